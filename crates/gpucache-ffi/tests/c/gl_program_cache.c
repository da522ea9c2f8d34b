/* The GPU program cache on a real driver: a surfaceless EGL context with GLES 3 (Mesa 25's
 * llvmpipe in the tests), GLSL ES 3.00 programs, two processes on one directory.
 *   gl_program_cache cold DIR   links two programs from source (from_cache 0) and draws with
 *                               them; a compile error and a link error come back with GL's
 *                               log; bad input is refused;
 *   gl_program_cache warm DIR   both programs come from the cache (from_cache 1) and draw the
 *                               same; the histograms count the hits, and both runs once
 *                               flushed. */
#define _POSIX_C_SOURCE 200809L
#include <string.h>

#include <EGL/egl.h>
#include <EGL/eglext.h>
#define GL_GLES_PROTOTYPES 0 /* every GL function comes through eglGetProcAddress */
#include <GLES3/gl3.h>

#include "check.h"

#define LOADER ((gpucache_gl_loader)eglGetProcAddress)

static const char *const VS_A = "#version 300 es\n"
                                "in vec2 pos;\n"
                                "void main() { gl_Position = vec4(pos, 0.0, 1.0); }\n";
static const char *const FS_A = "#version 300 es\n"
                                "precision mediump float;\n"
                                "out vec4 color;\n"
                                "void main() { color = vec4(0.25, 0.5, 0.75, 1.0); }\n";
/* A full-screen triangle from gl_VertexID, in a uniform color. */
static const char *const VS_B =
    "#version 300 es\n"
    "void main() {\n"
    "    vec2 p = vec2(float((gl_VertexID & 1) * 4 - 1), float((gl_VertexID >> 1) * 4 - 1));\n"
    "    gl_Position = vec4(p, 0.0, 1.0);\n"
    "}\n";
static const char *const FS_B = "#version 300 es\n"
                                "precision mediump float;\n"
                                "uniform vec4 tint;\n"
                                "out vec4 color;\n"
                                "void main() { color = tint; }\n";
static const char *const FS_SYNTAX_ERROR = "#version 300 es\n"
                                           "precision mediump float;\n"
                                           "out vec4 color;\n"
                                           "void main() { color = vec4(1.0) }\n";
/* Reads a varying that VS_A does not write: compiles, does not link. */
static const char *const FS_UNMATCHED_VARYING = "#version 300 es\n"
                                                "precision mediump float;\n"
                                                "in vec4 v_missing;\n"
                                                "out vec4 color;\n"
                                                "void main() { color = v_missing; }\n";

enum { POS_LOCATION = 3, SIZE = 4 };

static const uint8_t COLOR_A[4] = {64, 128, 191, 255};
static const uint8_t COLOR_B[4] = {255, 0, 128, 255};

static struct {
    PFNGLGETPROGRAMIVPROC GetProgramiv;
    PFNGLGETATTRIBLOCATIONPROC GetAttribLocation;
    PFNGLGETUNIFORMLOCATIONPROC GetUniformLocation;
    PFNGLUSEPROGRAMPROC UseProgram;
    PFNGLUNIFORM4FPROC Uniform4f;
    PFNGLDELETEPROGRAMPROC DeleteProgram;
    PFNGLGENFRAMEBUFFERSPROC GenFramebuffers;
    PFNGLBINDFRAMEBUFFERPROC BindFramebuffer;
    PFNGLDELETEFRAMEBUFFERSPROC DeleteFramebuffers;
    PFNGLGENRENDERBUFFERSPROC GenRenderbuffers;
    PFNGLBINDRENDERBUFFERPROC BindRenderbuffer;
    PFNGLDELETERENDERBUFFERSPROC DeleteRenderbuffers;
    PFNGLRENDERBUFFERSTORAGEPROC RenderbufferStorage;
    PFNGLFRAMEBUFFERRENDERBUFFERPROC FramebufferRenderbuffer;
    PFNGLCHECKFRAMEBUFFERSTATUSPROC CheckFramebufferStatus;
    PFNGLVIEWPORTPROC Viewport;
    PFNGLCLEARCOLORPROC ClearColor;
    PFNGLCLEARPROC Clear;
    PFNGLVERTEXATTRIBPOINTERPROC VertexAttribPointer;
    PFNGLENABLEVERTEXATTRIBARRAYPROC EnableVertexAttribArray;
    PFNGLDISABLEVERTEXATTRIBARRAYPROC DisableVertexAttribArray;
    PFNGLDRAWARRAYSPROC DrawArrays;
    PFNGLREADPIXELSPROC ReadPixels;
    PFNGLGETERRORPROC GetError;
    PFNGLGETSTRINGPROC GetString;
} gl;

