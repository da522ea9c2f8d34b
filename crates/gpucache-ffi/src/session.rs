//! D3D12-style cache sessions (`ID3D12ShaderCacheSession`) and cache control.

use std::ffi::c_void;
use std::ptr;

use gpucache::session::{CacheMode, Session, SessionDesc, SessionFlags, SessionRegistry};
use gpucache::{CacheControl, CacheKinds};

use crate::error::{ffi_call, ffi_quiet, Failure};

/// `D3D12_SHADER_CACHE_MODE_MEMORY`: no backing files; the entries are gone once the last
/// session of the cache closes. Value `0`.
pub const GPUCACHE_MODE_MEMORY: u32 = 0;
/// `D3D12_SHADER_CACHE_MODE_DISK`: backed by files that persist from run to run, under
/// `$GPUCACHE_DIR` (else `$XDG_CACHE_HOME/gpucache`, else `~/.cache/gpucache`). Value `1`.
pub const GPUCACHE_MODE_DISK: u32 = 1;

/// `D3D12_SHADER_CACHE_FLAG_NONE`. Value `0`.
pub const GPUCACHE_FLAG_NONE: u32 = 0;
/// `D3D12_SHADER_CACHE_FLAG_DRIVER_VERSIONED`: versioned by the driver as well as by
/// `version`. Value `0x1`.
pub const GPUCACHE_FLAG_DRIVER_VERSIONED: u32 = 0x1;
/// `D3D12_SHADER_CACHE_FLAG_USE_WORKING_DIR`: a disk cache lives in the current working
/// directory. Value `0x2`.
pub const GPUCACHE_FLAG_USE_WORKING_DIR: u32 = 0x2;

/// `D3D12_SHADER_CACHE_KIND_FLAG_IMPLICIT_D3D_CACHE_FOR_DRIVER` (gpucache has none; accepted).
/// Value `0x1`.
pub const GPUCACHE_KIND_IMPLICIT_D3D_CACHE_FOR_DRIVER: u32 = 0x1;
/// `D3D12_SHADER_CACHE_KIND_FLAG_IMPLICIT_D3D_CONVERSIONS` (gpucache has none; accepted).
/// Value `0x2`.
pub const GPUCACHE_KIND_IMPLICIT_D3D_CONVERSIONS: u32 = 0x2;
/// `D3D12_SHADER_CACHE_KIND_FLAG_IMPLICIT_DRIVER_MANAGED`: the EGL blob cache.
/// Value `0x4`.
pub const GPUCACHE_KIND_IMPLICIT_DRIVER_MANAGED: u32 = 0x4;
/// `D3D12_SHADER_CACHE_KIND_FLAG_APPLICATION_MANAGED`: every cache opened through sessions.
/// Value `0x8`.
pub const GPUCACHE_KIND_APPLICATION_MANAGED: u32 = 0x8;

/// `D3D12_SHADER_CACHE_SUPPORT_SINGLE_PSO`: single blobs stored and found by the
/// application (sessions); always set. Value `0x1`.
pub const GPUCACHE_SHADER_CACHE_SUPPORT_SINGLE_PSO: u32 = 0x1;
/// `D3D12_SHADER_CACHE_SUPPORT_LIBRARY`: pipeline libraries; gpucache has none, never set.
/// Value `0x2`.
pub const GPUCACHE_SHADER_CACHE_SUPPORT_LIBRARY: u32 = 0x2;
/// `D3D12_SHADER_CACHE_SUPPORT_AUTOMATIC_INPROC_CACHE`: the driver's compilations are cached
/// in this process (the EGL blob cache is configured). Value `0x4`.
pub const GPUCACHE_SHADER_CACHE_SUPPORT_AUTOMATIC_INPROC_CACHE: u32 = 0x4;
/// `D3D12_SHADER_CACHE_SUPPORT_AUTOMATIC_DISK_CACHE`: ... and on disk (it has a directory).
/// Value `0x8`.
pub const GPUCACHE_SHADER_CACHE_SUPPORT_AUTOMATIC_DISK_CACHE: u32 = 0x8;
/// `D3D12_SHADER_CACHE_SUPPORT_DRIVER_MANAGED_CACHE`: a driver-managed cache (the EGL blob
/// cache) is present and `GPUCACHE_KIND_IMPLICIT_DRIVER_MANAGED` control reaches it.
/// Value `0x10`.
pub const GPUCACHE_SHADER_CACHE_SUPPORT_DRIVER_MANAGED_CACHE: u32 = 0x10;

