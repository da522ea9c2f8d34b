//! The `EGL_ANDROID_blob_cache` callbacks over the process-global blob cache, and its
//! configuration, flush, shutdown and counters.

use std::ffi::{c_char, c_void, CStr};
use std::mem::size_of;
use std::path::PathBuf;
use std::ptr;

use gpucache::egl::{self as blob, BlobCacheConfig, BlobCacheStats};
use gpucache::DirAccess;

use crate::error::{ffi_call, ffi_quiet, Failure};

/// The size type of the blob-cache callbacks: Khronos's `khronos_ssize_t` (`signed long`
/// everywhere except 64-bit Windows, where it is `signed long long`; pointer-sized on every
/// platform gpucache supports).
pub type EGLsizeiANDROID = isize;

/// Settings of the process-global blob cache. Fill it with `gpucache_egl_config_init`, change
/// what you need, then pass it to `gpucache_egl_configure`.
///
/// ABI growth: later versions only append fields. Set `struct_size` to
/// `sizeof(gpucache_egl_config)` (`gpucache_egl_config_init` does); the library reads the
/// first `struct_size` bytes and gives every field beyond them its default, so a program
/// built against an older header keeps working with a newer library.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct gpucache_egl_config {
    /// `sizeof(gpucache_egl_config)` as the caller knows it.
    pub struct_size: usize,
    /// NUL-terminated directory that persists the cache (shared by every process that uses
    /// the same directory and identity), or NULL to keep it in memory only. Default NULL.
    pub directory: *const c_char,
    /// What the persisted entries depend on (driver vendor, renderer, version): a directory
    /// written for another identity is wiped. `identity_len` bytes; NULL when the length is 0.
    /// Default empty.
    pub identity: *const u8,
    /// Length of `identity` in bytes.
    pub identity_len: usize,
    /// Byte limit of the directory. Default 1 GiB.
    pub max_disk_bytes: u64,
    /// Memory budget: keys + values + 192 bytes per entry. Default 64 MiB.
    pub max_memory_bytes: u64,
    /// Entry budget of the memory tier. Default `UINT64_MAX` (unbounded).
    pub max_memory_entries: u64,
    /// Longest key stored; longer keys are dropped by `set` and miss in `get`. Default 4 KiB.
    pub max_key_size: u64,
    /// Largest value stored; larger values are dropped by `set` (and counted in
    /// `sets_dropped`) without being read. Default 4 MiB: above Android's 64 KiB, since
    /// drivers store whole program binaries; Mesa reads through a 64 KiB buffer, so for Mesa
    /// a larger value is stored but answered 0 (miss-on-oversize). A directory whose
    /// segments are smaller (`max_disk_bytes` under 32 MiB: a segment is an eighth of it)
    /// lowers it; `gpucache_egl_max_value_size` gives the limit in force.
    pub max_value_size: u64,
    /// Non-zero: `get` answers 0 (a miss) instead of the size when the value is larger than
    /// the caller's buffer. Default 0, the extension's behaviour; `gpucache_egl_install`
    /// turns it on for Mesa.
    pub miss_on_oversize: i32,
    /// Set to 0 (`gpucache_egl_config_init` does). A later version may give it a meaning
    /// whose 0 is today's behaviour.
    pub reserved: u32,
    /// Who may use the directories and files the cache creates: 0, private (directories
    /// 0700, files 0600, whatever the umask); 1, group (0770 and 0660, keeping the parent's
    /// setgid bit: a cache shared by a group on purpose). Other values are refused. Default
    /// 0. (Added in the second version of this structure.)
    pub dir_access: i32,
    /// Non-zero: use a directory owned by another user (not this process's effective user,
    /// nor root). Default 0: `gpucache_egl_configure` refuses such a directory with
    /// `GPUCACHE_ERROR_FOREIGN_OWNER`, since its owner can read the entries and plant code a
    /// driver loads. (Added in the second version of this structure.)
    pub allow_foreign_owner: i32,
    /// NUL-terminated URL of a fleet tier below the directory: `redis://host:port`,
    /// `rediss://host:port` (TLS, when built in), or `redis+cluster://h1:p1,h2:p2,...`
    /// (`docs/fleet.md`). NULL: the environment variable `GPUCACHE_FLEET_URL` if set, else
    /// no fleet. Default NULL. (Added in the third version of this structure.)
    pub fleet_url: *const c_char,
    /// NUL-terminated path of the fleet key file (owner-only, at least 32 bytes): every
    /// entry is signed and checked with it. NULL: `GPUCACHE_FLEET_KEY_FILE`. Required with a
    /// fleet. Default NULL. (Third version.)
    pub fleet_key_file: *const c_char,
    /// NUL-terminated path of the previous fleet key file, during a key rotation: entries it
    /// signed are still accepted. NULL: `GPUCACHE_FLEET_PREVIOUS_KEY_FILE`, if set. Default
    /// NULL. (Third version.)
    pub fleet_previous_key_file: *const c_char,
    /// Longest a `get` waits for the fleet, in microseconds; 0: the default, 2000 (2 ms),
    /// or `GPUCACHE_FLEET_READ_BUDGET_MS`. (Third version.)
    pub fleet_read_budget_us: u64,
}

