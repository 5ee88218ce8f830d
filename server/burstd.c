// burstd: the daemon. Loads the model (failing clearly before any port opens), starts the engine
// thread and the HTTP server, and runs until SIGINT or SIGTERM.
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "engine.h"
#include "http.h"
#include "weights/json_file.h"

static const char usage[] =
    "usage: burstd --model DIR [options]\n"
    "\n"
    "Serves the model over an OpenAI-compatible HTTP API (see README.md).\n"
    "\n"
    "  --model DIR       Hugging Face LLaMA directory (config.json, *.safetensors, tokenizer.model)\n"
    "  --served-model-name NAME  the model's name in the API (/v1/models, each answer's \"model\",\n"
    "                    the metrics' model_name); a request naming another model gets 404\n"
    "                    (default: the --model directory's name)\n"
    "  --chat-template T how /v1/chat/completions turns messages into a prompt: llama-2 (LLaMA-2-chat,\n"
    "                    Code Llama - Instruct: [INST] ... [/INST]), vicuna (Vicuna, LongChat: USER: ...\n"
    "                    ASSISTANT:) or zephyr (TinyLlama-Chat: <|user|> ... <|assistant|>)\n"
    "                    (default: the one tokenizer_config.json's chat_template looks like, else llama-2)\n"
    "  --generation-config on|off  take the sampling a request leaves out (temperature, top_p, top_k,\n"
    "                    min_p, repetition_penalty) from the checkpoint's generation_config.json, as\n"
    "                    vLLM does (default on; off, or no such file: OpenAI's, temperature 1 and no\n"
    "                    cut or penalty)\n"
    "  --host ADDR       address to listen on (default 127.0.0.1)\n"
    "  --port N          port (default 8080; 0: any free port, printed at start)\n"
    "  --api-key KEY     require \"Authorization: Bearer KEY\" (all routes but /health); default:\n"
    "                    $BURST_API_KEY, which other users of the machine cannot read in ps\n"
    "  --tls-cert FILE   serve HTTPS with this PEM certificate (chain) and --tls-key's PEM private\n"
    "  --tls-key FILE    key (default: plain HTTP)\n"
    "  --cors-origin O   let web pages from origin O (\"*\": any) call the API from a browser:\n"
    "                    CORS headers and preflight answers (default: none)\n"
    "  --slots N         requests running at once, each with its own KV cache slot (default 4)\n"
    "  --ctx N           tokens per slot, prompt + completion (default: the model's context)\n"
    "  --max-queue N     requests waiting for a slot at most; more get 429 (default 64)\n"
    "  --max-connections N  open HTTP connections at most; more are closed as soon as they are\n"
    "                    accepted (default 1024; raises the open-files limit toward its hard limit\n"
    "                    when it needs to)\n"
    "  --idle-timeout S  close a connection whose client sends or reads nothing for S seconds,\n"
    "                    mid-request or between requests; a request waiting for its tokens is\n"
    "                    not idle (default 60; 0: never)\n"
    "  --stream-ping S   a stream that has sent nothing for S seconds (its request waiting for a\n"
    "                    slot) gets an SSE comment line, which clients skip, so that proxies with\n"
    "                    read timeouts keep it open (default 15; 0: never)\n"
    "  --batch N         tokens per engine step, decode tokens plus prompt chunks (default 512;\n"
    "                    8192 with a cuda backend, where large steps keep the GPU busy)\n"
    "  --prefill-chunk N prompt tokens of one request per step at most, so that long prompts\n"
    "                    interleave with other requests (default 256, 8192 with cuda; at most --batch;\n"
    "                    a request alone in the slots takes whole --batch steps)\n"
    "  --prefix-cache on|off  keep each finished request's KV cache in its slot, so that a prompt\n"
    "                    beginning with the same tokens (a chat's next turn, a shared system\n"
    "                    prompt) skips their prefill (default on)\n"
    "  --speculate K     speculative decoding: each decode step also runs up to K tokens guessed\n"
    "                    by prompt lookup (what followed the last few tokens where they occurred\n"
    "                    before) and keeps those the model agrees with; the same text in fewer\n"
    "                    steps when answers quote the prompt (default 0: off)\n"
    "  --max-wait S      answer 429 at once when a request's estimated wait for a KV slot is\n"
    "                    longer than S seconds (default 0: off; --max-queue still applies)\n"
    "  --warmup N        before the port opens, run a throw-away prompt of N tokens in steps of\n"
    "                    --batch, as a prompt alone runs, then one decode step, then forget them,\n"
    "                    so that the GPU's first-use costs (cuDNN plans, kernel loading) do not\n"
    "                    fall on the first requests (default: two steps of --batch tokens, at\n"
    "                    most --ctx - 1, with a cuda backend; 0 on the cpu)\n"
    "  --ranks G         ranks sharing each sequence: BurstAttention prefill, sharded KV cache\n"
    "                    (default 1)\n"
    "  --threads N       CPU threads of this process, shared out among its ranks; as many sample\n"
    "                    the running requests' tokens side by side (default: all cores)\n"
    "  --backend NAME    cpu (float32), cpu-bf16 (the matmuls' inputs, and F16 weights, in\n"
    "                    bf16: with Intel AMX, or AVX512-BF16 as on AMD Zen 4 and later, prompts\n"
    "                    run ~1.7-2x faster), cuda, or cuda-fp32 (float32 on the GPU); a\n"
    "                    process's i-th rank runs on its GPU i modulo the number of GPUs.\n"
    "                    Default: cpu-bf16 for a BF16 or F16 checkpoint on a CPU with AMX or\n"
    "                    AVX512-BF16, else cpu. The cpu multiplies 16-bit weights, and attends\n"
    "                    prompts to a bf16 KV cache, with Intel AMX where the CPU has it (still\n"
    "                    float32-exact; BURST_AMX=0 in the environment: not)\n"
    "  --quantize q8|q4  made at load on the cpu backends, a float32 scale per 32 columns: q8,\n"
    "                    int8 weights: 56% of BF16's memory, and decode steps, which read every\n"
    "                    weight, ~1.4-1.8x as fast on LLaMA-7B, logits move by ~1-2%; q4, 4-bit\n"
    "                    weights (llama.cpp's Q4_0): 31% of BF16's memory, one sequence's decode\n"
    "                    faster again, a model's quality lower (default none: the weights as stored)\n"
    "  --kv-dtype T      KV cache rows in f32 or bf16 (half the memory: twice the context in the\n"
    "                    same space; attention reads K/V rounded to bf16); default bf16 with\n"
    "                    --backend cuda or cpu-bf16, else f32\n"
    "  --comm NAME       threads (default in one process), tcp (cpu backends, any processes) or\n"
    "                    nccl (one GPU per rank; default for cuda across nodes)\n"
    "  --nodes P         processes sharing the G ranks, this one and P-1 `burst worker`s, each\n"
    "                    running an even share of the ranks (default 1)\n"
    "  --coordinator HOST:PORT  with --nodes: where this process listens for its workers\n"
    "                    ([ADDR]:PORT for IPv6; set the same secret in BURST_CLUSTER_KEY on every\n"
    "                    node: only nodes that hold it join)\n"
    "  --drain-timeout S on SIGTERM or SIGINT, refuse new requests (503) and let the running and\n"
    "                    waiting ones finish for up to S seconds before stopping them; a second\n"
    "                    signal stops at once (default 30)\n"
    "  --join-timeout S  seconds to wait for the workers to join (default 600)\n"
    "  --node-timeout S  a transfer between ranks that makes no progress for S seconds (tcp), or\n"
    "                    an NCCL operation unfinished after S seconds, means a process hangs: the\n"
    "                    model goes out of service, /health says why (default 600)\n"
    "  --version         print the version, the git commit and what this build runs on (cpu, CUDA,\n"
    "                    cuDNN, NCCL)\n";

