// `burst`: command-line tools. `burst generate` prints one completion of a prompt on stdout (the
// prompt is not repeated) and timings on stderr, with the model in-process; `burst worker` runs
// a share of the ranks of a burstd (or burst generate) on another process or machine; `burst
// load` drives a running burstd (server/load.h).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_args.h"
#include "load.h"
#include "model/llama.h"
#include "model/sampler.h"
#include "model/tokenizer.h"

static const char usage[] =
    "usage: burst generate --model DIR (--prompt TEXT | --prompt-file PATH | --chat TEXT) [options]\n"
    "       burst worker --model DIR --coordinator HOST:PORT [options]   (burst worker --help)\n"
    "       burst load --url URL [options]   (burst load --help)\n"
    "       burst --version   (the version, the git commit and what this build runs on)\n"
    "\n"
    "Prints the completion of TEXT on stdout and timings on stderr.\n"
    "\n"
    "  --model DIR         Hugging Face LLaMA directory (config.json, *.safetensors, tokenizer.model)\n"
    "  --prompt TEXT       the prompt (a BOS token is added before it)\n"
    "  --prompt-file PATH  the prompt is the file's text (- for stdin): long prompts\n"
    "  --chat TEXT         the prompt is a chat's: TEXT a user's message (after --system TEXT's, if\n"
    "                      given) through the chat template (--chat-template T: llama-2, vicuna or\n"
    "                      zephyr; default: the one the checkpoint's tokenizer_config.json's\n"
    "                      chat_template looks like, else llama-2), as burstd's chats\n"
    "  --max-tokens N      tokens to generate at most (default 256); stops early at EOS\n"
    "  --temperature T     0 is greedy (default 0)\n"
    "  --top-p P           nucleus sampling mass (default 1: off)\n"
    "  --top-k K           keep the K most likely tokens (default 0: off)\n"
    "  --repetition-penalty R  Hugging Face's: the logits of the prompt's and the generated tokens\n"
    "                      divided by R where positive, times R where not (default 1: off)\n"
    "  --seed S            sampling seed (default: from the clock; printed on stderr)\n"
    "  --json-schema FILE  the completion is an instance of the JSON Schema in FILE, as with the\n"
    "                      API's response_format json_schema (README; {\"type\": \"object\"}: any\n"
    "                      object, JSON mode); it ends at EOS once whole\n"
    "  --ctx N             KV cache tokens (default: prompt + max-tokens)\n"
    "  --batch N           tokens per prefill chunk (default 512; 8192 with a cuda backend)\n"
    "  --ranks G           ranks sharing the sequence: BurstAttention prefill, sharded KV cache\n"
    "                      (default 1)\n"
    "  --threads N         CPU threads of this process, shared out among its ranks (default: all cores)\n"
    "  --backend NAME      cpu (float32), cpu-bf16 (the matmuls' inputs, and F16 weights,\n"
    "                      in bf16: with Intel AMX, or AVX512-BF16 as on AMD Zen 4 and later,\n"
    "                      prompts run ~1.7-2x faster), cuda, or cuda-fp32 (float32 on the\n"
    "                      GPU, for exactness). Default: cpu-bf16 for a BF16 or F16\n"
    "                      checkpoint on a CPU with AMX or AVX512-BF16, else cpu. The cpu\n"
    "                      multiplies 16-bit weights, and attends a prompt to a bf16 KV cache,\n"
    "                      with Intel AMX where the CPU has it (still float32-exact;\n"
    "                      BURST_AMX=0 in the environment: not)\n"
    "  --quantize q8|q4    made at load on the cpu backends, a float32 scale per 32 columns:\n"
    "                      q8, int8 weights: 56% of BF16's memory, and decode ~1.4-1.8x as fast\n"
    "                      on LLaMA-7B, logits move by ~1-2%; q4, 4-bit weights (llama.cpp's\n"
    "                      Q4_0): 31% of BF16's memory, one sequence's decode faster again, a\n"
    "                      model's quality lower (default none: the weights as stored)\n"
    "  --kv-dtype T        KV cache rows in f32 or bf16 (half the memory); default bf16 with\n"
    "                      --backend cuda or cpu-bf16, else f32\n"
    "  --comm NAME         threads (default in one process), tcp (cpu backends, any processes) or\n"
    "                      nccl (one GPU per rank; default for cuda across nodes)\n"
    "  --nodes P           processes sharing the G ranks: this one and P-1 `burst worker`s\n"
    "  --coordinator HOST:PORT  with --nodes: where this process listens for its workers\n"
    "                      ([ADDR]:PORT for IPv6; set the same secret in BURST_CLUSTER_KEY on every\n"
    "                      node: only nodes that hold it join)\n"
    "  --join-timeout S    seconds to wait for the workers to join (default 600)\n"
    "  --node-timeout S    a transfer between ranks that makes no progress for S seconds (tcp), or\n"
    "                      an NCCL operation unfinished after S seconds, means a process hangs,\n"
    "                      and fails the run (default 600)\n";