/// The size of the first published `gpucache_egl_config` (up to `reserved`, padded); smaller
/// sizes are refused, and its callers get the later fields' defaults.
const CONFIG_SIZE_V1: usize = (std::mem::offset_of!(gpucache_egl_config, reserved)
    + size_of::<u32>())
.next_multiple_of(std::mem::align_of::<gpucache_egl_config>());

/// The size of the second version (up to `allow_foreign_owner`, padded).
const CONFIG_SIZE_V2: usize = (std::mem::offset_of!(gpucache_egl_config, allow_foreign_owner)
    + size_of::<i32>())
.next_multiple_of(std::mem::align_of::<gpucache_egl_config>());

/// The published sizes, oldest first: the library reads a caller's structure up to the
/// largest of these that its `struct_size` covers.
const CONFIG_SIZES: [usize; 3] = [
    CONFIG_SIZE_V1,
    CONFIG_SIZE_V2,
    size_of::<gpucache_egl_config>(),
];

impl Default for gpucache_egl_config {
    fn default() -> Self {
        Self {
            struct_size: size_of::<Self>(),
            directory: ptr::null(),
            identity: ptr::null(),
            identity_len: 0,
            max_disk_bytes: 1 << 30,
            max_memory_bytes: 64 << 20,
            max_memory_entries: u64::MAX,
            max_key_size: 4 << 10,
            max_value_size: 4 << 20,
            miss_on_oversize: 0,
            reserved: 0,
            dir_access: 0,
            allow_foreign_owner: 0,
            fleet_url: ptr::null(),
            fleet_key_file: ptr::null(),
            fleet_previous_key_file: ptr::null(),
            fleet_read_budget_us: 0,
        }
    }
}

/// Counters of the process-global blob cache, since it was configured. In C write
/// `struct gpucache_egl_stats`: the name is also the function's, like `struct stat`.
///
/// `gets = hits + misses + gets_buffer_too_small`: the hit rate seen by the driver is
/// `hits / gets` (`hits` counts only values copied into the driver's buffer). `sets` counts
/// every `set` call, dropped ones included: `sets - sets_dropped` values were stored. The
/// counts have the same names and meanings in the Rust API, the `blob-cache-stats` file and
/// `gpucache stats`. Calls made while cache control disables the driver-managed cache count
/// only in `calls_while_disabled`.
///
/// ABI growth: later versions only append fields. Set `struct_size` to
/// `sizeof(gpucache_egl_stats)` before the call; the library writes at most that many bytes
/// and sets `struct_size` to the number it wrote.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct gpucache_egl_stats {
    /// In: the size of the caller's structure. Out: the bytes written.
    pub struct_size: usize,
    /// `get` calls answered by the cache.
    pub gets: u64,
    /// `get` calls that copied a value into the caller's buffer.
    pub hits: u64,
    /// `get` calls that found no value (absent key, or a key longer than the limit).
    pub misses: u64,
    /// `get` calls that found a value larger than the caller's buffer (nothing copied; the
    /// answer was the size, or 0 with miss-on-oversize).
    pub gets_buffer_too_small: u64,
    /// `set` calls, dropped ones included.
    pub sets: u64,
    /// `set` calls dropped: key or value too large, or an empty value.
    pub sets_dropped: u64,
    /// `set` and `get` calls ignored while `gpucache_cache_control` disabled the
    /// driver-managed cache.
    pub calls_while_disabled: u64,
    /// Bytes held in memory now (keys + values + 192 bytes per entry).
    pub memory_bytes: u64,
    /// Entries held in memory now.
    pub memory_entries: u64,
    /// The memory byte budget.
    pub memory_max_bytes: u64,
    /// Entries evicted from memory to make room (including newcomers refused at the door).
    pub memory_evictions: u64,
    /// Bytes of the cache's files on disk; 0 without a directory.
    pub disk_bytes: u64,
    /// Live entries on disk; 0 without a directory.
    pub disk_entries: u64,
    /// Failed disk reads and writes (the cache keeps serving from memory).
    pub disk_errors: u64,
    /// 1 when a directory was configured and its disk tier takes writes now, else 0 (no
    /// directory, a read-only one, or the last write failed: a full disk).
    pub disk_available: i32,
    /// 1 when a value larger than the caller's buffer is answered with 0, else 0.
    pub miss_on_oversize: i32,
}