typedef struct {
    const char *model, *served_name, *host, *api_key, *cors_origin, *backend, *comm, *coordinator, *tls_cert, *tls_key;
    int port, slots, ctx, max_queue, batch, threads, ranks, prefill_chunk, nodes, prefix_cache, generation_config, max_connections,
        idle_timeout, warmup, speculate, quant; // warmup: -1 until resolved against the backend and the context
    chat_template chat;
    int chat_given; // --chat-template given (else the checkpoint's, or llama-2)
    float max_wait, join_timeout, node_timeout, drain_timeout, stream_ping;
    const char *kv; // --kv-dtype as given (NULL: the backend's default)
    burst_dtype kv_dtype;
} burstd_args;

static int parse_args(int argc, char **argv, burstd_args *a) {
    *a = (burstd_args){.host = "127.0.0.1", .port = 8080, .slots = 4, .max_queue = 64, .ranks = 1, .prefix_cache = 1, .generation_config = 1,
                         .drain_timeout = 30, .max_connections = 1024, .idle_timeout = 60,
                         .stream_ping = 15, .warmup = -1};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = cli_value("burstd", usage, argc, argv, &i);
        if (!v) return 0;
        long n = 0;
        int ok = 1, *dst = NULL;
        if (!strcmp(f, "--model")) a->model = v;
        else if (!strcmp(f, "--served-model-name")) a->served_name = v;
        else if (!strcmp(f, "--host")) a->host = v;
        else if (!strcmp(f, "--api-key")) a->api_key = v;
        else if (!strcmp(f, "--cors-origin")) a->cors_origin = v;
        else if (!strcmp(f, "--tls-cert")) a->tls_cert = v;
        else if (!strcmp(f, "--tls-key")) a->tls_key = v;
        else if (!strcmp(f, "--backend")) a->backend = v;
        else if (!strcmp(f, "--comm")) a->comm = v;
        else if (!strcmp(f, "--prefix-cache")) ok = cli_parse_on_off("burstd", f, v, &a->prefix_cache);
        else if (!strcmp(f, "--generation-config")) ok = cli_parse_on_off("burstd", f, v, &a->generation_config);
        else if (!strcmp(f, "--kv-dtype")) a->kv = v;
        else if (!strcmp(f, "--chat-template")) ok = a->chat_given = cli_parse_chat_template("burstd", f, v, &a->chat);
        else if (!strcmp(f, "--quantize")) ok = cli_parse_quantize("burstd", f, v, &a->quant);
        else if (!strcmp(f, "--coordinator")) a->coordinator = v;
        else if (!strcmp(f, "--nodes")) ok = cli_parse_long("burstd", f, v, 1, 1024, &n), dst = &a->nodes;
        else if (!strcmp(f, "--join-timeout")) ok = cli_parse_float("burstd", f, v, 0.1f, 1e7f, &a->join_timeout);
        else if (!strcmp(f, "--drain-timeout")) ok = cli_parse_float("burstd", f, v, 0, 1e7f, &a->drain_timeout);
        else if (!strcmp(f, "--node-timeout")) ok = cli_parse_float("burstd", f, v, 0.1f, 1e7f, &a->node_timeout);
        else if (!strcmp(f, "--port")) ok = cli_parse_long("burstd", f, v, 0, 65535, &n), dst = &a->port;
        else if (!strcmp(f, "--slots")) ok = cli_parse_long("burstd", f, v, 1, 4096, &n), dst = &a->slots;
        else if (!strcmp(f, "--ctx")) ok = cli_parse_long("burstd", f, v, 1, 1 << 30, &n), dst = &a->ctx;
        else if (!strcmp(f, "--max-connections")) ok = cli_parse_long("burstd", f, v, 1, 1 << 20, &n), dst = &a->max_connections;
        else if (!strcmp(f, "--idle-timeout")) ok = cli_parse_long("burstd", f, v, 0, 1 << 24, &n), dst = &a->idle_timeout;
        else if (!strcmp(f, "--stream-ping")) ok = cli_parse_float("burstd", f, v, 0, 1e6f, &a->stream_ping);
        else if (!strcmp(f, "--max-queue")) ok = cli_parse_long("burstd", f, v, 1, 1 << 20, &n), dst = &a->max_queue;
        else if (!strcmp(f, "--batch")) ok = cli_parse_long("burstd", f, v, 1, 1 << 20, &n), dst = &a->batch;
        else if (!strcmp(f, "--prefill-chunk")) ok = cli_parse_long("burstd", f, v, 1, 1 << 20, &n), dst = &a->prefill_chunk;
        else if (!strcmp(f, "--speculate")) ok = cli_parse_long("burstd", f, v, 0, 64, &n), dst = &a->speculate;
        else if (!strcmp(f, "--max-wait")) ok = cli_parse_float("burstd", f, v, 0, 1e9f, &a->max_wait);
        else if (!strcmp(f, "--threads")) ok = cli_parse_long("burstd", f, v, 1, 4096, &n), dst = &a->threads;
        else if (!strcmp(f, "--warmup")) ok = cli_parse_long("burstd", f, v, 0, 1 << 30, &n), dst = &a->warmup;
        else if (!strcmp(f, "--ranks")) ok = cli_parse_long("burstd", f, v, 1, 64, &n), dst = &a->ranks;
        else {
            fprintf(stderr, "burstd: %s: unknown option\n%s", f, usage);
            return 0;
        }
        if (!ok) return 0;
        if (dst) *dst = (int)n;
    }
    a->api_key = cli_api_key(a->api_key);
    if (!a->batch) a->batch = cli_step_default(a->backend, 512);
    if (!a->prefill_chunk) a->prefill_chunk = cli_step_default(a->backend, 256);
    if (a->kv && !cli_parse_kv_dtype("burstd", "--kv-dtype", a->kv, &a->kv_dtype))
        return 0;
    if (!a->model) fprintf(stderr, "burstd: --model DIR is required\n%s", usage);
    else if (a->nodes > 1 && !a->coordinator) fprintf(stderr, "burstd: --nodes %d needs --coordinator HOST:PORT\n", a->nodes);
    else if (!a->tls_cert != !a->tls_key) fprintf(stderr, "burstd: HTTPS needs both --tls-cert and --tls-key\n");
    else if (a->served_name && !a->served_name[0]) fprintf(stderr, "burstd: --served-model-name must not be empty\n");
    else if (a->api_key && !a->api_key[0]) fprintf(stderr, "burstd: --api-key must not be empty\n");
    else return 1;
    return 0;
}