/// `D3D12_SHADER_CACHE_CONTROL_FLAG_DISABLE`. Value `0x1`.
pub const GPUCACHE_CONTROL_DISABLE: u32 = 0x1;
/// `D3D12_SHADER_CACHE_CONTROL_FLAG_ENABLE`. Value `0x2`.
pub const GPUCACHE_CONTROL_ENABLE: u32 = 0x2;
/// `D3D12_SHADER_CACHE_CONTROL_FLAG_CLEAR`. Value `0x4`.
pub const GPUCACHE_CONTROL_CLEAR: u32 = 0x4;

/// An open session (`ID3D12ShaderCacheSession`). Opaque; close it with
/// `gpucache_session_close`. A session may be used from several threads at once, but must
/// not be closed while another thread uses it.
#[allow(non_camel_case_types)]
pub struct gpucache_session {
    session: Session,
}

/// The description a session is opened with (`D3D12_SHADER_CACHE_SESSION_DESC`). Zero
/// limits mean D3D12's defaults (1 KiB, 128 entries, 128 MiB).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct gpucache_session_desc {
    /// Names the cache: sessions with equal identifiers in one process share one cache.
    pub identifier: [u8; 16],
    /// `GPUCACHE_MODE_MEMORY` or `GPUCACHE_MODE_DISK`.
    pub mode: u32,
    /// `GPUCACHE_FLAG_*` bits.
    pub flags: u32,
    /// Byte budget of the in-memory cache (keys + values + 192 bytes per entry).
    pub max_in_memory_bytes: u32,
    /// Entry budget of the in-memory cache.
    pub max_in_memory_entries: u32,
    /// Byte limit of a disk cache's files; a store past it is `GPUCACHE_ERROR_CACHE_FULL`.
    pub max_value_file_bytes: u32,
    /// Set to 0; ignored.
    pub reserved: u32,
    /// Opening a cache with another version wipes it (when no other session has it open).
    pub version: u64,
}

/// Opens a session on the cache named by `desc->identifier`, creating it if needed, and
/// stores the handle in `*out` (NULL on failure).
///
/// Returns `GPUCACHE_OK`; `GPUCACHE_ERROR_INVALID_ARGUMENT` (NULL pointer, unknown mode or
/// flag, the identifier open in the other mode); `GPUCACHE_ERROR_ALREADY_EXISTS` (open with
/// another version); `GPUCACHE_ERROR_NOT_CURRENTLY_AVAILABLE` (application-managed caches
/// disabled); `GPUCACHE_ERROR_IO`.
///
/// # Safety
///
/// `desc` is NULL or points to a readable `gpucache_session_desc`; `out` is NULL or points
/// to a writable pointer.
#[no_mangle]
pub unsafe extern "C" fn gpucache_session_open(
    desc: *const gpucache_session_desc,
    out: *mut *mut gpucache_session,
) -> i32 {
    ffi_call("gpucache_session_open", || {
        if out.is_null() {
            return Err(Failure::invalid("out is NULL"));
        }
        // SAFETY: `out` is non-NULL and writable per the contract.
        unsafe { out.write(ptr::null_mut()) };
        if desc.is_null() {
            return Err(Failure::invalid("desc is NULL"));
        }
        // SAFETY: `desc` is non-NULL and readable per the contract; any bits are valid.
        let desc = unsafe { desc.read() };
        let session = SessionRegistry::global().open(to_rust_desc(&desc)?)?;
        let handle = Box::into_raw(Box::new(gpucache_session { session }));
        // SAFETY: as above.
        unsafe { out.write(handle) };
        Ok(())
    })
}

