// libFuzzer target: openai_parse (server/openai.h) on arbitrary request bodies, completions or chat
// (the first byte picks: its bit 0, and the chat template: bits 1 and 2), handed over as the HTTP layer
// hands them: NUL-terminated. Bodies with bytes outside 1..127 are skipped, as http.c refuses
// invalid UTF-8 before parsing (\u escapes still reach the parser with any code point). The parser
// must answer a request or an error and never crash, leak or touch memory it does not own: build
// with sanitizers (README, "Tests"). A request in JSON mode or with a schema then feeds its own
// bytes to the grammar; a function call's request then answers with the bytes the grammar took,
// streamed in two pieces and whole.
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_tokenizer.h"
#include "server/openai.h"

static tokenizer *tok;
static json_vocab *json;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    tok = fuzz_tokenizer("fuzz_openai_parse");
    json = json_vocab_new(tok);
    return 0;
}

// text (a grammar's) as choice 0's answer to call: streamed, its first cut bytes and the rest, then
// whole.
static void answer(openai_call *call, const char *text, size_t cut) {
    request_result res = {.finish = FINISH_STOP};
    char *first = strndup(text, cut);
    call->stream = 1;
    char *chunks[] = {openai_chunk_text(call, "id", 0, first, NULL, 0),
                      openai_chunk_final(call, "id", 0, text + cut, NULL, 0, &res)};
    free(chunks[0]), free(chunks[1]), free(first);
    openai_choice_state *st = &call->state[0];
    free(st->calls);
    *st = (openai_choice_state){0};
    call->stream = 0;
    free(openai_response(call, "id", &(openai_choice){.text = text, .result = res}));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (n < 1) return 0;
    for (size_t i = 1; i < n; i++)
        if (data[i] == 0 || data[i] > 127) return 0;
    openai_kind kind = data[0] & 1 ? OPENAI_CHAT : OPENAI_COMPLETION;
    char *body = malloc(n);
    memcpy(body, data + 1, n - 1);
    body[n - 1] = '\0';
    // A small context and few slots, so that the limits are reached too.
    openai_limits lim = {.model = "m", .tok = tok, .vocab = tokenizer_vocab_size(tok), .ctx = 256, .max_choices = 3,
                         .max_prompts = 4, .chat = (chat_template)((data[0] >> 1 & 3) % 3), .json = json,
                         .sampling = {.temperature = 1, .top_p = 1, .repetition_penalty = 1}};
    openai_call call = {.kind = kind, .model = "m", .tok = tok};
    burst_request *r = request_new();
    api_error e;
    if (openai_parse(kind, body, &lim, r, &call, &e) && r->sampling.json) {
        // The body's bytes as generated text, those the grammar refuses skipped: its states on
        // the schema the body gave.
        json_state s, next;
        json_start(&s, r->sampling.json_schema);
        char *taken = malloc(n);
        size_t len = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            json_copy(&next, &s);
            if (json_feed(&next, body + i, 1)) json_copy(&s, &next), taken[len++] = body[i];
        }
        taken[len] = '\0';
        if (call.tool || call.tool_calls) answer(&call, taken, len / 2);
        free(taken);
    }
    openai_call_free(&call);
    request_release(r);
    free(body);
    return 0;
}