// The model directory's last component names the model in the API ("stories260K") unless
// --served-model-name does.
static const char *model_name(const char *dir) {
    static char name[256];
    snprintf(name, sizeof name, "%s", dir);
    size_t n = strlen(name);
    while (n > 1 && name[n - 1] == '/') name[--n] = 0;
    const char *slash = strrchr(name, '/');
    return slash && slash[1] ? slash + 1 : name;
}

// The sampling a request leaves out: OpenAI's (temperature 1, no top_p, top_k, min_p or repetition
// penalty), and, where read, the checkpoint's generation_config.json's temperature, top_p, top_k,
// min_p and repetition_penalty (as vLLM takes them); a value out of range is left out, with a
// warning.
static sampler_params sampling_defaults(const char *dir, int read) {
    sampler_params p = {.temperature = 1, .top_p = 1, .repetition_penalty = 1};
    char path[4096], said[256] = "";
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    burst_error err;
    cJSON *root;
    if (!read || json_file_load(path, &root, &err) == BURST_ERR_IO) return p; // none: OpenAI's
    if (!cJSON_IsObject(root)) LOG_W("%s: not a JSON object: left out", path);
    const struct {
        const char *key;
        double lo, hi;
        int above; // above lo (not at it)
        float *real;
        int *count;
    } fields[] = {{"temperature", 0, 2, 0, &p.temperature, NULL},     {"top_p", 0, 1, 1, &p.top_p, NULL},
                  {"top_k", 0, 1 << 30, 0, NULL, &p.top_k},           {"min_p", 0, 1, 0, &p.min_p, NULL},
                  {"repetition_penalty", 0, 10, 1, &p.repetition_penalty, NULL}};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, fields[i].key);
        if (!v || cJSON_IsNull(v)) continue;
        const double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        if (!(x >= fields[i].lo && x <= fields[i].hi) || (fields[i].above && x == fields[i].lo) ||
            (fields[i].count && x != floor(x))) {
            LOG_W("%s: %s is not %s in [%.10g, %.10g]: left out", path, fields[i].key, fields[i].count ? "an integer" : "a number",
                  fields[i].lo, fields[i].hi);
            continue;
        }
        if (fields[i].real) *fields[i].real = (float)x;
        else *fields[i].count = (int)x;
        snprintf(said + strlen(said), sizeof said - strlen(said), " %s %g", fields[i].key, x);
    }
    if (said[0]) LOG_I("sampling a request leaves out, from %s:%s", path, said);
    cJSON_Delete(root);
    return p;
}

