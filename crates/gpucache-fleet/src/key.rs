//! Fleet keys: the MAC that authenticates every remote entry.
//!
//! A key file holds at least 32 bytes of secret material (any bytes; white space at both
//! ends is ignored, so `head -c 32 /dev/urandom | base64 > key` works). It must be owned by
//! the user that reads it and readable by no one else (mode `0600` or `0400`): anyone who can
//! read it can plant entries that every machine of the fleet hands to its driver.
//!
//! From the material two values are derived with BLAKE3's key derivation mode: the 32-byte
//! MAC key (context `gpucache fleet v1 entry mac`) and a 32-bit key id (context
//! `gpucache fleet v1 key id`) that every entry carries, so that a reader picks the right key
//! during a rotation and rejects entries of unknown keys without computing anything.

use std::fs;
use std::path::Path;

use crate::error::{Error, Result};

/// One fleet key: its id and MAC key.
#[derive(Clone)]
pub struct FleetKey {
    id: u32,
    mac: [u8; 32],
}

impl FleetKey {
    /// A key from secret material (at least 32 bytes).
    pub fn from_material(material: &[u8]) -> Option<Self> {
        if material.len() < 32 {
            return None;
        }
        let mac = blake3::derive_key("gpucache fleet v1 entry mac", material);
        let idb = blake3::derive_key("gpucache fleet v1 key id", material);
        Some(Self {
            id: u32::from_le_bytes([idb[0], idb[1], idb[2], idb[3]]),
            mac,
        })
    }

    /// Reads a key file, refusing one that others can read or that another user owns.
    pub fn from_file(path: &Path) -> Result<Self> {
        check_private(path)?;
        let bytes = fs::read(path)?;
        let material = bytes.trim_ascii();
        Self::from_material(material).ok_or_else(|| Error::KeyTooShort {
            path: path.to_path_buf(),
            len: material.len(),
        })
    }

    /// The key id entries written with this key carry.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The MAC of `bytes` under this key.
    pub(crate) fn mac(&self, bytes: &[u8]) -> blake3::Hash {
        blake3::keyed_hash(&self.mac, bytes)
    }
}

impl std::fmt::Debug for FleetKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetKey")
            .field("id", &format_args!("{:08x}", self.id))
            .finish_non_exhaustive()
    }
}

/// The keys a tier uses: writers sign with `current`; readers accept `current` and
/// `previous` (during a rotation).
#[derive(Clone, Debug)]
pub struct KeyRing {
    pub(crate) current: FleetKey,
    pub(crate) previous: Option<FleetKey>,
}

impl KeyRing {
    /// Writers sign with `current`; readers also accept `previous`.
    pub fn new(current: FleetKey, previous: Option<FleetKey>) -> Self {
        Self { current, previous }
    }

    /// The key with id `id`, if this ring holds it.
    pub(crate) fn by_id(&self, id: u32) -> Option<&FleetKey> {
        std::iter::once(&self.current)
            .chain(self.previous.as_ref())
            .find(|k| k.id == id)
    }
}

#[cfg(unix)]
fn check_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(path)?;
    let not_private = |why: String| Error::KeyFileNotPrivate {
        path: path.to_path_buf(),
        why,
    };
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(not_private(format!(
            "mode {mode:04o}: group or others may read it"
        )));
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(not_private(format!(
            "owned by uid {}, not by this process's uid {me}",
            meta.uid()
        )));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_path: &Path) -> Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_must_be_private_and_long_enough() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        fs::write(&path, b"0123456789abcdef0123456789abcdef\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let err = FleetKey::from_file(&path).unwrap_err();
        assert!(matches!(err, Error::KeyFileNotPrivate { .. }), "{err}");
        assert!(err.to_string().contains("chmod 600"));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        assert!(FleetKey::from_file(&path).is_err());
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        let key = FleetKey::from_file(&path).unwrap();
        // White space at the ends is not key material.
        let same = FleetKey::from_material(b"0123456789abcdef0123456789abcdef").unwrap();
        assert_eq!(key.id(), same.id());
        fs::write(&path, b"short\n").unwrap();
        assert!(matches!(
            FleetKey::from_file(&path),
            Err(Error::KeyTooShort { len: 5, .. })
        ));
        let other = FleetKey::from_material(&[7; 32]).unwrap();
        assert_ne!(other.id(), same.id());
        assert_ne!(other.mac(b"x"), same.mac(b"x"));
    }
}
