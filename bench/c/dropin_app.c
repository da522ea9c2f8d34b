/* An unmodified GL application for the drop-in's tests and benchmark: it links libEGL and knows
 * nothing of gpucache. It creates a surfaceless GLES 3 context, compiles, links and draws N
 * programs into a 16x16 framebuffer, and prints a hash of every pixel read back.
 *
 * Usage: dropin_app [--programs N] [--threads T] [--displays 2] [--reinit] [--fork]
 *                   [--own-cache before|after] [--pause-ms MS] [--shader-dir DIR]
 *                   [--platform surfaceless|device]
 * --threads T     T threads, each with its own context on the display, split the programs.
 * --displays 2    also a second display (the device platform), its own context and programs.
 * --reinit        eglTerminate, then initialise the display again and draw everything again.
 * --fork          fork once the displays are terminated; the child exits at once (running its
 *                 exit handlers), the parent goes on.
 * --own-cache W   install the application's own blob cache (an in-memory table, as Chromium
 *                 does), W = before (right after eglInitialize) or after (after the context);
 *                 prints how often its callbacks were called.
 * --pause-ms MS   sleep after each program (the kill tests).
 * --shader-dir D  the fragment shaders are D's *.frag files (shadertoy bodies, mainImage) in
 *                 name order instead of generated ones.
 * --platform P    the first display's platform: surfaceless (Mesa's, the default) or device
 *                 (EGL_EXT_platform_device, the first device: drivers without surfaceless).
 * Output: "pixels <hash>", "programs <n>", with --displays 2 "devices <n>",
 * "env_mesa_shader_cache_dir <value or ->", "own_sets <n> own_gets <n> own_hits <n>",
 * "create_ms <ms> compile_draw_ms <ms> total_ms <ms>". Exit 0 on success. */
#define _GNU_SOURCE
#include <EGL/egl.h>
#include <EGL/eglext.h>
#include <GLES3/gl3.h>
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GL_FUNCS(X)                                                                             \
    X(PFNGLCREATESHADERPROC, glCreateShader)                                                    \
    X(PFNGLSHADERSOURCEPROC, glShaderSource)                                                    \
    X(PFNGLCOMPILESHADERPROC, glCompileShader)                                                  \
    X(PFNGLGETSHADERIVPROC, glGetShaderiv)                                                      \
    X(PFNGLGETSHADERINFOLOGPROC, glGetShaderInfoLog)                                            \
    X(PFNGLCREATEPROGRAMPROC, glCreateProgram)                                                  \
    X(PFNGLATTACHSHADERPROC, glAttachShader)                                                    \
    X(PFNGLLINKPROGRAMPROC, glLinkProgram)                                                      \
    X(PFNGLGETPROGRAMIVPROC, glGetProgramiv)                                                    \
    X(PFNGLUSEPROGRAMPROC, glUseProgram)                                                        \
    X(PFNGLDELETESHADERPROC, glDeleteShader)                                                    \
    X(PFNGLDELETEPROGRAMPROC, glDeleteProgram)                                                  \
    X(PFNGLGENFRAMEBUFFERSPROC, glGenFramebuffers)                                              \
    X(PFNGLBINDFRAMEBUFFERPROC, glBindFramebuffer)                                              \
    X(PFNGLGENRENDERBUFFERSPROC, glGenRenderbuffers)                                            \
    X(PFNGLBINDRENDERBUFFERPROC, glBindRenderbuffer)                                            \
    X(PFNGLRENDERBUFFERSTORAGEPROC, glRenderbufferStorage)                                      \
    X(PFNGLFRAMEBUFFERRENDERBUFFERPROC, glFramebufferRenderbuffer)                              \
    X(PFNGLGENVERTEXARRAYSPROC, glGenVertexArrays)                                              \
    X(PFNGLBINDVERTEXARRAYPROC, glBindVertexArray)                                              \
    X(PFNGLVIEWPORTPROC, glViewport)                                                            \
    X(PFNGLDRAWARRAYSPROC, glDrawArrays)                                                        \
    X(PFNGLREADPIXELSPROC, glReadPixels)                                                        \
    X(PFNGLGETUNIFORMLOCATIONPROC, glGetUniformLocation)                                        \
    X(PFNGLUNIFORM1FPROC, glUniform1f)                                                          \
    X(PFNGLGETERRORPROC, glGetError)

#define DECLARE(type, name) static type p_##name;
GL_FUNCS(DECLARE)

static int programs = 24, threads = 1, displays = 1, reinit = 0, do_fork = 0, pause_ms = 0;
static int device_platform = 0;
static const char *own_cache = NULL, *shader_dir = NULL;
static char **dir_shaders;
static int dir_count;

