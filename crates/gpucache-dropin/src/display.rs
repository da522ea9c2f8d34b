//! Per-display state: configuring gpucache before a display's first context, installing the
//! callbacks after it, giving the application's own install precedence, and forgetting a
//! terminated display.
//!
//! Each display that gets gpucache's callbacks gets its own pair of trampolines (a slot):
//! the callbacks carry no display, so the slot is what tells one display from another when
//! the application later installs callbacks of its own on it: from then on that slot's
//! trampolines call the application's functions instead of gpucache's.

use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use gpucache::egl::BlobCacheConfig;

use crate::config::Settings;
use crate::egl::{
    has_token, EGLDisplay, GetBlob, Real, SetBlob, EGL_EXTENSIONS, EGL_SUCCESS, EGL_VENDOR,
};
use crate::log;

/// What the process is: its executable's name and build id, and its settings.
pub struct Process {
    pub exe_name: String,
    pub build_id: Option<Vec<u8>>,
    pub settings: Settings,
}

/// The process's settings, read once.
pub fn process() -> &'static Process {
    static PROCESS: OnceLock<Process> = OnceLock::new();
    PROCESS.get_or_init(|| {
        let exe = std::fs::read_link("/proc/self/exe").ok();
        let exe_name = exe
            .as_ref()
            .and_then(|e| e.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "unknown".to_string());
        let build_id = exe.as_deref().and_then(crate::elf::build_id);
        // SAFETY: these four calls have no preconditions.
        let trusted =
            unsafe { libc::getuid() == libc::geteuid() && libc::getgid() == libc::getegid() };
        let env = |k: &str| std::env::var(k).ok();
        let (mut settings, warnings) = Settings::load(&env, &exe_name);
        if !trusted {
            // A setuid/setgid program: its environment is not its user's to trust (GLVND
            // ignores its variables too), and its cache would be written as another user.
            settings.enabled = false;
        }
        let p = Process {
            exe_name,
            build_id,
            settings,
        };
        for w in warnings {
            log(&p, &w);
        }
        p
    })
}

/// The number of displays that can have gpucache's callbacks at once.
const SLOTS: usize = 16;

/// The application's own callbacks, once it installed them over gpucache's.
struct AppFuncs {
    set: SetBlob,
    get: GetBlob,
}

struct Slot {
    /// The display the slot belongs to (0: free). A slot stays with its display for the
    /// life of the process: the driver may still hold its trampolines.
    display: AtomicUsize,
    /// The application's callbacks (leaked, never freed: a callback running on a driver
    /// thread may still read them), or NULL for gpucache's.
    app: AtomicPtr<AppFuncs>,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE_SLOT: Slot = Slot {
    display: AtomicUsize::new(0),
    app: AtomicPtr::new(ptr::null_mut()),
};
static SLOT: [Slot; SLOTS] = [FREE_SLOT; SLOTS];

/// Set in a child after `fork`: gpucache's threads did not survive, so its callbacks go
/// inert (sets ignored, gets miss); the application's own still work.
static FORKED: AtomicBool = AtomicBool::new(false);

fn slot_set(i: usize, key: *const c_void, ks: isize, value: *const c_void, vs: isize) {
    let app = SLOT[i].app.load(Ordering::Acquire);
    if !app.is_null() {
        // SAFETY: a non-NULL `app` is a leaked, never freed `AppFuncs`; its `set` is the
        // application's callback, called with the driver's own arguments.
        unsafe { ((*app).set)(key, ks, value, vs) };
        return;
    }
    if FORKED.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: the driver's arguments, under the extension's contract, which is this
    // function's.
    unsafe { gpucache_ffi::gpucache_egl_set(key, ks, value, vs) }
}

fn slot_get(i: usize, key: *const c_void, ks: isize, value: *mut c_void, vs: isize) -> isize {
    let app = SLOT[i].app.load(Ordering::Acquire);
    if !app.is_null() {
        // SAFETY: as in `slot_set`.
        return unsafe { ((*app).get)(key, ks, value, vs) };
    }
    if FORKED.load(Ordering::Relaxed) {
        return 0;
    }
    // SAFETY: the driver's arguments, under the extension's contract.
    unsafe { gpucache_ffi::gpucache_egl_get(key, ks, value, vs) }
}

macro_rules! trampolines {
    ($($i:literal)*) => {
        /// Each slot's `set` callback.
        static SET_FNS: [SetBlob; SLOTS] = [$({
            /// # Safety
            ///
            /// The `EGLSetBlobFuncANDROID` contract: `key` and `value` readable for their
            /// sizes.
            unsafe extern "C" fn set(k: *const c_void, ks: isize, v: *const c_void, vs: isize) {
                let _ = std::panic::catch_unwind(|| slot_set($i, k, ks, v, vs));
            }
            set
        }),*];
        /// Each slot's `get` callback.
        static GET_FNS: [GetBlob; SLOTS] = [$({
            /// # Safety
            ///
            /// The `EGLGetBlobFuncANDROID` contract: `key` readable and `value` writable
            /// for their sizes.
            unsafe extern "C" fn get(k: *const c_void, ks: isize, v: *mut c_void, vs: isize) -> isize {
                std::panic::catch_unwind(|| slot_get($i, k, ks, v, vs)).unwrap_or(0)
            }
            get
        }),*];
    };
}
trampolines!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);