/// The size of the first published `gpucache_egl_stats`; smaller sizes are refused.
const STATS_SIZE_V1: usize = size_of::<gpucache_egl_stats>();

/// The `EGLSetBlobFuncANDROID` callback: stores a copy of the value for the key, best effort
/// (the newest value wins; a value that cannot be stored is dropped and counted).
///
/// Ignored when no cache is configured, after `gpucache_egl_shutdown`, and for a NULL `key`
/// or `value` or a negative size. A key over `max_key_size` or a value over
/// `gpucache_egl_max_value_size()` is dropped and counted without being read or copied,
/// whatever size is declared (`LONG_MAX` included). May be called from any thread at any
/// time.
///
/// # Safety
///
/// When non-NULL with a non-negative size within the limits, `key` and `value` must be
/// readable for `key_size` and `value_size` bytes for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn gpucache_egl_set(
    key: *const c_void,
    key_size: EGLsizeiANDROID,
    value: *const c_void,
    value_size: EGLsizeiANDROID,
) {
    ffi_quiet((), || {
        let Some(cache) = blob::current() else {
            return;
        };
        let (Ok(key_len), Ok(value_len)) = (usize::try_from(key_size), usize::try_from(value_size))
        else {
            return;
        };
        if key_len > cache.max_key_size() || value_len as u64 > cache.max_value_size() {
            // Refused from the sizes alone: a size no buffer has (`LONG_MAX`) is never read
            // or allocated for.
            if !key.is_null() && !value.is_null() {
                cache.set_refused();
            }
            return;
        }
        // SAFETY: the caller guarantees both regions are readable for their sizes when the
        // pointers are non-NULL and the sizes non-negative; `bytes` checks exactly that.
        let (key, value) = unsafe { (bytes(key, key_size), bytes(value, value_size)) };
        if let (Some(key), Some(value)) = (key, value) {
            cache.set(key, value);
        }
    });
}

/// The `EGLGetBlobFuncANDROID` callback: returns the size of the value stored for the key,
/// or 0 when there is none, and copies the value into `value` only when `value_size` is at
/// least that size (otherwise nothing is written). With miss-on-oversize on, a value that
/// does not fit is answered with 0.
///
/// `value` NULL with `value_size` 0 asks for the size only. A NULL `key`, a NULL `value`
/// with a non-zero size, or a negative size answer 0, as do calls when no cache is
/// configured and after `gpucache_egl_shutdown`. May be called from any thread at any time.
///
/// # Safety
///
/// When non-NULL with a non-negative size, `key` must be readable for `key_size` bytes and
/// `value` writable for `value_size` bytes for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn gpucache_egl_get(
    key: *const c_void,
    key_size: EGLsizeiANDROID,
    value: *mut c_void,
    value_size: EGLsizeiANDROID,
) -> EGLsizeiANDROID {
    ffi_quiet(0, || {
        // SAFETY: as for `gpucache_egl_set`, the caller guarantees `key` is readable for
        // `key_size` bytes when non-NULL with a non-negative size.
        let Some(key) = (unsafe { bytes(key, key_size) }) else {
            return 0;
        };
        let Ok(capacity) = usize::try_from(value_size) else {
            return 0;
        };
        let mut empty = [0u8; 0];
        let buf: &mut [u8] = if capacity == 0 {
            &mut empty
        } else if value.is_null() {
            return 0;
        } else {
            // SAFETY: `value` is non-NULL and the caller guarantees it is writable for
            // `value_size` (> 0, <= isize::MAX) bytes; gpucache only writes into it (a whole
            // value or nothing), so its previous contents, initialised or not, are never read.
            unsafe { std::slice::from_raw_parts_mut(value.cast::<u8>(), capacity) }
        };
        EGLsizeiANDROID::try_from(blob::get(key, buf)).unwrap_or(0)
    })
}

