/* The EGL_ANDROID_blob_cache callbacks through the C API: before configure, configure,
 * set/get with the extension's rules, miss-on-oversize (Mesa), exact counters, bad input,
 * cache control, flush, shutdown, and configuring again. */
#include <limits.h>
#include <string.h>

#include "check.h"

static uint8_t key_a[20], key_b[20], key_big[20];
static uint8_t value_a[1000], value_a2[500], value_big[100 * 1024];
static uint8_t buf[128 * 1024];

static void fill(uint8_t *p, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++) {
        p[i] = (uint8_t)(seed + i * 7 + (i >> 8));
    }
}

static struct gpucache_egl_stats stats(void) {
    struct gpucache_egl_stats st;
    memset(&st, 0xee, sizeof st);
    st.struct_size = sizeof st;
    CHECK_CODE(gpucache_egl_stats(&st), GPUCACHE_OK);
    CHECK(st.struct_size == sizeof st);
    CHECK(st.gets == st.hits + st.misses + st.gets_buffer_too_small);
    return st;
}

static void before_configure(void) {
    gpucache_egl_set(key_a, sizeof key_a, value_a, sizeof value_a);
    CHECK(gpucache_egl_get(key_a, sizeof key_a, buf, sizeof buf) == 0);
    struct gpucache_egl_stats st = {.struct_size = sizeof st};
    CHECK_CODE(gpucache_egl_stats(&st), GPUCACHE_ERROR_NOT_CONFIGURED);
    CHECK_CODE(gpucache_egl_flush(), GPUCACHE_ERROR_NOT_CONFIGURED);
    CHECK_CODE(gpucache_egl_set_miss_on_oversize(1), GPUCACHE_ERROR_NOT_CONFIGURED);
    gpucache_egl_shutdown(); /* nothing to shut down: fine */
    CHECK(gpucache_egl_max_value_size() == 0);
}

static void configure(void) {
    gpucache_egl_config cfg;
    memset(&cfg, 0x5a, sizeof cfg);
    cfg.struct_size = sizeof cfg;
    gpucache_egl_config_init(&cfg);
    CHECK(cfg.struct_size == sizeof cfg);
    CHECK(cfg.directory == NULL && cfg.identity == NULL && cfg.identity_len == 0);
    CHECK(cfg.max_disk_bytes == 1ull << 30 && cfg.max_memory_bytes == 64ull << 20);
    CHECK(cfg.max_memory_entries == UINT64_MAX && cfg.max_key_size == 4096);
    CHECK(cfg.max_value_size == 4ull << 20 && cfg.miss_on_oversize == 0 && cfg.reserved == 0);
    /* Third version: no fleet unless asked for. */
    CHECK(cfg.fleet_url == NULL && cfg.fleet_key_file == NULL);
    CHECK(cfg.fleet_previous_key_file == NULL && cfg.fleet_read_budget_us == 0);

    /* A second-version caller: the fleet fields past its size are neither read nor written. */
    size_t v2_size = offsetof(gpucache_egl_config, fleet_url);
    gpucache_egl_config v2;
    memset(&v2, 0x5a, sizeof v2);
    v2.struct_size = v2_size;
    gpucache_egl_config_init(&v2);
    CHECK(v2.struct_size == v2_size && v2.dir_access == 0 && v2.allow_foreign_owner == 0);
    CHECK(v2.fleet_read_budget_us == 0x5a5a5a5a5a5a5a5aull);
    v2.fleet_url = "garbage://that a v2 caller never set";
    CHECK_CODE(gpucache_egl_configure(&v2), GPUCACHE_OK);
    gpucache_egl_shutdown();

    /* A zeroed structure gets the first version's size. */
    gpucache_egl_config zeroed;
    memset(&zeroed, 0, sizeof zeroed);
    gpucache_egl_config_init(&zeroed);
    size_t v1_size = (offsetof(gpucache_egl_config, reserved) + sizeof(uint32_t) + 7) & ~(size_t)7;
    CHECK(zeroed.struct_size == v1_size && zeroed.max_key_size == 4096);
    gpucache_egl_config_init(NULL);

    /* Refused configurations leave nothing configured. */
    gpucache_egl_config bad = cfg;
    bad.struct_size = 8;
    CHECK_CODE(gpucache_egl_configure(&bad), GPUCACHE_ERROR_INVALID_ARGUMENT);
    bad = cfg;
    bad.identity_len = 3;
    CHECK_CODE(gpucache_egl_configure(&bad), GPUCACHE_ERROR_INVALID_ARGUMENT);
    bad = cfg;
    bad.directory = "";
    CHECK_CODE(gpucache_egl_configure(&bad), GPUCACHE_ERROR_INVALID_ARGUMENT);
    /* A fleet URL that is not one, and a fleet without a key file. */
    bad = cfg;
    bad.fleet_url = "http://127.0.0.1:1";
    bad.fleet_key_file = "/nonexistent/fleet.key";
    CHECK_CODE(gpucache_egl_configure(&bad), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(gpucache_last_error_message(), "fleet") != NULL);
    bad.fleet_url = "redis://127.0.0.1:1";
    CHECK_CODE(gpucache_egl_configure(&bad), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_egl_flush(), GPUCACHE_ERROR_NOT_CONFIGURED);

    cfg.max_key_size = 32;
    CHECK_CODE(gpucache_egl_configure(&cfg), GPUCACHE_OK);
    struct gpucache_egl_stats st = stats();
    CHECK(st.gets == 0 && st.sets == 0 && st.memory_entries == 0);
    CHECK(st.memory_max_bytes == 64ull << 20);
    CHECK(st.disk_available == 0 && st.disk_bytes == 0 && st.miss_on_oversize == 0);
}