/// Where a display stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing done yet (or terminated since).
    Fresh,
    /// gpucache is configured for it; the callbacks go in after its first context.
    Prepared,
    /// gpucache's callbacks are installed (the slot says whose functions they call).
    Installed(usize),
    /// The application installed its own callbacks first: everything is forwarded.
    App,
    /// Not for gpucache (no extension, another identity, a failure): forwarded.
    Aside,
}

struct Entry {
    display: usize,
    state: State,
}

/// The process-wide cache: configured once, for the first display's identity.
enum Global {
    Unconfigured,
    Configured { identity: Vec<u8>, dir: PathBuf },
    Failed,
}

struct Displays {
    entries: Vec<Entry>,
    global: Global,
}

static DISPLAYS: Mutex<Displays> = Mutex::new(Displays {
    entries: Vec::new(),
    global: Global::Unconfigured,
});

fn displays() -> MutexGuard<'static, Displays> {
    // A panic while holding the lock leaves consistent data (every change is one
    // assignment): keep going.
    DISPLAYS.lock().unwrap_or_else(|e| e.into_inner())
}

impl Displays {
    fn entry(&mut self, display: usize) -> &mut Entry {
        if let Some(i) = self.entries.iter().position(|e| e.display == display) {
            return &mut self.entries[i];
        }
        self.entries.push(Entry {
            display,
            state: State::Fresh,
        });
        self.entries.last_mut().expect("just pushed")
    }
}

/// Before the real `eglCreateContext`: on a display's first context, checks the display
/// and configures gpucache for it (and Mesa's own cache for the context-creation shaders:
/// the hybrid). Never fails: a display that cannot be served is set aside.
///
/// # Safety
///
/// `dpy` belongs to the EGL of `real`.
pub unsafe fn before_create_context(real: &Real, dpy: EGLDisplay) -> Option<EnvRestore> {
    let p = process();
    if !p.settings.enabled || dpy.is_null() {
        return None;
    }
    let started = std::time::Instant::now();
    let mut d = displays();
    if d.entry(dpy as usize).state != State::Fresh {
        return None;
    }
    // SAFETY: `dpy` belongs to `real`'s EGL (the caller's contract).
    let Some(extensions) = (unsafe { real.query(dpy, EGL_EXTENSIONS) }) else {
        // Not initialised: the real call fails too; try again next time.
        return None;
    };
    if !has_token(&extensions, b"EGL_ANDROID_blob_cache") {
        log(
            p,
            "the display does not advertise EGL_ANDROID_blob_cache: stepping aside",
        );
        d.entry(dpy as usize).state = State::Aside;
        return None;
    }
    // SAFETY: as above.
    let vendor = unsafe { real.query(dpy, EGL_VENDOR) }.unwrap_or_default();
    // SAFETY: as above.
    let identity = unsafe { crate::identity::of_display(real, dpy, &extensions, &vendor) };
    let mesa = vendor.windows(4).any(|w| w == b"Mesa");
    let ok = match &d.global {
        Global::Configured { identity: id, .. } => *id == identity,
        Global::Failed => false,
        Global::Unconfigured => {
            let result = configure(p, &identity, mesa);
            d.global = match result {
                Ok(dir) => {
                    log(
                        p,
                        &format!(
                            "cache in {} (identity and configuration: {:.2} ms)",
                            dir.display(),
                            started.elapsed().as_secs_f64() * 1e3
                        ),
                    );
                    Global::Configured {
                        identity: identity.clone(),
                        dir,
                    }
                }
                Err(e) => {
                    log(p, &format!("stepping aside: {e}"));
                    Global::Failed
                }
            };
            matches!(d.global, Global::Configured { .. })
        }
    };
    if !ok {
        log(
            p,
            "the display's identity is not the one the cache was configured for, or the \
             cache could not be configured: stepping aside",
        );
    }
    d.entry(dpy as usize).state = if ok { State::Prepared } else { State::Aside };
    if ok && mesa {
        hybrid(p)
    } else {
        None
    }
}

