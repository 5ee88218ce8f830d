// The LLaMA-2 chat template: a conversation becomes token ids the way Meta's reference code
// (llama/generation.py, chat_completion) builds them. Each finished exchange is
//   BOS "[INST] <user> [/INST] <assistant> " EOS
// and the last user turn is BOS "[INST] <user> [/INST]", left open for the model's answer. A system
// message is folded into the first user turn as "<<SYS>>\n<system>\n<</SYS>>\n\n<user>". Contents
// are stripped of surrounding whitespace, as Meta's code does.
//
// Stateless; safe from any thread. The returned ids are malloc'd; the caller frees them.
#pragma once
#include "tokenizer.h"

typedef struct {
    const char *role;    // "system", "user" or "assistant" ("developer" counts as "system")
    const char *content; // UTF-8
} chat_message;

// Fails with BURST_ERR_INVALID (a message saying which one) unless the roles are: an optional
// system message, then user and assistant alternating, ending with user.
burst_status chat_template_encode(const tokenizer *t, const chat_message *msgs, int n_msgs,
                                  int **ids, int *n_ids, burst_error *err);
