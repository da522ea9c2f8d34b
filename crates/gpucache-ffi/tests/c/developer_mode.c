/* Cache control only in developer mode, and the support query, through the C API.
 * Usage: developer_mode on|off DIR. The caller sets (or clears) GPUCACHE_DEVELOPER_MODE and
 * points XDG_CONFIG_HOME and HOME at a directory of its own. */
#define _POSIX_C_SOURCE 200809L
#include <string.h>

#include "check.h"

static const char KEY[] = "vertex-shader-42";
static const char VALUE[] = "specialised DXIL bytes";

static uint32_t support(void) {
    uint32_t flags = 0xdead;
    CHECK_CODE(gpucache_shader_cache_support(&flags), GPUCACHE_OK);
    return flags;
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    int on = strcmp(argv[1], "on") == 0;
    CHECK(gpucache_developer_mode() == on);

    /* The support query: single blobs always, the driver cache once configured. */
    CHECK_CODE(gpucache_shader_cache_support(NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK(support() == GPUCACHE_SHADER_CACHE_SUPPORT_SINGLE_PSO);
    gpucache_egl_config cfg = {.struct_size = sizeof cfg};
    gpucache_egl_config_init(&cfg);
    CHECK_CODE(gpucache_egl_configure(&cfg), GPUCACHE_OK);
    const uint32_t in_memory = GPUCACHE_SHADER_CACHE_SUPPORT_SINGLE_PSO |
                               GPUCACHE_SHADER_CACHE_SUPPORT_AUTOMATIC_INPROC_CACHE |
                               GPUCACHE_SHADER_CACHE_SUPPORT_DRIVER_MANAGED_CACHE;
    CHECK(support() == in_memory);
    cfg.directory = argv[2];
    CHECK_CODE(gpucache_egl_configure(&cfg), GPUCACHE_OK);
    CHECK(support() == (in_memory | GPUCACHE_SHADER_CACHE_SUPPORT_AUTOMATIC_DISK_CACHE));
    CHECK((support() & GPUCACHE_SHADER_CACHE_SUPPORT_LIBRARY) == 0);

    gpucache_egl_set(KEY, sizeof KEY, VALUE, sizeof VALUE);
    gpucache_session_desc d;
    memset(&d, 0, sizeof d);
    memset(d.identifier, 9, sizeof d.identifier);
    d.mode = GPUCACHE_MODE_MEMORY;
    d.max_in_memory_bytes = 1u << 16;
    gpucache_session *s = NULL;
    CHECK_CODE(gpucache_session_open(&d, &s), GPUCACHE_OK);
    CHECK_CODE(gpucache_session_store(s, KEY, sizeof KEY, VALUE, sizeof VALUE), GPUCACHE_OK);

    const uint32_t every = GPUCACHE_KIND_IMPLICIT_D3D_CACHE_FOR_DRIVER |
                           GPUCACHE_KIND_IMPLICIT_D3D_CONVERSIONS |
                           GPUCACHE_KIND_IMPLICIT_DRIVER_MANAGED | GPUCACHE_KIND_APPLICATION_MANAGED;
    int32_t expected = on ? GPUCACHE_OK : GPUCACHE_ERROR_UNSUPPORTED;
    CHECK_CODE(gpucache_cache_control(every, GPUCACHE_CONTROL_CLEAR), expected);
    if (!on)
        CHECK(strstr(gpucache_last_error_message(), "developer mode") != NULL);
    CHECK_CODE(gpucache_cache_control(every, GPUCACHE_CONTROL_DISABLE), expected);
    /* A malformed request is reported as such either way. */
    CHECK_CODE(gpucache_cache_control(every, GPUCACHE_CONTROL_DISABLE | GPUCACHE_CONTROL_ENABLE),
               GPUCACHE_ERROR_INVALID_ARGUMENT);

    char buf[64];
    size_t n = sizeof buf;
    if (on) {
        CHECK_CODE(gpucache_session_find(s, KEY, sizeof KEY, buf, &n),
                   GPUCACHE_ERROR_NOT_CURRENTLY_AVAILABLE);
        CHECK_CODE(gpucache_cache_control(every, GPUCACHE_CONTROL_ENABLE), GPUCACHE_OK);
        CHECK_CODE(gpucache_session_find(s, KEY, sizeof KEY, buf, &n), GPUCACHE_ERROR_NOT_FOUND);
        CHECK(gpucache_egl_get(KEY, sizeof KEY, buf, sizeof buf) == 0);
    } else {
        CHECK_CODE(gpucache_session_find(s, KEY, sizeof KEY, buf, &n), GPUCACHE_OK);
        CHECK(n == sizeof VALUE && memcmp(buf, VALUE, n) == 0);
        CHECK(gpucache_egl_get(KEY, sizeof KEY, buf, sizeof buf) == (EGLsizeiANDROID)sizeof VALUE);
    }
    gpucache_session_close(s);
    gpucache_egl_shutdown();
    CHECK(support() == GPUCACHE_SHADER_CACHE_SUPPORT_SINGLE_PSO);
    printf("developer_mode %s: ok\n", argv[1]);
    return 0;
}