/// The variables the hybrid sets or removes (`gpucache_egl_mesa_context_cache`).
const HYBRID_VARS: [&str; 5] = [
    "MESA_SHADER_CACHE_DIR",
    "MESA_SHADER_CACHE_MAX_SIZE",
    "MESA_DISK_CACHE_DATABASE_NUM_PARTS",
    "MESA_GLSL_CACHE_DIR",
    "MESA_GLSL_CACHE_MAX_SIZE",
];

/// The environment as it was before the hybrid changed it, put back right after the real
/// `eglCreateContext` (Mesa has read it by then): the application and the processes it
/// starts see their own environment.
pub struct EnvRestore(Vec<(&'static str, Option<std::ffi::OsString>)>);

impl EnvRestore {
    /// Puts the variables back.
    pub fn restore(self) {
        for (name, value) in self.0 {
            match value {
                Some(v) => std::env::set_var(name, v),
                None => std::env::remove_var(name),
            }
        }
    }
}

/// The hybrid for a display's first context: Mesa's own cache pointed into gpucache's
/// directory for what context creation compiles, unless the environment already chooses
/// Mesa's cache directory (the user's choice is kept) or disables it.
fn hybrid(p: &Process) -> Option<EnvRestore> {
    if !p.settings.hybrid {
        return None;
    }
    let own = ["MESA_SHADER_CACHE_DIR", "MESA_GLSL_CACHE_DIR"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if own {
        log(
            p,
            "hybrid off: the environment chooses Mesa's cache directory",
        );
        return None;
    }
    let saved = EnvRestore(
        HYBRID_VARS
            .iter()
            .map(|&v| (v, std::env::var_os(v)))
            .collect(),
    );
    // SAFETY: it changes the environment (see docs/dropin.md, "The hybrid"), inside the
    // application's eglCreateContext call, and the caller puts it back right after.
    let rc =
        unsafe { gpucache_ffi::gpucache_egl_mesa_context_cache(p.settings.mesa_context_max_bytes) };
    if rc != gpucache_ffi::GPUCACHE_OK {
        log(
            p,
            "hybrid off: Mesa's cache is disabled or its folder cannot be made",
        );
        return None;
    }
    Some(saved)
}

/// Configures the process-global blob cache in this application's directory, for
/// `identity`.
fn configure(p: &Process, identity: &[u8], mesa: bool) -> Result<PathBuf, String> {
    let s = &p.settings;
    let dir = s
        .app_dir(&p.exe_name, p.build_id.as_deref())
        .ok_or("no cache directory (set GPUCACHE_DROPIN_DIR, XDG_CACHE_HOME or HOME)")?;
    let identity = identity.to_vec();
    // The identity's directory in the namespace.
    let cache_dir = gpucache::Cache::builder()
        .directory(&dir)
        .identity(identity.clone())
        .driver_versioned(true)
        .resolved_directory()
        .unwrap_or_else(|| dir.clone());
    // In use before it opens, so that no prune removes it meanwhile (`crate::prune`); the
    // fork handler first, which closes a child's copy of the lock.
    at_exit_and_fork();
    crate::upkeep::hold(&cache_dir);
    let opened = open_cache(p, &dir, &cache_dir, identity, mesa);
    if opened.is_err() {
        crate::upkeep::release();
    }
    opened
}

/// The rest of [`configure`]: opens the blob cache in the namespace `dir` (its identity's
/// directory `cache_dir`).
fn open_cache(
    p: &Process,
    dir: &Path,
    cache_dir: &Path,
    identity: Vec<u8>,
    mesa: bool,
) -> Result<PathBuf, String> {
    let max = p.settings.max_bytes;
    // The fleet tier (`docs/fleet.md`) when GPUCACHE_FLEET_URL names one; a fleet that cannot
    // be set up (no key file, a bad URL) is left out: the local cache still serves.
    let fleet = match gpucache_fleet::FleetBuilder::from_env(
        gpucache::Identity::new(identity.clone()).with_driver_versioned(true),
    ) {
        Ok(Some(b)) => {
            // Its counters beside the cache's files (the identity's subdirectory), where
            // `gpucache stats` finds them.
            match b.stats_directory(cache_dir.to_path_buf()).build() {
                Ok(tier) => Some(tier),
                Err(e) => {
                    log(p, &format!("fleet tier left out: {e}"));
                    None
                }
            }
        }
        Ok(None) => None,
        Err(e) => {
            log(p, &format!("fleet tier left out: GPUCACHE_FLEET_*: {e}"));
            None
        }
    };
    let config = BlobCacheConfig::new()
        .cache(|c| {
            let c = match fleet {
                Some(tier) => c.tier(tier),
                None => c,
            };
            let c = c
                .directory(dir)
                .identity(identity)
                .driver_versioned(true)
                .max_disk_bytes(max);
            // Mesa reads through a 64 KiB buffer: a larger value would never hit, so it is
            // not worth its bytes on disk.
            if mesa {
                c.max_value_size(64 << 10)
            } else {
                c
            }
        })
        .miss_on_oversize(mesa);
    gpucache::egl::configure(config).map_err(|e| format!("{}: {e}", dir.display()))?;
    let stats = gpucache::egl::stats().ok_or("the cache vanished")?;
    let usable = stats.cache.disk.as_ref().is_some_and(|d| d.available);
    if !usable {
        gpucache::egl::shutdown();
        return Err(format!(
            "{} cannot be used ({})",
            dir.display(),
            stats.cache.disk_error.as_deref().unwrap_or("not writable")
        ));
    }
    let resolved = gpucache::egl::current()
        .and_then(|c| c.cache().directory().map(|d| d.to_path_buf()))
        .unwrap_or_else(|| dir.to_path_buf());
    if !crate::upkeep::hold(&resolved) {
        log(p, "the cache is not marked in use: a prune may remove it");
    }
    crate::upkeep::prune_if_due(p, &resolved);
    Ok(resolved)
}

/// Registers, once, the exit handler that persists the cache and the fork handler that
/// makes a child's callbacks inert.
fn at_exit_and_fork() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        extern "C" fn at_exit() {
            // In a forked child the cache's locks may be held by threads that did not
            // survive the fork: only the process that configured it persists it.
            if !FORKED.load(Ordering::Relaxed) {
                let _ = std::panic::catch_unwind(|| {
                    crate::upkeep::at_exit();
                    let p = process();
                    if p.settings.log {
                        if let Some(s) = gpucache::egl::stats() {
                            log(
                                p,
                                &format!(
                                    "at exit: gets {} hits {} sets {} sets_dropped {}",
                                    s.gets, s.hits, s.sets, s.sets_dropped
                                ),
                            );
                        }
                    }
                    gpucache_ffi::gpucache_egl_shutdown_at_exit()
                });
            }
        }
        extern "C" fn in_child() {
            FORKED.store(true, Ordering::Relaxed);
            crate::upkeep::in_child();
        }
        // SAFETY: both handlers are plain functions of this library, which is never
        // unloaded (lib.rs pins it), and only store to atomics, close descriptors or call a
        // guarded Rust function.
        unsafe {
            libc::atexit(at_exit);
            libc::pthread_atfork(None, None, Some(in_child));
        }
    });
}

