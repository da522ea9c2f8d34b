/* gpucache_egl_set and gpucache_egl_get have exactly Khronos's callback types: assigned
 * without casts under -Werror. The Khronos declarations are written out as
 * <KHR/khrplatform.h> and <EGL/eglext.h> have them (libegl-dev is not needed), before or
 * after gpucache.h (-DKHRONOS_FIRST); with -DSYSTEM_EGL the installed headers are used. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(SYSTEM_EGL)
#include <EGL/egl.h>
#include <EGL/eglext.h>
#define KHRONOS_DECLARED 1
#elif defined(KHRONOS_FIRST)
#if defined(_WIN64)
typedef signed long long int khronos_ssize_t;
#else
typedef signed long int khronos_ssize_t;
#endif
#define EGL_ANDROID_blob_cache 1
typedef khronos_ssize_t EGLsizeiANDROID;
typedef void (*EGLSetBlobFuncANDROID)(const void *key, EGLsizeiANDROID keySize,
                                      const void *value, EGLsizeiANDROID valueSize);
typedef EGLsizeiANDROID (*EGLGetBlobFuncANDROID)(const void *key, EGLsizeiANDROID keySize,
                                                 void *value, EGLsizeiANDROID valueSize);
#define KHRONOS_DECLARED 1
#endif

#include "check.h"

#ifndef KHRONOS_DECLARED
/* After gpucache.h: C11 accepts the repeated typedef only if the types are the same. */
#if defined(_WIN64)
typedef signed long long int khronos_ssize_t;
#else
typedef signed long int khronos_ssize_t;
#endif
#define EGL_ANDROID_blob_cache 1
typedef khronos_ssize_t EGLsizeiANDROID;
typedef void (*EGLSetBlobFuncANDROID)(const void *key, EGLsizeiANDROID keySize,
                                      const void *value, EGLsizeiANDROID valueSize);
typedef EGLsizeiANDROID (*EGLGetBlobFuncANDROID)(const void *key, EGLsizeiANDROID keySize,
                                                 void *value, EGLsizeiANDROID valueSize);
#endif

_Static_assert(_Generic((EGLsizeiANDROID)0, khronos_ssize_t: 1, default: 0),
               "EGLsizeiANDROID is khronos_ssize_t");
_Static_assert(sizeof(EGLsizeiANDROID) == sizeof(void *), "pointer-sized");

int main(void) {
    EGLSetBlobFuncANDROID set = gpucache_egl_set;
    EGLGetBlobFuncANDROID get = gpucache_egl_get;
    CHECK_CODE(gpucache_egl_configure(NULL), GPUCACHE_OK);
    set("key", 3, "value", 5);
    char buf[8];
    CHECK(get("key", 3, buf, sizeof buf) == 5 && memcmp(buf, "value", 5) == 0);
    gpucache_egl_shutdown();
    printf("khronos_types: ok\n");
    return 0;
}