/* ---- the application's own blob cache (Chromium-style), an in-memory table ---- */
#define OWN_MAX 8192
static struct own_entry {
    void *key, *value;
    EGLsizeiANDROID key_size, value_size;
} own[OWN_MAX];
static int own_n;
static unsigned long own_sets, own_gets, own_hits;
static pthread_mutex_t own_lock = PTHREAD_MUTEX_INITIALIZER;

static void own_set(const void *key, EGLsizeiANDROID ks, const void *value, EGLsizeiANDROID vs) {
    pthread_mutex_lock(&own_lock);
    own_sets++;
    if (own_n < OWN_MAX) {
        own[own_n].key = malloc((size_t)ks);
        own[own_n].value = malloc((size_t)vs);
        memcpy(own[own_n].key, key, (size_t)ks);
        memcpy(own[own_n].value, value, (size_t)vs);
        own[own_n].key_size = ks;
        own[own_n].value_size = vs;
        own_n++;
    }
    pthread_mutex_unlock(&own_lock);
}

static EGLsizeiANDROID own_get(const void *key, EGLsizeiANDROID ks, void *value, EGLsizeiANDROID vs) {
    EGLsizeiANDROID r = 0;
    pthread_mutex_lock(&own_lock);
    own_gets++;
    for (int i = own_n - 1; i >= 0; i--) {
        if (own[i].key_size == ks && memcmp(own[i].key, key, (size_t)ks) == 0) {
            if (own[i].value_size <= vs) {
                memcpy(value, own[i].value, (size_t)own[i].value_size);
                r = own[i].value_size;
                own_hits++;
            }
            break;
        }
    }
    pthread_mutex_unlock(&own_lock);
    return r;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void die(const char *what) {
    fprintf(stderr, "dropin_app: %s (EGL error 0x%x)\n", what, eglGetError());
    exit(2);
}

static const char *VS = "#version 300 es\n"
                        "void main() {\n"
                        "  vec2 p = vec2(gl_VertexID == 1 ? 3.0 : -1.0, gl_VertexID == 2 ? 3.0 : -1.0);\n"
                        "  gl_Position = vec4(p, 0.0, 1.0);\n"
                        "}\n";

/* A fragment shader with enough work that llvmpipe's code generation shows; `variant` makes
 * each program distinct. */
static char *fragment_source(int variant) {
    char *s = NULL;
    if (shader_dir) {
        const char *body = dir_shaders[variant % dir_count];
        if (asprintf(&s,
                     "#version 300 es\nprecision highp float;\nprecision highp int;\n"
                     "uniform vec3 iResolution; uniform float iTime; uniform float iGlobalTime;\n"
                     "uniform float iTimeDelta; uniform int iFrame; uniform vec4 iMouse;\n"
                     "uniform vec4 iDate; uniform float iSampleRate;\n"
                     "uniform vec3 iChannelResolution[4]; uniform float iChannelTime[4];\n"
                     "uniform sampler2D iChannel0; uniform sampler2D iChannel1;\n"
                     "uniform sampler2D iChannel2; uniform sampler2D iChannel3;\n"
                     "#define texture2D texture\n#define VARIANT %d\n"
                     "out vec4 dropin_out;\n%s\n"
                     "void main() { vec4 c = vec4(0.0); mainImage(c, gl_FragCoord.xy); dropin_out = c; }\n",
                     variant, body) < 0)
            die("out of memory");
        return s;
    }
    if (asprintf(&s,
                 "#version 300 es\nprecision highp float;\n"
                 "uniform float t;\nout vec4 color;\n"
                 "float h(vec2 p) { return fract(sin(dot(p, vec2(12.9898, 78.233 + float(%d)))) * 43758.5453); }\n"
                 "void main() {\n"
                 "  vec2 uv = gl_FragCoord.xy / 16.0;\n"
                 "  vec3 c = vec3(0.0);\n"
                 "  for (int i = 0; i < %d; i++) {\n"
                 "    float fi = float(i);\n"
                 "    c += vec3(h(uv + fi), h(uv.yx * fi), sin(uv.x * fi + t)) * 0.1;\n"
                 "    uv = mat2(cos(fi), sin(fi), -sin(fi), cos(fi)) * uv + 0.%d;\n"
                 "  }\n"
                 "  color = vec4(fract(c), 1.0);\n"
                 "}\n",
                 variant, 4 + variant % 5, variant + 1) < 0)
        die("out of memory");
    return s;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

static void load_shader_dir(void) {
    struct dirent **names;
    int n = scandir(shader_dir, &names, NULL, by_name);
    if (n < 0)
        die("cannot read --shader-dir");
    dir_shaders = calloc((size_t)n, sizeof *dir_shaders);
    for (int i = 0; i < n; i++) {
        const char *name = names[i]->d_name;
        size_t len = strlen(name);
        if (len > 5 && strcmp(name + len - 5, ".frag") == 0) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", shader_dir, name);
            FILE *f = fopen(path, "rb");
            if (f) {
                fseek(f, 0, SEEK_END);
                long size = ftell(f);
                fseek(f, 0, SEEK_SET);
                char *text = calloc(1, (size_t)size + 1);
                if (fread(text, 1, (size_t)size, f) == (size_t)size)
                    dir_shaders[dir_count++] = text;
                fclose(f);
            }
        }
        free(names[i]);
    }
    free(names);
    if (dir_count == 0)
        die("no .frag files in --shader-dir");
}

static GLuint compile(GLenum kind, const char *src) {
    GLuint s = p_glCreateShader(kind);
    p_glShaderSource(s, 1, &src, NULL);
    p_glCompileShader(s);
    GLint ok = 0;
    p_glGetShaderiv(s, GL_COMPILE_STATUS, &ok);
    if (!ok) {
        char log[1024];
        p_glGetShaderInfoLog(s, sizeof log, NULL, log);
        fprintf(stderr, "dropin_app: compile failed: %s\n", log);
        exit(3);
    }
    return s;
}

/* FNV-1a over every pixel of every program, in program order. */
static uint64_t pixel_hash[4096];

/* Compiles, links and draws programs [first, last) on the current context. */
static void draw_programs(int first, int last) {
    GLuint fb, rb, vao;
    p_glGenFramebuffers(1, &fb);
    p_glBindFramebuffer(GL_FRAMEBUFFER, fb);
    p_glGenRenderbuffers(1, &rb);
    p_glBindRenderbuffer(GL_RENDERBUFFER, rb);
    p_glRenderbufferStorage(GL_RENDERBUFFER, GL_RGBA8, 16, 16);
    p_glFramebufferRenderbuffer(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_RENDERBUFFER, rb);
    p_glGenVertexArrays(1, &vao);
    p_glBindVertexArray(vao);
    p_glViewport(0, 0, 16, 16);
    for (int i = first; i < last; i++) {
        char *fs_src = fragment_source(i);
        GLuint vs = compile(GL_VERTEX_SHADER, VS), fs = compile(GL_FRAGMENT_SHADER, fs_src);
        free(fs_src);
        GLuint prog = p_glCreateProgram();
        p_glAttachShader(prog, vs);
        p_glAttachShader(prog, fs);
        p_glLinkProgram(prog);
        GLint ok = 0;
        p_glGetProgramiv(prog, GL_LINK_STATUS, &ok);
        if (!ok) {
            fprintf(stderr, "dropin_app: link failed for program %d\n", i);
            exit(3);
        }
        p_glUseProgram(prog);
        GLint t = p_glGetUniformLocation(prog, "t");
        if (t >= 0)
            p_glUniform1f(t, 0.5f);
        p_glDrawArrays(GL_TRIANGLES, 0, 3);
        uint8_t px[16 * 16 * 4];
        p_glReadPixels(0, 0, 16, 16, GL_RGBA, GL_UNSIGNED_BYTE, px);
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t k = 0; k < sizeof px; k++)
            h = (h ^ px[k]) * 0x100000001b3ull;
        pixel_hash[i % 4096] = h;
        p_glDeleteProgram(prog);
        p_glDeleteShader(vs);
        p_glDeleteShader(fs);
        if (pause_ms)
            usleep((useconds_t)pause_ms * 1000);
    }
    if (p_glGetError() != GL_NO_ERROR)
        die("GL error");
}