static void spec_behaviour(void) {
    gpucache_egl_set(key_a, sizeof key_a, value_a, sizeof value_a);
    /* The size query of the extension: NULL buffer, size 0. */
    CHECK(gpucache_egl_get(key_a, sizeof key_a, NULL, 0) == (EGLsizeiANDROID)sizeof value_a);
    /* Too small: the size, nothing written. */
    memset(buf, 0xab, sizeof buf);
    CHECK(gpucache_egl_get(key_a, sizeof key_a, buf, sizeof value_a - 1) ==
          (EGLsizeiANDROID)sizeof value_a);
    for (size_t i = 0; i < sizeof buf; i++) {
        CHECK(buf[i] == 0xab);
    }
    /* Exactly large enough: copied. */
    CHECK(gpucache_egl_get(key_a, sizeof key_a, buf, sizeof value_a) ==
          (EGLsizeiANDROID)sizeof value_a);
    CHECK(memcmp(buf, value_a, sizeof value_a) == 0);
    CHECK(buf[sizeof value_a] == 0xab);
    /* A miss. */
    CHECK(gpucache_egl_get(key_b, sizeof key_b, buf, sizeof buf) == 0);
    /* The newest value wins. */
    gpucache_egl_set(key_a, sizeof key_a, value_a2, sizeof value_a2);
    CHECK(gpucache_egl_get(key_a, sizeof key_a, buf, sizeof buf) == (EGLsizeiANDROID)sizeof value_a2);
    CHECK(memcmp(buf, value_a2, sizeof value_a2) == 0);
    /* Dropped: an empty value (a get could not tell it from a miss), a key over the limit. */
    gpucache_egl_set(key_b, sizeof key_b, value_a, 0);
    CHECK(gpucache_egl_get(key_b, sizeof key_b, buf, sizeof buf) == 0);
    uint8_t long_key[33] = {1};
    gpucache_egl_set(long_key, sizeof long_key, value_a, sizeof value_a);
    CHECK(gpucache_egl_get(long_key, sizeof long_key, buf, sizeof buf) == 0);

    struct gpucache_egl_stats st = stats();
    CHECK(st.gets == 7 && st.hits == 2 && st.misses == 3 && st.gets_buffer_too_small == 2);
    CHECK(st.sets == 4 && st.sets_dropped == 2);
    CHECK(st.memory_entries == 1 && st.memory_bytes > sizeof value_a2);
}