/// The bytes at `ptr`, or `None` for a NULL pointer or a negative size.
///
/// # Safety
///
/// A non-NULL `ptr` with a non-negative `len` must be readable for `len` bytes while the
/// returned slice lives.
unsafe fn bytes<'a>(ptr: *const c_void, len: EGLsizeiANDROID) -> Option<&'a [u8]> {
    let len = usize::try_from(len).ok()?;
    if ptr.is_null() {
        return None;
    }
    // SAFETY: non-NULL, `len` <= isize::MAX, and readable for `len` bytes per the contract.
    Some(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}

/// Fills `cfg` with the defaults (memory only, 64 MiB, values up to 4 MiB, keys up to
/// 4 KiB, miss-on-oversize off) and sets `struct_size`. NULL is ignored.
///
/// Set `cfg->struct_size = sizeof *cfg` first, or zero the structure: a `struct_size`
/// between the first version's size and this library's is kept and only that many bytes
/// are written; any other value is replaced by the first version's size.
///
/// # Safety
///
/// `cfg` is NULL or points to a writable `gpucache_egl_config` (its `struct_size` field
/// readable).
#[no_mangle]
pub unsafe extern "C" fn gpucache_egl_config_init(cfg: *mut gpucache_egl_config) {
    ffi_quiet((), || {
        if cfg.is_null() {
            return;
        }
        // SAFETY: `cfg` is non-NULL and points to a config whose leading `struct_size` is
        // readable (the caller's contract; every version starts with it).
        let given = unsafe { ptr::addr_of!((*cfg).struct_size).read() };
        let ours = size_of::<gpucache_egl_config>();
        let size = if (CONFIG_SIZE_V1..=ours).contains(&given) {
            given
        } else {
            CONFIG_SIZE_V1
        };
        let defaults = gpucache_egl_config {
            struct_size: size,
            ..Default::default()
        };
        // SAFETY: the caller's structure is at least `size` bytes (it is at least the first
        // version, or the caller told us its size); source and destination do not overlap.
        unsafe {
            ptr::copy_nonoverlapping(ptr::addr_of!(defaults).cast::<u8>(), cfg.cast::<u8>(), size);
        }
    });
}

/// Creates the process-global blob cache from `cfg` (NULL: the defaults, memory only),
/// replacing any previous one (whose pending entries are persisted first). With a
/// directory, values it holds from earlier runs are found at once; start-up reads only the
/// index, and values are loaded into memory in the background from `gpucache_egl_install`
/// on (or from the first get or set, where the callbacks are installed another way), not
/// while the driver creates its first context.
///
/// Returns `GPUCACHE_OK`, `GPUCACHE_ERROR_INVALID_ARGUMENT` (bad `struct_size`, a NULL
/// identity with a non-zero length, an identity over 64 KiB, a bad `dir_access`),
/// `GPUCACHE_ERROR_FOREIGN_OWNER` (the directory belongs to another user and
/// `allow_foreign_owner` is 0) or `GPUCACHE_ERROR_IO`. A directory that cannot be used
/// otherwise is not an error: the cache then serves from memory (see `disk_available` and
/// `disk_errors` in the stats).
///
/// # Safety
///
/// `cfg` is NULL or points to a readable `gpucache_egl_config` of `cfg->struct_size` bytes
/// whose `directory` is NULL or a NUL-terminated string and whose `identity` is readable for
/// `identity_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn gpucache_egl_configure(cfg: *const gpucache_egl_config) -> i32 {
    ffi_call("gpucache_egl_configure", || {
        let config = if cfg.is_null() {
            BlobCacheConfig::default()
        } else {
            // SAFETY: forwarded caller contract: `cfg` is a readable config of
            // `struct_size` bytes with valid `directory` and `identity` pointers.
            unsafe { to_rust_config(&read_config(cfg)?)? }
        };
        // Persist what the previous cache still holds before it is replaced.
        let _ = blob::flush();
        blob::configure(config)?;
        Ok(())
    })
}