// Runs a throw-away prompt of n tokens, in the engine's prompt chunks (the shapes requests will
// run), and one decode step in slot 0, then empties the slot: the first use of each GPU kernel,
// cuBLAS heuristic and cuDNN plan (up to ~0.6 s for a first long prompt on an H100) happens here
// rather than in the first requests' time to first token.
static burst_status warm_up(llama_model *m, int n, int chunk, burst_error *err) {
    const int vocab = llama_config_of(m)->vocab_size;
    int *tokens = burst_malloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i <= n; i++) tokens[i] = (int)((1 + 7919 * (int64_t)i) % vocab); // any ids serve
    float *logits = burst_malloc(sizeof(float) * (size_t)vocab);
    double t0 = burst_now();
    burst_status st = llama_prefill(m, 0, tokens, n, chunk, logits, err);
    if (!st) st = llama_forward(m, &(llama_segment){.slot = 0, .n = 1}, 1, tokens + n, logits, NULL, NULL, err);
    if (!st) {
        llama_slot_truncate(m, 0, 0);
        LOG_I("warm-up: a prompt of %d tokens in chunks of %d and a decode step in %.2f s", n, chunk, burst_now() - t0);
    }
    free(tokens);
    free(logits);
    return st;
}

// After a stop signal: no new requests, and up to --drain-timeout seconds for those accepted to
// finish (a second signal cuts it short); engine_stop then ends what is left.
static void drain(const burstd_args *a, engine *eng, http_server *http, const sigset_t *stop_signals, int sig) {
    int running, waiting;
    http_drain(http);
    engine_counts(eng, &running, &waiting);
    LOG_I("signal %d: draining: new requests get 503; %d running and %d waiting may finish within %.0f s "
          "(a second signal stops at once)", sig, running, waiting, a->drain_timeout);
    double until = burst_now() + a->drain_timeout;
    const struct timespec tick = {.tv_nsec = 50 * 1000 * 1000};
    for (;;) {
        engine_counts(eng, &running, &waiting);
        if (!running && !waiting) break;
        if (burst_now() >= until) {
            LOG_W("drain timeout: stopping %d running and %d waiting requests", running, waiting);
            break;
        }
        if ((sig = sigtimedwait(stop_signals, NULL, &tick)) > 0) {
            LOG_I("signal %d again: stopping %d running and %d waiting requests", sig, running, waiting);
            break;
        }
    }
    LOG_I("stopping");
}

