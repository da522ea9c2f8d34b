/* gpucache's blob cache from C, in a program's life: configure once, install on the EGL
 * display after eglCreateContext, shut down at exit. Here the program calls the callbacks
 * itself, as a driver would, so that it runs without a GPU.
 *
 *   cc -std=c11 blob_cache.c $(pkg-config --cflags --libs gpucache) -o blob_cache
 *   ./blob_cache /tmp/shader-cache     # first run: cold (stores); later runs: warm (hits) */
#include <gpucache.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    gpucache_egl_config cfg = {.struct_size = sizeof cfg};
    gpucache_egl_config_init(&cfg);
    cfg.directory = argc > 1 ? argv[1] : NULL; /* NULL: memory only */
    static const char identity[] = "llvmpipe / Mesa 25.0.7"; /* what the entries depend on */
    cfg.identity = (const uint8_t *)identity;
    cfg.identity_len = sizeof identity - 1;
    int32_t rc = gpucache_egl_configure(&cfg);
    if (rc != GPUCACHE_OK) {
        fprintf(stderr, "%s: %s\n", gpucache_error_name(rc), gpucache_last_error_message());
        return 1;
    }
    atexit(gpucache_egl_shutdown_at_exit); /* persists what was stored, whatever the exit path */

    /* With a driver: eglInitialize(dpy), eglCreateContext(dpy, ...), then
     * rc = gpucache_egl_install(dpy); and the driver calls set/get from then on. */
    static const char key[] = "sha1-of-a-program";
    static char program[64 * 1024];
    EGLsizeiANDROID n = gpucache_egl_get(key, sizeof key, program, sizeof program);
    if (n > 0) {
        printf("warm: found a %ld-byte program\n", (long)n);
    } else {
        static const char compiled[] = "pretend this took 300 ms of LLVM";
        gpucache_egl_set(key, sizeof key, compiled, sizeof compiled);
        printf("cold: compiled and stored\n");
    }

    struct gpucache_egl_stats st = {.struct_size = sizeof st};
    if (gpucache_egl_stats(&st) == GPUCACHE_OK && st.gets > 0) {
        printf("hit rate %.0f%% (%llu of %llu gets)\n", 100.0 * (double)st.hits / (double)st.gets,
               (unsigned long long)st.hits, (unsigned long long)st.gets);
    }
    return 0;
}