/// The caller's config, with fields past its `struct_size` at their defaults.
///
/// # Safety
///
/// `cfg` is non-NULL and readable for its `struct_size` bytes.
unsafe fn read_config(cfg: *const gpucache_egl_config) -> Result<gpucache_egl_config, Failure> {
    // SAFETY: every version of the structure starts with a readable `struct_size`.
    let given = unsafe { ptr::addr_of!((*cfg).struct_size).read() };
    if given < CONFIG_SIZE_V1 {
        return Err(Failure::invalid(format!(
            "struct_size {given} is smaller than any gpucache_egl_config \
             (set it to sizeof(gpucache_egl_config))"
        )));
    }
    let mut config = gpucache_egl_config::default();
    // Whole versions only: the fields past the newest version the caller's size covers keep
    // their defaults.
    let n = CONFIG_SIZES
        .iter()
        .copied()
        .filter(|&v| v <= given)
        .max()
        .unwrap_or(CONFIG_SIZE_V1);
    // SAFETY: the caller's structure is readable for `given` >= `n` bytes, `config` is `n`
    // or more bytes, and they do not overlap. Every bit pattern is valid for its fields.
    unsafe {
        ptr::copy_nonoverlapping(cfg.cast::<u8>(), ptr::addr_of_mut!(config).cast::<u8>(), n);
    }
    Ok(config)
}

/// The core settings described by a C config.
///
/// # Safety
///
/// `cfg.directory` is NULL or NUL-terminated; `cfg.identity` is readable for
/// `cfg.identity_len` bytes when non-NULL.
unsafe fn to_rust_config(cfg: &gpucache_egl_config) -> Result<BlobCacheConfig, Failure> {
    let mut directory = None;
    if !cfg.directory.is_null() {
        // SAFETY: a non-NULL `directory` is NUL-terminated per the caller's contract.
        let dir = unsafe { CStr::from_ptr(cfg.directory) };
        if dir.is_empty() {
            return Err(Failure::invalid(
                "directory is an empty string (use NULL for memory only)",
            ));
        }
        directory = Some(path_from_c(dir));
    }
    let mut identity = Vec::new();
    if cfg.identity_len > 0 {
        if cfg.identity.is_null() {
            return Err(Failure::invalid(
                "identity is NULL but identity_len is not 0",
            ));
        }
        if cfg.identity_len > isize::MAX as usize {
            return Err(Failure::invalid("identity_len is too large"));
        }
        // SAFETY: non-NULL, length checked against isize::MAX, readable per the contract.
        identity = unsafe { std::slice::from_raw_parts(cfg.identity, cfg.identity_len) }.to_vec();
    }
    let access = match cfg.dir_access {
        0 => DirAccess::Private,
        1 => DirAccess::Group,
        other => {
            return Err(Failure::invalid(format!(
                "dir_access {other} is neither 0 (private) nor 1 (group)"
            )))
        }
    };
    // SAFETY: forwarded caller contract: the fleet strings are NULL or NUL-terminated.
    let fleet = unsafe { crate::fleet::tier(cfg, &identity, directory.as_deref()) }?;
    Ok(BlobCacheConfig::new()
        .cache(|c| {
            let c = match fleet {
                Some(tier) => c.tier(tier),
                None => c,
            };
            let c = c
                .max_disk_bytes(cfg.max_disk_bytes)
                .max_memory_bytes(cfg.max_memory_bytes)
                .max_memory_entries(cfg.max_memory_entries)
                .max_value_size(cfg.max_value_size)
                .dir_access(access)
                .allow_foreign_owner(cfg.allow_foreign_owner != 0);
            match directory {
                Some(dir) => c.directory(dir).identity(identity),
                None => c,
            }
        })
        .max_key_size(usize::try_from(cfg.max_key_size).unwrap_or(usize::MAX))
        .miss_on_oversize(cfg.miss_on_oversize != 0))
}

