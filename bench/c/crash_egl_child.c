/* A child of the crash harness (bench/src/bin/crash): the EGL blob cache through the C library.
 * Usage: crash_egl_child DIR EPOCH SEED. Configures the blob cache on DIR, prints READY, then
 * runs the operation stream of SEED (the "egl" stream of bench/src/bin/crash/model.rs, which
 * this file must compute identically): sets, gets (each checked; a wrong value exits 3) and
 * flushes, printing "F <seq>" after each successful flush, until it is killed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpucache.h"

#define KEYS 600u
#define HOT (KEYS / 12u)
#define MAX_SEQ ((1ull << 20) - 1)
#define HEADER_LEN 20u
#define TRAILER_LEN 8u

static uint64_t splitmix(uint64_t *state) {
    *state += 0x9E3779B97F4A7C15ull;
    uint64_t z = *state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

enum op_kind { OP_PUT, OP_GET, OP_FLUSH };

struct op {
    enum op_kind kind;
    uint32_t id;
    size_t len;
};

static struct op op_at(uint64_t seed, uint64_t seq) {
    uint64_t r = seed ^ (seq * 0xD6E8FEB86659FD93ull);
    uint64_t roll = splitmix(&r) % 100;
    struct op o;
    if (splitmix(&r) % 2 == 0)
        o.id = (uint32_t)(splitmix(&r) % HOT);
    else
        o.id = (uint32_t)(splitmix(&r) % KEYS);
    if (splitmix(&r) % 20 == 0)
        o.len = 4000 + (size_t)(splitmix(&r) % 8000);
    else
        o.len = 32 + (size_t)(splitmix(&r) % 3000);
    o.kind = roll < 80 ? OP_PUT : roll < 94 ? OP_GET : OP_FLUSH;
    return o;
}

static size_t key_for(uint32_t id, char *out) {
    int n = snprintf(out, 32, "key/%08u/", (unsigned)id);
    size_t pad = (size_t)((uint32_t)(id * 2654435761u) >> 27);
    for (size_t i = 0; i < pad; i++)
        out[(size_t)n + i] = (char)('a' + (int)(((size_t)id + i) % 26));
    return (size_t)n + pad;
}

static void put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t fnv1a(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x00000100000001b3ull;
    return h;
}

static void value_for(uint32_t id, uint64_t version, size_t len, uint8_t *v) {
    memcpy(v, "GPCV", 4);
    put_le(v + 4, id, 4);
    put_le(v + 8, version, 8);
    put_le(v + 16, len, 4);
    uint64_t r = ((uint64_t)id << 40) ^ (version * 0x2545F4914F6CDD1Dull) ^ (uint64_t)len;
    size_t at = HEADER_LEN;
    while (at < len - TRAILER_LEN) {
        uint64_t w = splitmix(&r);
        for (int i = 0; i < 8 && at < len - TRAILER_LEN; i++, at++)
            v[at] = (uint8_t)(w >> (8 * i));
    }
    put_le(v + len - TRAILER_LEN, fnv1a(v, len - TRAILER_LEN), 8);
}

static uint8_t value[16384], expect[16384], got[16384];

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: crash_egl_child DIR EPOCH SEED\n");
        return 2;
    }
    uint64_t epoch = strtoull(argv[2], NULL, 10);
    uint64_t seed = strtoull(argv[3], NULL, 10);
    static const char identity[] = "gpucache crash harness";
    gpucache_egl_config cfg = {.struct_size = sizeof cfg};
    gpucache_egl_config_init(&cfg);
    cfg.directory = argv[1];
    cfg.identity = (const uint8_t *)identity;
    cfg.identity_len = sizeof identity - 1;
    cfg.max_memory_bytes = 1u << 20; /* small: gets also read from disk */
    if (gpucache_egl_configure(&cfg) != GPUCACHE_OK) {
        fprintf(stderr, "configure: %s\n", gpucache_last_error_message());
        return 4;
    }
    printf("READY\n");
    fflush(stdout);
    char key[64];
    for (uint64_t seq = 0; seq < MAX_SEQ; seq++) {
        struct op o = op_at(seed, seq);
        size_t klen = key_for(o.id, key);
        switch (o.kind) {
        case OP_PUT:
            value_for(o.id, (epoch << 32) | seq, o.len, value);
            gpucache_egl_set(key, (EGLsizeiANDROID)klen, value, (EGLsizeiANDROID)o.len);
            break;
        case OP_GET: {
            EGLsizeiANDROID n = gpucache_egl_get(key, (EGLsizeiANDROID)klen, got, sizeof got);
            if (n > 0) {
                uint64_t version = 0;
                for (int i = 0; i < 8; i++)
                    version |= (uint64_t)got[8 + i] << (8 * i);
                value_for(o.id, version, (size_t)n, expect);
                if (memcmp(got, expect, (size_t)n) != 0) {
                    printf("CORRUPT key %u (%ld bytes)\n", (unsigned)o.id, (long)n);
                    fflush(stdout);
                    return 3;
                }
            }
            break;
        }
        case OP_FLUSH:
            if (gpucache_egl_flush() == GPUCACHE_OK) {
                struct gpucache_egl_stats st = {.struct_size = sizeof st};
                if (gpucache_egl_stats(&st) == GPUCACHE_OK && st.sets_dropped > 0) {
                    printf("DROPPED %llu\n", (unsigned long long)st.sets_dropped);
                    fflush(stdout);
                    return 5;
                }
                printf("F %llu\n", (unsigned long long)seq);
                fflush(stdout);
            }
            break;
        }
    }
    printf("DONE\n");
    gpucache_egl_shutdown();
    return 0;
}
