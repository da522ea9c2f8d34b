//! Cache control by kind (`ID3D12Device9::ShaderCacheControl`).

use std::ops::BitOr;

use crate::{Error, Result};

/// Which caches a control request applies to (`D3D12_SHADER_CACHE_KIND_FLAGS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CacheKinds(u32);

impl CacheKinds {
    /// The cache of driver compilations managed by the runtime. gpucache has none; requests
    /// for it succeed and do nothing ("any one of these caches may or may not exist").
    pub const IMPLICIT_D3D_CACHE_FOR_DRIVER: Self = Self(0x1);
    /// The cache of shader-format conversions. gpucache has none; as above.
    pub const IMPLICIT_D3D_CONVERSIONS: Self = Self(0x2);
    /// The cache the driver manages: in gpucache, the EGL blob cache that drivers fill
    /// through the `set`/`get` callbacks.
    pub const IMPLICIT_DRIVER_MANAGED: Self = Self(0x4);
    /// Every cache opened through sessions.
    pub const APPLICATION_MANAGED: Self = Self(0x8);
    const ALL: u32 = 0xF;

    /// The kinds from their D3D12 bits; `None` if an unknown bit is set.
    pub fn from_bits(bits: u32) -> Option<Self> {
        (bits & !Self::ALL == 0).then_some(Self(bits))
    }

    /// The D3D12 bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Whether every kind of `other` is included.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for CacheKinds {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// What to do to the caches (`D3D12_SHADER_CACHE_CONTROL_FLAGS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CacheControl(u32);

impl CacheControl {
    /// Stop finding and storing; opening sessions fails with `NotCurrentlyAvailable`.
    pub const DISABLE: Self = Self(0x1);
    /// Resume after `DISABLE`.
    pub const ENABLE: Self = Self(0x2);
    /// Delete the existing contents.
    pub const CLEAR: Self = Self(0x4);
    const ALL: u32 = 0x7;

    /// The control from its D3D12 bits; `None` if an unknown bit is set.
    pub fn from_bits(bits: u32) -> Option<Self> {
        (bits & !Self::ALL == 0).then_some(Self(bits))
    }

    /// The D3D12 bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Whether every flag of `other` is set.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for CacheControl {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
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