#define LOAD(type, name)                                                                    \
    do {                                                                                    \
        gl.name = (type)eglGetProcAddress("gl" #name);                                      \
        CHECK(gl.name != NULL);                                                             \
    } while (0)

static void load_gl(void) {
    LOAD(PFNGLGETPROGRAMIVPROC, GetProgramiv);
    LOAD(PFNGLGETATTRIBLOCATIONPROC, GetAttribLocation);
    LOAD(PFNGLGETUNIFORMLOCATIONPROC, GetUniformLocation);
    LOAD(PFNGLUSEPROGRAMPROC, UseProgram);
    LOAD(PFNGLUNIFORM4FPROC, Uniform4f);
    LOAD(PFNGLDELETEPROGRAMPROC, DeleteProgram);
    LOAD(PFNGLGENFRAMEBUFFERSPROC, GenFramebuffers);
    LOAD(PFNGLBINDFRAMEBUFFERPROC, BindFramebuffer);
    LOAD(PFNGLDELETEFRAMEBUFFERSPROC, DeleteFramebuffers);
    LOAD(PFNGLGENRENDERBUFFERSPROC, GenRenderbuffers);
    LOAD(PFNGLBINDRENDERBUFFERPROC, BindRenderbuffer);
    LOAD(PFNGLDELETERENDERBUFFERSPROC, DeleteRenderbuffers);
    LOAD(PFNGLRENDERBUFFERSTORAGEPROC, RenderbufferStorage);
    LOAD(PFNGLFRAMEBUFFERRENDERBUFFERPROC, FramebufferRenderbuffer);
    LOAD(PFNGLCHECKFRAMEBUFFERSTATUSPROC, CheckFramebufferStatus);
    LOAD(PFNGLVIEWPORTPROC, Viewport);
    LOAD(PFNGLCLEARCOLORPROC, ClearColor);
    LOAD(PFNGLCLEARPROC, Clear);
    LOAD(PFNGLVERTEXATTRIBPOINTERPROC, VertexAttribPointer);
    LOAD(PFNGLENABLEVERTEXATTRIBARRAYPROC, EnableVertexAttribArray);
    LOAD(PFNGLDISABLEVERTEXATTRIBARRAYPROC, DisableVertexAttribArray);
    LOAD(PFNGLDRAWARRAYSPROC, DrawArrays);
    LOAD(PFNGLREADPIXELSPROC, ReadPixels);
    LOAD(PFNGLGETERRORPROC, GetError);
    LOAD(PFNGLGETSTRINGPROC, GetString);
}

static EGLDisplay dpy;
static EGLContext ctx;

/* A GLES 3 context on Mesa's surfaceless platform, not yet current. */
static void egl_up(void) {
    dpy = eglGetPlatformDisplay(EGL_PLATFORM_SURFACELESS_MESA, EGL_DEFAULT_DISPLAY, NULL);
    CHECK(dpy != EGL_NO_DISPLAY);
    EGLint major, minor;
    CHECK(eglInitialize(dpy, &major, &minor));
    const EGLint config_attribs[] = {EGL_SURFACE_TYPE, EGL_PBUFFER_BIT, EGL_RENDERABLE_TYPE,
                                     EGL_OPENGL_ES3_BIT, EGL_NONE};
    EGLConfig config;
    EGLint n = 0;
    CHECK(eglChooseConfig(dpy, config_attribs, &config, 1, &n) && n == 1);
    CHECK(eglBindAPI(EGL_OPENGL_ES_API));
    const EGLint context_attribs[] = {EGL_CONTEXT_MAJOR_VERSION, 3, EGL_NONE};
    ctx = eglCreateContext(dpy, config, EGL_NO_CONTEXT, context_attribs);
    CHECK(ctx != EGL_NO_CONTEXT);
}

static void make_current(void) {
    CHECK(eglMakeCurrent(dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, ctx));
    load_gl();
    printf("GL: %s, %s\n", (const char *)gl.GetString(GL_RENDERER),
           (const char *)gl.GetString(GL_VERSION));
}

static void egl_down(void) {
    CHECK(eglMakeCurrent(dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT));
    CHECK(eglDestroyContext(dpy, ctx));
    CHECK(eglTerminate(dpy));
    CHECK(eglReleaseThread());
}

static gpucache_gl_cache *open_cache(const char *dir) {
    gpucache_gl_config cfg = {.struct_size = sizeof cfg};
    gpucache_gl_config_init(&cfg);
    cfg.directory = dir;
    cfg.build_id = "gpucache C test 1";
    gpucache_gl_cache *cache = NULL;
    CHECK_CODE(gpucache_gl_cache_open(&cfg, LOADER, &cache), GPUCACHE_OK);
    CHECK(cache != NULL);
    return cache;
}

static const gpucache_gl_binding POS_BINDING[] = {{.name = "pos", .location = POS_LOCATION}};

static gpucache_gl_program_desc desc_of(const char *vs, const char *fs) {
    gpucache_gl_program_desc d = {.struct_size = sizeof d};
    d.vertex_source = vs;
    d.fragment_source = fs;
    return d;
}

/* Links (or loads) a program, checking from_cache and GL's link status. */
static GLuint program(gpucache_gl_cache *cache, const gpucache_gl_program_desc *d,
                      int expect_from_cache) {
    uint32_t name = 0;
    int32_t from_cache = -1;
    CHECK_CODE(gpucache_gl_program(cache, d, &name, &from_cache), GPUCACHE_OK);
    CHECK(name != 0);
    CHECK(from_cache == expect_from_cache);
    GLint linked = GL_FALSE;
    gl.GetProgramiv(name, GL_LINK_STATUS, &linked);
    CHECK(linked == GL_TRUE);
    return name;
}

static void expect_pixels(const uint8_t rgba[4]) {
    uint8_t pixels[SIZE * SIZE * 4];
    memset(pixels, 0, sizeof pixels);
    gl.ReadPixels(0, 0, SIZE, SIZE, GL_RGBA, GL_UNSIGNED_BYTE, pixels);
    CHECK(gl.GetError() == GL_NO_ERROR);
    for (size_t i = 0; i < sizeof pixels; i++) {
        int d = (int)pixels[i] - (int)rgba[i % 4];
        if (d < -1 || d > 1) {
            fprintf(stderr, "pixel byte %zu is %u, expected %u\n", i, pixels[i], rgba[i % 4]);
            CHECK(!"the drawn color");
        }
    }
}

/* Draws with both programs into a 4x4 RGBA8 framebuffer and checks every pixel. */
static void draw(GLuint a, GLuint b) {
    GLuint fbo, rbo;
    gl.GenRenderbuffers(1, &rbo);
    gl.BindRenderbuffer(GL_RENDERBUFFER, rbo);
    gl.RenderbufferStorage(GL_RENDERBUFFER, GL_RGBA8, SIZE, SIZE);
    gl.GenFramebuffers(1, &fbo);
    gl.BindFramebuffer(GL_FRAMEBUFFER, fbo);
    gl.FramebufferRenderbuffer(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_RENDERBUFFER, rbo);
    CHECK(gl.CheckFramebufferStatus(GL_FRAMEBUFFER) == GL_FRAMEBUFFER_COMPLETE);
    gl.Viewport(0, 0, SIZE, SIZE);

    /* The attribute is where the binding put it. */
    CHECK(gl.GetAttribLocation(a, "pos") == POS_LOCATION);
    static const float triangle[] = {-1, -1, 3, -1, -1, 3};
    gl.ClearColor(0, 0, 0, 0);
    gl.Clear(GL_COLOR_BUFFER_BIT);
    gl.UseProgram(a);
    gl.VertexAttribPointer(POS_LOCATION, 2, GL_FLOAT, GL_FALSE, 0, triangle);
    gl.EnableVertexAttribArray(POS_LOCATION);
    gl.DrawArrays(GL_TRIANGLES, 0, 3);
    gl.DisableVertexAttribArray(POS_LOCATION);
    expect_pixels(COLOR_A);

    GLint tint = gl.GetUniformLocation(b, "tint");
    CHECK(tint >= 0);
    gl.Clear(GL_COLOR_BUFFER_BIT);
    gl.UseProgram(b);
    gl.Uniform4f(tint, 1.0f, 0.0f, 0.5f, 1.0f);
    gl.DrawArrays(GL_TRIANGLES, 0, 3);
    expect_pixels(COLOR_B);

    gl.UseProgram(0);
    gl.BindFramebuffer(GL_FRAMEBUFFER, 0);
    gl.DeleteFramebuffers(1, &fbo);
    gl.DeleteRenderbuffers(1, &rbo);
    CHECK(gl.GetError() == GL_NO_ERROR);
}

static struct gpucache_histogram_summary histogram(gpucache_gl_cache *cache, int32_t metric,
                                                   int32_t persisted) {
    struct gpucache_histogram_summary h = {.struct_size = sizeof h};
    CHECK_CODE(gpucache_gl_histogram(cache, metric, persisted, &h), GPUCACHE_OK);
    CHECK(h.struct_size == sizeof h);
    CHECK(h.count == 0 ? h.min == 0 && h.max == 0 : h.min <= h.p50 && h.p99 <= h.max);
    return h;
}

static struct gpucache_gl_stats stats(gpucache_gl_cache *cache) {
    struct gpucache_gl_stats s = {.struct_size = sizeof s};
    CHECK_CODE(gpucache_gl_stats(cache, &s), GPUCACHE_OK);
    CHECK(s.struct_size == sizeof s);
    return s;
}

static int contains(const char *haystack, const char *needle) {
    return strstr(haystack, needle) != NULL;
}

/* Refusals before a context is current, and of bad configurations. */
static void bad_opens(const char *dir) {
    static int sentinel;
    gpucache_gl_cache *cache = (gpucache_gl_cache *)&sentinel; /* failures set it to NULL */
    gpucache_gl_config cfg = {.struct_size = sizeof cfg};
    gpucache_gl_config_init(&cfg);
    cfg.directory = dir;
    CHECK_CODE(gpucache_gl_cache_open(&cfg, LOADER, &cache), GPUCACHE_ERROR_GL);
    CHECK(cache == NULL);
    CHECK(contains(gpucache_last_error_message(), "no GL context is current"));
    CHECK_CODE(gpucache_gl_cache_open(&cfg, NULL, &cache), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_gl_cache_open(&cfg, LOADER, NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);
    cfg.struct_size = sizeof(size_t);
    CHECK_CODE(gpucache_gl_cache_open(&cfg, LOADER, &cache), GPUCACHE_ERROR_INVALID_ARGUMENT);
    cfg.struct_size = sizeof cfg;
    cfg.build_id = "\xff build";
    CHECK_CODE(gpucache_gl_cache_open(&cfg, LOADER, &cache), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK(contains(gpucache_last_error_message(), "build_id is not UTF-8"));
    cfg.build_id = NULL;
    cfg.directory = "";
    CHECK_CODE(gpucache_gl_cache_open(&cfg, LOADER, &cache), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK(cache == NULL);
    gpucache_gl_config_init(NULL);
    gpucache_gl_cache_close(NULL);
}

/* Refusals of bad program descriptions and arguments; nothing reaches GL. */
static void bad_programs(gpucache_gl_cache *cache) {
    uint32_t name = 99;
    int32_t from_cache = 99;
    gpucache_gl_program_desc d = desc_of(VS_A, FS_A);
    CHECK_CODE(gpucache_gl_program(cache, NULL, &name, &from_cache),
               GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK(name == 0 && from_cache == 0);
    CHECK_CODE(gpucache_gl_program(cache, &d, NULL, NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_gl_program(NULL, &d, &name, NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);

    d.struct_size = 0;
    CHECK_CODE(gpucache_gl_program(cache, &d, &name, NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);
    d = desc_of(NULL, FS_A);
    CHECK_CODE(gpucache_gl_program(cache, &d, &name, NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK(contains(gpucache_last_error_message(), "vertex_source is NULL"));
    d = desc_of(VS_A, "#version 300 es\n// \xc3\x28\n");
    CHECK_CODE(gpucache_gl_program(cache, &d, &name, NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK(contains(gpucache_last_error_message(), "fragment_source is not UTF-8"));
    d = desc_of(VS_A, FS_A);
    d.attribute_count = 1; /* attributes NULL */
    CHECK_CODE(gpucache_gl_program(cache, &d, &name, NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);
    const char *varyings[] = {"gl_Position"};
    d = desc_of(VS_A, FS_A);
    d.varyings = varyings;
    d.varying_count = 1;
    d.varying_buffer_mode = 0; /* neither interleaved nor separate */
    CHECK_CODE(gpucache_gl_program(cache, &d, &name, NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK(name == 0);
}

static void bad_queries(gpucache_gl_cache *cache) {
    struct gpucache_histogram_summary h = {.struct_size = sizeof h};
    CHECK_CODE(gpucache_gl_histogram(cache, 7, 0, &h), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_gl_histogram(cache, -1, 0, &h), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_gl_histogram(cache, 0, 2, &h), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_gl_histogram(cache, 0, 0, NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);
    h.struct_size = sizeof h - 8;
    CHECK_CODE(gpucache_gl_histogram(cache, 0, 0, &h), GPUCACHE_ERROR_INVALID_ARGUMENT);
    struct gpucache_gl_stats s = {.struct_size = 0};
    CHECK_CODE(gpucache_gl_stats(cache, &s), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_gl_stats(cache, NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);
    CHECK_CODE(gpucache_gl_cache_flush(NULL), GPUCACHE_ERROR_INVALID_ARGUMENT);
}

static void cold(const char *dir) {
    egl_up();
    bad_opens(dir);
    make_current();
    gpucache_gl_cache *cache = open_cache(dir);

    gpucache_gl_program_desc da = desc_of(VS_A, FS_A);
    da.attributes = POS_BINDING;
    da.attribute_count = 1;
    gpucache_gl_program_desc db = desc_of(VS_B, FS_B);
    GLuint a = program(cache, &da, 0);
    GLuint b = program(cache, &db, 0);
    draw(a, b);

    uint32_t name = 99;
    int32_t from_cache = 99;
    gpucache_gl_program_desc bad = desc_of(VS_A, FS_SYNTAX_ERROR);
    CHECK_CODE(gpucache_gl_program(cache, &bad, &name, &from_cache), GPUCACHE_ERROR_COMPILE);
    CHECK(name == 0 && from_cache == 0);
    const char *message = gpucache_last_error_message();
    CHECK(contains(message, "fragment shader does not compile"));
    CHECK(contains(message, "syntax error"));
    printf("compile error: %s\n", message);

    bad = desc_of(VS_A, FS_UNMATCHED_VARYING);
    CHECK_CODE(gpucache_gl_program(cache, &bad, &name, NULL), GPUCACHE_ERROR_LINK);
    CHECK(name == 0);
    message = gpucache_last_error_message();
    CHECK(contains(message, "does not link"));
    CHECK(contains(message, "v_missing"));
    printf("link error: %s\n", message);

    bad_programs(cache);
    bad_queries(cache);

    struct gpucache_gl_stats s = stats(cache);
    CHECK(s.programs == 2 && s.memory_entries == 2 && s.hits == 0);
    CHECK(s.disk_available == 1);

    CHECK(histogram(cache, GPUCACHE_GL_METRIC_BINARY_MISS_LINK_TIME, 0).count == 2);
    CHECK(histogram(cache, GPUCACHE_GL_METRIC_BINARY_HIT_TIME, 0).count == 0);
    struct gpucache_histogram_summary size = histogram(cache, GPUCACHE_GL_METRIC_BINARY_SIZE, 0);
    CHECK(size.count == 2 && size.min > 0 && size.runs == 1);
    /* Nothing persisted before the first flush: all zero. */
    struct gpucache_histogram_summary none = histogram(cache, GPUCACHE_GL_METRIC_BINARY_SIZE, 1);
    CHECK(none.count == 0 && none.sum == 0 && none.p99 == 0 && none.runs == 0);

    /* Without a current context GL creates no object (libglvnd's dispatch answers 0); the
     * calls that need no context still work. */
    CHECK(eglMakeCurrent(dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT));
    CHECK_CODE(gpucache_gl_program(cache, &db, &name, NULL), GPUCACHE_ERROR_GL);
    CHECK(contains(gpucache_last_error_message(), "returned 0"));
    CHECK_CODE(gpucache_gl_cache_flush(cache), GPUCACHE_OK);
    CHECK(stats(cache).programs == 2);
    make_current();

    CHECK_CODE(gpucache_gl_cache_flush(cache), GPUCACHE_OK);
    struct gpucache_histogram_summary kept = histogram(cache, GPUCACHE_GL_METRIC_BINARY_SIZE, 1);
    CHECK(kept.count == 2 && kept.sum == size.sum && kept.runs == 1);

    gpucache_gl_cache_close(cache);
    gl.DeleteProgram(a);
    gl.DeleteProgram(b);
    egl_down();
    printf("gl_program_cache cold: ok\n");
}

static void warm(const char *dir) {
    egl_up();
    make_current();
    gpucache_gl_cache *cache = open_cache(dir);

    gpucache_gl_program_desc da = desc_of(VS_A, FS_A);
    da.attributes = POS_BINDING;
    da.attribute_count = 1;
    gpucache_gl_program_desc db = desc_of(VS_B, FS_B);
    GLuint a = program(cache, &da, 1);
    GLuint b = program(cache, &db, 1);
    draw(a, b);

    struct gpucache_gl_stats s = stats(cache);
    CHECK(s.programs == 2 && s.hits == 2);
    CHECK(histogram(cache, GPUCACHE_GL_METRIC_BINARY_HIT_TIME, 0).count == 2);
    CHECK(histogram(cache, GPUCACHE_GL_METRIC_BINARY_MISS_LINK_TIME, 0).count == 0);
    CHECK(histogram(cache, GPUCACHE_GL_METRIC_STATUS_HIT_TIME, 0).count == 4);
    CHECK(histogram(cache, GPUCACHE_GL_METRIC_STATUS_MISS_COMPILE_TIME, 0).count == 0);

    /* The directory holds the first run until this one flushes, then both. */
    struct gpucache_histogram_summary h;
    h = histogram(cache, GPUCACHE_GL_METRIC_BINARY_HIT_TIME, 1);
    CHECK(h.count == 0 && h.runs == 1);
    CHECK_CODE(gpucache_gl_cache_flush(cache), GPUCACHE_OK);
    h = histogram(cache, GPUCACHE_GL_METRIC_BINARY_HIT_TIME, 1);
    CHECK(h.count == 2 && h.runs == 2);
    h = histogram(cache, GPUCACHE_GL_METRIC_BINARY_MISS_LINK_TIME, 1);
    CHECK(h.count == 2 && h.runs == 2);
    h = histogram(cache, GPUCACHE_GL_METRIC_BINARY_SIZE, 1);
    CHECK(h.count == 2);

    gpucache_gl_cache_close(cache);
    gl.DeleteProgram(a);
    gl.DeleteProgram(b);
    egl_down();
    printf("gl_program_cache warm: ok\n");
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    if (strcmp(argv[1], "cold") == 0) {
        cold(argv[2]);
    } else if (strcmp(argv[1], "warm") == 0) {
        warm(argv[2]);
    } else {
        fprintf(stderr, "unknown mode %s\n", argv[1]);
        return 2;
    }
    return 0;
}
