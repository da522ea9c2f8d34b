//! Cache control by kind (`ID3D12Device9::ShaderCacheControl`): disable, enable and clear the
//! caches of a process, by the kind of cache.
//!
//! The enabled state of each kind lives here, so it holds whatever order front ends start
//! in. Front ends that hold entries register a [`ControlTarget`] for their kind; a clear
//! reaches every live target of the kinds asked for. A new front end registers itself and
//! needs no change here or in any other front end.
//!
//! As in D3D12, cache control is for developers: [`cache_control`] answers
//! [`Error::DeveloperModeRequired`] unless [`developer_mode`] is on, which a user or an
//! administrator turns on outside the process (an environment variable or a file), never the
//! application itself. [`shader_cache_support`] is the support query
//! (`D3D12_SHADER_CACHE_SUPPORT_FLAGS`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::{Error, Result};

bitflags::bitflags! {
    /// Which caches a control request applies to (`D3D12_SHADER_CACHE_KIND_FLAGS`, same bits).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct CacheKinds: u32 {
        /// The cache of driver compilations managed by the runtime. gpucache has none;
        /// requests for it succeed and do nothing ("any one of these caches may or may not
        /// exist").
        const IMPLICIT_D3D_CACHE_FOR_DRIVER = 0x1;
        /// The cache of shader-format conversions. gpucache has none; as above.
        const IMPLICIT_D3D_CONVERSIONS = 0x2;
        /// The cache the driver manages: in gpucache, the EGL blob cache that drivers fill
        /// through the `set`/`get` callbacks.
        const IMPLICIT_DRIVER_MANAGED = 0x4;
        /// The caches the application manages: sessions, and program caches.
        const APPLICATION_MANAGED = 0x8;
    }
}

bitflags::bitflags! {
    /// What to do to the caches (`D3D12_SHADER_CACHE_CONTROL_FLAGS`, same bits).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct CacheControl: u32 {
        /// Stop finding and storing; opening sessions fails with `NotCurrentlyAvailable`.
        const DISABLE = 0x1;
        /// Resume after `DISABLE`.
        const ENABLE = 0x2;
        /// Delete the existing contents.
        const CLEAR = 0x4;
    }
}

impl CacheControl {
    /// Checks a request as D3D12 does: at least one kind, at least one control flag, and
    /// not both `DISABLE` and `ENABLE`.
    pub fn check(self, kinds: CacheKinds) -> Result<()> {
        if kinds.is_empty() {
            return Err(Error::InvalidArgument("no cache kind given".into()));
        }
        if self.is_empty() {
            return Err(Error::InvalidArgument("no control flag given".into()));
        }
        if self.contains(CacheControl::DISABLE | CacheControl::ENABLE) {
            return Err(Error::InvalidArgument(
                "DISABLE and ENABLE cannot be given together".into(),
            ));
        }
        Ok(())
    }
}

bitflags::bitflags! {
    /// What shader caching this process supports now (`D3D12_SHADER_CACHE_SUPPORT_FLAGS`,
    /// same bits), from [`shader_cache_support`].
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct ShaderCacheSupport: u32 {
        /// Single cached blobs, stored and found by the application (sessions; always).
        const SINGLE_PSO = 0x1;
        /// Pipeline libraries (`ID3D12PipelineLibrary`): gpucache has none, never set.
        const LIBRARY = 0x2;
        /// The driver's compilations are cached automatically in this process: a
        /// driver-managed cache (the EGL blob cache) is configured.
        const AUTOMATIC_INPROC_CACHE = 0x4;
        /// ... and persisted on disk: that cache has a directory.
        const AUTOMATIC_DISK_CACHE = 0x8;
        /// A driver-managed cache is present, so that cache control of
        /// [`CacheKinds::IMPLICIT_DRIVER_MANAGED`] reaches it.
        const DRIVER_MANAGED_CACHE = 0x10;
    }
}

/// What a [`ControlTarget`] holds now, for [`shader_cache_support`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Presence {
    /// No cache (not configured yet, or shut down).
    Absent,
    /// A cache in memory only.
    Memory,
    /// A cache persisted in a directory.
    Disk,
}

/// Something [`cache_control`] clears: a front end's caches of one or more kinds.
pub trait ControlTarget: Send + Sync {
    /// Removes every entry of the caches this target stands for, in memory and on disk.
    fn clear(&self) -> Result<()>;

