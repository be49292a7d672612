/* The checks of the single-threaded C tests: a failed CHECK prints where
 * and the library's last error, counts, and the test goes on; finish()
 * turns the count into the exit status. */
#ifndef MKCACHE_TESTS_CHECK_H
#define MKCACHE_TESTS_CHECK_H

#include <stdio.h>

#include "mkcache/mkcache.h"

static int failures = 0;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n",       \
                    __FILE__, __LINE__, #cond, mkc_last_error());                \
            ++failures;                                                          \
        }                                                                        \
    } while (0)

#define OK(call) CHECK((call) == MKC_STATUS_OK)

static int finish(const char *test) {
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("%s: all checks passed\n", test);
    return 0;
}

#endif
