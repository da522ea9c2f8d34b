/* D3D12-style sessions through the C API: open, find (size query, copy, too small), store,
 * AlreadyExists, NotFound, CacheFull, GetDesc, sharing, versions, disk persistence,
 * delete-on-destroy, cache control, and NULL pointers everywhere.
 * Run with GPUCACHE_DIR set to an empty directory and the working directory writable. */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"

static gpucache_session_desc desc_for(uint8_t id, uint32_t mode) {
    gpucache_session_desc d;
    memset(&d, 0, sizeof d);
    memset(d.identifier, id, sizeof d.identifier);
    d.mode = mode;
    d.max_in_memory_bytes = 1u << 20;
    d.max_in_memory_entries = 1000;
    return d;
}

static gpucache_session *open_ok(const gpucache_session_desc *d) {
    gpucache_session *s = NULL;
    CHECK_CODE(gpucache_session_open(d, &s), GPUCACHE_OK);
    CHECK(s != NULL);
    return s;
}

static const char KEY[] = "vertex-shader-42";
static const char VALUE[] = "specialised DXIL bytes";

static void find_size_then_copy(void) {
    gpucache_session_desc d = desc_for(1, GPUCACHE_MODE_MEMORY);
    gpucache_session *s = open_ok(&d);
    size_t n = 12345;
    CHECK_CODE(gpucache_session_find(s, KEY, sizeof KEY, NULL, &n), GPUCACHE_ERROR_NOT_FOUND);
    CHECK(n == 12345);
    CHECK_CODE(gpucache_session_store(s, KEY, sizeof KEY, VALUE, sizeof VALUE), GPUCACHE_OK);
    CHECK_CODE(gpucache_session_store(s, KEY, sizeof KEY, "other", 5),
               GPUCACHE_ERROR_ALREADY_EXISTS);

    /* FindValue's two calls: the size, then the bytes. */
    n = 0;
    CHECK_CODE(gpucache_session_find(s, KEY, sizeof KEY, NULL, &n), GPUCACHE_OK);
    CHECK(n == sizeof VALUE);
    char *buf = malloc(n);
    CHECK(buf != NULL);
    CHECK_CODE(gpucache_session_find(s, KEY, sizeof KEY, buf, &n), GPUCACHE_OK);
    CHECK(n == sizeof VALUE && memcmp(buf, VALUE, n) == 0); /* the first value was kept */
    free(buf);

    /* A larger buffer: copied, the size reported. */
    char big[100];
    size_t big_n = sizeof big;
    CHECK_CODE(gpucache_session_find(s, KEY, sizeof KEY, big, &big_n), GPUCACHE_OK);
    CHECK(big_n == sizeof VALUE && memcmp(big, VALUE, big_n) == 0);

    /* Too small: nothing written, the size needed reported. */
    char small[4] = {'x', 'x', 'x', 'x'};
    size_t small_n = sizeof small;
    CHECK_CODE(gpucache_session_find(s, KEY, sizeof KEY, small, &small_n),
               GPUCACHE_ERROR_BUFFER_TOO_SMALL);
    CHECK(small_n == sizeof VALUE);
    CHECK(memcmp(small, "xxxx", 4) == 0);

    /* GetDesc returns what was asked for. */
    gpucache_session_desc got;
    memset(&got, 0xff, sizeof got);
    CHECK_CODE(gpucache_session_get_desc(s, &got), GPUCACHE_OK);
    CHECK(memcmp(got.identifier, d.identifier, 16) == 0);
    CHECK(got.mode == GPUCACHE_MODE_MEMORY && got.flags == GPUCACHE_FLAG_NONE);
    CHECK(got.max_in_memory_bytes == 1u << 20 && got.max_in_memory_entries == 1000);
    CHECK(got.max_value_file_bytes == 128u << 20 && got.version == 0 && got.reserved == 0);

    /* A second session on the identifier shares the cache. */
    gpucache_session *s2 = open_ok(&d);
    n = sizeof big;
    CHECK_CODE(gpucache_session_find(s2, KEY, sizeof KEY, big, &n), GPUCACHE_OK);
    CHECK(n == sizeof VALUE);

    /* Another version while open: AlreadyExists; the other mode: InvalidArgument. */
    gpucache_session_desc v2 = d;
    v2.version = 2;
    gpucache_session *bad = (gpucache_session *)&d; /* must be overwritten with NULL */
    CHECK_CODE(gpucache_session_open(&v2, &bad), GPUCACHE_ERROR_ALREADY_EXISTS);
    CHECK(bad == NULL);
    gpucache_session_desc disk = d;
    disk.mode = GPUCACHE_MODE_DISK;
    CHECK_CODE(gpucache_session_open(&disk, &bad), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK(bad == NULL);

    /* Closing the last session of a memory cache drops its entries. */
    gpucache_session_close(s);
    gpucache_session_close(s2);
    s = open_ok(&d);
    CHECK_CODE(gpucache_session_find(s, KEY, sizeof KEY, NULL, &n), GPUCACHE_ERROR_NOT_FOUND);
    CHECK_CODE(gpucache_session_flush(s), GPUCACHE_OK);
    gpucache_session_close(s);
}

static void defaults_and_cache_full(void) {
    gpucache_session_desc d = desc_for(2, GPUCACHE_MODE_MEMORY);
    d.max_in_memory_bytes = 0;
    d.max_in_memory_entries = 0;
    gpucache_session *s = open_ok(&d);
    gpucache_session_desc got;
    CHECK_CODE(gpucache_session_get_desc(s, &got), GPUCACHE_OK);
    CHECK(got.max_in_memory_bytes == 1024 && got.max_in_memory_entries == 128);
    CHECK(got.max_value_file_bytes == 128u << 20);
    /* D3D12's 1 KiB default cannot hold a 2000-byte value, and a memory cache never evicts. */
    static char value[2000];
    CHECK_CODE(gpucache_session_store(s, "k", 1, value, sizeof value), GPUCACHE_ERROR_CACHE_FULL);
    CHECK_CODE(gpucache_session_store(s, "k", 1, value, 100), GPUCACHE_OK);
    gpucache_session_close(s);
}

static void disk_sessions_persist_until_deleted(void) {
    gpucache_session_desc d = desc_for(3, GPUCACHE_MODE_DISK);
    d.version = 5;
    gpucache_session *s = open_ok(&d);
    CHECK_CODE(gpucache_session_store(s, KEY, sizeof KEY, VALUE, sizeof VALUE), GPUCACHE_OK);
    CHECK_CODE(gpucache_session_flush(s), GPUCACHE_OK);
    gpucache_session_close(s);

    /* Reopened: found on disk. */
    s = open_ok(&d);
    char buf[64];
    size_t n = sizeof buf;
    CHECK_CODE(gpucache_session_find(s, KEY, sizeof KEY, buf, &n), GPUCACHE_OK);
    CHECK(n == sizeof VALUE && memcmp(buf, VALUE, n) == 0);
    CHECK_CODE(gpucache_session_store(s, KEY, sizeof KEY, VALUE, sizeof VALUE),
               GPUCACHE_ERROR_ALREADY_EXISTS);

    /* Delete-on-destroy: gone once the last session closes. */
    CHECK_CODE(gpucache_session_set_delete_on_destroy(s), GPUCACHE_OK);
    gpucache_session_close(s);
    s = open_ok(&d);
    CHECK_CODE(gpucache_session_find(s, KEY, sizeof KEY, NULL, &n), GPUCACHE_ERROR_NOT_FOUND);
    gpucache_session_close(s);

    /* USE_WORKING_DIR: the cache lives in ./<identifier in hex>.gpucache. */
    gpucache_session_desc w = desc_for(4, GPUCACHE_MODE_DISK);
    w.flags = GPUCACHE_FLAG_USE_WORKING_DIR | GPUCACHE_FLAG_DRIVER_VERSIONED;
    s = open_ok(&w);
    CHECK_CODE(gpucache_session_store(s, KEY, sizeof KEY, VALUE, sizeof VALUE), GPUCACHE_OK);
    gpucache_session_close(s);
    struct stat st;
    CHECK(stat("04040404040404040404040404040404.gpucache", &st) == 0 && S_ISDIR(st.st_mode));
}

static void value_limits(void) {
    /* A declared size no buffer has is refused before it is read or allocated for. */
    gpucache_session_desc d = desc_for(5, GPUCACHE_MODE_DISK);
    d.max_value_file_bytes = 64u << 10;
    gpucache_session *s = open_ok(&d);
    uint64_t limit = 0;
    CHECK_CODE(gpucache_session_max_value_size(s, &limit), GPUCACHE_OK);
    CHECK(limit > 1000 && limit < 64u << 10);
    CHECK_CODE(gpucache_session_max_value_size(s, NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_session_max_value_size(NULL, &limit), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_session_store(s, KEY, sizeof KEY, VALUE, (size_t)LONG_MAX),
               GPUCACHE_ERROR_CACHE_FULL);
    CHECK_CODE(gpucache_session_store(s, KEY, sizeof KEY, VALUE, SIZE_MAX),
               GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_session_store(s, KEY, sizeof KEY, VALUE, (size_t)limit + 1),
               GPUCACHE_ERROR_CACHE_FULL);

    /* Stores past the value file's size are refused even before the writer has written
     * the earlier ones, and every store that succeeded survives a reopen. */
    static uint8_t value[1000];
    int stored = 0, full = 0;
    for (uint32_t i = 0; i < 1000; i++) {
        int32_t rc = gpucache_session_store(s, &i, sizeof i, value, sizeof value);
        CHECK(rc == GPUCACHE_OK || rc == GPUCACHE_ERROR_CACHE_FULL);
        if (rc == GPUCACHE_OK)
            stored++;
        else
            full++;
    }
    CHECK(stored > 0 && full > 0);
    gpucache_session_close(s);
    s = open_ok(&d);
    int found = 0;
    for (uint32_t i = 0; i < 1000; i++) {
        size_t n = 0;
        if (gpucache_session_find(s, &i, sizeof i, NULL, &n) == GPUCACHE_OK && n == sizeof value)
            found++;
    }
    if (found != stored) {
        fprintf(stderr, "%d stores succeeded, %d survived a reopen\n", stored, found);
        exit(1);
    }
    CHECK_CODE(gpucache_session_set_delete_on_destroy(s), GPUCACHE_OK);
    gpucache_session_close(s);

    /* A memory session: what fits in its budget. */
    gpucache_session_desc m = desc_for(6, GPUCACHE_MODE_MEMORY);
    m.max_in_memory_bytes = 4096;
    s = open_ok(&m);
    CHECK_CODE(gpucache_session_max_value_size(s, &limit), GPUCACHE_OK);
    CHECK(limit > 0 && limit <= 4096 - 192);
    CHECK_CODE(gpucache_session_store(s, "k", 1, VALUE, (size_t)LONG_MAX),
               GPUCACHE_ERROR_CACHE_FULL);
    gpucache_session_close(s);
}

static void cache_control(void) {
    gpucache_session_desc d = desc_for(5, GPUCACHE_MODE_MEMORY);
    gpucache_session *s = open_ok(&d);
    CHECK_CODE(gpucache_session_store(s, KEY, sizeof KEY, VALUE, sizeof VALUE), GPUCACHE_OK);
    size_t n = 0;

    CHECK_CODE(gpucache_cache_control(GPUCACHE_KIND_APPLICATION_MANAGED, GPUCACHE_CONTROL_DISABLE),
               GPUCACHE_OK);
    CHECK_CODE(gpucache_session_find(s, KEY, sizeof KEY, NULL, &n),
               GPUCACHE_ERROR_NOT_CURRENTLY_AVAILABLE);
    CHECK_CODE(gpucache_session_store(s, "x", 1, "y", 1), GPUCACHE_ERROR_NOT_CURRENTLY_AVAILABLE);
    gpucache_session *other = NULL;
    gpucache_session_desc d2 = desc_for(6, GPUCACHE_MODE_MEMORY);
    CHECK_CODE(gpucache_session_open(&d2, &other), GPUCACHE_ERROR_NOT_CURRENTLY_AVAILABLE);
    CHECK(other == NULL);

    CHECK_CODE(gpucache_cache_control(GPUCACHE_KIND_APPLICATION_MANAGED, GPUCACHE_CONTROL_ENABLE),
               GPUCACHE_OK);
    CHECK_CODE(gpucache_session_find(s, KEY, sizeof KEY, NULL, &n), GPUCACHE_OK);
    CHECK(n == sizeof VALUE);

    CHECK_CODE(gpucache_cache_control(GPUCACHE_KIND_APPLICATION_MANAGED, GPUCACHE_CONTROL_CLEAR),
               GPUCACHE_OK);
    CHECK_CODE(gpucache_session_find(s, KEY, sizeof KEY, NULL, &n), GPUCACHE_ERROR_NOT_FOUND);

    /* Kinds gpucache does not have are accepted and do nothing. */
    CHECK_CODE(gpucache_cache_control(GPUCACHE_KIND_IMPLICIT_D3D_CACHE_FOR_DRIVER |
                                          GPUCACHE_KIND_IMPLICIT_D3D_CONVERSIONS,
                                      GPUCACHE_CONTROL_CLEAR),
               GPUCACHE_OK);
    /* Invalid requests. */
    CHECK_CODE(gpucache_cache_control(0, GPUCACHE_CONTROL_CLEAR), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_cache_control(GPUCACHE_KIND_APPLICATION_MANAGED, 0),
               GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_cache_control(GPUCACHE_KIND_APPLICATION_MANAGED,
                                      GPUCACHE_CONTROL_DISABLE | GPUCACHE_CONTROL_ENABLE),
               GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_cache_control(0x10, GPUCACHE_CONTROL_CLEAR), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_cache_control(GPUCACHE_KIND_APPLICATION_MANAGED, 0x8),
               GPUCACHE_ERROR_INVALID_ARGUMENT);
    gpucache_session_close(s);
}

static void null_pointers_and_bad_sizes(void) {
    gpucache_session_desc d = desc_for(7, GPUCACHE_MODE_MEMORY);
    gpucache_session *s = NULL;
    CHECK_CODE(gpucache_session_open(NULL, &s), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK(s == NULL);
    CHECK_CODE(gpucache_session_open(&d, NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);
    gpucache_session_desc bad = d;
    bad.mode = 7;
    CHECK_CODE(gpucache_session_open(&bad, &s), GPUCACHE_ERROR_INVALID_ARGUMENT);
    bad = d;
    bad.flags = 0x100;
    CHECK_CODE(gpucache_session_open(&bad, &s), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK(s == NULL);

    s = open_ok(&d);
    char buf[8];
    size_t n = sizeof buf;
    CHECK_CODE(gpucache_session_find(NULL, KEY, sizeof KEY, buf, &n), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_session_find(s, NULL, 4, buf, &n), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_session_find(s, KEY, sizeof KEY, buf, NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_session_find(s, KEY, SIZE_MAX, buf, &n), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK(n == sizeof buf);
    CHECK_CODE(gpucache_session_store(NULL, KEY, sizeof KEY, VALUE, sizeof VALUE),
               GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_session_store(s, NULL, 3, VALUE, sizeof VALUE),
               GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_session_store(s, KEY, sizeof KEY, NULL, 3), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_session_store(s, KEY, sizeof KEY, VALUE, SIZE_MAX),
               GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_session_find(s, KEY, sizeof KEY, NULL, &n), GPUCACHE_ERROR_NOT_FOUND);
    CHECK_CODE(gpucache_session_set_delete_on_destroy(NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);
    gpucache_session_desc got;
    CHECK_CODE(gpucache_session_get_desc(NULL, &got), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_session_get_desc(s, NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_session_flush(NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);
    gpucache_session_close(NULL);
    gpucache_session_close(s);
}

int main(void) {
    find_size_then_copy();
    defaults_and_cache_full();
    disk_sessions_persist_until_deleted();
    value_limits();
    cache_control();
    null_pointers_and_bad_sizes();
    printf("sessions: ok\n");
    return 0;
}