#[cfg(unix)]
pub(crate) fn path_from_c(s: &CStr) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(s.to_bytes()))
}

#[cfg(not(unix))]
pub(crate) fn path_from_c(s: &CStr) -> PathBuf {
    PathBuf::from(s.to_string_lossy().into_owned())
}

/// Writes the blob cache's pending entries to its directory and syncs them.
///
/// Returns `GPUCACHE_OK` (also for a memory-only cache), `GPUCACHE_ERROR_NOT_CONFIGURED`
/// or `GPUCACHE_ERROR_IO`.
///
/// # Safety
///
/// None needed: callable from any thread at any time.
#[no_mangle]
pub extern "C" fn gpucache_egl_flush() -> i32 {
    ffi_call("gpucache_egl_flush", || {
        require_configured()?;
        blob::flush()?;
        Ok(())
    })
}

/// The largest value `gpucache_egl_set` stores now: the configured `max_value_size` (4 MiB
/// by default), or less when the directory's segments are smaller. 0 when no cache is
/// configured.
///
/// # Safety
///
/// None needed: callable from any thread at any time.
#[no_mangle]
pub extern "C" fn gpucache_egl_max_value_size() -> u64 {
    ffi_quiet(0, || {
        blob::current().map_or(0, |cache| cache.max_value_size())
    })
}

/// Persists the blob cache's pending entries and drops the cache; from then on `set` is
/// ignored and `get` answers 0 until `gpucache_egl_configure` is called again.
///
/// Idempotent, and safe while other threads still call the callbacks (their calls finish
/// on the old cache or see no cache). Safe as an `atexit` handler:
/// `atexit(gpucache_egl_shutdown)` persists what a program stored even when it returns
/// from `main` without flushing (`gpucache_egl_shutdown_at_exit` does so without freeing
/// the cache's memory first).
///
/// # Safety
///
/// None needed: callable from any thread at any time.
#[no_mangle]
pub extern "C" fn gpucache_egl_shutdown() {
    ffi_quiet((), || {
        // Flush first: a callback running on another thread may hold the cache a moment
        // longer, and whatever was stored until now must not wait for it.
        let _ = blob::flush();
        blob::shutdown();
    });
}

/// `gpucache_egl_shutdown` for an `atexit` handler: persists the same way, but leaves the
/// cache's values in memory to the end of the process instead of freeing them (freeing them
/// would only delay the exit, about 0.2 ms per MB of values).
/// `atexit(gpucache_egl_shutdown_at_exit)` is the handler to register; never call it in a
/// process that goes on.
///
/// # Safety
///
/// None needed: callable from any thread at any time.
#[no_mangle]
pub extern "C" fn gpucache_egl_shutdown_at_exit() {
    ffi_quiet((), || {
        let _ = blob::flush();
        blob::shutdown_at_exit();
    });
}

/// Turns miss-on-oversize on (`on` non-zero) or off: with it on, `get` answers 0 instead
/// of the size when the value is larger than the caller's buffer. Mesa 25 needs it on
/// (`gpucache_egl_install` does that for Mesa).
///
/// Returns `GPUCACHE_OK` or `GPUCACHE_ERROR_NOT_CONFIGURED`.
///
/// # Safety
///
/// None needed: callable from any thread at any time.
#[no_mangle]
pub extern "C" fn gpucache_egl_set_miss_on_oversize(on: i32) -> i32 {
    ffi_call("gpucache_egl_set_miss_on_oversize", || {
        if blob::set_miss_on_oversize(on != 0) {
            Ok(())
        } else {
            Err(Failure::not_configured())
        }
    })
}