static void miss_on_oversize(void) {
    gpucache_egl_set(key_big, sizeof key_big, value_big, sizeof value_big);
    /* Spec behaviour: the size of a value larger than the buffer. */
    CHECK(gpucache_egl_get(key_big, sizeof key_big, buf, 64 * 1024) ==
          (EGLsizeiANDROID)sizeof value_big);
    /* Mesa's behaviour: 0, so that Mesa never reads past its 64 KiB buffer. */
    CHECK_CODE(gpucache_egl_set_miss_on_oversize(1), GPUCACHE_OK);
    CHECK(stats().miss_on_oversize == 1);
    memset(buf, 0xcd, sizeof buf);
    CHECK(gpucache_egl_get(key_big, sizeof key_big, buf, 64 * 1024) == 0);
    CHECK(gpucache_egl_get(key_big, sizeof key_big, NULL, 0) == 0);
    for (size_t i = 0; i < sizeof buf; i++) {
        CHECK(buf[i] == 0xcd);
    }
    /* A buffer that fits still gets it. */
    CHECK(gpucache_egl_get(key_big, sizeof key_big, buf, sizeof buf) ==
          (EGLsizeiANDROID)sizeof value_big);
    CHECK(memcmp(buf, value_big, sizeof value_big) == 0);
    CHECK_CODE(gpucache_egl_set_miss_on_oversize(0), GPUCACHE_OK);
    CHECK(stats().miss_on_oversize == 0);

    struct gpucache_egl_stats st = stats();
    CHECK(st.gets == 11 && st.hits == 3 && st.misses == 3 && st.gets_buffer_too_small == 5);
    CHECK(st.sets == 5 && st.sets_dropped == 2 && st.memory_entries == 2);
}

