/* Assertions for the C tests: print where and why, with gpucache's last error, and exit 1. */
#ifndef GPUCACHE_TEST_CHECK_H
#define GPUCACHE_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "gpucache.h"

#define CHECK(cond)                                                                         \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__,         \
                    __LINE__, #cond, gpucache_last_error_message());                        \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

#define CHECK_CODE(expr, expected)                                                          \
    do {                                                                                    \
        int32_t got_ = (expr);                                                              \
        if (got_ != (expected)) {                                                           \
            fprintf(stderr, "%s:%d: %s returned %s (%d), expected %s (last error: %s)\n",  \
                    __FILE__, __LINE__, #expr, gpucache_error_name(got_), (int)got_,        \
                    #expected, gpucache_last_error_message());                              \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

#endif /* GPUCACHE_TEST_CHECK_H */
