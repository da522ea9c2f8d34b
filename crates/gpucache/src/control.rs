//! Cache control by kind (`ID3D12Device9::ShaderCacheControl`): disable, enable and clear the
//! caches of a process, by the kind of cache.
//!
//! The enabled state of each kind lives here, so it holds whatever order front ends start
//! in. Front ends that hold entries register a [`ControlTarget`] for their kind; a clear
//! reaches every live target of the kinds asked for. A new front end registers itself and
//! needs no change here or in any other front end.

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

/// Something [`cache_control`] clears: a front end's caches of one or more kinds.
pub trait ControlTarget: Send + Sync {
    /// Removes every entry of the caches this target stands for, in memory and on disk.
    fn clear(&self) -> Result<()>;
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
pub fn cache_control(kinds: CacheKinds, control: CacheControl) -> Result<()> {
    control.check(kinds)?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