typedef struct {
    const char *model, *prompt, *prompt_file, *chat, *system, *backend, *comm, *coordinator;
    chat_template chat_template;
    int chat_template_given;
    char *prompt_text; // --prompt-file's text (malloc'd); prompt points to it
    int max_tokens, top_k, ctx, batch, threads, ranks, nodes, quant;
    float temperature, top_p, repetition_penalty, join_timeout, node_timeout;
    uint64_t seed;
    const char *kv; // --kv-dtype as given (NULL: the backend's default)
    const char *json_schema; // --json-schema's file (NULL: none)
    burst_dtype kv_dtype;
} generate_args;

// The whole text of a file (path "-": stdin), malloc'd; NULL with a one-line error on stderr.
static char *read_text(const char *path) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "burst: --prompt-file %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t len = 0, cap = 1 << 16, n;
    char *text = burst_malloc(cap);
    while ((n = fread(text + len, 1, cap - len - 1, f)) > 0) {
        if ((len += n) < cap - 1) continue;
        text = realloc(text, cap *= 2);
        BURST_ASSERT(text && "burst: out of memory reading the prompt");
    }
    int failed = ferror(f);
    if (f != stdin) fclose(f);
    text[len] = 0;
    if (failed) {
        fprintf(stderr, "burst: --prompt-file %s: read error\n", path);
        free(text);
        return NULL;
    }
    return text;
}

// --chat's prompt: [--system's message,] its user message, through the checkpoint's chat template.
static burst_status chat_prompt(const generate_args *a, const tokenizer *tok, int **ids, int *n, burst_error *err) {
    const chat_message msgs[] = {{"system", a->system}, {"user", a->chat}};
    const chat_template tpl = cli_chat_template(a->model, a->chat_template_given ? &a->chat_template : NULL);
    return chat_template_encode(tok, tpl, msgs + !a->system, 1 + !!a->system, ids, n, err);
}