static EGLDisplay open_display(int which) {
    EGLDisplay dpy = EGL_NO_DISPLAY;
    if (which == 0 && !device_platform) {
        PFNEGLGETPLATFORMDISPLAYEXTPROC get_platform_display =
            (PFNEGLGETPLATFORMDISPLAYEXTPROC)eglGetProcAddress("eglGetPlatformDisplayEXT");
        if (get_platform_display)
            dpy = get_platform_display(EGL_PLATFORM_SURFACELESS_MESA, EGL_DEFAULT_DISPLAY, NULL);
    } else {
        PFNEGLQUERYDEVICESEXTPROC query_devices =
            (PFNEGLQUERYDEVICESEXTPROC)eglGetProcAddress("eglQueryDevicesEXT");
        PFNEGLGETPLATFORMDISPLAYEXTPROC get_platform_display =
            (PFNEGLGETPLATFORMDISPLAYEXTPROC)eglGetProcAddress("eglGetPlatformDisplayEXT");
        EGLDeviceEXT devices[8];
        EGLint n = 0;
        if (query_devices && get_platform_display && query_devices(8, devices, &n) && n > 0)
            dpy = get_platform_display(EGL_PLATFORM_DEVICE_EXT, devices[which ? n - 1 : 0], NULL);
        printf("devices %d\n", (int)n);
    }
    if (dpy == EGL_NO_DISPLAY)
        die("no display");
    return dpy;
}

