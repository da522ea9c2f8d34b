//! One shard of the memory tier: an index from key hash to slot, the slots, and a policy.
//!
//! Invariants, checked by the model tests: `bytes` is the sum of the charges of the occupied
//! slots and never exceeds `max_bytes`; the number of occupied slots never exceeds
//! `max_entries`; every occupied slot is in `index` under its hash and tracked by `policy`.

use std::collections::HashMap;

use bytes::Bytes;

use super::stats::StoreStats;
use crate::hash::PassThroughBuildHasher;
use crate::policy::{EntryId, EvictionPolicy};
use crate::{Error, Result};

/// Bytes charged per entry on top of its key and value: the slot (64 B), the index bucket at
/// the map's maximum load factor (20 B), the policy's bookkeeping (32 B), the allocator's
/// headers for the key and value allocations (32 B), the free-list id, and the average slack
/// of the growing slot vector and index. A unit test checks it covers the static sizes.
pub const ENTRY_OVERHEAD: u64 = 192;

/// What a lookup found.
pub(crate) enum Lookup {
    Hit(Bytes),
    Miss,
    /// Another key with the same hash is stored.
    Collision,
}

/// What `insert` does when the key or its hash is present.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnExisting {
    /// The newest value wins (EGL); a colliding key is displaced.
    Replace,
    /// Refuse with `AlreadyExists` or `HashCollision` (D3D12).
    Refuse,
}

/// What `insert` does when the entry does not fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WhenFull {
    Evict,
    /// Refuse with `CacheFull` (a D3D12 memory session).
    Refuse,
}

#[derive(Debug)]
struct Slot {
    key: Box<[u8]>,
    value: Bytes,
    key_hash: u64,
    charge: u64,
}

#[derive(Debug)]
pub(crate) struct Shard {
    index: HashMap<u64, EntryId, PassThroughBuildHasher>,
    slots: Vec<Option<Slot>>,
    free: Vec<EntryId>,
    policy: Box<dyn EvictionPolicy>,
    bytes: u64,
    entries: u64,
    max_bytes: u64,
    max_entries: u64,
    max_value_size: u64,
    stats: StoreStats,
}

impl Shard {
    pub(crate) fn new(
        policy: Box<dyn EvictionPolicy>,
        max_bytes: u64,
        max_entries: u64,
        max_value_size: u64,
    ) -> Self {
        Self {
            index: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            policy,
            bytes: 0,
            entries: 0,
            max_bytes,
            max_entries,
            max_value_size,
            stats: StoreStats::default(),
        }
    }

    pub(crate) fn lookup(&mut self, key_hash: u64, key: &[u8]) -> Lookup {
        let Some(&id) = self.index.get(&key_hash) else {
            self.stats.misses += 1;
            return Lookup::Miss;
        };
        let slot = self.slots[id as usize]
            .as_ref()
            .expect("indexed slot is occupied");
        if *slot.key != *key {
            self.stats.misses += 1;
            return Lookup::Collision;
        }
        let value = slot.value.clone();
        self.policy.touch(id);
        self.stats.hits += 1;
        Lookup::Hit(value)
    }

    /// Whether the key is present; counts nothing and changes no order.
    pub(crate) fn contains(&self, key_hash: u64, key: &[u8]) -> bool {
        self.index
            .get(&key_hash)
            .and_then(|&id| self.slots[id as usize].as_ref())
            .is_some_and(|slot| *slot.key == *key)
    }

