//! Stored keys: up to 32 bytes inline in the slot, longer ones on the heap.
//!
//! Drivers key their caches with 20- to 32-byte hashes; keeping those inline saves an
//! allocation per entry and a dependent cache miss on every lookup's key comparison.

const INLINE: usize = 32;

#[derive(Clone, Debug)]
pub(crate) enum StoredKey {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl StoredKey {
    pub(crate) fn new(key: &[u8]) -> Self {
        if key.len() <= INLINE {
            let mut bytes = [0u8; INLINE];
            bytes[..key.len()].copy_from_slice(key);
            StoredKey::Inline {
                len: key.len() as u8,
                bytes,
            }
        } else {
            StoredKey::Heap(key.into())
        }
    }

    /// Whether this is `key`. Short keys are compared word by word inline: a call to the C
    /// library's `memcmp` costs more than the comparison itself at these sizes.
    #[inline]
    pub(crate) fn matches(&self, key: &[u8]) -> bool {
        match self {
            StoredKey::Inline { len, bytes } => {
                usize::from(*len) == key.len() && short_eq(&bytes[..key.len()], key)
            }
            StoredKey::Heap(bytes) => **bytes == *key,
        }
    }

    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            StoredKey::Inline { len, bytes } => &bytes[..usize::from(*len)],
            StoredKey::Heap(bytes) => bytes,
        }
    }
}

/// Equality of two slices of equal length, at most `INLINE` bytes.
#[inline]
fn short_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = 0u64;
    let (a8, a_rest) = a.split_at(a.len() / 8 * 8);
    let (b8, b_rest) = b.split_at(a8.len());
    for (x, y) in a8.chunks_exact(8).zip(b8.chunks_exact(8)) {
        let x = u64::from_ne_bytes(x.try_into().expect("8-byte chunk"));
        let y = u64::from_ne_bytes(y.try_into().expect("8-byte chunk"));
        diff |= x ^ y;
    }
    for (x, y) in a_rest.iter().zip(b_rest) {
        diff |= u64::from(x ^ y);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_keys_round_trip() {
        for len in [0, 1, 20, 32, 33, 1000] {
            let key: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let stored = StoredKey::new(&key);
            assert_eq!(stored.as_slice(), &key[..]);
            assert_eq!(matches!(stored, StoredKey::Inline { .. }), len <= 32);
            assert!(stored.matches(&key));
            let mut other = key.clone();
            if let Some(last) = other.last_mut() {
                *last ^= 1;
                assert!(!stored.matches(&other));
            }
            other.push(0);
            assert!(!stored.matches(&other));
        }
    }
}