/* Whether the display advertises EGL_ANDROID_blob_cache (a whole token of its extensions):
 * calling the extension's function on a display without it is undefined (NVIDIA's EGL, which
 * lacks it, crashes), so the application's own cache is installed only where it exists. */
static int has_blob_cache(EGLDisplay dpy) {
    const char *ext = eglQueryString(dpy, EGL_EXTENSIONS);
    const char *name = "EGL_ANDROID_blob_cache";
    size_t n = strlen(name);
    for (const char *p = ext; p && (p = strstr(p, name)) != NULL; p += n)
        if ((p == ext || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return 1;
    return 0;
}

static EGLConfig init_display(EGLDisplay dpy) {
    EGLint major, minor, n = 0;
    if (!eglInitialize(dpy, &major, &minor))
        die("eglInitialize");
    if (own_cache && !has_blob_cache(dpy)) {
        printf("own_cache unsupported\n");
        own_cache = NULL;
    }
    if (own_cache && strcmp(own_cache, "before") == 0) {
        PFNEGLSETBLOBCACHEFUNCSANDROIDPROC set_funcs =
            (PFNEGLSETBLOBCACHEFUNCSANDROIDPROC)eglGetProcAddress("eglSetBlobCacheFuncsANDROID");
        set_funcs(dpy, own_set, own_get);
        if (eglGetError() != EGL_SUCCESS)
            die("own eglSetBlobCacheFuncsANDROID (before)");
    }
    static const EGLint attribs[] = {EGL_SURFACE_TYPE, EGL_PBUFFER_BIT, EGL_RENDERABLE_TYPE,
                                     EGL_OPENGL_ES3_BIT, EGL_NONE};
    EGLConfig config;
    if (!eglChooseConfig(dpy, attribs, &config, 1, &n) || n < 1)
        die("eglChooseConfig");
    if (!eglBindAPI(EGL_OPENGL_ES_API))
        die("eglBindAPI");
    return config;
}

static EGLContext make_context(EGLDisplay dpy, EGLConfig config) {
    static const EGLint ctx_attribs[] = {EGL_CONTEXT_MAJOR_VERSION, 3, EGL_NONE};
    EGLContext ctx = eglCreateContext(dpy, config, EGL_NO_CONTEXT, ctx_attribs);
    if (ctx == EGL_NO_CONTEXT)
        die("eglCreateContext");
    return ctx;
}

struct job {
    EGLDisplay dpy;
    EGLConfig config;
    int first, last;
};

static void *thread_main(void *arg) {
    struct job *j = arg;
    EGLContext ctx = make_context(j->dpy, j->config);
    if (!eglMakeCurrent(j->dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, ctx))
        die("eglMakeCurrent (thread)");
    draw_programs(j->first, j->last);
    eglMakeCurrent(j->dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
    eglDestroyContext(j->dpy, ctx);
    eglReleaseThread();
    return NULL;
}

static double create_ms;

/* Forks a child that exits at once, running the exit handlers (the drop-in's among them:
 * in a forked child it must not persist the cache, whose locks may be held by threads that
 * did not survive the fork). After the displays are terminated: Mesa's own exit handler
 * broadcasts on its worker queues' condition variables, and glibc's condition variables
 * are not fork-safe while the parent's threads wait on them (the child blocked in that
 * broadcast forever, in 4 to 5 runs of 10 on a loaded 2-core machine, whatever the wait
 * before the fork). With the screens destroyed there are no queues left to wake. */
static void fork_and_exit_child(void) {
    eglReleaseThread();
    /* The child's exit flushes the stdio buffers it inherits: empty them first, or the
     * lines printed so far reach the pipe twice. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        /* Should an exit handler hang all the same, the alarm kills the child and the
         * parent fails below, rather than the test waiting forever. */
        alarm(30);
        exit(0); /* runs the atexit handlers in the child */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("the forked child failed");
}

/* One round on one display: a context, the programs (split over threads), teardown of the
 * contexts. `base` offsets the program numbers (the second display draws other programs). */
static void round_on(EGLDisplay dpy, EGLConfig config, int base, int first_round) {
    double t0 = now_ms();
    EGLContext ctx = make_context(dpy, config);
    if (first_round && base == 0)
        create_ms = now_ms() - t0;
    if (!eglMakeCurrent(dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, ctx))
        die("eglMakeCurrent");
    if (own_cache && strcmp(own_cache, "after") == 0) {
        PFNEGLSETBLOBCACHEFUNCSANDROIDPROC set_funcs =
            (PFNEGLSETBLOBCACHEFUNCSANDROIDPROC)eglGetProcAddress("eglSetBlobCacheFuncsANDROID");
        set_funcs(dpy, own_set, own_get);
        if (eglGetError() != EGL_SUCCESS)
            die("own eglSetBlobCacheFuncsANDROID (after)");
        /* A second install is refused, with or without gpucache. */
        set_funcs(dpy, own_set, own_get);
        if (eglGetError() != EGL_BAD_PARAMETER)
            die("a second eglSetBlobCacheFuncsANDROID was not refused");
    }
    if (threads <= 1) {
        draw_programs(base, base + programs);
    } else {
        pthread_t tid[64];
        struct job jobs[64];
        int per = (programs + threads - 1) / threads;
        for (int t = 0; t < threads; t++) {
            int first = base + t * per, last = base + (t + 1) * per;
            if (last > base + programs)
                last = base + programs;
            jobs[t] = (struct job){dpy, config, first, last};
            pthread_create(&tid[t], NULL, thread_main, &jobs[t]);
        }
        for (int t = 0; t < threads; t++)
            pthread_join(tid[t], NULL);
    }
    eglMakeCurrent(dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
    eglDestroyContext(dpy, ctx);
}

int main(int argc, char **argv) {
    double start = now_ms();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--programs") && i + 1 < argc)
            programs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--displays") && i + 1 < argc)
            displays = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reinit"))
            reinit = 1;
        else if (!strcmp(argv[i], "--fork"))
            do_fork = 1;
        else if (!strcmp(argv[i], "--own-cache") && i + 1 < argc)
            own_cache = argv[++i];
        else if (!strcmp(argv[i], "--pause-ms") && i + 1 < argc)
            pause_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shader-dir") && i + 1 < argc)
            shader_dir = argv[++i];
        else if (!strcmp(argv[i], "--platform") && i + 1 < argc)
            device_platform = !strcmp(argv[++i], "device");
        else {
            fprintf(stderr, "dropin_app: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (threads < 1 || threads > 64 || programs < 1 || programs > 2048 || displays < 1 || displays > 2)
        die("bad arguments");
    if (shader_dir)
        load_shader_dir();
#define LOAD(type, name)                                                                        \
    p_##name = (type)eglGetProcAddress(#name);                                                  \
    if (!p_##name)                                                                              \
        die("eglGetProcAddress(" #name ")");
    GL_FUNCS(LOAD)

    EGLDisplay dpys[2];
    EGLConfig configs[2];
    for (int d = 0; d < displays; d++) {
        dpys[d] = open_display(d);
        configs[d] = init_display(dpys[d]);
    }
    double t1 = now_ms();
    for (int d = 0; d < displays; d++)
        round_on(dpys[d], configs[d], d * programs, 1);
    if (reinit) {
        for (int d = 0; d < displays; d++) {
            if (!eglTerminate(dpys[d]))
                die("eglTerminate");
            configs[d] = init_display(dpys[d]);
            round_on(dpys[d], configs[d], d * programs, 0);
        }
    }
    double t2 = now_ms();
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < programs * displays && i < 4096; i++)
        h = (h ^ pixel_hash[i]) * 0x100000001b3ull;
    printf("pixels %016llx\n", (unsigned long long)h);
    printf("programs %d\n", programs * displays);
    printf("own_sets %lu own_gets %lu own_hits %lu\n", own_sets, own_gets, own_hits);
    /* The environment as the application sees it after creating its contexts. */
    const char *mesa_dir = getenv("MESA_SHADER_CACHE_DIR");
    printf("env_mesa_shader_cache_dir %s\n", mesa_dir && *mesa_dir ? mesa_dir : "-");
    for (int d = 0; d < displays; d++)
        eglTerminate(dpys[d]);
    if (do_fork)
        fork_and_exit_child();
    printf("create_ms %.1f compile_draw_ms %.1f total_ms %.1f\n", create_ms, t2 - t1, now_ms() - start);
    return 0;
}
