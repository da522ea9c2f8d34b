//! Installing the blob-cache callbacks on an `EGLDisplay`: checks the display advertises
//! `EGL_ANDROID_blob_cache`, recognises Mesa, and calls `eglSetBlobCacheFuncsANDROID`.

use std::ffi::{c_char, c_void, CStr};

use crate::egl::{gpucache_egl_get, gpucache_egl_set, require_configured, EGLsizeiANDROID};
use crate::error::{
    ffi_call, Failure, GPUCACHE_ERROR_ALREADY_EXISTS, GPUCACHE_ERROR_INVALID_ARGUMENT,
    GPUCACHE_ERROR_UNSUPPORTED,
};

const EGL_SUCCESS: i32 = 0x3000;
const EGL_BAD_PARAMETER: i32 = 0x300C;
const EGL_VENDOR: i32 = 0x3053;
const EGL_EXTENSIONS: i32 = 0x3055;
const EXTENSION: &[u8] = b"EGL_ANDROID_blob_cache";

type SetBlobFn =
    unsafe extern "C" fn(*const c_void, EGLsizeiANDROID, *const c_void, EGLsizeiANDROID);
type GetBlobFn = unsafe extern "C" fn(
    *const c_void,
    EGLsizeiANDROID,
    *mut c_void,
    EGLsizeiANDROID,
) -> EGLsizeiANDROID;
// EGL entry points use EGLAPIENTRY, which is "system" (stdcall on 32-bit Windows, C elsewhere).
type QueryStringFn = unsafe extern "system" fn(*mut c_void, i32) -> *const c_char;
type GetErrorFn = unsafe extern "system" fn() -> i32;
type SetBlobCacheFuncsFn = unsafe extern "system" fn(*mut c_void, SetBlobFn, GetBlobFn);

/// Installs gpucache's blob-cache callbacks on `display` (an initialised `EGLDisplay`),
/// finding EGL in the process: `libEGL.so.1` as already loaded, else loaded now (and never
/// unloaded).
///
/// Order: `gpucache_egl_configure`, `eglInitialize`, `eglCreateContext`, then this. Mesa 25
/// creates its cache with the first context and never calls callbacks installed before
/// `eglCreateContext`. Callbacks can be installed once per display (until it is terminated).
///
/// Refuses, without calling into the driver's blob-cache entry point:
/// - `GPUCACHE_ERROR_INVALID_ARGUMENT`: `display` is NULL (`EGL_NO_DISPLAY`), or not
///   initialised (`eglQueryString` answers NULL);
/// - `GPUCACHE_ERROR_NOT_CONFIGURED`: no blob cache is configured;
/// - `GPUCACHE_ERROR_UNSUPPORTED`: no libEGL, or the display does not advertise
///   `EGL_ANDROID_blob_cache` (Mesa 22.3 exports the entry point anyway and crashes when it is
///   called), or the entry point cannot be found;
/// - `GPUCACHE_ERROR_ALREADY_EXISTS`: EGL reports `EGL_BAD_PARAMETER` for the install, i.e.
///   callbacks are already installed on this display.
///
/// When the display's `EGL_VENDOR` contains "Mesa", miss-on-oversize is turned on first:
/// Mesa passes a fixed 64 KiB buffer and reads it whenever `get` answers non-zero.
///
/// # Safety
///
/// `display` is NULL or an `EGLDisplay` of the libEGL loaded in this process.
#[no_mangle]
pub unsafe extern "C" fn gpucache_egl_install(display: *mut c_void) -> i32 {
    ffi_call("gpucache_egl_install", || {
        precheck(display)?;
        let egl = libegl::open()?;
        // SAFETY: the resolver only returns addresses of libEGL's own functions, and the
        // caller guarantees `display` belongs to that libEGL.
        unsafe { install(display, &|name| egl.resolve(name)) }
    })
}

/// `gpucache_egl_install` for programs that load EGL themselves: every EGL function is
/// looked up with `get_proc_address` (EGL 1.5's `eglGetProcAddress` also returns core
/// functions; pass it cast to this type). Same order, checks and results; a NULL
/// `get_proc_address` is `GPUCACHE_ERROR_INVALID_ARGUMENT`, and a loader that does not find
/// `eglQueryString` or the blob-cache entry point gives `GPUCACHE_ERROR_UNSUPPORTED`.
///
/// # Safety
///
/// `display` is NULL or an `EGLDisplay` of the EGL that `get_proc_address` resolves from;
/// `get_proc_address` returns NULL or the address of the named EGL function.
#[no_mangle]
pub unsafe extern "C" fn gpucache_egl_install_with_loader(
    display: *mut c_void,
    get_proc_address: Option<unsafe extern "C" fn(*const c_char) -> *mut c_void>,
) -> i32 {
    ffi_call("gpucache_egl_install_with_loader", || {
        let loader =
            get_proc_address.ok_or_else(|| Failure::invalid("get_proc_address is NULL"))?;
        precheck(display)?;
        // SAFETY: `loader` returns NULL or the named EGL function of the EGL that owns
        // `display` (the caller's contract); `name` is NUL-terminated.
        let resolve = |name: &CStr| unsafe { loader(name.as_ptr()) };
        // SAFETY: as above, the resolved functions belong to the display's EGL.
        unsafe { install(display, &resolve) }
    })
}

