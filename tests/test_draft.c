// server/draft.h: prompt lookup takes the longest suffix match (2 to 4 tokens), the most recent
// among equals, copies max_draft tokens of what followed it (repeating the tokens from there to the
// end when they are fewer), and proposes nothing for a match of one token or none.
#include <stdio.h>
#include <string.h>

#include "server/draft.h"

static int failures;

static void check(const char *name, const int *tokens, int len, int max_draft, const int *want, int n_want) {
    int out[16], n = draft_lookup(tokens, len, max_draft, out);
    int ok = n == n_want && (n == 0 || !memcmp(out, want, sizeof(int) * (size_t)n));
    printf("%s %s: %d tokens", ok ? "ok  " : "FAIL", name, n);
    for (int i = 0; i < n; i++) printf(" %d", out[i]);
    printf("\n");
    failures += !ok;
}

int main(void) {
    // ... 7 8 9 | 1 2 3 ... 1 2 3: the last three occurred before, followed by 4 5 6.
    check("follows the earlier occurrence", (int[]){7, 8, 1, 2, 3, 4, 5, 6, 9, 1, 2, 3}, 12, 3, (int[]){4, 5, 6}, 3);
    check("at most max_draft", (int[]){1, 2, 3, 4, 5, 6, 9, 1, 2, 3}, 10, 2, (int[]){4, 5}, 2);
    // 2 3 8 | 2 3: three tokens from the match to the end, repeated.
    check("a match near the end repeats what follows it", (int[]){5, 2, 3, 8, 2, 3}, 6, 8,
          (int[]){8, 2, 3, 8, 2, 3, 8, 2}, 8);
    check("one token over and over", (int[]){4, 7, 7, 7}, 4, 5, (int[]){7, 7, 7, 7, 7}, 5);
    // 2 3 occurs twice before: the later one, followed by 7, wins over the earlier (followed by 4).
    check("most recent of equal matches", (int[]){2, 3, 4, 9, 2, 3, 7, 1, 2, 3}, 10, 1, (int[]){7}, 1);
    // 1 2 3 (three tokens) beats the more recent 2 3 (two).
    check("longest match wins", (int[]){1, 2, 3, 4, 5, 2, 3, 6, 1, 2, 3}, 11, 1, (int[]){4}, 1);
    check("one token matching is not enough", (int[]){3, 4, 5, 6, 3}, 5, 4, NULL, 0);
    check("no match", (int[]){1, 2, 3, 4}, 4, 4, NULL, 0);
    check("a repeating pattern", (int[]){1, 2, 1, 2, 1, 2}, 6, 5, (int[]){1, 2, 1, 2, 1}, 5);
    check("max_draft 0", (int[]){1, 2, 3, 1, 2}, 5, 0, NULL, 0);
    check("too short", (int[]){1}, 1, 4, NULL, 0);
    return failures ? 1 : 0;
}