static int parse_generate(int argc, char **argv, generate_args *a) {
    *a = (generate_args){.max_tokens = 256, .top_p = 1.0f, .repetition_penalty = 1.0f, .ranks = 1,
                         .seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32)};
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i], *v = cli_value("burst", usage, argc, argv, &i);
        if (!v) return 0;
        long n;
        int ok = 1;
        if (!strcmp(f, "--model")) a->model = v;
        else if (!strcmp(f, "--prompt")) a->prompt = v;
        else if (!strcmp(f, "--prompt-file")) a->prompt_file = v;
        else if (!strcmp(f, "--chat")) a->chat = v;
        else if (!strcmp(f, "--system")) a->system = v;
        else if (!strcmp(f, "--chat-template"))
            ok = a->chat_template_given = cli_parse_chat_template("burst", f, v, &a->chat_template);
        else if (!strcmp(f, "--json-schema")) a->json_schema = v;
        else if (!strcmp(f, "--max-tokens")) ok = cli_parse_long("burst", f, v, 0, 1 << 30, &n), a->max_tokens = (int)n;
        else if (!strcmp(f, "--top-k")) ok = cli_parse_long("burst", f, v, 0, 1 << 30, &n), a->top_k = (int)n;
        else if (!strcmp(f, "--ctx")) ok = cli_parse_long("burst", f, v, 1, 1 << 30, &n), a->ctx = (int)n;
        else if (!strcmp(f, "--batch")) ok = cli_parse_long("burst", f, v, 1, 1 << 20, &n), a->batch = (int)n;
        else if (!strcmp(f, "--threads")) ok = cli_parse_long("burst", f, v, 1, 4096, &n), a->threads = (int)n;
        else if (!strcmp(f, "--backend")) a->backend = v;
        else if (!strcmp(f, "--comm")) a->comm = v;
        else if (!strcmp(f, "--kv-dtype")) a->kv = v;
        else if (!strcmp(f, "--quantize")) ok = cli_parse_quantize("burst", f, v, &a->quant);
        else if (!strcmp(f, "--coordinator")) a->coordinator = v;
        else if (!strcmp(f, "--nodes")) ok = cli_parse_long("burst", f, v, 1, 1024, &n), a->nodes = (int)n;
        else if (!strcmp(f, "--join-timeout")) ok = cli_parse_float("burst", f, v, 0.1f, 1e7f, &a->join_timeout);
        else if (!strcmp(f, "--node-timeout")) ok = cli_parse_float("burst", f, v, 0.1f, 1e7f, &a->node_timeout);
        else if (!strcmp(f, "--ranks")) ok = cli_parse_long("burst", f, v, 1, 64, &n), a->ranks = (int)n;
        else if (!strcmp(f, "--seed")) ok = cli_parse_long("burst", f, v, 0, 0x7fffffffffffffffL, &n), a->seed = (uint64_t)n;
        else if (!strcmp(f, "--temperature")) ok = cli_parse_float("burst", f, v, 0, 100, &a->temperature);
        else if (!strcmp(f, "--top-p")) ok = cli_parse_float("burst", f, v, 0, 1, &a->top_p);
        else if (!strcmp(f, "--repetition-penalty"))
            ok = cli_parse_float("burst", f, v, 0.001f, 10, &a->repetition_penalty);
        else {
            fprintf(stderr, "burst: %s: unknown option\n%s", f, usage);
            return 0;
        }
        if (!ok) return 0;
    }
    if (!a->batch) a->batch = cli_step_default(a->backend, 512);
    if (a->kv && !cli_parse_kv_dtype("burst", "--kv-dtype", a->kv, &a->kv_dtype))
        return 0;
    if (!a->model || !!a->prompt + !!a->prompt_file + !!a->chat != 1) {
        fprintf(stderr, "burst: generate needs --model and one of --prompt, --prompt-file and --chat\n%s", usage);
        return 0;
    }
    if ((a->system || a->chat_template_given) && !a->chat) {
        fprintf(stderr, "burst: --system and --chat-template are for --chat\n");
        return 0;
    }
    if (a->prompt_file && !(a->prompt = a->prompt_text = read_text(a->prompt_file))) return 0;
    if (a->nodes > 1 && !a->coordinator) {
        fprintf(stderr, "burst: --nodes %d needs --coordinator HOST:PORT\n", a->nodes);
        return 0;
    }
    return 1;
}

// --json-schema's file, compiled; NULL with a one-line error on stderr.
static json_schema *load_json_schema(const char *path) {
    char *text, why[512];
    burst_error err;
    if (burst_read_file(path, 16 << 20, &text, NULL, &err)) {
        fprintf(stderr, "burst: --json-schema %s\n", err.msg);
        return NULL;
    }
    cJSON *j = cJSON_Parse(text);
    free(text);
    json_schema *s = j ? json_schema_compile(j, "schema", why, sizeof why) : NULL;
    if (!s) fprintf(stderr, "burst: --json-schema %s: %s\n", path, j ? why : "not valid JSON");
    cJSON_Delete(j);
    return s;
}

// Writes text to stdout at once, so that tokens appear as they are generated.
static void emit(char *text) {
    fputs(text, stdout);
    fflush(stdout);
    free(text);
}