fn to_rust_desc(d: &gpucache_session_desc) -> Result<SessionDesc, Failure> {
    let mode = match d.mode {
        GPUCACHE_MODE_MEMORY => CacheMode::Memory,
        GPUCACHE_MODE_DISK => CacheMode::Disk,
        other => return Err(Failure::invalid(format!("unknown mode {other}"))),
    };
    let flags = SessionFlags::from_bits(d.flags)
        .ok_or_else(|| Failure::invalid(format!("unknown flag bits 0x{:x}", d.flags)))?;
    Ok(SessionDesc::new(d.identifier)
        .mode(mode)
        .flags(flags)
        .max_in_memory_bytes(d.max_in_memory_bytes)
        .max_in_memory_entries(d.max_in_memory_entries)
        .max_value_file_bytes(d.max_value_file_bytes)
        .version(d.version))
}

/// The session behind a handle.
///
/// # Safety
///
/// `s` is NULL or a handle from `gpucache_session_open` not yet closed.
unsafe fn session<'a>(s: *const gpucache_session) -> Result<&'a Session, Failure> {
    // SAFETY: a non-NULL handle points to a live `gpucache_session` per the contract.
    unsafe { s.as_ref() }
        .map(|s| &s.session)
        .ok_or_else(|| Failure::invalid("session is NULL"))
}

/// The bytes at `ptr`, refusing NULL and sizes no allocation can have.
///
/// # Safety
///
/// A non-NULL `ptr` is readable for `len` bytes while the slice lives.
unsafe fn input<'a>(ptr: *const c_void, len: usize, what: &str) -> Result<&'a [u8], Failure> {
    if ptr.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    if len > isize::MAX as usize {
        return Err(Failure::invalid(format!("{what} size is too large")));
    }
    // SAFETY: non-NULL, `len` <= isize::MAX, readable per the contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}

/// Looks up the entry whose key equals the `key_size` bytes at `key` (`FindValue`).
///
/// With `value` NULL, writes the value's size to `*value_size`. Otherwise copies the value
/// into `value` if `*value_size` is at least its size and writes the size to `*value_size`;
/// if the buffer is smaller, writes nothing to it, sets `*value_size` to the size needed
/// and returns `GPUCACHE_ERROR_BUFFER_TOO_SMALL`.
///
/// Returns `GPUCACHE_OK`, `GPUCACHE_ERROR_NOT_FOUND`, `GPUCACHE_ERROR_HASH_COLLISION`,
/// `GPUCACHE_ERROR_BUFFER_TOO_SMALL`, `GPUCACHE_ERROR_NOT_CURRENTLY_AVAILABLE` or
/// `GPUCACHE_ERROR_INVALID_ARGUMENT` (NULL `s`, `key` or `value_size`).
///
/// # Safety
///
/// `s` is NULL or an open session; `key` is NULL or readable for `key_size` bytes;
/// `value_size` is NULL or points to a readable and writable `size_t`; a non-NULL `value` is
/// writable for `*value_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn gpucache_session_find(
    s: *const gpucache_session,
    key: *const c_void,
    key_size: usize,
    value: *mut c_void,
    value_size: *mut usize,
) -> i32 {
    ffi_call("gpucache_session_find", || {
        // SAFETY: forwarded caller contract for `s` and `key`.
        let (session, key) = unsafe { (session(s)?, input(key, key_size, "key")?) };
        if value_size.is_null() {
            return Err(Failure::invalid("value_size is NULL"));
        }
        // SAFETY: `value_size` is non-NULL and readable per the contract.
        let capacity = unsafe { value_size.read() };
        let found = if value.is_null() {
            session.find_size(key)
        } else if capacity > isize::MAX as usize {
            return Err(Failure::invalid("*value_size is too large"));
        } else {
            // SAFETY: `value` is non-NULL and writable for `capacity` (<= isize::MAX) bytes
            // per the contract; gpucache writes a whole value or nothing and never reads it.
            let buf = unsafe { std::slice::from_raw_parts_mut(value.cast::<u8>(), capacity) };
            session.find_into(key, buf)
        };
        let size = match found {
            Ok(size) => size,
            Err(e) => {
                if let gpucache::Error::BufferTooSmall { needed, .. } = e {
                    let needed = usize::try_from(needed).unwrap_or(usize::MAX);
                    // SAFETY: `value_size` is non-NULL and writable per the contract.
                    unsafe { value_size.write(needed) };
                }
                return Err(e.into());
            }
        };
        // SAFETY: as above.
        unsafe { value_size.write(size) };
        Ok(())
    })
}

