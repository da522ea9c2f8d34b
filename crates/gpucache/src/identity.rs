//! What makes stored entries valid: the identity and version a cache is opened with.
//!
//! Every tier namespaces its entries by it. The disk tier writes it into the directory's
//! meta file and wipes (or, driver-versioned, sets aside) a directory of another identity;
//! a shared tier (a fleet) files entries under [`Identity::namespace`]; front ends keep their
//! metadata streams under the same check, so nothing recorded for one driver is read back
//! for another.

use std::fmt;

/// Longest identity accepted, in bytes.
pub const MAX_IDENTITY_LEN: usize = 64 << 10;

/// The identity of a cache: opaque bytes naming what its entries depend on (driver vendor,
/// renderer and version, API, application build, CPU architecture), the application's or
/// session's cache version, and whether caches of different identities live side by side
/// (driver-versioned) instead of replacing each other.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Identity {
    bytes: Vec<u8>,
    version: u64,
    driver_versioned: bool,
}

impl Identity {
    /// An identity of these bytes, version 0, not driver-versioned.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self {
            bytes: bytes.into(),
            version: 0,
            driver_versioned: false,
        }
    }

    /// The same identity with cache version `version`.
    pub fn with_version(mut self, version: u64) -> Self {
        self.version = version;
        self
    }

    /// The same identity, driver-versioned or not.
    pub fn with_driver_versioned(mut self, on: bool) -> Self {
        self.driver_versioned = on;
        self
    }

    /// The identity bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The cache version.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Whether caches of other identities are kept beside this one rather than replaced.
    pub fn driver_versioned(&self) -> bool {
        self.driver_versioned
    }

    /// A 128-bit name for everything above (XXH3-128 over version, flags and bytes): the
    /// namespace a shared tier files this cache's entries under. Stable across processes,
    /// machines and gpucache versions of the same on-disk format.
    pub fn namespace(&self) -> u128 {
        let mut input = Vec::with_capacity(16 + self.bytes.len());
        input.extend_from_slice(&self.version.to_le_bytes());
        input.extend_from_slice(&u64::from(self.driver_versioned).to_le_bytes());
        input.extend_from_slice(&self.bytes);
        xxhash_rust::xxh3::xxh3_128(&input)
    }

    /// The identity bytes as text, with non-printable bytes escaped (for messages).
    pub fn display_bytes(&self) -> String {
        self.bytes.escape_ascii().to_string()
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("bytes", &self.display_bytes())
            .field("version", &self.version)
            .field("driver_versioned", &self.driver_versioned)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_changes_the_namespace() {
        let base = Identity::new(b"llvmpipe".to_vec());
        let all = [
            base.clone(),
            base.clone().with_version(1),
            base.clone().with_driver_versioned(true),
            Identity::new(b"llvmpipE".to_vec()),
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a.namespace(), b.namespace(), "{a:?} vs {b:?}");
            }
        }
        assert_eq!(
            base.namespace(),
            Identity::new(b"llvmpipe".to_vec()).namespace()
        );
        assert_eq!(
            format!("{:?}", Identity::new(b"a\x01".to_vec())),
            "Identity { bytes: \"a\\\\x01\", version: 0, driver_versioned: false }"
        );
    }
}