    /// Whether the target holds a cache now, and where. A target that always holds one in
    /// memory need not say.
    fn presence(&self) -> Presence {
        Presence::Memory
    }
}

/// Kinds disabled now (`CacheKinds` bits).
static DISABLED: AtomicU32 = AtomicU32::new(0);
/// Registered targets; dead ones are pruned on each registration.
static TARGETS: Mutex<Vec<(CacheKinds, Weak<dyn ControlTarget>)>> = Mutex::new(Vec::new());

/// Registers `target` for `kinds` for as long as it lives (a weak reference is kept).
pub fn register(kinds: CacheKinds, target: &Arc<dyn ControlTarget>) {
    let mut targets = TARGETS.lock();
    targets.retain(|(_, t)| t.strong_count() > 0);
    targets.push((kinds, Arc::downgrade(target)));
}

/// Whether any of `kinds` is disabled by cache control. One atomic load: front ends ask on
/// every call.
#[inline]
pub fn is_disabled(kinds: CacheKinds) -> bool {
    DISABLED.load(Ordering::Acquire) & kinds.bits() != 0
}

/// Applies a control request to every cache of `kinds` in this process: `CLEAR` empties
/// every registered target of those kinds (all are tried; the first failure is returned),
/// then `DISABLE` or `ENABLE` changes the kinds' state, which every front end obeys from its
/// next call on.
///
/// Outside [`developer_mode`] nothing changes and the answer is
/// [`Error::DeveloperModeRequired`].
pub fn cache_control(kinds: CacheKinds, control: CacheControl) -> Result<()> {
    control.check(kinds)?;
    require_developer_mode()?;
    let mut result = Ok(());
    if control.contains(CacheControl::CLEAR) {
        // Called outside the lock: a target may register others while clearing.
        let live: Vec<Arc<dyn ControlTarget>> = TARGETS
            .lock()
            .iter()
            .filter(|(k, _)| k.intersects(kinds))
            .filter_map(|(_, t)| t.upgrade())
            .collect();
        for target in live {
            if let Err(e) = target.clear() {
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
    }
    if control.contains(CacheControl::DISABLE) {
        DISABLED.fetch_or(kinds.bits(), Ordering::AcqRel);
    }
    if control.contains(CacheControl::ENABLE) {
        DISABLED.fetch_and(!kinds.bits(), Ordering::AcqRel);
    }
    result
}

/// The support query (`CheckFeatureSupport(D3D12_FEATURE_SHADER_CACHE)`): what this process
/// supports now, from the live targets registered for [`CacheKinds::IMPLICIT_DRIVER_MANAGED`].
pub fn shader_cache_support() -> ShaderCacheSupport {
    let mut support = ShaderCacheSupport::SINGLE_PSO;
    let targets = TARGETS.lock();
    let driver = targets
        .iter()
        .filter(|(k, _)| k.contains(CacheKinds::IMPLICIT_DRIVER_MANAGED))
        .filter_map(|(_, t)| t.upgrade());
    for target in driver {
        match target.presence() {
            Presence::Absent => {}
            Presence::Memory => {
                support |= ShaderCacheSupport::AUTOMATIC_INPROC_CACHE
                    | ShaderCacheSupport::DRIVER_MANAGED_CACHE;
            }
            Presence::Disk => {
                support |= ShaderCacheSupport::AUTOMATIC_INPROC_CACHE
                    | ShaderCacheSupport::AUTOMATIC_DISK_CACHE
                    | ShaderCacheSupport::DRIVER_MANAGED_CACHE;
            }
        }
    }
    support
}

/// The environment variable that turns developer mode on for a process: `1`.
pub const DEVELOPER_MODE_ENV: &str = "GPUCACHE_DEVELOPER_MODE";

/// The administrator's switch: developer mode for every user when this file exists, is a
/// regular file owned by root and writable by no one else.
pub const SYSTEM_DEVELOPER_MODE_FILE: &str = "/etc/gpucache/developer-mode";

/// Whether cache control is allowed: asked on each control request (rare), so a change
/// applies from the next request on. On when any of
/// - the environment variable [`DEVELOPER_MODE_ENV`] is `1` (the user who starts the
///   process);
/// - `$XDG_CONFIG_HOME/gpucache/developer-mode` (default `~/.config/gpucache/developer-mode`)
///   is a regular file owned by the process's user and writable by no one else (the user);
/// - [`SYSTEM_DEVELOPER_MODE_FILE`] is a regular file owned by root and writable by no one
///   else (the administrator).
///
/// The ownership checks keep a file another user planted from turning it on. The
/// application has no call to turn it on: that is the point of the gate.
pub fn developer_mode() -> bool {
    #[cfg(test)]
    if let Some(forced) = tests::FORCED_DEVELOPER_MODE.with(|f| f.get()) {
        return forced;
    }
    if std::env::var_os(DEVELOPER_MODE_ENV).is_some_and(|v| v == "1") {
        return true;
    }
    let user = process_uid();
    if let (Some(file), Some(uid)) = (user_developer_mode_file(), user) {
        if trusted_file(&file, uid) {
            return true;
        }
    }
    trusted_file(Path::new(SYSTEM_DEVELOPER_MODE_FILE), 0)
}

fn require_developer_mode() -> Result<()> {
    if developer_mode() {
        Ok(())
    } else {
        Err(Error::DeveloperModeRequired)
    }
}

/// `$XDG_CONFIG_HOME/gpucache/developer-mode`, else `$HOME/.config/gpucache/developer-mode`.
fn user_developer_mode_file() -> Option<PathBuf> {
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config.join("gpucache").join("developer-mode"))
}

/// The process's effective user: the owner of `/proc/self` (Linux). The crate has no
/// `unsafe` to call `geteuid`; elsewhere the user's file is not consulted.
fn process_uid() -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self").ok().map(|m| m.uid())
    }
    #[cfg(not(unix))]
    None
}