/// Adds an entry (`StoreValue`); never replaces one.
///
/// A value over `gpucache_session_max_value_size` is `GPUCACHE_ERROR_CACHE_FULL` and is
/// neither read nor copied, whatever size is declared (`LONG_MAX` included; a size over
/// `SSIZE_MAX` is `GPUCACHE_ERROR_INVALID_ARGUMENT`); so is a value for which the cache has
/// no room left, counting stores not yet written to its files.
///
/// Returns `GPUCACHE_OK`, `GPUCACHE_ERROR_ALREADY_EXISTS`, `GPUCACHE_ERROR_HASH_COLLISION`,
/// `GPUCACHE_ERROR_CACHE_FULL`, `GPUCACHE_ERROR_NOT_CURRENTLY_AVAILABLE` or
/// `GPUCACHE_ERROR_INVALID_ARGUMENT` (NULL `s`, `key` or `value`).
///
/// # Safety
///
/// `s` is NULL or an open session; `key` and `value` are NULL or readable for `key_size`
/// and `value_size` bytes (`value` only when `value_size` is within the limit).
#[no_mangle]
pub unsafe extern "C" fn gpucache_session_store(
    s: *const gpucache_session,
    key: *const c_void,
    key_size: usize,
    value: *const c_void,
    value_size: usize,
) -> i32 {
    ffi_call("gpucache_session_store", || {
        // SAFETY: forwarded caller contract for `s` and `key`.
        let (session, key) = unsafe { (session(s)?, input(key, key_size, "key")?) };
        if value.is_null() {
            return Err(Failure::invalid("value is NULL"));
        }
        if value_size > isize::MAX as usize {
            return Err(Failure::invalid("value size is too large"));
        }
        let limit = session.max_value_size();
        if value_size as u64 > limit {
            // Checked before the bytes are touched: a declared size no buffer has is refused,
            // never read or allocated for.
            return Err(gpucache::Error::CacheFull {
                needed: value_size as u64,
                available: limit,
            }
            .into());
        }
        // SAFETY: forwarded caller contract for `value` (its size is within the limit).
        let value = unsafe { input(value, value_size, "value")? };
        let mut copy = Vec::new();
        if copy.try_reserve_exact(value.len()).is_err() {
            return Err(gpucache::Error::CacheFull {
                needed: value_size as u64,
                available: 0,
            }
            .into());
        }
        copy.extend_from_slice(value);
        session.store(key, copy)?;
        Ok(())
    })
}

/// Writes the largest value `gpucache_session_store` accepts to `*out`. A memory cache:
/// what fits in `max_in_memory_bytes` with one entry's 192-byte overhead (the key counts
/// too). A disk cache: what one segment of its files holds (an eighth of
/// `max_value_file_bytes`, at least 64 KiB in all, less 56 bytes of headers and the key).
/// A smaller value is still `GPUCACHE_ERROR_CACHE_FULL` when the cache has no room left.
///
/// Returns `GPUCACHE_OK` or `GPUCACHE_ERROR_INVALID_ARGUMENT` (NULL pointer).
///
/// # Safety
///
/// `s` is NULL or an open session; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn gpucache_session_max_value_size(
    s: *const gpucache_session,
    out: *mut u64,
) -> i32 {
    ffi_call("gpucache_session_max_value_size", || {
        // SAFETY: forwarded caller contract.
        let limit = unsafe { session(s) }?.max_value_size();
        if out.is_null() {
            return Err(Failure::invalid("out is NULL"));
        }
        // SAFETY: `out` is non-NULL and writable per the contract.
        unsafe { out.write(limit) };
        Ok(())
    })
}

/// Clears the session's cache, files included, once every session on it has closed
/// (`SetDeleteOnDestroy`).
///
/// Returns `GPUCACHE_OK` or `GPUCACHE_ERROR_INVALID_ARGUMENT` (NULL `s`).
///
/// # Safety
///
/// `s` is NULL or an open session.
#[no_mangle]
pub unsafe extern "C" fn gpucache_session_set_delete_on_destroy(s: *const gpucache_session) -> i32 {
    ffi_call("gpucache_session_set_delete_on_destroy", || {
        // SAFETY: forwarded caller contract.
        unsafe { session(s) }?.set_delete_on_destroy();
        Ok(())
    })
}

