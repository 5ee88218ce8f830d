#include "draft.h"

int draft_lookup(const int *tokens, int len, int max_draft, int *out) {
    if (len < 2 || max_draft < 1) return 0;
    int best_end = -1, best_n = 0;
    // From the most recent: an earlier match ending at i must leave a token after it (i < len - 1).
    for (int i = len - 2; i >= 0 && best_n < DRAFT_NGRAM_MAX; i--) {
        if (tokens[i] != tokens[len - 1]) continue;
        int n = 1;
        while (n < DRAFT_NGRAM_MAX && n <= i && tokens[i - n] == tokens[len - 1 - n]) n++;
        if (n > best_n) best_n = n, best_end = i;
    }
    if (best_n < DRAFT_NGRAM_MIN) return 0;
    // What followed the match, to the end of the tokens; a match closer to the end than max_draft
    // (text repeating a short pattern) goes on repeating it: period tokens, again and again.
    const int period = len - 1 - best_end;
    for (int k = 0; k < max_draft; k++) out[k] = tokens[best_end + 1 + k % period];
    return max_draft;
}
