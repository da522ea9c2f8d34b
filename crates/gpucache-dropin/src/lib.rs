//! gpucache for unmodified GL applications (`libEGL_gpucache.so`).
//!
//! - **A GLVND EGL vendor** (`__egl_Main`) that wraps the real one (Mesa's): it loads the
//!   real vendor, calls its `__egl_Main` and hands GLVND the real vendor's imports, except
//!   `getProcAddress`, which answers `eglCreateContext`, `eglTerminate` and
//!   `eglSetBlobCacheFuncsANDROID` with wrappers. GLVND takes every core function from
//!   `getProcAddress` and dispatches extension functions to it too, so the wrappers reach
//!   applications that link libEGL and those that load it themselves alike.
//! - **An `LD_PRELOAD` interposer** where GLVND is absent: the same library exports
//!   `eglCreateContext`, `eglTerminate`, `eglGetProcAddress` and
//!   `eglSetBlobCacheFuncsANDROID`, forwarding to the next definitions.
//!
//! The wrappers configure gpucache before a display's first context (its identity from the
//! display; the hybrid with Mesa's own cache for context creation), install gpucache's
//! callbacks after it, give an application's own blob cache precedence, and forget a
//! terminated display. Every failure steps aside: the call goes to the real EGL untouched.
//! `docs/dropin.md` is the guide.

#![allow(non_snake_case)] // the library's name: GLVND vendors are libEGL_<vendor>.so
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod config;
mod display;
pub mod egl;
pub mod elf;
mod identity;
pub mod prune;
mod upkeep;
pub mod vendor;

use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use egl::{
    EGLBoolean, EGLConfig, EGLContext, EGLDisplay, EGLint, EglApiImports, EglMainFn, GetBlob,
    GetProcAddressFn, Real, SetBlob,
};

pub use display::configured_dir;

/// Diagnostics on standard error (`GPUCACHE_DROPIN_LOG=1`).
mod log {
    pub fn line(message: &str) {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "gpucache-dropin: {message}");
    }
}

pub(crate) fn log(p: &display::Process, message: &str) {
    if p.settings.log {
        log::line(message);
    }
}

/// The real vendor's functions, once `__egl_Main` loaded it.
static VENDOR: OnceLock<Real> = OnceLock::new();
/// The real vendor's `getProcAddress`.
static VENDOR_GPA: OnceLock<GetProcAddressFn> = OnceLock::new();
/// GLVND loads the real vendor as a vendor of its own as well: device enumeration is left
/// to that entry (GLVND maps each device to the last vendor that lists it; listed by both,
/// every device would appear twice to the application).
static HIDE_DEVICES: AtomicBool = AtomicBool::new(false);
/// Set once GLVND loaded this library as a vendor: the interposed symbols then only
/// forward (the vendor's wrappers do the work).
static VENDOR_ACTIVE: AtomicBool = AtomicBool::new(false);

/// Runs `f`, and `fallback` if it panics: no panic crosses the C boundary.
fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// This library's `dlopen` handle, pinned (`RTLD_NODELETE`): the driver keeps pointers to
/// its callbacks and wrappers, so it must never be unloaded.
fn self_handle() -> *mut c_void {
    static HANDLE: OnceLock<usize> = OnceLock::new();
    *HANDLE.get_or_init(|| {
        let mut info: libc::Dl_info = unsafe_zeroed_dl_info();
        // SAFETY: dladdr only reads the address and fills `info`.
        let found = unsafe { libc::dladdr(self_handle as *const c_void, &mut info) };
        if found == 0 || info.dli_fname.is_null() {
            return 0;
        }
        // SAFETY: `dli_fname` is a NUL-terminated path of a loaded object; RTLD_NOLOAD only
        // finds it (already loaded: it is this library) and RTLD_NODELETE pins it.
        unsafe {
            libc::dlopen(
                info.dli_fname,
                libc::RTLD_LAZY | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
            ) as usize
        }
    }) as *mut c_void
}

fn unsafe_zeroed_dl_info() -> libc::Dl_info {
    libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    }
}

