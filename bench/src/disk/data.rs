//! The data every engine stores: `n` distinct 20-byte keys and 8 KiB values.
//!
//! Values are slices of one pool of random (incompressible) bytes, at a different offset per
//! key and generation, so they are distinct, cost no allocation when stored (`Bytes` slices)
//! and can be checked when read back.

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{RngCore, SeedableRng};

/// Key length in bytes.
pub const KEY_LEN: usize = 20;
/// Value length in bytes.
pub const VALUE_LEN: usize = 8 << 10;
/// Size of the random pool values are sliced from.
const POOL_LEN: usize = 64 << 20;

/// Keys and a value pool, reproducible from a fixed seed.
#[derive(Clone, Debug)]
pub struct Dataset {
    keys: Vec<[u8; KEY_LEN]>,
    pool: Bytes,
}

/// A 64-bit mix (SplitMix64's finalizer): distinct inputs give distinct outputs.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Dataset {
    /// `n` keys; key `i` holds `mix(i)`, `mix(!i)` and `i` itself, so keys never repeat.
    pub fn new(n: usize) -> Self {
        let keys = (0..n as u64)
            .map(|i| {
                let mut k = [0u8; KEY_LEN];
                k[..8].copy_from_slice(&mix(i).to_le_bytes());
                k[8..16].copy_from_slice(&mix(!i).to_le_bytes());
                k[16..].copy_from_slice(&(i as u32).to_le_bytes());
                k
            })
            .collect();
        let mut pool = vec![0u8; POOL_LEN];
        StdRng::seed_from_u64(0x6770_7563).fill_bytes(&mut pool);
        Self {
            keys,
            pool: Bytes::from(pool),
        }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Key `i`.
    pub fn key(&self, i: usize) -> &[u8] {
        &self.keys[i]
    }

    /// The value of key `i` in `generation` (each overwrite pass is a new generation).
    pub fn value(&self, i: usize, generation: u64) -> Bytes {
        let span = (POOL_LEN - VALUE_LEN) as u64;
        let at = (mix((i as u64) ^ (generation << 40)) % span) as usize;
        self.pool.slice(at..at + VALUE_LEN)
    }

    /// Like [`Self::value`], `len` bytes long (at most the pool's size less 1 MiB).
    pub fn value_of_len(&self, i: usize, generation: u64, len: usize) -> Bytes {
        let len = len.min(POOL_LEN - (1 << 20));
        let span = (POOL_LEN - len) as u64;
        let at = (mix((i as u64) ^ (generation << 40)) % span) as usize;
        self.pool.slice(at..at + len)
    }

    /// Every value of `generation`, made before a timed loop.
    pub fn values(&self, generation: u64) -> Vec<Bytes> {
        (0..self.len()).map(|i| self.value(i, generation)).collect()
    }

    /// `len` random bytes (for writes that need incompressible data).
    pub fn random_block(&self, len: usize) -> Bytes {
        self.pool.slice(..len.min(POOL_LEN))
    }

    /// Key and value bytes of `n` entries (the denominator of space amplification).
    pub fn logical_bytes(n: usize) -> u64 {
        (n * (KEY_LEN + VALUE_LEN)) as u64
    }

    /// The first `n` key indexes in a random order (reproducible from `seed`).
    pub fn shuffled(n: usize, seed: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(&mut StdRng::seed_from_u64(seed));
        order
    }
}
