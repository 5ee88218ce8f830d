// common/: the error line names file:line and function, and the abort path reports the check.
#include "common/burst.h"
#include "tests/test_util.h"

static burst_status fails_here(burst_error *err) {
    return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: tensor %s dtype %s unsupported", "a.safetensors", "wq", "F64");
}

int main(void) {
    burst_error err;
    burst_status s = fails_here(&err);
    int ok = s == BURST_ERR_FORMAT &&
             strstr(err.msg, "tests/test_common.c:") == err.msg &&
             strstr(err.msg, " fails_here: a.safetensors: tensor wq dtype F64 unsupported") != NULL;
    printf("%s error line: %s\n", ok ? "ok  " : "FAIL", err.msg);
    ok &= BURST_FAIL(NULL, BURST_ERR_IO, "no buffer") == BURST_ERR_IO;
    return ok ? 0 : 1;
}
