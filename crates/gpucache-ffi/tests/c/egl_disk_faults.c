/* The blob cache's directory as it can go wrong (issue 11, items 3, 4.1, 4.5), through the C
 * API. `egl_disk_faults MODE DIR`, with the directory prepared by tests/c_disk_faults.rs:
 *   limits    identity over 64 KiB refused; the config's new fields and their defaults; a
 *             first-version struct_size ignores the bytes past `reserved`
 *   foreign   DIR belongs to another user: refused with GPUCACHE_ERROR_FOREIGN_OWNER unless
 *             allow_foreign_owner
 *   readonly  DIR is a read-only mount: configure works, disk_available is 0, stores count
 *             disk_errors and the flush fails; memory serves
 *   full      DIR is on a full file system: the same, once it fills */
#include <string.h>

#include "check.h"

static uint8_t value[2000];
static uint8_t buf[4096];

static struct gpucache_egl_stats stats(void) {
    struct gpucache_egl_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    CHECK_CODE(gpucache_egl_stats(&st), GPUCACHE_OK);
    return st;
}

static gpucache_egl_config config(const char *dir) {
    gpucache_egl_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.struct_size = sizeof cfg;
    gpucache_egl_config_init(&cfg);
    cfg.directory = dir;
    cfg.identity = (const uint8_t *)"egl-disk-faults driver 1";
    cfg.identity_len = strlen((const char *)cfg.identity);
    return cfg;
}

/* Value `i`: incompressible bytes (the disk tier compresses, and a value of one repeated
 * byte would never fill the file system). */
static void fill_value(int i) {
    uint32_t x = 2463534242u ^ (uint32_t)i * 2654435761u;
    for (size_t j = 0; j < sizeof value; j++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        value[j] = (uint8_t)x;
    }
}

/* Stores `n` values and flushes: the flush must fail and the stats say why; memory serves.
 * A read-only directory stays unavailable; a full file system can still take a small write
 * (a removal record in the last block's slack) after the failed stores, and `available` follows
 * the last write, so there only the failed flush and the error count are certain. */
static void stores_are_reported(int n, int stays_unavailable) {
    for (int i = 0; i < n; i++) {
        uint32_t key = (uint32_t)i;
        fill_value(i);
        gpucache_egl_set(&key, sizeof key, value, sizeof value);
    }
    CHECK(gpucache_egl_flush() == GPUCACHE_ERROR_IO);
    struct gpucache_egl_stats st = stats();
    CHECK(!stays_unavailable || st.disk_available == 0);
    CHECK(st.disk_errors > 0);
    for (int i = 0; i < n; i++) {
        uint32_t key = (uint32_t)i;
        CHECK(gpucache_egl_get(&key, sizeof key, buf, sizeof buf) == (EGLsizeiANDROID)sizeof value);
        fill_value(i);
        CHECK(memcmp(buf, value, sizeof value) == 0);
    }
    printf("disk_errors=%llu\n", (unsigned long long)st.disk_errors);
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    const char *mode = argv[1];
    const char *dir = argv[2];
    gpucache_egl_config cfg = config(dir);
    if (strcmp(mode, "limits") == 0) {
        CHECK(cfg.dir_access == 0 && cfg.allow_foreign_owner == 0);
        static uint8_t long_identity[64 * 1024 + 1];
        gpucache_egl_config bad = cfg;
        bad.identity = long_identity;
        bad.identity_len = sizeof long_identity;
        CHECK_CODE(gpucache_egl_configure(&bad), GPUCACHE_ERROR_INVALID_ARGUMENT);
        bad.identity_len = sizeof long_identity - 1;
        CHECK_CODE(gpucache_egl_configure(&bad), GPUCACHE_OK);
        CHECK(stats().disk_available == 1);
        bad = cfg;
        bad.dir_access = 2;
        CHECK_CODE(gpucache_egl_configure(&bad), GPUCACHE_ERROR_INVALID_ARGUMENT);
        /* A first-version caller: the bytes past `reserved` are not read. */
        gpucache_egl_config v1;
        memset(&v1, 0x5a, sizeof v1);
        v1.struct_size = offsetof(gpucache_egl_config, reserved) + sizeof v1.reserved;
        v1.struct_size = (v1.struct_size + 7) & ~(size_t)7;
        gpucache_egl_config_init(&v1);
        CHECK(v1.dir_access == 0x5a5a5a5a);
        v1.directory = dir;
        CHECK_CODE(gpucache_egl_configure(&v1), GPUCACHE_OK);
        cfg.dir_access = 1;
        CHECK_CODE(gpucache_egl_configure(&cfg), GPUCACHE_OK);
        CHECK(strcmp(gpucache_error_name(GPUCACHE_ERROR_FOREIGN_OWNER),
                     "GPUCACHE_ERROR_FOREIGN_OWNER") == 0);
    } else if (strcmp(mode, "foreign") == 0) {
        CHECK_CODE(gpucache_egl_configure(&cfg), GPUCACHE_ERROR_FOREIGN_OWNER);
        CHECK_CODE(gpucache_egl_flush(), GPUCACHE_ERROR_NOT_CONFIGURED);
        cfg.allow_foreign_owner = 1;
        CHECK_CODE(gpucache_egl_configure(&cfg), GPUCACHE_OK);
        CHECK(stats().disk_available == 1);
    } else if (strcmp(mode, "readonly") == 0) {
        CHECK_CODE(gpucache_egl_configure(&cfg), GPUCACHE_OK);
        CHECK(stats().disk_available == 0);
        stores_are_reported(50, 1);
    } else if (strcmp(mode, "full") == 0) {
        cfg.max_memory_bytes = 64ull << 20;
        CHECK_CODE(gpucache_egl_configure(&cfg), GPUCACHE_OK);
        CHECK(stats().disk_available == 1);
        stores_are_reported(1000, 0);
    } else {
        CHECK(!"unknown mode");
    }
    gpucache_egl_shutdown();
    printf("egl_disk_faults %s: ok\n", mode);
    return 0;
}