/// The file of the object containing `addr`.
fn object_path(addr: *const c_void) -> Option<std::path::PathBuf> {
    let mut info = unsafe_zeroed_dl_info();
    // SAFETY: dladdr only reads the address and fills `info`.
    let found = unsafe { libc::dladdr(addr, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: a non-NULL `dli_fname` is a NUL-terminated path.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    use std::os::unix::ffi::OsStrExt;
    Some(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(
        name.to_bytes(),
    )))
}

/// Loads the first real vendor that is not this library and has `__egl_Main`.
fn load_real_vendor(p: &display::Process) -> Option<EglMainFn> {
    // SAFETY: these four calls have no preconditions.
    let trusted = unsafe { libc::getuid() == libc::geteuid() && libc::getgid() == libc::getegid() };
    let env = |k: &str| std::env::var(k).ok();
    let me = self_handle();
    for candidate in vendor::candidates(p.settings.vendor.as_deref(), &env, trusted) {
        let lib = candidate.library;
        let Ok(name) = std::ffi::CString::new(lib.clone()) else {
            continue;
        };
        // SAFETY: loading a GLVND vendor library, as GLVND itself does (RTLD_LAZY, local).
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY) };
        if handle.is_null() {
            continue;
        }
        if handle == me {
            // Ourselves (our own JSON file): balance the reference and go on.
            // SAFETY: `handle` came from the dlopen above.
            unsafe { libc::dlclose(handle) };
            continue;
        }
        // SAFETY: a live handle and a NUL-terminated name.
        let main = unsafe { libc::dlsym(handle, c"__egl_Main".as_ptr()) };
        // SAFETY: a vendor's `__egl_Main` has GLVND's `__PFNEGLMAINPROC` type.
        match unsafe { egl::cast::<EglMainFn>(main) } {
            Some(main) => {
                log(p, &format!("real vendor: {lib}"));
                HIDE_DEVICES.store(candidate.also_loaded_by_glvnd, Ordering::Relaxed);
                // Never closed: GLVND keeps the real vendor's functions.
                return Some(main);
            }
            None => {
                // SAFETY: `handle` came from the dlopen above and nothing of it is kept.
                unsafe { libc::dlclose(handle) };
            }
        }
    }
    log(p, "no real EGL vendor found");
    None
}

/// GLVND's entry point of a vendor library: loads the real vendor, lets it fill
/// `imports`, and replaces `imports->getProcAddress` with the drop-in's. Disabled (by
/// `GPUCACHE_DROPIN=0` or the config file), the real vendor's imports are handed over
/// unchanged. Returns `EGL_FALSE` (GLVND then skips this vendor) when no real vendor can
/// be loaded or it refuses.
///
/// # Safety
///
/// Called by GLVND with its exports, its vendor handle and a zeroed imports structure of
/// ABI major version 0, as `glvnd/libeglabi.h` specifies.
#[no_mangle]
pub unsafe extern "C" fn __egl_Main(
    version: u32,
    exports: *const c_void,
    vendor: *mut c_void,
    imports: *mut EglApiImports,
) -> EGLBoolean {
    guard(0, || {
        if imports.is_null() || version >> 16 != 0 {
            return 0;
        }
        let p = display::process();
        self_handle();
        let Some(real_main) = load_real_vendor(p) else {
            return 0;
        };
        // SAFETY: GLVND's arguments, passed on to the real vendor's entry point as GLVND
        // would have passed them.
        if unsafe { real_main(version, exports, vendor, imports) } == 0 {
            return 0;
        }
        // SAFETY: `imports` is GLVND's structure, just filled by the real vendor.
        let Some(gpa) = (unsafe { (*imports).get_proc_address }) else {
            return 1;
        };
        if !p.settings.enabled {
            return 1;
        }
        let library = object_path(real_main as *const c_void);
        let resolve = |name: &CStr| {
            // SAFETY: the real vendor's getProcAddress takes any NUL-terminated name.
            unsafe { gpa(name.as_ptr()) }
        };
        // SAFETY: the vendor's getProcAddress returns NULL or the named function, for
        // core and extension functions alike.
        let real = unsafe { Real::resolve(&resolve, &resolve, library) };
        let _ = VENDOR_GPA.set(gpa);
        let _ = VENDOR.set(real);
        // SAFETY: as above; GLVND reads the structure after this function returns.
        unsafe { (*imports).get_proc_address = Some(vendor_get_proc_address) };
        VENDOR_ACTIVE.store(true, Ordering::Release);
        1
    })
}

/// The vendor's `getProcAddress`: the wrappers for the three functions the drop-in
/// watches (where the real vendor has them), the real vendor's answer for every other.
///
/// # Safety
///
/// `name` is NULL or NUL-terminated (GLVND's contract).
unsafe extern "C" fn vendor_get_proc_address(name: *const c_char) -> *mut c_void {
    let Some(gpa) = VENDOR_GPA.get() else {
        return std::ptr::null_mut();
    };
    // SAFETY: forwarded as GLVND called it.
    let real = unsafe { gpa(name) };
    if real.is_null() || name.is_null() {
        return real;
    }
    // SAFETY: non-NULL and NUL-terminated (GLVND's contract).
    let name = unsafe { CStr::from_ptr(name) };
    if HIDE_DEVICES.load(Ordering::Relaxed) && name.to_bytes() == b"eglQueryDevicesEXT" {
        return std::ptr::null_mut();
    }
    guard(real, || wrapper_for(name.to_bytes()).unwrap_or(real))
}

