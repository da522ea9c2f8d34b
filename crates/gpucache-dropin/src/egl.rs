//! EGL and GLVND types, and the real functions the drop-in forwards to.

use std::ffi::{c_char, c_void, CStr};

pub type EGLDisplay = *mut c_void;
pub type EGLContext = *mut c_void;
pub type EGLConfig = *mut c_void;
pub type EGLBoolean = u32;
pub type EGLint = i32;

pub const EGL_SUCCESS: EGLint = 0x3000;
pub const EGL_VENDOR: EGLint = 0x3053;
pub const EGL_VERSION: EGLint = 0x3054;
pub const EGL_EXTENSIONS: EGLint = 0x3055;

/// `EGLSetBlobFuncANDROID`.
pub type SetBlob = unsafe extern "C" fn(*const c_void, isize, *const c_void, isize);
/// `EGLGetBlobFuncANDROID`.
pub type GetBlob = unsafe extern "C" fn(*const c_void, isize, *mut c_void, isize) -> isize;

pub type CreateContextFn =
    unsafe extern "C" fn(EGLDisplay, EGLConfig, EGLContext, *const EGLint) -> EGLContext;
pub type TerminateFn = unsafe extern "C" fn(EGLDisplay) -> EGLBoolean;
pub type SetBlobFuncsFn = unsafe extern "C" fn(EGLDisplay, Option<SetBlob>, Option<GetBlob>);
pub type QueryStringFn = unsafe extern "C" fn(EGLDisplay, EGLint) -> *const c_char;
pub type GetErrorFn = unsafe extern "C" fn() -> EGLint;
pub type DriverNameFn = unsafe extern "C" fn(EGLDisplay) -> *const c_char;
pub type DriverConfigFn = unsafe extern "C" fn(EGLDisplay) -> *mut c_char;
pub type GetProcAddressFn = unsafe extern "C" fn(*const c_char) -> *mut c_void;

/// GLVND's `__EGLapiImports` (`glvnd/libeglabi.h`, ABI 0.2): what a vendor's `__egl_Main`
/// fills in. Only `get_proc_address` is replaced; every other field is the real vendor's.
#[repr(C)]
pub struct EglApiImports {
    pub get_platform_display: Option<unsafe extern "C" fn()>,
    pub get_supports_api: Option<unsafe extern "C" fn()>,
    pub get_vendor_string: Option<unsafe extern "C" fn()>,
    pub get_proc_address: Option<GetProcAddressFn>,
    pub get_dispatch_address: Option<unsafe extern "C" fn()>,
    pub set_dispatch_index: Option<unsafe extern "C" fn()>,
    pub is_patch_supported: Option<unsafe extern "C" fn()>,
    pub initiate_patch: Option<unsafe extern "C" fn()>,
    pub release_patch: Option<unsafe extern "C" fn()>,
    pub patch_thread_attach: Option<unsafe extern "C" fn()>,
    pub find_native_display_platform: Option<unsafe extern "C" fn()>,
}

/// `__egl_Main`'s type (`__PFNEGLMAINPROC`).
pub type EglMainFn =
    unsafe extern "C" fn(u32, *const c_void, *mut c_void, *mut EglApiImports) -> EGLBoolean;

/// The real EGL functions the wrappers forward to and the drop-in calls.
pub struct Real {
    pub create_context: Option<CreateContextFn>,
    pub terminate: Option<TerminateFn>,
    pub set_blob_funcs: Option<SetBlobFuncsFn>,
    pub query_string: Option<QueryStringFn>,
    pub get_error: Option<GetErrorFn>,
    pub driver_name: Option<DriverNameFn>,
    pub driver_config: Option<DriverConfigFn>,
    /// The real `eglGetProcAddress` (the LD_PRELOAD interposer forwards to it).
    pub get_proc_address: Option<GetProcAddressFn>,
    /// The file of the real vendor library, for its build id.
    pub library: Option<std::path::PathBuf>,
}

/// Casts a non-NULL function address to the function pointer type `F`.
///
/// # Safety
///
/// `p` is NULL or the address of a function whose type is `F`, and `F` is a function
/// pointer type.
pub unsafe fn cast<F: Copy>(p: *mut c_void) -> Option<F> {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: `F` is a function pointer type of pointer size (checked) and `p` is a
    // non-NULL address of such a function (the caller's contract).
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

impl Real {
    /// Every function found by `resolve` (core functions) and `resolve_ext` (extension
    /// functions, which GLVND and non-GLVND libEGL give only through `eglGetProcAddress`).
    ///
    /// # Safety
    ///
    /// Both resolvers return NULL or the address of the named EGL function.
    pub unsafe fn resolve(
        resolve: &dyn Fn(&CStr) -> *mut c_void,
        resolve_ext: &dyn Fn(&CStr) -> *mut c_void,
        library: Option<std::path::PathBuf>,
    ) -> Self {
        // SAFETY: each name is resolved to NULL or to the function of that name, whose type
        // is the one it is cast to (EGL 1.4/1.5, EGL_ANDROID_blob_cache,
        // EGL_MESA_query_driver).
        unsafe {
            Self {
                create_context: cast(resolve(c"eglCreateContext")),
                terminate: cast(resolve(c"eglTerminate")),
                set_blob_funcs: cast(resolve_ext(c"eglSetBlobCacheFuncsANDROID")),
                query_string: cast(resolve(c"eglQueryString")),
                get_error: cast(resolve(c"eglGetError")),
                driver_name: cast(resolve_ext(c"eglGetDisplayDriverName")),
                driver_config: cast(resolve_ext(c"eglGetDisplayDriverConfig")),
                get_proc_address: cast(resolve(c"eglGetProcAddress")),
                library,
            }
        }
    }

    /// `eglQueryString(dpy, name)` as bytes, `None` for NULL.
    ///
    /// # Safety
    ///
    /// `dpy` belongs to this EGL.
    pub unsafe fn query(&self, dpy: EGLDisplay, name: EGLint) -> Option<Vec<u8>> {
        let query = self.query_string?;
        // SAFETY: eglQueryString takes any display handle of this EGL and answers NULL
        // for one it cannot use.
        let s = unsafe { query(dpy, name) };
        // SAFETY: a non-NULL answer is a NUL-terminated string owned by EGL.
        (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) }.to_bytes().to_vec())
    }

    /// Reads and so clears the calling thread's EGL error.
    pub fn take_error(&self) -> EGLint {
        match self.get_error {
            // SAFETY: eglGetError takes no arguments and may be called at any time.
            Some(f) => unsafe { f() },
            None => EGL_SUCCESS,
        }
    }
}

/// Whether the space-separated list `list` contains exactly `token`.
pub fn has_token(list: &[u8], token: &[u8]) -> bool {
    list.split(|b| b.is_ascii_whitespace()).any(|t| t == token)
}