/// After a successful real `eglCreateContext`: installs gpucache's callbacks on a prepared
/// display, once.
///
/// # Safety
///
/// `dpy` belongs to the EGL of `real` and has just had a context created.
pub unsafe fn after_create_context(real: &Real, dpy: EGLDisplay) {
    let p = process();
    let mut d = displays();
    let entry = d.entry(dpy as usize);
    if entry.state != State::Prepared {
        return;
    }
    let Some(set_funcs) = real.set_blob_funcs else {
        entry.state = State::Aside;
        return;
    };
    let key = dpy as usize;
    // The display's slot from an earlier initialisation, else a free one.
    let slot = (0..SLOTS)
        .find(|&i| SLOT[i].display.load(Ordering::Relaxed) == key)
        .or_else(|| {
            (0..SLOTS).find(|&i| {
                SLOT[i]
                    .display
                    .compare_exchange(0, key, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })
        });
    let Some(slot) = slot else {
        log(p, "more displays than slots: stepping aside");
        entry.state = State::Aside;
        return;
    };
    SLOT[slot].app.store(ptr::null_mut(), Ordering::Release);
    real.take_error();
    // SAFETY: the display advertises EGL_ANDROID_blob_cache (checked before the context
    // was created); the trampolines have the extension's types and live as long as the
    // process.
    unsafe { set_funcs(dpy, Some(SET_FNS[slot]), Some(GET_FNS[slot])) };
    let error = real.take_error();
    if error == EGL_SUCCESS {
        entry.state = State::Installed(slot);
        // Context creation's reads are done and the driver's lookups come next: the cache's
        // preload starts now (the blob cache defers it to its first use).
        if let Some(cache) = gpucache::egl::current() {
            cache.cache().start_preload();
        }
        log(
            p,
            &format!("callbacks installed on display {dpy:p} (slot {slot})"),
        );
    } else {
        entry.state = State::Aside;
        log(
            p,
            &format!("eglSetBlobCacheFuncsANDROID failed (0x{error:04x}): stepping aside"),
        );
    }
}

/// The application's `eglSetBlobCacheFuncsANDROID`. Returns `true` when it was taken over
/// (gpucache's callbacks are installed on the display: from now on they call the
/// application's), `false` when the caller must forward it to the real function.
///
/// # Safety
///
/// `dpy` belongs to the EGL of `real`.
pub unsafe fn app_installs(
    real: &Real,
    dpy: EGLDisplay,
    set: Option<SetBlob>,
    get: Option<GetBlob>,
) -> bool {
    let mut d = displays();
    let entry = d.entry(dpy as usize);
    match (entry.state, set, get) {
        (State::Installed(slot), Some(set), Some(get))
            if SLOT[slot].app.load(Ordering::Acquire).is_null() =>
        {
            let app = Box::into_raw(Box::new(AppFuncs { set, get }));
            SLOT[slot].app.store(app, Ordering::Release);
            // The call succeeded, as it would have without gpucache.
            real.take_error();
            log(
                process(),
                "the application installed its own blob cache: its callbacks take over",
            );
            true
        }
        (State::Fresh | State::Prepared, Some(_), Some(_)) => {
            // First come: the application's. gpucache stays out of this display.
            entry.state = State::App;
            false
        }
        _ => false,
    }
}

/// After the real `eglTerminate`: the display starts over (EGL drops the callbacks on
/// terminate; a re-initialised display gets them again after its next first context).
pub fn terminated(dpy: EGLDisplay) {
    let mut d = displays();
    let entry = d.entry(dpy as usize);
    if let State::Installed(slot) = entry.state {
        SLOT[slot].app.store(ptr::null_mut(), Ordering::Release);
    }
    entry.state = State::Fresh;
}

/// The directory the cache was configured in, if it was (for the tests' diagnostics).
pub fn configured_dir() -> Option<PathBuf> {
    match &displays().global {
        Global::Configured { dir, .. } => Some(dir.clone()),
        _ => None,
    }
}