static int generate(const generate_args *a) {
    burst_error err = {{0}};
    char tok_path[4096];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.model", a->model);
    tokenizer *tok = NULL;
    llama_model *m = NULL;
    int *ids = NULL, n_prompt = 0, rc = 1;
    float *logits = NULL;
    json_schema *schema = NULL;
    json_vocab *json = NULL;
    if (a->json_schema && !(schema = load_json_schema(a->json_schema))) return 1;
    if (tokenizer_load(tok_path, &tok, &err) || (a->chat ? chat_prompt(a, tok, &ids, &n_prompt, &err)
                                                         : tokenizer_encode(tok, a->prompt, 1, &ids, &n_prompt, &err)))
        goto fail;
    if (schema) json = json_vocab_new(tok);

    llama_options opt = {.ctx = a->ctx ? a->ctx : n_prompt + a->max_tokens, .n_slots = 1,
                         .max_batch = a->batch, .n_threads = a->threads, .n_ranks = a->ranks,
                         .backend = a->backend, .kv_dtype = a->kv_dtype, .kv_default = !a->kv, .weights_quant = a->quant,
                         .comm = a->comm, .n_nodes = a->nodes,
                         .coordinator = a->coordinator,
                         .cluster_key = getenv("BURST_CLUSTER_KEY"), .join_timeout_s = a->join_timeout,
                         .node_timeout_s = a->node_timeout};
    double t0 = burst_now();
    if (llama_load(a->model, &opt, &m, &err)) goto fail;
    const llama_config *c = llama_config_of(m);
    if (n_prompt > llama_options_of(m)->ctx) {
        BURST_FAIL(&err, BURST_ERR_INVALID, "prompt of %d tokens exceeds the context of %d",
                   n_prompt, llama_options_of(m)->ctx);
        goto fail;
    }
    if (tokenizer_vocab_size(tok) != c->vocab_size)
        LOG_W("%s: tokenizer has %d pieces, model vocab_size %d", tok_path, tokenizer_vocab_size(tok), c->vocab_size);
    fprintf(stderr, "burst: %s: %d layers, dim %d, %d heads (%d kv), vocab %d; ctx %d (KV %s), %d rank(s) on %s%s, %.1f MB reserved, loaded in %.2f s\n",
            a->model, c->n_layers, c->dim, c->n_heads, c->n_kv_heads, c->vocab_size, llama_options_of(m)->ctx,
            dtype_name(llama_options_of(m)->kv_dtype), a->ranks, llama_options_of(m)->backend,
            llama_weights_note(llama_options_of(m)), llama_reserved_bytes(m) / 1e6,
            burst_now() - t0);

    sampler smp;
    sampler_init(&smp, &(sampler_params){.temperature = a->temperature, .top_p = a->top_p, .top_k = a->top_k,
                                         .repetition_penalty = a->repetition_penalty, .context = ids,
                                         .n_context = n_prompt, .seed = a->seed, .json = json,
                                         .json_schema = schema},
                 c->vocab_size);
    detok_stream ds;
    detok_init(&ds, ids, n_prompt);
    logits = burst_malloc(sizeof(float) * (size_t)c->vocab_size);

    double t_start = burst_now(), t_first = 0;
    int n_gen = 0, ctx = llama_options_of(m)->ctx;
    if (llama_prefill(m, 0, ids, n_prompt, 0, logits, &err)) goto fail_gen;
    while (n_gen < a->max_tokens) {
        int next = sampler_sample(&smp, logits);
        if (n_gen++ == 0) t_first = burst_now();
        if (next == tokenizer_eos(tok)) break;
        char *text = detok_push(tok, &ds, next);
        if (!text) {
            BURST_FAIL(&err, BURST_ERR_INVALID, "sampled id %d has no piece", next);
            goto fail_gen;
        }
        emit(text);
        if (n_gen == a->max_tokens) break;
        if (llama_slot_len(m, 0) >= ctx) {
            LOG_W("stopped at the context limit of %d tokens", ctx);
            break;
        }
        llama_segment seg = {.slot = 0, .n = 1};
        if (llama_forward(m, &seg, 1, &next, logits, NULL, NULL, &err)) goto fail_gen;
    }
    emit(detok_flush(tok, &ds));
    double t_end = burst_now();
    printf("\n");
    fprintf(stderr, "burst: seed %llu; prompt %d tokens, first token after %.3f s (%.1f tok/s prefill); "
            "%d generated, %.1f tok/s decode\n", (unsigned long long)a->seed, n_prompt, t_first - t_start,
            n_prompt / (t_first - t_start), n_gen,
            n_gen > 1 ? (n_gen - 1) / (t_end - t_first) : 0.0);
    rc = 0;
fail_gen:
    sampler_free(&smp);
    detok_free(&ds);
fail:
    if (rc) fprintf(stderr, "E %s\n", err.msg);
    free(logits);
    free(ids);
    llama_free(m);
    json_vocab_free(json);
    json_schema_free(schema);
    tokenizer_free(tok);
    return rc;
}

