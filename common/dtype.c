// The dtypes: size and name (common/dtype.h).
#include "dtype.h"

#include <strings.h>

size_t dtype_size(burst_dtype t) {
    switch (t) {
    case DTYPE_F32: return 4;
    case DTYPE_F16: return 2;
    case DTYPE_BF16: return 2;
    case DTYPE_Q8: return 1;
    case DTYPE_Q4: return 0;
    }
    return 0;
}

const char *dtype_name(burst_dtype t) {
    switch (t) {
    case DTYPE_F32: return "F32";
    case DTYPE_F16: return "F16";
    case DTYPE_BF16: return "BF16";
    case DTYPE_Q8: return "Q8";
    case DTYPE_Q4: return "Q4";
    }
    return "?";
}

const char *quant_name(int quant) { return quant == DTYPE_Q8 ? "q8" : quant == DTYPE_Q4 ? "q4" : "none"; }

int quant_parse(const char *s, int *out) {
    static const int all[] = {0, DTYPE_Q8, DTYPE_Q4};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcasecmp(s, quant_name(all[i])) == 0) {
            *out = all[i];
            return 1;
        }
    return 0;
}

int dtype_parse(const char *name, burst_dtype *out) {
    static const burst_dtype all[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcasecmp(name, dtype_name(all[i])) == 0) {
            *out = all[i];
            return 1;
        }
    return 0;
}
