//! The install helper: every refusal path, and a successful install, against a fake EGL
//! given through `gpucache_egl_install_with_loader`; then against the machine's real
//! libEGL when there is one (a display not initialised is refused; an initialised one is
//! installed on only if it advertises EGL_ANDROID_blob_cache — Mesa 22.3 does not, and
//! crashes if the entry point is called anyway).

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicUsize, Ordering};
use std::sync::Mutex;

use gpucache_ffi::*;

/// The blob cache and the fake EGL are process-global: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn last_error() -> String {
    // SAFETY: a NUL-terminated string valid until the next failing call on this thread.
    unsafe { CStr::from_ptr(gpucache_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

// ---- A fake EGL: what eglQueryString answers and what eglSetBlobCacheFuncsANDROID got.

const EGL_SUCCESS: i32 = 0x3000;
const EGL_BAD_PARAMETER: i32 = 0x300C;
const EGL_VENDOR: i32 = 0x3053;
const EGL_EXTENSIONS: i32 = 0x3055;

static EXTENSIONS: AtomicPtr<c_char> = AtomicPtr::new(std::ptr::null_mut());
static VENDOR: AtomicPtr<c_char> = AtomicPtr::new(std::ptr::null_mut());
static HAS_ENTRY_POINT: AtomicI32 = AtomicI32::new(1);
static INSTALLS: AtomicUsize = AtomicUsize::new(0);
static INSTALLED_ON: AtomicUsize = AtomicUsize::new(0);
static INSTALLED_SET: AtomicUsize = AtomicUsize::new(0);
static INSTALLED_GET: AtomicUsize = AtomicUsize::new(0);
static PENDING_ERROR: AtomicI32 = AtomicI32::new(EGL_SUCCESS);

type SetFn = unsafe extern "C" fn(*const c_void, EGLsizeiANDROID, *const c_void, EGLsizeiANDROID);
type GetFn = unsafe extern "C" fn(
    *const c_void,
    EGLsizeiANDROID,
    *mut c_void,
    EGLsizeiANDROID,
) -> EGLsizeiANDROID;

/// The fake `eglQueryString`: the configured extension list or vendor, else NULL.
///
/// # Safety
///
/// None needed: the display is never dereferenced.
extern "system" fn fake_query_string(_display: *mut c_void, name: i32) -> *const c_char {
    match name {
        EGL_EXTENSIONS => EXTENSIONS.load(Ordering::SeqCst),
        EGL_VENDOR => VENDOR.load(Ordering::SeqCst),
        _ => std::ptr::null(),
    }
}

/// The fake `eglGetError`: returns and clears the pending error.
///
/// # Safety
///
/// None needed.
extern "system" fn fake_get_error() -> i32 {
    PENDING_ERROR.swap(EGL_SUCCESS, Ordering::SeqCst)
}

/// The fake `eglSetBlobCacheFuncsANDROID`: records what it was given, once per display.
///
/// # Safety
///
/// None needed: the display is never dereferenced and the callbacks are only recorded.
extern "system" fn fake_set_blob_cache_funcs(display: *mut c_void, set: SetFn, get: GetFn) {
    // Like a real EGL: once per display.
    if INSTALLED_ON.load(Ordering::SeqCst) == display as usize {
        PENDING_ERROR.store(EGL_BAD_PARAMETER, Ordering::SeqCst);
        return;
    }
    INSTALLS.fetch_add(1, Ordering::SeqCst);
    INSTALLED_ON.store(display as usize, Ordering::SeqCst);
    INSTALLED_SET.store(set as usize, Ordering::SeqCst);
    INSTALLED_GET.store(get as usize, Ordering::SeqCst);
}

/// The fake `eglGetProcAddress`.
///
/// # Safety
///
/// `name` is a NUL-terminated string.
unsafe extern "C" fn fake_loader(name: *const c_char) -> *mut c_void {
    // SAFETY: the install helper passes NUL-terminated names.
    let name = unsafe { CStr::from_ptr(name) }.to_bytes();
    match name {
        b"eglQueryString" => fake_query_string as *mut c_void,
        b"eglGetError" => fake_get_error as *mut c_void,
        b"eglSetBlobCacheFuncsANDROID" if HAS_ENTRY_POINT.load(Ordering::SeqCst) != 0 => {
            fake_set_blob_cache_funcs as *mut c_void
        }
        _ => std::ptr::null_mut(),
    }
}

/// A loader that finds nothing.
///
/// # Safety
///
/// None needed: `name` is not read.
unsafe extern "C" fn empty_loader(_name: *const c_char) -> *mut c_void {
    std::ptr::null_mut()
}

fn fake_egl(extensions: Option<&'static CStr>, vendor: Option<&'static CStr>) {
    let ptr = |s: Option<&'static CStr>| s.map_or(std::ptr::null_mut(), |s| s.as_ptr().cast_mut());
    EXTENSIONS.store(ptr(extensions), Ordering::SeqCst);
    VENDOR.store(ptr(vendor), Ordering::SeqCst);
    HAS_ENTRY_POINT.store(1, Ordering::SeqCst);
    INSTALLS.store(0, Ordering::SeqCst);
    INSTALLED_ON.store(0, Ordering::SeqCst);
}

/// A display handle for the fake EGL: any non-NULL address.
fn fake_display(n: usize) -> *mut c_void {
    (0x1000 * n) as *mut c_void
}

fn install_fake(display: *mut c_void) -> i32 {
    // SAFETY: the fake loader returns the fake EGL's functions, which accept any display.
    unsafe { gpucache_egl_install_with_loader(display, Some(fake_loader)) }
}

fn configure() {
    // SAFETY: NULL asks for the defaults.
    let rc = unsafe { gpucache_egl_configure(std::ptr::null()) };
    assert_eq!(rc, GPUCACHE_OK);
}

#[test]
fn null_display_and_null_loader_are_invalid_arguments() {
    let _s = serial();
    configure();
    // SAFETY: NULL is EGL_NO_DISPLAY, refused before EGL is touched.
    let rc = unsafe { gpucache_egl_install(std::ptr::null_mut()) };
    assert_eq!(rc, GPUCACHE_ERROR_INVALID_ARGUMENT);
    assert!(last_error().contains("EGL_NO_DISPLAY"), "{}", last_error());
    assert_eq!(
        install_fake(std::ptr::null_mut()),
        GPUCACHE_ERROR_INVALID_ARGUMENT
    );
    // SAFETY: a NULL loader is refused before it could be called.
    let rc = unsafe { gpucache_egl_install_with_loader(fake_display(1), None) };
    assert_eq!(rc, GPUCACHE_ERROR_INVALID_ARGUMENT);
    gpucache_egl_shutdown();
}

#[test]
fn install_needs_a_configured_cache() {
    let _s = serial();
    fake_egl(Some(c"EGL_ANDROID_blob_cache"), Some(c"Mesa Project"));
    gpucache_egl_shutdown();
    assert_eq!(install_fake(fake_display(2)), GPUCACHE_ERROR_NOT_CONFIGURED);
    assert_eq!(INSTALLS.load(Ordering::SeqCst), 0);
}

#[test]
fn a_display_that_is_not_initialised_is_refused() {
    let _s = serial();
    configure();
    fake_egl(None, None); // eglQueryString answers NULL, as for EGL_NOT_INITIALIZED
    assert_eq!(
        install_fake(fake_display(3)),
        GPUCACHE_ERROR_INVALID_ARGUMENT
    );
    assert!(last_error().contains("not initialised"), "{}", last_error());
    assert_eq!(INSTALLS.load(Ordering::SeqCst), 0);
    gpucache_egl_shutdown();
}

#[test]
fn without_the_exact_extension_token_the_entry_point_is_never_called() {
    let _s = serial();
    configure();
    for list in [
        c"",
        c"EGL_KHR_image_base EGL_MESA_configless_context",
        c"EGL_ANDROID_blob_cache_v2 EGL_KHR_fence_sync",
        c"XEGL_ANDROID_blob_cache",
    ] {
        fake_egl(Some(list), Some(c"Mesa Project"));
        assert_eq!(
            install_fake(fake_display(4)),
            GPUCACHE_ERROR_UNSUPPORTED,
            "{list:?}"
        );
        assert_eq!(INSTALLS.load(Ordering::SeqCst), 0, "{list:?}");
    }
    assert_eq!(
        gpucache_ffi::gpucache_egl_set_miss_on_oversize(0),
        GPUCACHE_OK
    );
    // SAFETY: the empty loader finds nothing; the helper must not call through NULL.
    let rc = unsafe { gpucache_egl_install_with_loader(fake_display(4), Some(empty_loader)) };
    assert_eq!(rc, GPUCACHE_ERROR_UNSUPPORTED);
    // Advertised, but the loader has no entry point.
    fake_egl(Some(c"EGL_ANDROID_blob_cache"), None);
    HAS_ENTRY_POINT.store(0, Ordering::SeqCst);
    assert_eq!(install_fake(fake_display(4)), GPUCACHE_ERROR_UNSUPPORTED);
    gpucache_egl_shutdown();
}

#[test]
fn install_hands_the_callbacks_to_egl_and_recognises_mesa() {
    let _s = serial();
    configure();
    // Not Mesa: the extension's behaviour stays.
    fake_egl(
        Some(c"EGL_KHR_a EGL_ANDROID_blob_cache EGL_KHR_b"),
        Some(c"NVIDIA"),
    );
    assert_eq!(install_fake(fake_display(5)), GPUCACHE_OK);
    assert_eq!(INSTALLS.load(Ordering::SeqCst), 1);
    assert_eq!(
        INSTALLED_ON.load(Ordering::SeqCst),
        fake_display(5) as usize
    );
    assert_eq!(
        INSTALLED_SET.load(Ordering::SeqCst),
        gpucache_egl_set as SetFn as usize
    );
    assert_eq!(
        INSTALLED_GET.load(Ordering::SeqCst),
        gpucache_egl_get as GetFn as usize
    );
    let mut st = gpucache_egl_stats {
        struct_size: std::mem::size_of::<gpucache_egl_stats>(),
        ..Default::default()
    };
    // SAFETY: `st` is writable with its struct_size set.
    assert_eq!(unsafe { gpucache_egl_stats(&mut st) }, GPUCACHE_OK);
    assert_eq!(st.miss_on_oversize, 0);

    // Twice on one display: EGL says EGL_BAD_PARAMETER.
    assert_eq!(install_fake(fake_display(5)), GPUCACHE_ERROR_ALREADY_EXISTS);

    // Mesa: miss-on-oversize is turned on.
    fake_egl(Some(c"EGL_ANDROID_blob_cache"), Some(c"Mesa Project"));
    assert_eq!(install_fake(fake_display(6)), GPUCACHE_OK);
    // SAFETY: as above.
    assert_eq!(unsafe { gpucache_egl_stats(&mut st) }, GPUCACHE_OK);
    assert_eq!(st.miss_on_oversize, 1);

    // The driver calls what it was given.
    let set = INSTALLED_SET.load(Ordering::SeqCst);
    let get = INSTALLED_GET.load(Ordering::SeqCst);
    // SAFETY: these are the addresses of gpucache_egl_set and gpucache_egl_get (checked above).
    let (set, get) = unsafe {
        (
            std::mem::transmute::<usize, SetFn>(set),
            std::mem::transmute::<usize, GetFn>(get),
        )
    };
    let big = vec![7u8; 100 * 1024];
    let mut buf = vec![0u8; 64 * 1024];
    // SAFETY: every pointer is valid for its size.
    unsafe {
        set(b"k".as_ptr().cast(), 1, b"v".as_ptr().cast(), 1);
        assert_eq!(
            get(b"k".as_ptr().cast(), 1, buf.as_mut_ptr().cast(), 65536),
            1
        );
        set(
            b"big".as_ptr().cast(),
            3,
            big.as_ptr().cast(),
            big.len() as EGLsizeiANDROID,
        );
        assert_eq!(
            get(b"big".as_ptr().cast(), 3, buf.as_mut_ptr().cast(), 65536),
            0
        );
    }
    gpucache_egl_shutdown();
}

// ---- The machine's libEGL, when there is one.

type GetPlatformDisplay = unsafe extern "system" fn(u32, *mut c_void, *const isize) -> *mut c_void;
type Initialize = unsafe extern "system" fn(*mut c_void, *mut i32, *mut i32) -> u32;
type QueryString = unsafe extern "system" fn(*mut c_void, i32) -> *const c_char;
const EGL_PLATFORM_SURFACELESS_MESA: u32 = 0x31DD;
const EGL_NONE: isize = 0x3038;

fn sym(lib: *mut c_void, name: &CStr) -> *mut c_void {
    // SAFETY: `lib` is a live dlopen handle and `name` NUL-terminated.
    unsafe { libc::dlsym(lib, name.as_ptr()) }
}

#[test]
fn real_libegl_refuses_uninitialised_displays_and_displays_without_the_extension() {
    let _s = serial();
    // SAFETY: loading the system's libEGL runs only its initialisers; never closed.
    let lib = unsafe { libc::dlopen(c"libEGL.so.1".as_ptr(), libc::RTLD_NOW) };
    if lib.is_null() {
        eprintln!("note: no libEGL.so.1 on this machine; real-EGL checks skipped");
        return;
    }
    let (gpd, init, query) = (
        sym(lib, c"eglGetPlatformDisplay"),
        sym(lib, c"eglInitialize"),
        sym(lib, c"eglQueryString"),
    );
    if [gpd, init, query].iter().any(|p| p.is_null()) {
        eprintln!("note: libEGL.so.1 lacks EGL 1.5 entry points; real-EGL checks skipped");
        return;
    }
    // SAFETY: non-NULL addresses of these EGL 1.5 functions, whose types these are.
    let (gpd, init, query) = unsafe {
        (
            std::mem::transmute::<*mut c_void, GetPlatformDisplay>(gpd),
            std::mem::transmute::<*mut c_void, Initialize>(init),
            std::mem::transmute::<*mut c_void, QueryString>(query),
        )
    };
    let attribs = [EGL_NONE];
    // SAFETY: a valid platform, the default native display, an EGL_NONE-terminated list.
    let display = unsafe {
        gpd(
            EGL_PLATFORM_SURFACELESS_MESA,
            std::ptr::null_mut(),
            attribs.as_ptr(),
        )
    };
    if display.is_null() {
        eprintln!("note: no surfaceless EGL platform here; real-EGL checks skipped");
        return;
    }
    configure();
    // SAFETY: `display` is a display of the libEGL the helper finds.
    let rc = unsafe { gpucache_egl_install(display) };
    assert_eq!(rc, GPUCACHE_ERROR_INVALID_ARGUMENT);
    assert!(last_error().contains("not initialised"), "{}", last_error());

    let (mut major, mut minor) = (0, 0);
    // SAFETY: `display` is valid; the out-pointers are writable.
    if unsafe { init(display, &mut major, &mut minor) } == 0 {
        eprintln!("note: eglInitialize failed on the surfaceless platform; rest skipped");
        gpucache_egl_shutdown();
        return;
    }
    // SAFETY: an initialised display; a non-NULL answer is a static NUL-terminated string.
    let extensions = unsafe { CStr::from_ptr(query(display, EGL_EXTENSIONS)) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: as above.
    let vendor = unsafe { CStr::from_ptr(query(display, EGL_VENDOR)) }
        .to_string_lossy()
        .into_owned();
    let advertised = extensions.split(' ').any(|t| t == "EGL_ANDROID_blob_cache");
    // SAFETY: `display` is an initialised display of the libEGL the helper finds.
    let rc = unsafe { gpucache_egl_install(display) };
    eprintln!("EGL {major}.{minor}, vendor {vendor:?}, blob cache advertised: {advertised}, install: {rc}");
    if advertised {
        assert_eq!(rc, GPUCACHE_OK, "{}", last_error());
        if vendor.contains("Mesa") {
            let mut st = gpucache_egl_stats {
                struct_size: std::mem::size_of::<gpucache_egl_stats>(),
                ..Default::default()
            };
            // SAFETY: `st` is writable with its struct_size set.
            assert_eq!(unsafe { gpucache_egl_stats(&mut st) }, GPUCACHE_OK);
            assert_eq!(st.miss_on_oversize, 1);
        }
    } else {
        // Mesa 22.3: exported but not advertised, and calling it would crash.
        assert_eq!(rc, GPUCACHE_ERROR_UNSUPPORTED, "{}", last_error());
    }
    // Not terminated: Mesa unloads its driver in eglTerminate and leaves a block allocated
    // by it, which LeakSanitizer reports (scripts/sanitize). The process ends soon anyway.
    gpucache_egl_shutdown();
}

/// The blob cache's preload waits for the install (the driver's context creation reads its
/// own files meanwhile), and the install starts it.
#[test]
fn the_preload_starts_at_the_install() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = std::ffi::CString::new(dir.path().to_str().unwrap()).unwrap();
    let configure_dir = || {
        let mut config = gpucache_egl_config {
            struct_size: std::mem::size_of::<gpucache_egl_config>(),
            ..Default::default()
        };
        // SAFETY: `config` is writable with its struct_size set.
        unsafe { gpucache_egl_config_init(&mut config) };
        config.directory = path.as_ptr();
        // SAFETY: `config` is initialised and `path` outlives the call.
        assert_eq!(unsafe { gpucache_egl_configure(&config) }, GPUCACHE_OK);
    };
    configure_dir();
    for i in 0..20u32 {
        gpucache::egl::set(&i.to_le_bytes(), &[i as u8; 300]);
    }
    gpucache_egl_shutdown();
    configure_dir();
    let preloaded = || gpucache::egl::current().unwrap().cache().stats().preloaded;
    // Time enough for a preload started by the open to read 6 KB.
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(preloaded(), 0, "the preload started before the install");
    fake_egl(Some(c"EGL_ANDROID_blob_cache"), Some(c"Mesa Project"));
    assert_eq!(install_fake(fake_display(9)), GPUCACHE_OK);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while preloaded() < 20 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert_eq!(preloaded(), 20, "the install did not start the preload");
    gpucache_egl_shutdown();
}
