//! A surfaceless EGL context (Mesa llvmpipe here, any vendor's EGL elsewhere) for GLES 3 or
//! desktop GL 4.5 compatibility, with the hook that installs blob-cache callbacks once the
//! context exists (Mesa 25 ignores callbacks installed before `eglCreateContext`: llvmpipe
//! creates its cache lazily).

use std::ffi::c_void;
use std::fmt::Display;
use std::time::{Duration, Instant};

use khronos_egl as egl;

use crate::glow_gl::GlowGl;
use crate::identity::Api;
use crate::Error;

/// `EGL_PLATFORM_SURFACELESS_MESA`.
const PLATFORM_SURFACELESS_MESA: egl::Enum = 0x31DD;

/// `EGLSetBlobFuncANDROID`.
pub type SetBlobFn = unsafe extern "C" fn(*const c_void, isize, *const c_void, isize);
/// `EGLGetBlobFuncANDROID`.
pub type GetBlobFn = unsafe extern "C" fn(*const c_void, isize, *mut c_void, isize) -> isize;
type SetBlobCacheFuncsFn = unsafe extern "C" fn(*mut c_void, SetBlobFn, GetBlobFn);

fn egl_error(what: &str, e: impl Display) -> Error {
    Error::Context(format!("{what}: {e}"))
}

/// A current GL context with no surface, on the thread that created it; destroyed (and the
/// display terminated, which makes Mesa finish its cache writes) on drop.
pub struct GlContext {
    egl: egl::DynamicInstance<egl::EGL1_5>,
    display: egl::Display,
    context: egl::Context,
    gl: glow::Context,
    api: Api,
    create_time: Duration,
    /// The context is current on the creating thread only: not `Send`.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl std::fmt::Debug for GlContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlContext")
            .field("api", &self.api)
            .field("create_time", &self.create_time)
            .finish_non_exhaustive()
    }
}

impl GlContext {
    /// A GLES 3.0 or desktop GL 4.5 compatibility context.
    pub fn create(api: Api) -> Result<Self, Error> {
        Self::create_with(api, |_| Ok::<(), Error>(()))
    }

    /// Creates the context, then runs `install(&context)` before the caller compiles
    /// anything (where blob-cache callbacks go; see [`install_blob_funcs`](Self::install_blob_funcs)).
    pub fn create_with<E: Display>(
        api: Api,
        install: impl FnOnce(&Self) -> Result<(), E>,
    ) -> Result<Self, Error> {
        let start = Instant::now();
        // SAFETY: loads the system's libEGL (glvnd), which is thread-safe to load.
        let egl = unsafe { egl::DynamicInstance::<egl::EGL1_5>::load_required() }
            .map_err(|e| egl_error("loading libEGL.so.1", e))?;
        // SAFETY: the surfaceless platform takes no native display; the list ends with NONE.
        let display = unsafe {
            egl.get_platform_display(
                PLATFORM_SURFACELESS_MESA,
                egl::DEFAULT_DISPLAY,
                &[egl::ATTRIB_NONE],
            )
        }
        .map_err(|e| egl_error("eglGetPlatformDisplay(surfaceless)", e))?;
        egl.initialize(display)
            .map_err(|e| egl_error("eglInitialize", e))?;
        let (renderable, bind, attributes) = match api {
            Api::Gles => (
                egl::OPENGL_ES3_BIT,
                egl::OPENGL_ES_API,
                vec![egl::CONTEXT_MAJOR_VERSION, 3, egl::NONE],
            ),
            Api::Gl => (
                egl::OPENGL_BIT,
                egl::OPENGL_API,
                vec![
                    egl::CONTEXT_MAJOR_VERSION,
                    4,
                    egl::CONTEXT_MINOR_VERSION,
                    5,
                    egl::CONTEXT_OPENGL_PROFILE_MASK,
                    egl::CONTEXT_OPENGL_COMPATIBILITY_PROFILE_BIT,
                    egl::NONE,
                ],
            ),
        };
        let config = egl
            .choose_first_config(
                display,
                &[
                    egl::SURFACE_TYPE,
                    egl::PBUFFER_BIT,
                    egl::RENDERABLE_TYPE,
                    renderable,
                    egl::NONE,
                ],
            )
            .map_err(|e| egl_error("eglChooseConfig", e))?
            .ok_or_else(|| {
                Error::Context(format!("no EGL config for {} with pbuffers", api.name()))
            })?;
        egl.bind_api(bind).map_err(|e| egl_error("eglBindAPI", e))?;
        let context = egl
            .create_context(display, config, None, &attributes)
            .map_err(|e| egl_error("eglCreateContext", e))?;
        if let Err(e) = egl.make_current(display, None, None, Some(context)) {
            let _ = egl.destroy_context(display, context);
            return Err(egl_error("eglMakeCurrent", e));
        }
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
            api,
            create_time: Duration::ZERO,
            _not_send: std::marker::PhantomData,
        };
        install(&this).map_err(|e| Error::Context(format!("install hook: {e}")))?;
        this.create_time = start.elapsed();
        Ok(this)
    }

    /// The [`Gl`](crate::Gl) of this context.
    pub fn gl(&self) -> GlowGl<'_> {
        // SAFETY: `create_with` made the context current on this thread, and `Self` is not
        // `Send`, so it is used on no other thread.
        unsafe { GlowGl::new(&self.gl) }
    }

    /// glow's context, for drawing.
    pub fn glow(&self) -> &glow::Context {
        &self.gl
    }

    /// The API the context was created for.
    pub fn api(&self) -> Api {
        self.api
    }

    /// Time spent from `eglGetPlatformDisplay` to `eglMakeCurrent`, install hook included.
    pub fn create_time(&self) -> Duration {
        self.create_time
    }

    /// The `EGLDisplay` handle, for an install helper written in C.
    pub fn display_ptr(&self) -> *mut c_void {
        self.display.as_ptr()
    }

    /// A string of the display (`EGL_VENDOR`, `EGL_EXTENSIONS`, ...).
    pub fn query_string(&self, name: egl::Int) -> Result<String, Error> {
        let s = self
            .egl
            .query_string(Some(self.display), name)
            .map_err(|e| egl_error("eglQueryString", e))?;
        Ok(s.to_string_lossy().into_owned())
    }

    /// Installs `set`/`get` with `eglSetBlobCacheFuncsANDROID`, after checking that the display
    /// advertises the extension (Mesa 22.3 crashes when called without it).
    pub fn install_blob_funcs(&self, set: SetBlobFn, get: GetBlobFn) -> Result<(), Error> {
        let extensions = self.query_string(egl::EXTENSIONS)?;
        if !extensions
            .split_ascii_whitespace()
            .any(|e| e == "EGL_ANDROID_blob_cache")
        {
            return Err(Error::Context(
                "the display does not advertise EGL_ANDROID_blob_cache".into(),
            ));
        }
        let f = self
            .egl
            .get_proc_address("eglSetBlobCacheFuncsANDROID")
            .ok_or_else(|| Error::Context("no eglSetBlobCacheFuncsANDROID".into()))?;
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