static const char worker_usage[] =
    "usage: burst worker --model DIR --coordinator HOST:PORT [options]\n"
    "\n"
    "Runs a share of the ranks of a burstd or burst generate started with --nodes P and\n"
    "--coordinator: it joins the leader there, takes the leader's options (ranks, ctx, slots,\n"
    "batch, backend, KV dtype, comm), checks that both loaded the same model, then runs the\n"
    "leader's steps until the leader stops (exit 0) or is lost (exit 1). Start P-1 of them, on\n"
    "any machines, each with the leader's BURST_CLUSTER_KEY in its environment (if it has one).\n"
    "\n"
    "  --model DIR         the same model as the leader's (a copy on this machine)\n"
    "  --coordinator HOST:PORT  the leader's --coordinator, as this machine reaches it ([ADDR]:PORT\n"
    "                      for IPv6)\n"
    "  --threads N         CPU threads of this process, shared out among its ranks (default: all cores)\n"
    "  --join-timeout S    seconds to keep trying to reach the leader (default 600)\n";

typedef struct {
    const char *model, *coordinator;
    int threads;
    float join_timeout;
} worker_args;

static int parse_worker(int argc, char **argv, worker_args *a) {
    *a = (worker_args){0};
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i], *v = cli_value("burst", worker_usage, argc, argv, &i);
        if (!v) return 0;
        long n = 0;
        int ok = 1;
        if (!strcmp(f, "--model")) a->model = v;
        else if (!strcmp(f, "--coordinator")) a->coordinator = v;
        else if (!strcmp(f, "--threads")) ok = cli_parse_long("burst", f, v, 1, 4096, &n), a->threads = (int)n;
        else if (!strcmp(f, "--join-timeout")) ok = cli_parse_float("burst", f, v, 0.1f, 1e7f, &a->join_timeout);
        else {
            fprintf(stderr, "burst: %s: unknown option\n%s", f, worker_usage);
            return 0;
        }
        if (!ok) return 0;
    }
    if (!a->model || !a->coordinator) fprintf(stderr, "burst: worker needs --model and --coordinator\n%s", worker_usage);
    return a->model && a->coordinator;
}

static int worker(const worker_args *a) {
    burst_error err = {{0}};
    llama_model *m = NULL;
    llama_options opt = {.n_threads = a->threads, .coordinator = a->coordinator,
                         .cluster_key = getenv("BURST_CLUSTER_KEY"), .worker = 1,
                         .join_timeout_s = a->join_timeout};
    int rc = llama_load(a->model, &opt, &m, &err) != BURST_OK; // (exit status 1)
    if (!rc) { // what it took from the leader
        const llama_options *o = llama_options_of(m);
        fprintf(stderr, "burst: worker: joined: %d rank(s) in all on %s%s (KV %s)\n", o->n_ranks, o->backend,
                llama_weights_note(o), dtype_name(o->kv_dtype));
        rc = llama_follow(m, &err) != BURST_OK;
    }
    if (rc) fprintf(stderr, "E %s\n", err.msg);
    else fprintf(stderr, "burst: worker: the leader has stopped\n");
    llama_free(m);
    return rc;
}

static const char load_usage[] =
    "usage: burst load --url URL [options]\n"
    "\n"
    "Sends streaming completions to a running burstd (or another server of the OpenAI API that\n"
    "takes token ids and ignore_eos, as llama.cpp's llama-server does) and prints p50/p90/p99 time\n"
    "to first token, inter-token latency and throughput, all measured on the client.\n"
    "\n"
    "  --url URL           the server, e.g. http://127.0.0.1:8080\n"
    "  --api-key KEY       sent as \"Authorization: Bearer KEY\" (default: $BURST_API_KEY)\n"
    "  --concurrency C     requests in flight at once (default 4); with --rate, at most\n"
    "  --rate R            send requests as users arrive: R a second on average, at Poisson\n"
    "                      times (the same every run), each when due unless all C are in\n"
    "                      flight (the report counts those sent late); default 0: each of\n"
    "                      the C clients sends its next request as soon as its last ends\n"
    "  --requests R        requests in all (default 16)\n"
    "  --prompt-tokens P   prompt length in tokens, exactly (default 128); MIN:MAX draws each\n"
    "                      prompt's length from MIN to MAX (the same draws every run)\n"
    "  --shared-prefix S   the first S prompt tokens are the same in every request, as behind a\n"
    "                      system prompt (default 0: only BOS; at most P)\n"
    "  --max-tokens M      tokens generated per request, exactly (default 64; EOS is ignored)\n"
    "  --temperature T     sampling temperature of every request (default 0: greedy); request i\n"
    "                      has seed i + 1, so a run samples the same tokens as the last\n"
    "  --slo-ttft S        also count the requests that completed with their first token within\n"
    "                      S seconds (goodput)\n"
    "  --json FILE         also write the report's numbers to FILE, as one JSON object\n";