fn precheck(display: *mut c_void) -> Result<(), Failure> {
    if display.is_null() {
        return Err(Failure::invalid("display is EGL_NO_DISPLAY"));
    }
    require_configured()
}

fn unsupported(message: impl Into<String>) -> Failure {
    Failure::new(GPUCACHE_ERROR_UNSUPPORTED, message)
}

/// The checks and the install, with EGL functions found by `resolve`.
///
/// # Safety
///
/// `resolve` returns NULL or the address of the named EGL function, of the EGL that owns
/// the non-NULL `display`.
unsafe fn install(
    display: *mut c_void,
    resolve: &dyn Fn(&CStr) -> *mut c_void,
) -> Result<(), Failure> {
    let query = resolve(c"eglQueryString");
    if query.is_null() {
        return Err(unsupported("eglQueryString not found"));
    }
    // SAFETY: a non-NULL address of eglQueryString, whose type this is (EGL 1.0).
    let query = unsafe { std::mem::transmute::<*mut c_void, QueryStringFn>(query) };
    // SAFETY: eglQueryString accepts any display and answers NULL (EGL_NOT_INITIALIZED or
    // EGL_BAD_DISPLAY) for one it cannot use; `display` belongs to this EGL.
    let extensions = unsafe { query(display, EGL_EXTENSIONS) };
    if extensions.is_null() {
        return Err(Failure::new(
            GPUCACHE_ERROR_INVALID_ARGUMENT,
            "eglQueryString(EGL_EXTENSIONS) failed: the display is not initialised \
             (call eglInitialize first)",
        ));
    }
    // SAFETY: a non-NULL result of eglQueryString is a static NUL-terminated string.
    let extensions = unsafe { CStr::from_ptr(extensions) };
    if !has_token(extensions.to_bytes(), EXTENSION) {
        return Err(unsupported(
            "the display does not advertise EGL_ANDROID_blob_cache",
        ));
    }
    let set_funcs = resolve(c"eglSetBlobCacheFuncsANDROID");
    if set_funcs.is_null() {
        return Err(unsupported("eglSetBlobCacheFuncsANDROID not found"));
    }
    // SAFETY: a non-NULL address of eglSetBlobCacheFuncsANDROID, whose type this is.
    let set_funcs = unsafe { std::mem::transmute::<*mut c_void, SetBlobCacheFuncsFn>(set_funcs) };
    // SAFETY: as for the first query.
    let vendor = unsafe { query(display, EGL_VENDOR) };
    // SAFETY: a non-NULL result of eglQueryString is a static NUL-terminated string.
    if !vendor.is_null() && contains(unsafe { CStr::from_ptr(vendor) }.to_bytes(), b"Mesa") {
        // Mesa 25 reads its fixed 64 KiB buffer after any non-zero answer.
        if !gpucache::egl::set_miss_on_oversize(true) {
            return Err(Failure::not_configured());
        }
    }
    let get_error = resolve(c"eglGetError");
    let get_error = (!get_error.is_null()).then(|| {
        // SAFETY: a non-NULL address of eglGetError, whose type this is (EGL 1.0).
        unsafe { std::mem::transmute::<*mut c_void, GetErrorFn>(get_error) }
    });
    if let Some(get_error) = get_error {
        // SAFETY: eglGetError takes no arguments; this clears the thread's pending error.
        unsafe { get_error() };
    }
    // SAFETY: the display advertises the extension, so the entry point is implemented; the
    // callbacks have exactly the extension's types and live as long as the process.
    unsafe { set_funcs(display, gpucache_egl_set, gpucache_egl_get) };
    if let Some(get_error) = get_error {
        // SAFETY: as above.
        let error = unsafe { get_error() };
        if error == EGL_BAD_PARAMETER {
            return Err(Failure::new(
                GPUCACHE_ERROR_ALREADY_EXISTS,
                "eglSetBlobCacheFuncsANDROID failed with EGL_BAD_PARAMETER: callbacks are \
                 already installed on this display",
            ));
        }
        if error != EGL_SUCCESS {
            return Err(Failure::invalid(format!(
                "eglSetBlobCacheFuncsANDROID failed with EGL error 0x{error:04X}"
            )));
        }
    }
    // Installed: the driver's own start-up reads are done (its first context exists) and its
    // lookups come next, so the blob cache's preload starts now (`preload_at_first_use`).
    // A failed install leaves it unstarted: that cache may never be asked.
    if let Some(cache) = gpucache::egl::current() {
        cache.cache().start_preload();
    }
    Ok(())
}