/// The vendor's wrapper for one of the watched functions.
fn wrapper_for(name: &[u8]) -> Option<*mut c_void> {
    Some(match name {
        b"eglCreateContext" => vendor_create_context as *mut c_void,
        b"eglTerminate" => vendor_terminate as *mut c_void,
        b"eglSetBlobCacheFuncsANDROID" => vendor_set_blob_funcs as *mut c_void,
        _ => return None,
    })
}

/// The interposer's wrapper for one of the watched functions.
fn interposer_for(name: &[u8]) -> Option<*mut c_void> {
    Some(match name {
        b"eglCreateContext" => eglCreateContext as *mut c_void,
        b"eglTerminate" => eglTerminate as *mut c_void,
        b"eglSetBlobCacheFuncsANDROID" => eglSetBlobCacheFuncsANDROID as *mut c_void,
        _ => return None,
    })
}

/// The next definitions in the process, for the LD_PRELOAD interposer.
fn next() -> &'static Real {
    static NEXT: OnceLock<Real> = OnceLock::new();
    NEXT.get_or_init(|| {
        let next = |name: &CStr| {
            // SAFETY: RTLD_NEXT finds the definition after this library's; the name is
            // NUL-terminated.
            unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) }
        };
        // SAFETY: RTLD_NEXT's answer is NULL or the named function.
        let gpa: Option<GetProcAddressFn> = unsafe { egl::cast(next(c"eglGetProcAddress")) };
        let ext = |name: &CStr| match gpa {
            // SAFETY: eglGetProcAddress takes any NUL-terminated name.
            Some(gpa) => unsafe { gpa(name.as_ptr()) },
            None => std::ptr::null_mut(),
        };
        let library = object_path(next(c"eglQueryString") as *const c_void);
        // SAFETY: both resolvers return NULL or the named EGL function.
        unsafe { Real::resolve(&next, &ext, library) }
    })
}

/// Whether the interposer does the work itself: not when GLVND loaded this library as a
/// vendor too (the vendor's wrappers, behind the next definitions, do it).
fn interposer_works() -> bool {
    !VENDOR_ACTIVE.load(Ordering::Acquire)
}

/// `eglCreateContext` through `real`: with `work`, before a display's first context
/// gpucache is configured for it, after it the callbacks are installed. The context and
/// the error are the real function's.
///
/// # Safety
///
/// EGL's contract for `eglCreateContext`; `real` is the EGL that owns `dpy`.
unsafe fn create_context(
    real: &Real,
    work: bool,
    dpy: EGLDisplay,
    config: EGLConfig,
    share: EGLContext,
    attribs: *const EGLint,
) -> EGLContext {
    let Some(create) = real.create_context else {
        return std::ptr::null_mut();
    };
    let restore = if work {
        // SAFETY: `dpy` is the application's display of this EGL.
        guard(None, || unsafe {
            display::before_create_context(real, dpy)
        })
    } else {
        None
    };
    // SAFETY: forwarded unchanged.
    let ctx = unsafe { create(dpy, config, share, attribs) };
    if let Some(restore) = restore {
        guard((), || restore.restore());
    }
    if work && !ctx.is_null() {
        // SAFETY: as above; the context was just created.
        guard((), || unsafe { display::after_create_context(real, dpy) });
    }
    ctx
}

/// `eglTerminate` through `real`; with `work`, the display's state is forgotten after a
/// successful call.
///
/// # Safety
///
/// EGL's contract for `eglTerminate`.
unsafe fn terminate(real: &Real, work: bool, dpy: EGLDisplay) -> EGLBoolean {
    let Some(terminate) = real.terminate else {
        return 0;
    };
    // SAFETY: forwarded unchanged.
    let ok = unsafe { terminate(dpy) };
    if work && ok != 0 {
        guard((), || display::terminated(dpy));
    }
    ok
}

