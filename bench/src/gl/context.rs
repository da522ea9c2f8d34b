//! A surfaceless EGL context on Mesa (llvmpipe) with desktop GL 4.5 compatibility, and the
//! hook that installs blob-cache callbacks once the context exists (Mesa 25 ignores callbacks
//! installed before `eglCreateContext`: llvmpipe creates its cache lazily).

use std::ffi::c_void;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use khronos_egl as egl;

/// `EGL_PLATFORM_SURFACELESS_MESA`.
const PLATFORM_SURFACELESS_MESA: egl::Enum = 0x31DD;

/// `EGLSetBlobFuncANDROID` / `EGLGetBlobFuncANDROID`.
pub type SetBlobFn = unsafe extern "C" fn(*const c_void, isize, *const c_void, isize);
/// See [`SetBlobFn`].
pub type GetBlobFn = unsafe extern "C" fn(*const c_void, isize, *mut c_void, isize) -> isize;
type SetBlobCacheFuncsFn = unsafe extern "C" fn(*mut c_void, SetBlobFn, GetBlobFn);

/// A current GL context with no surface; destroyed (and the display terminated, which makes
/// Mesa finish its cache writes) on drop.
pub struct GlContext {
    egl: egl::DynamicInstance<egl::EGL1_5>,
    display: egl::Display,
    context: egl::Context,
    /// The GL functions of the context.
    pub gl: glow::Context,
    /// Time spent in `eglGetPlatformDisplay` .. `eglMakeCurrent`, install hook included.
    pub create_time: Duration,
}

impl GlContext {
    /// Creates the context, then runs `install(display)` (an `EGLDisplay`) before any program
    /// of the caller is compiled.
    pub fn create(install: impl FnOnce(&Self) -> Result<()>) -> Result<Self> {
        let start = Instant::now();
        // SAFETY: loads the system's libEGL (glvnd), which is thread-safe to load.
        let egl = unsafe { egl::DynamicInstance::<egl::EGL1_5>::load_required() }
            .map_err(|e| anyhow!("loading libEGL.so.1: {e}"))?;
        // SAFETY: the surfaceless platform takes no native display; the list ends with NONE.
        let display = unsafe {
            egl.get_platform_display(
                PLATFORM_SURFACELESS_MESA,
                egl::DEFAULT_DISPLAY,
                &[egl::ATTRIB_NONE],
            )
        }
        .context("eglGetPlatformDisplay(surfaceless)")?;
        egl.initialize(display).context("eglInitialize")?;
        let config = egl
            .choose_first_config(
                display,
                &[
                    egl::SURFACE_TYPE,
                    egl::PBUFFER_BIT,
                    egl::RENDERABLE_TYPE,
                    egl::OPENGL_BIT,
                    egl::NONE,
                ],
            )
            .context("eglChooseConfig")?
            .ok_or_else(|| anyhow!("no EGL config with OpenGL and pbuffers"))?;
        egl.bind_api(egl::OPENGL_API).context("eglBindAPI")?;
        let context = egl
            .create_context(
                display,
                config,
                None,
                &[
                    egl::CONTEXT_MAJOR_VERSION,
                    4,
                    egl::CONTEXT_MINOR_VERSION,
                    5,
                    egl::CONTEXT_OPENGL_PROFILE_MASK,
                    egl::CONTEXT_OPENGL_COMPATIBILITY_PROFILE_BIT,
                    egl::NONE,
                ],
            )
            .context("eglCreateContext (GL 4.5 compatibility)")?;
        egl.make_current(display, None, None, Some(context))
            .context("eglMakeCurrent")?;
        // SAFETY: the context is current on this thread; the loader returns entry points of
        // the same EGL instance, which outlives `gl` (both live in `Self`).
        let gl = unsafe {
            glow::Context::from_loader_function(|name| {
                egl.get_proc_address(name)
                    .map_or(std::ptr::null(), |f| f as *const c_void)
            })
        };
        let mut this = Self {
            egl,
            display,
            context,
            gl,
            create_time: Duration::ZERO,
        };
        install(&this)?;
        this.create_time = start.elapsed();
        Ok(this)
    }

    /// The `EGLDisplay` handle, for an install helper written in C.
    pub fn display_ptr(&self) -> *mut c_void {
        self.display.as_ptr()
    }

    /// A string of the display (`EGL_VENDOR`, `EGL_EXTENSIONS`, ...).
    pub fn query_string(&self, name: egl::Int) -> Result<String> {
        let s = self
            .egl
            .query_string(Some(self.display), name)
            .context("eglQueryString")?;
        Ok(s.to_string_lossy().into_owned())
    }

    /// Installs `set`/`get` with `eglSetBlobCacheFuncsANDROID`, after checking that the display
    /// advertises the extension (Mesa 22.3 crashes when called without it).
    pub fn install_blob_funcs(&self, set: SetBlobFn, get: GetBlobFn) -> Result<()> {
        let extensions = self.query_string(egl::EXTENSIONS)?;
        if !extensions
            .split_ascii_whitespace()
            .any(|e| e == "EGL_ANDROID_blob_cache")
        {
            bail!("the display does not advertise EGL_ANDROID_blob_cache");
        }
        let f = self
            .egl
            .get_proc_address("eglSetBlobCacheFuncsANDROID")
            .ok_or_else(|| anyhow!("no eglSetBlobCacheFuncsANDROID"))?;
        // SAFETY: the extension is advertised, so the entry point has this signature.
        let set_funcs: SetBlobCacheFuncsFn = unsafe { std::mem::transmute(f) };
        // SAFETY: the display is initialized; the callbacks are 'static functions.
        unsafe { set_funcs(self.display.as_ptr(), set, get) };
        Ok(())
    }
}

impl Drop for GlContext {
    fn drop(&mut self) {
        let _ = self.egl.make_current(self.display, None, None, None);
        let _ = self.egl.destroy_context(self.display, self.context);
        // Terminating the display destroys the screen, which waits for Mesa's cache queue:
        // every `set` has arrived once this returns.
        let _ = self.egl.terminate(self.display);
    }
}
