// SentencePiece tokenizer (tokenizer.model of a LLaMA checkpoint) behind a C interface: a thin
// C++ wrapper over Debian's libsentencepiece (tokenizer.cpp), plus streaming detokenization
// that hands out text only in whole UTF-8 characters (tokenizer_stream.c).
//
// A tokenizer is immutable after load: every function is safe from any thread. Returned
// strings and id arrays are malloc'd; the caller frees them. A detok_stream belongs to one
// request (one thread at a time).
#pragma once
#include "../common/burst.h"

typedef struct tokenizer tokenizer;

burst_status tokenizer_load(const char *path, tokenizer **out, burst_error *err);
void tokenizer_free(tokenizer *t);
int tokenizer_vocab_size(const tokenizer *t);
int tokenizer_bos(const tokenizer *t);
int tokenizer_eos(const tokenizer *t);

// Encodes UTF-8 text; with add_bos the BOS id comes first. *ids is malloc'd (n entries). A long
// text is encoded in pieces on several threads (tokenizer.cpp says why the ids are the same).
burst_status tokenizer_encode(const tokenizer *t, const char *text, int add_bos, int **ids, int *n,
                              burst_error *err);
// Decodes ids into a malloc'd, NUL-terminated string (byte-fallback pieces become their bytes;
// bytes that do not form valid UTF-8 become U+FFFD). NULL when an id is out of range.
char *tokenizer_decode(const tokenizer *t, const int *ids, int n);
// One id's piece as text, malloc'd: SentencePiece's piece with its space mark (U+2581) as a space;
// control pieces by name ("</s>"). For a byte-fallback piece "<0xNN>", *byte is NN, else -1.
// NULL when id is out of range.
char *tokenizer_piece(const tokenizer *t, int id, int *byte);
// Whether id's piece is text (or a byte) in decoded output: 0 for control pieces (BOS, EOS),
// unknown and unused ones, and ids out of range.
int tokenizer_is_text(const tokenizer *t, int id);

// Streaming detokenization: text for generated ids as they come, never splitting a UTF-8
// character (byte-fallback pieces of one emoji arrive as several ids) and keeping the spaces
// SentencePiece would drop at the start of a decode.
typedef struct {
    int *ids;          // (cap) the window of ids decoded together
    int n, cap;
    int prefix, read;  // ids[prefix, read) were already emitted; ids[read, n) are pending
} detok_stream;

// context: the last prompt ids (up to a few), so that the first piece's leading space survives.
void detok_init(detok_stream *d, const int *context, int n_context);
void detok_free(detok_stream *d);
// Adds one id; returns the newly complete text (malloc'd, possibly ""), or NULL on a bad id.
char *detok_push(const tokenizer *t, detok_stream *d, int id);
// Returns whatever is still pending (incomplete bytes as U+FFFD), malloc'd.
char *detok_flush(const tokenizer *t, detok_stream *d);
