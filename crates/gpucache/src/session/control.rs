//! Cache control by kind (`ID3D12Device9::ShaderCacheControl`).

use super::bits::d3d12_flags;
use crate::{Error, Result};

d3d12_flags! {
    /// Which caches a control request applies to (`D3D12_SHADER_CACHE_KIND_FLAGS`).
    pub struct CacheKinds {
        /// The cache of driver compilations managed by the runtime. gpucache has none;
        /// requests for it succeed and do nothing ("any one of these caches may or may not
        /// exist").
        IMPLICIT_D3D_CACHE_FOR_DRIVER = 0x1,
        /// The cache of shader-format conversions. gpucache has none; as above.
        IMPLICIT_D3D_CONVERSIONS = 0x2,
        /// The cache the driver manages: in gpucache, the EGL blob cache that drivers fill
        /// through the `set`/`get` callbacks.
        IMPLICIT_DRIVER_MANAGED = 0x4,
        /// Every cache opened through sessions.
        APPLICATION_MANAGED = 0x8,
    }
}

d3d12_flags! {
    /// What to do to the caches (`D3D12_SHADER_CACHE_CONTROL_FLAGS`).
    pub struct CacheControl {
        /// Stop finding and storing; opening sessions fails with `NotCurrentlyAvailable`.
        DISABLE = 0x1,
        /// Resume after `DISABLE`.
        ENABLE = 0x2,
        /// Delete the existing contents.
        CLEAR = 0x4,
    }
}

/// Checks a request as D3D12 does: at least one kind, at least one control flag, and not
/// both `DISABLE` and `ENABLE`.
pub(crate) fn validate(kinds: CacheKinds, control: CacheControl) -> Result<()> {
    if kinds.0 == 0 {
        return Err(Error::InvalidArgument("no cache kind given".into()));
    }
    if control.0 == 0 {
        return Err(Error::InvalidArgument("no control flag given".into()));
    }
    if control.contains(CacheControl::DISABLE | CacheControl::ENABLE) {
        return Err(Error::InvalidArgument(
            "DISABLE and ENABLE cannot be given together".into(),
        ));
    }
    Ok(())
}

/// Applies a control request to every cache gpucache manages in this process: the sessions
/// of the global registry (`APPLICATION_MANAGED`) and the global EGL blob cache
/// (`IMPLICIT_DRIVER_MANAGED`). `DISABLE` or `ENABLE` is applied after `CLEAR`.
pub fn cache_control(kinds: CacheKinds, control: CacheControl) -> Result<()> {
    validate(kinds, control)?;
    if kinds.contains(CacheKinds::APPLICATION_MANAGED) {
        super::SessionRegistry::global().control(CacheKinds::APPLICATION_MANAGED, control)?;
    }
    if kinds.contains(CacheKinds::IMPLICIT_DRIVER_MANAGED) {
        crate::egl::control(control);
    }
    Ok(())
}