/// Writes the description the session was opened with to `*out` (`GetDesc`), zero limits
/// replaced by their defaults.
///
/// Returns `GPUCACHE_OK` or `GPUCACHE_ERROR_INVALID_ARGUMENT` (NULL pointer).
///
/// # Safety
///
/// `s` is NULL or an open session; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn gpucache_session_get_desc(
    s: *const gpucache_session,
    out: *mut gpucache_session_desc,
) -> i32 {
    ffi_call("gpucache_session_get_desc", || {
        // SAFETY: forwarded caller contract.
        let d = unsafe { session(s) }?.desc();
        if out.is_null() {
            return Err(Failure::invalid("out is NULL"));
        }
        let c = gpucache_session_desc {
            identifier: d.identifier,
            mode: match d.mode {
                CacheMode::Memory => GPUCACHE_MODE_MEMORY,
                CacheMode::Disk => GPUCACHE_MODE_DISK,
            },
            flags: d.flags.bits(),
            max_in_memory_bytes: d.max_in_memory_bytes,
            max_in_memory_entries: d.max_in_memory_entries,
            max_value_file_bytes: d.max_value_file_bytes,
            reserved: 0,
            version: d.version,
        };
        // SAFETY: `out` is non-NULL and writable per the contract.
        unsafe { out.write(c) };
        Ok(())
    })
}

/// Writes a disk session's pending stores to its files.
///
/// Returns `GPUCACHE_OK` (also for a memory session), `GPUCACHE_ERROR_IO` or
/// `GPUCACHE_ERROR_INVALID_ARGUMENT` (NULL `s`).
///
/// # Safety
///
/// `s` is NULL or an open session.
#[no_mangle]
pub unsafe extern "C" fn gpucache_session_flush(s: *const gpucache_session) -> i32 {
    ffi_call("gpucache_session_flush", || {
        // SAFETY: forwarded caller contract.
        unsafe { session(s) }?.flush()?;
        Ok(())
    })
}

/// Closes a session (releases it). The last session of a memory cache drops its entries;
/// the last session of a disk cache flushes it. NULL is ignored.
///
/// # Safety
///
/// `s` is NULL or an open session, not used by any thread after this call.
#[no_mangle]
pub unsafe extern "C" fn gpucache_session_close(s: *mut gpucache_session) {
    ffi_quiet((), || {
        if !s.is_null() {
            // SAFETY: a non-NULL handle came from `Box::into_raw` in `gpucache_session_open`
            // and is closed once, per the contract.
            drop(unsafe { Box::from_raw(s) });
        }
    });
}

/// Applies cache control (`ShaderCacheControl`): `kinds` is a set of `GPUCACHE_KIND_*`
/// bits, `control` of `GPUCACHE_CONTROL_*` bits (at least one, not both DISABLE and
/// ENABLE). `CLEAR` applies before `DISABLE`/`ENABLE`. `APPLICATION_MANAGED` concerns the
/// sessions; `IMPLICIT_DRIVER_MANAGED` the EGL blob cache (while disabled, `set` is ignored
/// and `get` answers 0).
///
/// As in D3D12, only in developer mode (`gpucache_developer_mode`), which the user turns
/// on with the environment variable `GPUCACHE_DEVELOPER_MODE=1` or their own file
/// `$XDG_CONFIG_HOME/gpucache/developer-mode` (mode 0600), or the administrator with
/// `/etc/gpucache/developer-mode` (root's, not writable by others). Otherwise nothing changes
/// and the answer is `GPUCACHE_ERROR_UNSUPPORTED`.
///
/// Returns `GPUCACHE_OK`, `GPUCACHE_ERROR_INVALID_ARGUMENT`, `GPUCACHE_ERROR_UNSUPPORTED` or
/// `GPUCACHE_ERROR_IO`.
///
/// # Safety
///
/// None needed: any bits are accepted, from any thread.
#[no_mangle]
pub extern "C" fn gpucache_cache_control(kinds: u32, control: u32) -> i32 {
    ffi_call("gpucache_cache_control", || {
        let k = CacheKinds::from_bits(kinds)
            .ok_or_else(|| Failure::invalid(format!("unknown kind bits 0x{kinds:x}")))?;
        let c = CacheControl::from_bits(control)
            .ok_or_else(|| Failure::invalid(format!("unknown control bits 0x{control:x}")))?;
        // The session front end registers with cache control when first used; use it now,
        // so that clearing before any session is opened removes the caches on disk too.
        SessionRegistry::global();
        gpucache::cache_control(k, c)?;
        Ok(())
    })
}