static void bad_input_is_ignored(void) {
    struct gpucache_egl_stats before = stats();
    gpucache_egl_set(NULL, 20, value_a, sizeof value_a);
    gpucache_egl_set(key_b, -1, value_a, sizeof value_a);
    gpucache_egl_set(key_b, sizeof key_b, NULL, sizeof value_a);
    gpucache_egl_set(key_b, sizeof key_b, value_a, -5);
    CHECK(gpucache_egl_get(NULL, 20, buf, sizeof buf) == 0);
    CHECK(gpucache_egl_get(key_a, -20, buf, sizeof buf) == 0);
    CHECK(gpucache_egl_get(key_a, sizeof key_a, NULL, 10) == 0);
    CHECK(gpucache_egl_get(key_a, sizeof key_a, buf, -1) == 0);
    CHECK(gpucache_egl_get(key_b, sizeof key_b, buf, sizeof buf) == 0); /* no set went through */
    struct gpucache_egl_stats after = stats();
    CHECK(after.sets == before.sets && after.sets_dropped == before.sets_dropped);
    CHECK(after.gets == before.gets + 1);

    /* Declared sizes over the limits: dropped and counted, never read nor allocated for
     * (LONG_MAX used to abort the process on allocation). */
    CHECK(gpucache_egl_max_value_size() == 4ull << 20);
    before = stats();
    gpucache_egl_set(key_b, sizeof key_b, value_a, LONG_MAX);
    gpucache_egl_set(key_b, sizeof key_b, value_a, (EGLsizeiANDROID)(4ull << 20) + 1);
    gpucache_egl_set(key_b, LONG_MAX, value_a, sizeof value_a);
    after = stats();
    CHECK(after.sets == before.sets + 3 && after.sets_dropped == before.sets_dropped + 3);
    CHECK(gpucache_egl_get(key_b, sizeof key_b, buf, sizeof buf) == 0);

    struct gpucache_egl_stats small = {.struct_size = 16};
    CHECK_CODE(gpucache_egl_stats(&small), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK(small.gets == 0); /* nothing written */
    CHECK_CODE(gpucache_egl_stats(NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);
}

static void cache_control(void) {
    CHECK_CODE(gpucache_cache_control(GPUCACHE_KIND_IMPLICIT_DRIVER_MANAGED, GPUCACHE_CONTROL_DISABLE),
               GPUCACHE_OK);
    CHECK(gpucache_egl_get(key_a, sizeof key_a, buf, sizeof buf) == 0);
    gpucache_egl_set(key_b, sizeof key_b, value_a, sizeof value_a);
    CHECK(stats().calls_while_disabled == 2);
    CHECK_CODE(gpucache_cache_control(GPUCACHE_KIND_IMPLICIT_DRIVER_MANAGED, GPUCACHE_CONTROL_ENABLE),
               GPUCACHE_OK);
    CHECK(gpucache_egl_get(key_a, sizeof key_a, buf, sizeof buf) == (EGLsizeiANDROID)sizeof value_a2);
    CHECK(gpucache_egl_get(key_b, sizeof key_b, buf, sizeof buf) == 0);
    CHECK_CODE(gpucache_cache_control(GPUCACHE_KIND_IMPLICIT_DRIVER_MANAGED, GPUCACHE_CONTROL_CLEAR),
               GPUCACHE_OK);
    CHECK(gpucache_egl_get(key_a, sizeof key_a, buf, sizeof buf) == 0);
    CHECK(stats().memory_entries == 0);
}

static void flush_shutdown_and_again(void) {
    gpucache_egl_set(key_a, sizeof key_a, value_a, sizeof value_a);
    CHECK_CODE(gpucache_egl_flush(), GPUCACHE_OK); /* memory only: nothing to write */
    gpucache_egl_shutdown();
    gpucache_egl_shutdown(); /* idempotent */
    gpucache_egl_set(key_b, sizeof key_b, value_a, sizeof value_a);
    CHECK(gpucache_egl_get(key_a, sizeof key_a, buf, sizeof buf) == 0);
    CHECK(gpucache_egl_get(key_b, sizeof key_b, NULL, 0) == 0);
    struct gpucache_egl_stats st = {.struct_size = sizeof st};
    CHECK_CODE(gpucache_egl_stats(&st), GPUCACHE_ERROR_NOT_CONFIGURED);
    CHECK_CODE(gpucache_egl_set_miss_on_oversize(1), GPUCACHE_ERROR_NOT_CONFIGURED);

    /* Configure again (NULL: defaults): an empty cache with fresh counters. */
    CHECK_CODE(gpucache_egl_configure(NULL), GPUCACHE_OK);
    CHECK(gpucache_egl_get(key_a, sizeof key_a, buf, sizeof buf) == 0);
    gpucache_egl_set(key_a, sizeof key_a, value_a, sizeof value_a);
    CHECK(gpucache_egl_get(key_a, sizeof key_a, buf, sizeof buf) == (EGLsizeiANDROID)sizeof value_a);
    st = stats();
    CHECK(st.gets == 2 && st.hits == 1 && st.sets == 1 && st.memory_entries == 1);
    /* A refused configuration keeps the cache in place. */
    gpucache_egl_config bad = {.struct_size = 8};
    CHECK_CODE(gpucache_egl_configure(&bad), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK(gpucache_egl_get(key_a, sizeof key_a, buf, sizeof buf) == (EGLsizeiANDROID)sizeof value_a);
    gpucache_egl_shutdown();
}

int main(void) {
    fill(key_a, sizeof key_a, 1);
    fill(key_b, sizeof key_b, 2);
    fill(key_big, sizeof key_big, 3);
    fill(value_a, sizeof value_a, 4);
    fill(value_a2, sizeof value_a2, 5);
    fill(value_big, sizeof value_big, 6);
    before_configure();
    configure();
    spec_behaviour();
    miss_on_oversize();
    bad_input_is_ignored();
    cache_control();
    flush_shutdown_and_again();
    printf("egl_blob_cache: ok\n");
    return 0;
}
