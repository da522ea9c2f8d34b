//! Key hashing.
//!
//! Every lookup hashes the key to find its slot and then compares the full key, so two keys
//! never alias whatever the hash does. The hash only decides which keys *collide*, which the
//! D3D12 session API reports as `HashCollision`; tests inject a weak hasher to exercise it.

use std::fmt;
use std::hash::{BuildHasher, RandomState};

/// Maps a key to a 64-bit hash. Implementations must be deterministic for the life of a store.
pub trait KeyHasher: Send + Sync + fmt::Debug {
    /// Hashes `key`.
    fn hash_key(&self, key: &[u8]) -> u64;
}

/// The default hasher: XXH3-64 with a per-instance random seed, so that an attacker who
/// controls keys cannot precompute collisions (hash flooding).
#[derive(Clone)]
pub struct Xxh3KeyHasher {
    seed: u64,
}

impl Xxh3KeyHasher {
    /// A hasher with a random seed.
    pub fn new() -> Self {
        Self {
            seed: RandomState::new().hash_one(0x6770_7563_6163_6865_u64),
        }
    }

    /// A hasher with a fixed seed (reproducible hashes, e.g. for on-disk use).
    pub fn with_seed(seed: u64) -> Self {
        Self { seed }
    }
}

impl Default for Xxh3KeyHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Xxh3KeyHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The seed is a secret against hash flooding: keep it out of logs.
        f.write_str("Xxh3KeyHasher")
    }
}

impl KeyHasher for Xxh3KeyHasher {
    #[inline]
    fn hash_key(&self, key: &[u8]) -> u64 {
        xxhash_rust::xxh3::xxh3_64_with_seed(key, self.seed)
    }
}

/// A `Hasher` for maps keyed by an already-computed `u64` hash: passes it through.
#[derive(Default, Clone, Copy)]
pub(crate) struct PassThroughHasher(u64);

impl std::hash::Hasher for PassThroughHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed through this hasher; fold anything else defensively.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

pub(crate) type PassThroughBuildHasher = std::hash::BuildHasherDefault<PassThroughHasher>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_hashers_differ_and_fixed_seed_is_stable() {
        let a = Xxh3KeyHasher::with_seed(1);
        let b = Xxh3KeyHasher::with_seed(1);
        let c = Xxh3KeyHasher::with_seed(2);
        assert_eq!(a.hash_key(b"key"), b.hash_key(b"key"));
        assert_ne!(a.hash_key(b"key"), c.hash_key(b"key"));
        assert_ne!(a.hash_key(b"key"), a.hash_key(b"kez"));
        assert_eq!(format!("{a:?}"), "Xxh3KeyHasher");
    }
}