/// `eglSetBlobCacheFuncsANDROID` through `real`; with `work`, the application's
/// callbacks take precedence. Before gpucache installed its own on the display, the call
/// goes to the real EGL and gpucache stays out of the display; after, gpucache's
/// trampolines call the application's callbacks from then on (and a second install by the
/// application gets the real EGL's `EGL_BAD_PARAMETER`, as it would without gpucache).
///
/// # Safety
///
/// EGL's contract for `eglSetBlobCacheFuncsANDROID`.
unsafe fn set_blob_funcs(
    real: &Real,
    work: bool,
    dpy: EGLDisplay,
    set: Option<SetBlob>,
    get: Option<GetBlob>,
) {
    // SAFETY: `dpy` is the application's display of this EGL.
    let taken = work
        && guard(false, || unsafe {
            display::app_installs(real, dpy, set, get)
        });
    if !taken {
        if let Some(f) = real.set_blob_funcs {
            // SAFETY: forwarded unchanged.
            unsafe { f(dpy, set, get) };
        }
    }
}

/// The vendor's `eglCreateContext` (see [`create_context`]).
///
/// # Safety
///
/// EGL's contract for `eglCreateContext`.
unsafe extern "C" fn vendor_create_context(
    dpy: EGLDisplay,
    config: EGLConfig,
    share: EGLContext,
    attribs: *const EGLint,
) -> EGLContext {
    match VENDOR.get() {
        // SAFETY: the vendor owns the displays GLVND hands it.
        Some(real) => unsafe { create_context(real, true, dpy, config, share, attribs) },
        None => std::ptr::null_mut(),
    }
}

/// The vendor's `eglTerminate`.
///
/// # Safety
///
/// EGL's contract for `eglTerminate`.
unsafe extern "C" fn vendor_terminate(dpy: EGLDisplay) -> EGLBoolean {
    match VENDOR.get() {
        // SAFETY: forwarded under the same contract.
        Some(real) => unsafe { terminate(real, true, dpy) },
        None => 0,
    }
}

/// The vendor's `eglSetBlobCacheFuncsANDROID`.
///
/// # Safety
///
/// EGL's contract for `eglSetBlobCacheFuncsANDROID`.
unsafe extern "C" fn vendor_set_blob_funcs(
    dpy: EGLDisplay,
    set: Option<SetBlob>,
    get: Option<GetBlob>,
) {
    if let Some(real) = VENDOR.get() {
        // SAFETY: forwarded under the same contract.
        unsafe { set_blob_funcs(real, true, dpy, set, get) }
    }
}

/// `eglCreateContext`, interposed (LD_PRELOAD; see `create_context`).
///
/// # Safety
///
/// EGL's contract for `eglCreateContext`.
#[no_mangle]
pub unsafe extern "C" fn eglCreateContext(
    dpy: EGLDisplay,
    config: EGLConfig,
    share: EGLContext,
    attribs: *const EGLint,
) -> EGLContext {
    guard(std::ptr::null_mut(), || {
        // SAFETY: forwarded under the same contract to the next definition.
        unsafe { create_context(next(), interposer_works(), dpy, config, share, attribs) }
    })
}

/// `eglTerminate`, interposed (LD_PRELOAD).
///
/// # Safety
///
/// EGL's contract for `eglTerminate`.
#[no_mangle]
pub unsafe extern "C" fn eglTerminate(dpy: EGLDisplay) -> EGLBoolean {
    guard(0, || {
        // SAFETY: forwarded under the same contract to the next definition.
        unsafe { terminate(next(), interposer_works(), dpy) }
    })
}

/// `eglSetBlobCacheFuncsANDROID`, interposed (LD_PRELOAD).
///
/// # Safety
///
/// EGL's contract for `eglSetBlobCacheFuncsANDROID`.
#[no_mangle]
pub unsafe extern "C" fn eglSetBlobCacheFuncsANDROID(
    dpy: EGLDisplay,
    set: Option<SetBlob>,
    get: Option<GetBlob>,
) {
    guard((), || {
        // SAFETY: forwarded under the same contract to the next definition.
        unsafe { set_blob_funcs(next(), interposer_works(), dpy, set, get) }
    })
}

/// `eglGetProcAddress`, interposed (LD_PRELOAD): the interposer's wrappers for the watched
/// functions, the next definition's answer for every other.
///
/// # Safety
///
/// EGL's contract for `eglGetProcAddress`: `name` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn eglGetProcAddress(name: *const c_char) -> *mut c_void {
    let Some(gpa) = guard(None, || next().get_proc_address) else {
        return std::ptr::null_mut();
    };
    // SAFETY: forwarded unchanged.
    let found = unsafe { gpa(name) };
    if found.is_null() || name.is_null() || !interposer_works() {
        return found;
    }
    // SAFETY: non-NULL and NUL-terminated (EGL's contract).
    let n = unsafe { CStr::from_ptr(name) };
    guard(found, || interposer_for(n.to_bytes()).unwrap_or(found))
}