// --prompt-tokens P or MIN:MAX.
static int parse_lengths(const char *flag, const char *v, load_args *a) {
    char *end;
    long lo = strtol(v, &end, 10), hi = *end == ':' ? strtol(end + 1, &end, 10) : lo;
    if (*v < '0' || *v > '9' || *end || lo < 1 || hi < lo || hi > 1 << 24) {
        fprintf(stderr, "burst: %s %s: want P or MIN:MAX, with 1 <= MIN <= MAX <= %d\n", flag, v, 1 << 24);
        return 0;
    }
    a->prompt_tokens = (int)lo, a->prompt_tokens_max = (int)hi;
    return 1;
}

// A rate or a number of seconds, >= 0.
static int parse_nonnegative(const char *flag, const char *v, double *out) {
    float x;
    int ok = cli_parse_float("burst", flag, v, 0, 1e6f, &x);
    *out = x;
    return ok;
}

static int parse_load(int argc, char **argv, load_args *a) {
    *a = (load_args){.concurrency = 4, .requests = 16, .prompt_tokens = 128, .prompt_tokens_max = 128, .max_tokens = 64};
    float temperature;
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i], *v = cli_value("burst", load_usage, argc, argv, &i);
        if (!v) return 0;
        long n = 0;
        int ok = 1, *dst = NULL;
        if (!strcmp(f, "--url")) a->url = v;
        else if (!strcmp(f, "--api-key")) a->api_key = v;
        else if (!strcmp(f, "--json")) a->json_path = v;
        else if (!strcmp(f, "--concurrency")) ok = cli_parse_long("burst", f, v, 1, 4096, &n), dst = &a->concurrency;
        else if (!strcmp(f, "--requests")) ok = cli_parse_long("burst", f, v, 1, 1 << 24, &n), dst = &a->requests;
        else if (!strcmp(f, "--prompt-tokens")) ok = parse_lengths(f, v, a);
        else if (!strcmp(f, "--max-tokens")) ok = cli_parse_long("burst", f, v, 1, 1 << 24, &n), dst = &a->max_tokens;
        else if (!strcmp(f, "--shared-prefix")) ok = cli_parse_long("burst", f, v, 0, 1 << 24, &n), dst = &a->shared_prefix;
        else if (!strcmp(f, "--rate")) ok = parse_nonnegative(f, v, &a->rate);
        else if (!strcmp(f, "--slo-ttft")) ok = parse_nonnegative(f, v, &a->slo_ttft_s);
        else if (!strcmp(f, "--temperature")) ok = cli_parse_float("burst", f, v, 0, 2, &temperature), a->temperature = temperature;
        else {
            fprintf(stderr, "burst: %s: unknown option\n%s", f, load_usage);
            return 0;
        }
        if (!ok) return 0;
        if (dst) *dst = (int)n;
    }
    a->api_key = cli_api_key(a->api_key);
    if (!a->url) fprintf(stderr, "burst: load needs --url\n%s", load_usage);
    else if (a->shared_prefix > a->prompt_tokens)
        fprintf(stderr, "burst: --shared-prefix %d is longer than the shortest prompt (--prompt-tokens %d)\n",
                a->shared_prefix, a->prompt_tokens);
    else return 1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) return printf("burst %s\n", cli_build_info()), 0;
    if (!strcmp(argv[1], "generate")) {
        generate_args a;
        int rc = parse_generate(argc - 2, argv + 2, &a) ? generate(&a) : 2;
        free(a.prompt_text);
        return rc;
    }
    if (!strcmp(argv[1], "worker")) {
        worker_args a;
        return parse_worker(argc - 2, argv + 2, &a) ? worker(&a) : 2;
    }
    if (!strcmp(argv[1], "load")) {
        load_args a;
        return parse_load(argc - 2, argv + 2, &a) ? load_run(&a) : 2;
    }
    fprintf(stderr, "burst: unknown command '%s'\n%s", argv[1], usage);
    return 2;
}