    pub(crate) fn insert(
        &mut self,
        key_hash: u64,
        key: &[u8],
        value: Bytes,
        on_existing: OnExisting,
        when_full: WhenFull,
    ) -> Result<()> {
        let charge = charge_of(key.len(), value.len());
        let value_len = value.len() as u64;
        if value_len > self.max_value_size || charge > self.max_bytes || self.max_entries == 0 {
            self.stats.rejected_too_large += 1;
            return Err(Error::ValueTooLarge {
                size: value_len,
                limit: self.max_value_size.min(
                    self.max_bytes
                        .saturating_sub(ENTRY_OVERHEAD + key.len() as u64),
                ),
            });
        }
        if let Some(&id) = self.index.get(&key_hash) {
            let same_key = self.slots[id as usize]
                .as_ref()
                .is_some_and(|slot| *slot.key == *key);
            match (on_existing, same_key) {
                (OnExisting::Refuse, true) => {
                    return Err(Error::AlreadyExists("an entry with this key is stored"))
                }
                (OnExisting::Refuse, false) => return Err(Error::HashCollision),
                (OnExisting::Replace, _) => {
                    self.policy.remove(id);
                    self.free_slot(id);
                }
            }
        }
        match when_full {
            WhenFull::Evict => {
                while self.bytes + charge > self.max_bytes || self.entries >= self.max_entries {
                    let Some(victim) = self.policy.evict() else {
                        break;
                    };
                    self.free_slot(victim);
                    self.stats.evictions += 1;
                }
            }
            WhenFull::Refuse => {
                if self.bytes + charge > self.max_bytes || self.entries >= self.max_entries {
                    return Err(Error::CacheFull {
                        needed: charge,
                        available: if self.entries >= self.max_entries {
                            0
                        } else {
                            self.max_bytes - self.bytes
                        },
                    });
                }
            }
        }
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.slots.push(None);
                EntryId::try_from(self.slots.len() - 1).expect("fewer than 2^32 slots per shard")
            }
        };
        self.slots[id as usize] = Some(Slot {
            key: key.into(),
            value,
            key_hash,
            charge,
        });
        self.index.insert(key_hash, id);
        self.policy.insert(id, key_hash, charge);
        self.bytes += charge;
        self.entries += 1;
        self.stats.stores += 1;
        Ok(())
    }

    pub(crate) fn remove(&mut self, key_hash: u64, key: &[u8]) -> bool {
        if !self.contains(key_hash, key) {
            return false;
        }
        let id = self.index[&key_hash];
        self.policy.remove(id);
        self.free_slot(id);
        true
    }

    /// Evicts in policy order until at most `target_bytes` are charged.
    pub(crate) fn evict_to(&mut self, target_bytes: u64) {
        while self.bytes > target_bytes {
            let Some(victim) = self.policy.evict() else {
                break;
            };
            self.free_slot(victim);
            self.stats.evictions += 1;
        }
    }

    pub(crate) fn clear(&mut self) {
        self.index.clear();
        self.slots.clear();
        self.free.clear();
        self.policy.clear();
        self.bytes = 0;
        self.entries = 0;
    }

    pub(crate) fn stats(&self) -> StoreStats {
        StoreStats {
            bytes: self.bytes,
            entries: self.entries,
            max_bytes: self.max_bytes,
            max_entries: self.max_entries,
            ..self.stats
        }
    }

    /// Calls `f` on every entry (order unspecified).
    pub(crate) fn for_each(&self, f: &mut dyn FnMut(&[u8], &Bytes)) {
        for slot in self.slots.iter().flatten() {
            f(&slot.key, &slot.value);
        }
    }

    fn free_slot(&mut self, id: EntryId) {
        let slot = self.slots[id as usize]
            .take()
            .expect("freed slot is occupied");
        self.index.remove(&slot.key_hash);
        self.bytes -= slot.charge;
        self.entries -= 1;
        self.free.push(id);
    }
}

/// What an entry costs against the byte budget.
pub(crate) fn charge_of(key_len: usize, value_len: usize) -> u64 {
    key_len as u64 + value_len as u64 + ENTRY_OVERHEAD
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overhead_covers_the_static_sizes() {
        use std::mem::size_of;
        // Slot + index bucket at 7/8 load + one control byte + policy metadata and links
        // (S3-FIFO: 24 B meta, 8 B links) + two allocator headers of 16 B.
        let index_bucket = (size_of::<(u64, EntryId)>() * 8).div_ceil(7) + 1;
        let policy = 24 + 8;
        let alloc_headers = 2 * 16;
        let free_list = size_of::<EntryId>();
        let need = size_of::<Option<Slot>>() + index_bucket + policy + alloc_headers + free_list;
        assert!(
            need as u64 <= ENTRY_OVERHEAD,
            "ENTRY_OVERHEAD {ENTRY_OVERHEAD} < {need}"
        );
    }
}