/// Whether cache control is allowed in this process (developer mode, see
/// `gpucache_cache_control`): 1 or 0.
///
/// # Safety
///
/// None needed.
#[no_mangle]
pub extern "C" fn gpucache_developer_mode() -> i32 {
    ffi_quiet(0, || i32::from(gpucache::developer_mode()))
}

/// The support query (`CheckFeatureSupport(D3D12_FEATURE_SHADER_CACHE)`): writes to `*flags`
/// the `GPUCACHE_SHADER_CACHE_SUPPORT_*` bits that hold now. `SINGLE_PSO` always; the
/// automatic and driver-managed bits while the EGL blob cache is configured (the disk bit
/// when it has a directory).
///
/// Returns `GPUCACHE_OK`, or `GPUCACHE_ERROR_INVALID_ARGUMENT` for a NULL `flags`.
///
/// # Safety
///
/// `flags` is NULL or points to a writable `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn gpucache_shader_cache_support(flags: *mut u32) -> i32 {
    ffi_call("gpucache_shader_cache_support", || {
        if flags.is_null() {
            return Err(Failure::invalid("flags is NULL"));
        }
        let bits = gpucache::shader_cache_support().bits();
        // SAFETY: non-NULL and writable per the contract.
        unsafe { flags.write_unaligned(bits) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_are_the_d3d12_values() {
        assert_eq!(GPUCACHE_FLAG_NONE, SessionFlags::NONE.bits());
        assert_eq!(
            GPUCACHE_FLAG_DRIVER_VERSIONED,
            SessionFlags::DRIVER_VERSIONED.bits()
        );
        assert_eq!(
            GPUCACHE_FLAG_USE_WORKING_DIR,
            SessionFlags::USE_WORKING_DIR.bits()
        );
        let kinds = [
            (
                GPUCACHE_KIND_IMPLICIT_D3D_CACHE_FOR_DRIVER,
                CacheKinds::IMPLICIT_D3D_CACHE_FOR_DRIVER,
            ),
            (
                GPUCACHE_KIND_IMPLICIT_D3D_CONVERSIONS,
                CacheKinds::IMPLICIT_D3D_CONVERSIONS,
            ),
            (
                GPUCACHE_KIND_IMPLICIT_DRIVER_MANAGED,
                CacheKinds::IMPLICIT_DRIVER_MANAGED,
            ),
            (
                GPUCACHE_KIND_APPLICATION_MANAGED,
                CacheKinds::APPLICATION_MANAGED,
            ),
        ];
        for (c, rust) in kinds {
            assert_eq!(c, rust.bits());
        }
        assert_eq!(GPUCACHE_CONTROL_DISABLE, CacheControl::DISABLE.bits());
        assert_eq!(GPUCACHE_CONTROL_ENABLE, CacheControl::ENABLE.bits());
        assert_eq!(GPUCACHE_CONTROL_CLEAR, CacheControl::CLEAR.bits());
        assert_eq!((GPUCACHE_MODE_MEMORY, GPUCACHE_MODE_DISK), (0, 1));
    }

    #[test]
    fn sessions_may_be_shared_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<gpucache_session>();
        assert_eq!(std::mem::size_of::<gpucache_session_desc>(), 48);
    }

    #[test]
    fn bad_descriptions_are_refused() {
        let mut d = gpucache_session_desc {
            mode: 2,
            ..Default::default()
        };
        assert!(to_rust_desc(&d).is_err());
        d.mode = GPUCACHE_MODE_DISK;
        d.flags = 0x4;
        assert!(to_rust_desc(&d).is_err());
        d.flags = GPUCACHE_FLAG_DRIVER_VERSIONED | GPUCACHE_FLAG_USE_WORKING_DIR;
        assert!(to_rust_desc(&d).is_ok());
    }
}