/// A regular file (not a link) owned by `uid` that no group or other user can write.
fn trusted_file(path: &Path, uid: u32) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(path)
            .is_ok_and(|m| m.is_file() && m.uid() == uid && m.mode() & 0o022 == 0)
    }
    #[cfg(not(unix))]
    {
        let _ = (path, uid);
        false
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// Developer mode for this test thread only: the unit tests of the crate cannot set
        /// the environment (other tests run beside them). Integration tests use real
        /// processes with the environment variable or the files.
        pub(crate) static FORCED_DEVELOPER_MODE: Cell<Option<bool>> = const { Cell::new(None) };
    }

    /// Turns developer mode on for the calling test thread.
    pub(crate) fn developer_mode_on() {
        FORCED_DEVELOPER_MODE.with(|f| f.set(Some(true)));
    }

    #[test]
    fn control_outside_developer_mode_changes_nothing() {
        FORCED_DEVELOPER_MODE.with(|f| f.set(Some(false)));
        assert!(matches!(
            cache_control(CacheKinds::IMPLICIT_D3D_CONVERSIONS, CacheControl::DISABLE),
            Err(Error::DeveloperModeRequired)
        ));
        assert!(!is_disabled(CacheKinds::IMPLICIT_D3D_CONVERSIONS));
        // A malformed request is still reported as such.
        assert!(matches!(
            cache_control(CacheKinds::empty(), CacheControl::CLEAR),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn support_is_single_blobs_without_a_driver_cache() {
        // Whatever other unit tests registered: single blobs always, libraries never.
        assert!(shader_cache_support().contains(ShaderCacheSupport::SINGLE_PSO));
        assert!(!shader_cache_support().contains(ShaderCacheSupport::LIBRARY));
        assert_eq!(ShaderCacheSupport::DRIVER_MANAGED_CACHE.bits(), 0x10);
    }

    #[test]
    fn requests_are_checked_as_d3d12_does() {
        let all = CacheControl::CLEAR;
        assert!(all.check(CacheKinds::empty()).is_err());
        assert!(CacheControl::empty()
            .check(CacheKinds::APPLICATION_MANAGED)
            .is_err());
        assert!((CacheControl::DISABLE | CacheControl::ENABLE)
            .check(CacheKinds::APPLICATION_MANAGED)
            .is_err());
        assert_eq!(CacheKinds::from_bits(0x10), None);
        assert_eq!(
            CacheKinds::from_bits(0xC),
            Some(CacheKinds::IMPLICIT_DRIVER_MANAGED | CacheKinds::APPLICATION_MANAGED)
        );
    }
}
