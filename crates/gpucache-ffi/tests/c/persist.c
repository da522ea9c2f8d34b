/* A blob cache persisted in a directory, across processes.
 *   persist write DIR   stores 50 values, installs atexit(gpucache_egl_shutdown) and returns
 *                       from main without flushing, while a second thread keeps calling
 *                       gpucache_egl_set (as a driver's worker thread would);
 *   persist write-at-exit DIR   the same with atexit(gpucache_egl_shutdown_at_exit), which
 *                       leaves the values in memory to the exit, and no second thread: its
 *                       set would hold the cache past the handler, hiding a leak from
 *                       LeakSanitizer (which the C tests run with, and which must not
 *                       report the values left to the exit);
 *   persist read DIR    finds all 50, byte for byte;
 *   persist wiped DIR   configures another identity: the directory is wiped, all miss. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <string.h>

#include "check.h"

enum { ENTRIES = 50 };

static void key_for(unsigned i, uint8_t key[20]) {
    for (unsigned j = 0; j < 20; j++) {
        key[j] = (uint8_t)(i * 31 + j);
    }
}

/* Sizes from 1 byte to ~150 KB; the bytes derive from the index. */
static size_t size_for(unsigned i) { return 1 + (size_t)i * i * 61; }

static void value_for(unsigned i, uint8_t *out, size_t n) {
    for (size_t j = 0; j < n; j++) {
        out[j] = (uint8_t)(i ^ (j * 13) ^ (j >> 9));
    }
}

static void configure(const char *dir, const char *identity) {
    gpucache_egl_config cfg = {.struct_size = sizeof cfg};
    gpucache_egl_config_init(&cfg);
    cfg.directory = dir;
    cfg.identity = (const uint8_t *)identity;
    cfg.identity_len = strlen(identity);
    CHECK_CODE(gpucache_egl_configure(&cfg), GPUCACHE_OK);
}

static void *noise(void *arg) {
    (void)arg;
    uint8_t key[20] = {0xff}, value[256];
    memset(value, 0x77, sizeof value);
    for (unsigned n = 0;; n++) {
        key[1] = (uint8_t)n;
        gpucache_egl_set(key, sizeof key, value, sizeof value);
    }
    return NULL;
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    const char *mode = argv[1], *dir = argv[2];
    static uint8_t value[200 * 1024], buf[200 * 1024];
    uint8_t key[20];

    int at_exit = strcmp(mode, "write-at-exit") == 0;
    if (strcmp(mode, "write") == 0 || at_exit) {
        configure(dir, "driver A 1.0");
        for (unsigned i = 0; i < ENTRIES; i++) {
            key_for(i, key);
            value_for(i, value, size_for(i));
            gpucache_egl_set(key, sizeof key, value, (EGLsizeiANDROID)size_for(i));
        }
        CHECK(atexit(at_exit ? gpucache_egl_shutdown_at_exit : gpucache_egl_shutdown) == 0);
        if (!at_exit) {
            pthread_t thread;
            CHECK(pthread_create(&thread, NULL, noise, NULL) == 0);
            CHECK(pthread_detach(thread) == 0);
        }
        printf("persist %s: ok\n", mode);
        return 0; /* no flush: the atexit handler persists */
    }
    if (strcmp(mode, "read") == 0) {
        configure(dir, "driver A 1.0");
        for (unsigned i = 0; i < ENTRIES; i++) {
            key_for(i, key);
            size_t n = size_for(i);
            value_for(i, value, n);
            memset(buf, 0, n);
            CHECK(gpucache_egl_get(key, sizeof key, buf, sizeof buf) == (EGLsizeiANDROID)n);
            CHECK(memcmp(buf, value, n) == 0);
        }
        struct gpucache_egl_stats st = {.struct_size = sizeof st};
        CHECK_CODE(gpucache_egl_stats(&st), GPUCACHE_OK);
        CHECK(st.disk_available == 1 && st.disk_entries >= ENTRIES && st.disk_bytes > 0);
        CHECK(st.hits == ENTRIES && st.gets == ENTRIES);
        gpucache_egl_shutdown();
        printf("persist read: ok\n");
        return 0;
    }
    if (strcmp(mode, "wiped") == 0) {
        configure(dir, "driver B 2.0");
        for (unsigned i = 0; i < ENTRIES; i++) {
            key_for(i, key);
            CHECK(gpucache_egl_get(key, sizeof key, buf, sizeof buf) == 0);
        }
        gpucache_egl_shutdown();
        printf("persist wiped: ok\n");
        return 0;
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