// Loads, serves until a signal, and tears down in reverse order. Returns the exit code.
static int serve(const burstd_args *a, const sigset_t *stop_signals) {
    burst_error err = {{0}};
    char tok_path[4096];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.model", a->model);
    tokenizer *tok = NULL;
    llama_model *m = NULL;
    metrics *met = NULL;
    engine *eng = NULL;
    http_server *http = NULL;
    // Room for every slot's logits with K guessed tokens each (--speculate).
    llama_options lo = {.ctx = a->ctx, .n_slots = a->slots, .max_batch = a->batch, .max_logits = a->slots * (1 + a->speculate),
                        .n_threads = a->threads,
                        .n_ranks = a->ranks, .backend = a->backend, .kv_dtype = a->kv_dtype, .kv_default = !a->kv, .weights_quant = a->quant,
                        .comm = a->comm, .n_nodes = a->nodes,
                        .coordinator = a->coordinator,
                        .cluster_key = getenv("BURST_CLUSTER_KEY"), .join_timeout_s = a->join_timeout,
                        .node_timeout_s = a->node_timeout};
    LOG_I("burstd %s", cli_build_info());
    char *tls_cert = NULL, *tls_key = NULL; // read first: a bad path fails before the model loads
    const size_t tls_max = 1 << 20;
    if ((a->tls_cert && (burst_read_file(a->tls_cert, tls_max, &tls_cert, NULL, &err) ||
                         burst_read_file(a->tls_key, tls_max, &tls_key, NULL, &err))) ||
        tokenizer_load(tok_path, &tok, &err) || llama_load(a->model, &lo, &m, &err))
        goto fail;
    const llama_config *c = llama_config_of(m);
    if (tokenizer_vocab_size(tok) != c->vocab_size) {
        BURST_FAIL(&err, BURST_ERR_FORMAT, "%s: tokenizer has %d pieces, config.json vocab_size %d (want equal)",
                   tok_path, tokenizer_vocab_size(tok), c->vocab_size);
        goto fail;
    }
    static const char *const rope_scaling[] = {[ROPE_SCALING_NONE] = "", [ROPE_SCALING_LINEAR] = " (RoPE linear x",
                                               [ROPE_SCALING_YARN] = " (RoPE YaRN x"};
    char rope[48] = "";
    const int batch = llama_options_of(m)->max_batch, chunk = a->prefill_chunk < batch ? a->prefill_chunk : batch; // as the engine's
    if (c->rope_scaling) snprintf(rope, sizeof rope, "%s%g)", rope_scaling[c->rope_scaling], c->rope_factor);
    LOG_I("%s: %d layers, dim %d, %d heads (%d kv), vocab %d%s; %d slots x %d tokens (KV %s), steps of %d tokens "
          "(prompt chunks of %d), %d rank(s) on %s%s, %.1f MB reserved",
          a->model, c->n_layers, c->dim, c->n_heads, c->n_kv_heads, c->vocab_size, rope, llama_options_of(m)->n_slots,
          llama_options_of(m)->ctx, dtype_name(llama_options_of(m)->kv_dtype), batch, chunk, llama_options_of(m)->n_ranks,
          llama_options_of(m)->backend, llama_weights_note(llama_options_of(m)), llama_reserved_bytes(m) / 1e6);
    int ctx = llama_options_of(m)->ctx, warmup = a->warmup;
    if (warmup < 0) warmup = backend_on_device(llama_options_of(m)->backend) ? 2 * batch : 0;
    if (warmup > ctx - 1) warmup = ctx - 1; // room for the decode step
    if (warmup > 0 && warm_up(m, warmup, batch, &err)) goto fail; // the steps of a first request, alone
    const chat_template chat = cli_chat_template(a->model, a->chat_given ? &a->chat : NULL);
    const char *name = a->served_name ? a->served_name : model_name(a->model);
    met = metrics_new(name);
    http_options ho = {.host = a->host, .port = a->port, .api_key = a->api_key, .model_name = name,
                       .cors_origin = a->cors_origin, .idle_timeout_s = (unsigned)a->idle_timeout,
                       .max_connections = (unsigned)a->max_connections, .stream_ping_s = a->stream_ping,
                       .tls_cert = tls_cert, .tls_key = tls_key, .chat = chat,
                       .sampling = sampling_defaults(a->model, a->generation_config)};
    if (engine_start(m, tok, met, &(engine_options){.max_queue = a->max_queue, .prefill_chunk = a->prefill_chunk,
                                                       .max_wait_s = a->max_wait, .prefix_cache = a->prefix_cache,
                                                       .speculate = a->speculate, .threads = a->threads},
                     &eng, &err) ||
        http_start(&ho, eng, m, tok, met, &http, &err))
        goto fail;
    int v6 = strchr(a->host, ':') != NULL; // an IPv6 address goes in brackets in a URL
    LOG_I("listening on http%s://%s%s%s:%d (model %s, chat template %s%s)", tls_cert ? "s" : "", v6 ? "[" : "", a->host,
          v6 ? "]" : "", http_port(http), ho.model_name, chat_template_name(chat), a->api_key ? ", API key required" : "");
    int sig;
    sigwait(stop_signals, &sig);
    drain(a, eng, http, stop_signals, sig);
fail:
    if (err.msg[0]) LOG_E("%s", err.msg);
    engine_stop(eng); // what is left ends with an error, which the HTTP threads send before http_stop
    http_stop(http);
    engine_free(eng);
    metrics_free(met);
    llama_free(m);
    tokenizer_free(tok);
    free(tls_cert);
    free(tls_key);
    return err.msg[0] ? 1 : 0;
}

int main(int argc, char **argv) {
    burstd_args a;
    if (!parse_args(argc, argv, &a)) return 2;
    signal(SIGPIPE, SIG_IGN);
    sigset_t stop_signals; // blocked in every thread, taken by sigwait in serve
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    return serve(&a, &stop_signals);
}