/// Fills `out` with the blob cache's counters (see `gpucache_egl_stats`). Set
/// `out->struct_size = sizeof *out` first.
///
/// Returns `GPUCACHE_OK`, `GPUCACHE_ERROR_INVALID_ARGUMENT` (NULL or a `struct_size` too
/// small) or `GPUCACHE_ERROR_NOT_CONFIGURED`.
///
/// # Safety
///
/// `out` is NULL or points to a writable structure of `out->struct_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn gpucache_egl_stats(out: *mut gpucache_egl_stats) -> i32 {
    ffi_call("gpucache_egl_stats", || {
        if out.is_null() {
            return Err(Failure::invalid("out is NULL"));
        }
        // SAFETY: `out` is non-NULL and its leading `struct_size` readable per the contract.
        let given = unsafe { ptr::addr_of!((*out).struct_size).read() };
        if given < STATS_SIZE_V1 {
            return Err(Failure::invalid(format!(
                "struct_size {given} is smaller than any gpucache_egl_stats \
                 (set it to sizeof(gpucache_egl_stats))"
            )));
        }
        let stats = blob::stats().ok_or_else(Failure::not_configured)?;
        let n = given.min(size_of::<gpucache_egl_stats>());
        let c = gpucache_egl_stats {
            struct_size: n,
            ..to_c_stats(&stats)
        };
        // SAFETY: the caller's structure is writable for `given` >= `n` bytes, `c` is at
        // least `n` bytes, and they do not overlap.
        unsafe { ptr::copy_nonoverlapping(ptr::addr_of!(c).cast::<u8>(), out.cast::<u8>(), n) };
        Ok(())
    })
}

fn to_c_stats(s: &BlobCacheStats) -> gpucache_egl_stats {
    let memory = &s.cache.memory;
    let disk = s.cache.disk.as_ref();
    gpucache_egl_stats {
        struct_size: size_of::<gpucache_egl_stats>(),
        gets: s.gets,
        hits: s.hits,
        misses: s.misses,
        gets_buffer_too_small: s.gets_buffer_too_small,
        sets: s.sets,
        sets_dropped: s.sets_dropped,
        calls_while_disabled: s.calls_while_disabled,
        memory_bytes: memory.bytes,
        memory_entries: memory.entries,
        memory_max_bytes: memory.max_bytes,
        memory_evictions: memory.evictions,
        disk_bytes: disk.map_or(0, |d| d.file_bytes),
        disk_entries: disk.map_or(0, |d| d.entries),
        // A directory that could not be opened at all counts as one error.
        disk_errors: disk.map_or(0, |d| d.read_errors + d.write_errors)
            + u64::from(s.cache.disk_error.is_some()),
        disk_available: i32::from(disk.is_some_and(|d| d.available)),
        miss_on_oversize: i32::from(blob::miss_on_oversize().unwrap_or(false)),
    }
}

/// `Ok` when a blob cache is configured, else the `NOT_CONFIGURED` failure.
pub(crate) fn require_configured() -> Result<(), Failure> {
    blob::miss_on_oversize()
        .map(|_| ())
        .ok_or_else(Failure::not_configured)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C defaults are the Rust defaults: both describe the same core settings.
    #[test]
    fn c_defaults_are_the_core_defaults() {
        let mut c = gpucache_egl_config {
            struct_size: 0,
            max_memory_bytes: 1,
            ..Default::default()
        };
        // SAFETY: `c` is a valid, writable config.
        unsafe { gpucache_egl_config_init(&mut c) };
        // A size of 0 is replaced by the first version's.
        assert_eq!(c.struct_size, CONFIG_SIZE_V1);
        // SAFETY: `c` has NULL directory and identity.
        let rust = unsafe { to_rust_config(&c) }.unwrap();
        assert_eq!(
            format!("{rust:?}"),
            format!("{:?}", BlobCacheConfig::default())
        );
    }

    #[test]
    fn layouts_are_the_documented_ones() {
        // 64-bit targets: the sizes C programs compiled against the header see.
        if size_of::<usize>() == 8 {
            assert_eq!(CONFIG_SIZE_V1, 80);
            assert_eq!(CONFIG_SIZE_V2, 88);
            assert_eq!(size_of::<gpucache_egl_config>(), 120);
            assert_eq!(size_of::<gpucache_egl_stats>(), 128);
        }
        assert_eq!(std::mem::offset_of!(gpucache_egl_config, struct_size), 0);
        assert_eq!(std::mem::offset_of!(gpucache_egl_stats, struct_size), 0);
    }
}
