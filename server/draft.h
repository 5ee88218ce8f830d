// Prompt lookup drafts for speculative decoding: the tokens that followed the sequence's last few
// tokens where they occurred before (in the prompt or in what has been generated) are a good
// guess at what comes next when an answer quotes its context: a summary, an edit of code, an
// answer drawn from a document, a repeated pattern. The engine runs the guesses beside the next
// token in one forward pass and keeps those the model agrees with (engine.h).
#pragma once

enum { DRAFT_NGRAM_MIN = 2, DRAFT_NGRAM_MAX = 4 };

// max_draft tokens to follow tokens[0..len) into out: what followed the most recent earlier
// occurrence of the longest suffix of tokens of DRAFT_NGRAM_MIN to DRAFT_NGRAM_MAX tokens, up to
// the end of tokens and then again (the end repeats the p tokens after the occurrence, p its
// distance from the end, so the guesses go on repeating them). Returns how many (0: no such
// occurrence). One pass over tokens.
int draft_lookup(const int *tokens, int len, int max_draft, int *out);