/// Whether the space-separated list `list` contains exactly `token`.
fn has_token(list: &[u8], token: &[u8]) -> bool {
    list.split(|b| b.is_ascii_whitespace()).any(|t| t == token)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(unix)]
mod libegl {
    use std::ffi::{c_void, CStr};

    use super::unsupported;
    use crate::error::Failure;

    const NAMES: [&CStr; 2] = [c"libEGL.so.1", c"libEGL.so"];

    /// The process's libEGL: a `dlopen` handle that is never closed.
    pub(super) struct Egl {
        handle: *mut c_void,
        get_proc_address: Option<unsafe extern "system" fn(*const std::ffi::c_char) -> *mut c_void>,
    }

    /// libEGL as already loaded by the application, else loaded now.
    pub(super) fn open() -> Result<Egl, Failure> {
        let modes = [libc::RTLD_NOW | libc::RTLD_NOLOAD, libc::RTLD_NOW];
        for mode in modes {
            for name in NAMES {
                // SAFETY: `name` is NUL-terminated; loading libEGL runs only its own
                // initialisers. The handle is deliberately never closed: the driver keeps
                // pointers to our callbacks and we keep pointers into it.
                let handle = unsafe { libc::dlopen(name.as_ptr(), mode) };
                if !handle.is_null() {
                    // SAFETY: `handle` is a live dlopen handle; the symbol name is
                    // NUL-terminated.
                    let gpa = unsafe { libc::dlsym(handle, c"eglGetProcAddress".as_ptr()) };
                    let get_proc_address = (!gpa.is_null()).then(|| {
                        // SAFETY: a non-NULL eglGetProcAddress, whose type this is.
                        unsafe {
                            std::mem::transmute::<
                                *mut c_void,
                                unsafe extern "system" fn(*const std::ffi::c_char) -> *mut c_void,
                            >(gpa)
                        }
                    });
                    return Ok(Egl {
                        handle,
                        get_proc_address,
                    });
                }
            }
        }
        Err(unsupported("libEGL.so.1 cannot be loaded"))
    }

    impl Egl {
        /// The named function: exported by libEGL, else from eglGetProcAddress (extension
        /// functions such as eglSetBlobCacheFuncsANDROID are found only that way).
        pub(super) fn resolve(&self, name: &CStr) -> *mut c_void {
            // SAFETY: `handle` is a live dlopen handle (never closed); `name` is
            // NUL-terminated.
            let exported = unsafe { libc::dlsym(self.handle, name.as_ptr()) };
            if !exported.is_null() {
                return exported;
            }
            match self.get_proc_address {
                // SAFETY: eglGetProcAddress takes any NUL-terminated name.
                Some(gpa) => unsafe { gpa(name.as_ptr()) },
                None => std::ptr::null_mut(),
            }
        }
    }
}

#[cfg(not(unix))]
mod libegl {
    use std::ffi::{c_void, CStr};

    use super::unsupported;
    use crate::error::Failure;

    pub(super) struct Egl;

    pub(super) fn open() -> Result<Egl, Failure> {
        Err(unsupported(
            "finding libEGL is implemented for Unix only: use gpucache_egl_install_with_loader",
        ))
    }

    impl Egl {
        pub(super) fn resolve(&self, _name: &CStr) -> *mut c_void {
            std::ptr::null_mut()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extension_token_must_match_exactly() {
        let t = |list: &str| has_token(list.as_bytes(), EXTENSION);
        assert!(t("EGL_ANDROID_blob_cache"));
        assert!(t("EGL_KHR_a EGL_ANDROID_blob_cache EGL_KHR_b"));
        assert!(t("EGL_KHR_a  EGL_ANDROID_blob_cache "));
        assert!(!t(""));
        assert!(!t("EGL_ANDROID_blob_cache_v2 EGL_KHR_a"));
        assert!(!t("XEGL_ANDROID_blob_cache"));
        assert!(!t("EGL_ANDROID_blob_cach"));
    }

    #[test]
    fn vendor_match_is_a_substring_match() {
        assert!(contains(b"Mesa Project", b"Mesa"));
        assert!(!contains(b"NVIDIA", b"Mesa"));
        assert!(!contains(b"", b"Mesa"));
    }
}
