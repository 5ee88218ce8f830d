// Chat templates: a conversation becomes token ids the way the model's makers built its training
// conversations.
//   llama-2 (LLaMA-2-chat, Code Llama - Instruct): as Meta's reference code builds them
//     (llama/generation.py, chat_completion). Each finished exchange is
//       BOS "[INST] <user> [/INST] <assistant> " EOS
//     and the last user turn is BOS "[INST] <user> [/INST]", left open for the model's answer. A
//     system message goes before the first user turn's text as "<<SYS>>\n<system>\n<</SYS>>\n\n";
//     user and assistant texts are stripped of surrounding whitespace (the first user turn's
//     after the system message joined it, as Meta's code does; ASCII whitespace only, where
//     Python's strip takes Unicode's too).
//   vicuna (Vicuna v1.1 and later, LongChat v1.5: FastChat's vicuna_v1.1): the text
//       <system> " USER: " <user> " ASSISTANT: " <assistant> "</s>USER: " <user> " ASSISTANT:"
//     with FastChat's system message where the conversation has none, and each "</s>" EOS, the
//     text between them encoded alone (BOS before the first), as the slow Hugging Face tokenizer
//     FastChat trained with encodes it. Texts are taken as they are.
//   zephyr (TinyLlama-1.1B-Chat v1.0: the alignment handbook's Zephyr Jinja template, as Hugging
//     Face renders it): each message as "<|system|>\n", "<|user|>\n" or
//     "<|assistant|>\n", its text and "</s>\n", then "<|assistant|>\n"; each "</s>" EOS, the text
//     between them encoded alone (BOS before the first). No system message where there is none.
// In all, "</s>" or "[INST]" inside a message's text is text, not EOS or a turn.
//
// Stateless; safe from any thread. The returned ids are malloc'd; the caller frees them.
#pragma once
#include "tokenizer.h"

typedef enum { CHAT_LLAMA2, CHAT_VICUNA, CHAT_ZEPHYR } chat_template;

typedef struct {
    const char *role;    // "system", "user" or "assistant" ("developer" counts as "system", "tool", a
                         // function's result, as "user": LLaMA-2's and Vicuna's turns have no other place)
    const char *content; // UTF-8
} chat_message;

// The template called name ("llama-2", "vicuna" or "zephyr") into *tpl: 1, or 0 for no such template.
int chat_template_named(const char *name, chat_template *tpl);
const char *chat_template_name(chat_template tpl);
// The template a checkpoint's Hugging Face chat_template (Jinja) looks like, by its markers
// ("[INST]"; "<|user|>", "<|assistant|>" and eos_token; "USER" and "ASSISTANT"): 1 and *tpl, or
// 0 for none of these.
int chat_template_guess(const char *jinja, chat_template *tpl);

// Fails with BURST_ERR_INVALID (a message saying which one) unless the roles are: an optional
// system message, then user (or tool) and assistant alternating, ending with user (or tool). Tool
// messages in a row (the results of parallel calls) are one user turn, their texts a line each.
burst_status chat_template_encode(const tokenizer *t, chat_template tpl, const chat_message *msgs, int n_msgs,
                                  int **ids, int *n_ids, burst_error *err);
