/* Result codes: their numbers, their names, and the thread's last error message. */
#include <string.h>

#include "check.h"

int main(void) {
    static const struct {
        int32_t code;
        int32_t value;
        const char *name;
    } codes[] = {
        {GPUCACHE_OK, 0, "GPUCACHE_OK"},
        {GPUCACHE_ERROR_IO, -1, "GPUCACHE_ERROR_IO"},
        {GPUCACHE_ERROR_NOT_FOUND, -2, "GPUCACHE_ERROR_NOT_FOUND"},
        {GPUCACHE_ERROR_ALREADY_EXISTS, -3, "GPUCACHE_ERROR_ALREADY_EXISTS"},
        {GPUCACHE_ERROR_HASH_COLLISION, -4, "GPUCACHE_ERROR_HASH_COLLISION"},
        {GPUCACHE_ERROR_CACHE_FULL, -5, "GPUCACHE_ERROR_CACHE_FULL"},
        {GPUCACHE_ERROR_VALUE_TOO_LARGE, -6, "GPUCACHE_ERROR_VALUE_TOO_LARGE"},
        {GPUCACHE_ERROR_BUFFER_TOO_SMALL, -7, "GPUCACHE_ERROR_BUFFER_TOO_SMALL"},
        {GPUCACHE_ERROR_NOT_CURRENTLY_AVAILABLE, -8, "GPUCACHE_ERROR_NOT_CURRENTLY_AVAILABLE"},
        {GPUCACHE_ERROR_INVALID_ARGUMENT, -9, "GPUCACHE_ERROR_INVALID_ARGUMENT"},
        {GPUCACHE_ERROR_UNSUPPORTED, -10, "GPUCACHE_ERROR_UNSUPPORTED"},
        {GPUCACHE_ERROR_NOT_CONFIGURED, -11, "GPUCACHE_ERROR_NOT_CONFIGURED"},
        {GPUCACHE_ERROR_INTERNAL, -12, "GPUCACHE_ERROR_INTERNAL"},
        {GPUCACHE_ERROR_COMPILE, -13, "GPUCACHE_ERROR_COMPILE"},
        {GPUCACHE_ERROR_LINK, -14, "GPUCACHE_ERROR_LINK"},
        {GPUCACHE_ERROR_GL, -15, "GPUCACHE_ERROR_GL"},
        {GPUCACHE_ERROR_CORRUPT, -16, "GPUCACHE_ERROR_CORRUPT"},
        {GPUCACHE_ERROR_FOREIGN_OWNER, -17, "GPUCACHE_ERROR_FOREIGN_OWNER"},
    };
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        CHECK(codes[i].code == codes[i].value);
        CHECK(strcmp(gpucache_error_name(codes[i].code), codes[i].name) == 0);
    }
    CHECK(strcmp(gpucache_error_name(1), "GPUCACHE_ERROR_UNKNOWN") == 0);
    CHECK(strcmp(gpucache_error_name(-18), "GPUCACHE_ERROR_UNKNOWN") == 0);
    CHECK(strcmp(gpucache_error_name(INT32_MIN), "GPUCACHE_ERROR_UNKNOWN") == 0);

    /* No error yet: an empty message, never NULL. */
    CHECK(gpucache_last_error_message() != NULL);
    CHECK(strcmp(gpucache_last_error_message(), "") == 0);

    /* A failing call leaves a message naming the function; a successful one keeps it. */
    CHECK_CODE(gpucache_egl_flush(), GPUCACHE_ERROR_NOT_CONFIGURED);
    CHECK(strstr(gpucache_last_error_message(), "gpucache_egl_flush") != NULL);
    CHECK_CODE(gpucache_cache_control(GPUCACHE_KIND_APPLICATION_MANAGED, 0),
               GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(gpucache_last_error_message(), "gpucache_cache_control") != NULL);
    CHECK(strstr(gpucache_last_error_message(), "control") != NULL);
    CHECK_CODE(gpucache_egl_configure(NULL), GPUCACHE_OK);
    CHECK(strstr(gpucache_last_error_message(), "gpucache_cache_control") != NULL);
    gpucache_egl_shutdown();

    printf("errors: ok\n");
    return 0;
}
