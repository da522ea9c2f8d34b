//! One shard of the memory tier: an index from key hash to slot, the slots, and a policy.
//!
//! Invariants, checked by [`Shard::validate`] in the model tests and the fuzz targets: `bytes`
//! is the sum of the charges of the occupied slots and never exceeds `max_bytes`; the number
//! of occupied slots never exceeds `max_entries` (within an insert whose policy decides
//! admission at the door, the policy tracks the newcomer, and `bytes` and `entries` count it,
//! one entry over, before its slot is written: see [`Shard::make_room_at_door`]); every
//! occupied slot is in `index` under its hash and tracked by `policy`; every free slot is on
//! the free list once.

use bytes::Bytes;
use hashbrown::HashTable;

use super::key::StoredKey;
use super::stats::StoreStats;
use crate::policy::{BuiltinPolicy, EntryId, EvictionPolicy};
use crate::{Error, InsertMode, Result};

/// Bytes charged per entry on top of its key and value: the slot (88 B, keys of up to 32 B
/// inline), the index bucket and control byte at the table's maximum load (6 B), the policy's
/// bookkeeping (W-TinyLFU, the largest: 24 B metadata, 8 B links, 1 B pending hits, 16 B of
/// frequency sketch and 4 B of admission regret, up to 32 B and 8 B after rounding their
/// tables up to a power of two), allocator
/// headers for a long key and the value (32 B), the free-list id (4 B), and the average slack
/// of the growing slot vector and index. A unit test checks it covers the static sizes.
pub const ENTRY_OVERHEAD: u64 = 192;

/// What [`Shard::find`] found: a hit names its slot, so the caller can record it.
pub(crate) enum Found {
    Hit(EntryId, Bytes),
    Miss,
    Collision,
}

#[derive(Debug)]
struct Slot {
    /// First: the index probe reads it, then the key compare, then the value.
    key_hash: u64,
    key: StoredKey,
    value: Bytes,
    charge: u64,
}

#[derive(Debug)]
pub(crate) struct Shard {
    /// Slot ids by key hash. Buckets hold only the 4-byte id (the hash is read from the slot),
    /// so the index of a hot shard stays in the first-level cache. At most one slot per hash.
    index: HashTable<EntryId>,
    slots: Vec<Option<Slot>>,
    free: Vec<EntryId>,
    policy: BuiltinPolicy,
    bytes: u64,
    entries: u64,
    max_bytes: u64,
    max_entries: u64,
    max_value_size: u64,
    stats: StoreStats,
    /// Entries evicted since the store last took them; kept only when a listener wants them.
    evicted: Vec<(StoredKey, Bytes)>,
    keep_evicted: bool,
}

impl Shard {
    pub(crate) fn new(
        policy: BuiltinPolicy,
        max_bytes: u64,
        max_entries: u64,
        max_value_size: u64,
        keep_evicted: bool,
    ) -> Self {
        Self {
            index: HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            policy,
            bytes: 0,
            entries: 0,
            max_bytes,
            max_entries,
            max_value_size,
            stats: StoreStats::default(),
            evicted: Vec::new(),
            keep_evicted,
        }
    }

    /// Finds `key` without recording anything. The caller records the hit, through
    /// [`touch_shared`](Self::touch_shared) under a read lock when the policy allows it, or
    /// [`touch`](Self::touch) under the write lock.
    pub(crate) fn find(&self, key_hash: u64, key: &[u8]) -> Found {
        let Some(id) = self.id_of(key_hash) else {
            return Found::Miss;
        };
        let slot = self.slots[id as usize]
            .as_ref()
            .expect("indexed slot is occupied");
        if !slot.key.matches(key) {
            return Found::Collision;
        }
        Found::Hit(id, slot.value.clone())
    }

    pub(crate) fn touch_shared(&self, id: EntryId) {
        self.policy.touch_shared(id);
    }

    pub(crate) fn touch(&mut self, id: EntryId) {
        self.policy.touch(id);
    }

    /// Whether the key is present; counts nothing and changes no order.
    pub(crate) fn contains(&self, key_hash: u64, key: &[u8]) -> bool {
        self.id_of(key_hash)
            .and_then(|id| self.slots[id as usize].as_ref())
            .is_some_and(|slot| slot.key.matches(key))
    }

    pub(crate) fn insert(
        &mut self,
        key_hash: u64,
        key: &[u8],
        value: Bytes,
        mode: InsertMode,
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
        // A stored key given a new value that does not fit in place: it was admitted once,
        // and its newest value must not vanish at the door.
        let mut resident = false;
        if let Some(id) = self.id_of(key_hash) {
            let same_key = self.slots[id as usize]
                .as_ref()
                .is_some_and(|slot| slot.key.matches(key));
            match (mode.refuses_existing(), same_key) {
                (true, true) => {
                    return Err(Error::AlreadyExists("an entry with this key is stored"))
                }
                (true, false) => return Err(Error::HashCollision),
                (false, true) if self.fits_in_place(id, charge) => {
                    self.replace_in_place(id, value, charge);
                    return Ok(());
                }
                (false, _) => {
                    resident = same_key;
                    self.policy.remove(id);
                    self.free_slot(id);
                }
            }
        }
        let over = |s: &Self| s.bytes + charge > s.max_bytes || s.entries >= s.max_entries;
        // W-TinyLFU decides the newcomer's admission at the door: the policy tracks it first
        // and may give it up, at once or after other victims (then the insert succeeds but
        // nothing is kept).
        let door = self.policy.inserts_first()
            && !mode.refuses_when_full()
            && !mode.keeps_newcomer()
            && !resident;
        if mode.refuses_when_full() {
            if over(self) {
                return Err(Error::CacheFull {
                    needed: charge,
                    available: if self.entries >= self.max_entries {
                        0
                    } else {
                        self.max_bytes - self.bytes
                    },
                });
            }
        } else if !door {
            self.evict_while(over);
        }
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                if self.slots.len() == self.slots.capacity() {
                    self.grow_slots();
                }
                self.slots.push(None);
                EntryId::try_from(self.slots.len() - 1).expect("fewer than 2^32 slots per shard")
            }
        };
        self.policy.insert(id, key_hash, charge);
        self.bytes += charge;
        self.entries += 1;
        self.stats.stores += 1;
        if door && !self.make_room_at_door(id, key, &value, charge) {
            return Ok(());
        }
        self.slots[id as usize] = Some(Slot {
            key: StoredKey::new(key),
            value,
            key_hash,
            charge,
        });
        let slots = &self.slots;
        self.index
            .insert_unique(key_hash, id, |&id| slot_hash(slots, id));
        Ok(())
    }

    /// Evicts for the newcomer `id`, which the policy already tracks but whose slot is not
    /// written yet, while over budget; returns whether it stays. A newcomer the policy gives
    /// up (refused at the door) is counted and reported as an eviction, as if it had been
    /// stored, but its slot and index entry are never written: where W-TinyLFU's window is
    /// closed most newcomers are refused at once, and writing them only to take them out
    /// again was about a quarter of such a put (`policy_hot_path`'s evicting put, 92-96 ns
    /// then, 66-67 ns now). The policy sees the same calls in the same order as when the slot
    /// was written first.
    fn make_room_at_door(&mut self, id: EntryId, key: &[u8], value: &Bytes, charge: u64) -> bool {
        while self.bytes > self.max_bytes || self.entries > self.max_entries {
            let Some(victim) = self.policy.evict() else {
                break;
            };
            if victim == id {
                self.bytes -= charge;
                self.entries -= 1;
                // Within budget before the insert, so within it now: nothing more to evict
                // (as when the newcomer's slot was written and taken out again).
                debug_assert!(self.bytes <= self.max_bytes && self.entries <= self.max_entries);
                self.free.push(id);
                self.stats.evictions += 1;
                if self.keep_evicted {
                    self.evicted.push((StoredKey::new(key), value.clone()));
                }
                return false;
            }
            self.evict(victim);
        }
        true
    }

    /// Makes room for one more slot: twice the table, but never past the entry budget and the
    /// one slot an insert at the door holds beyond it (see `door`), and the policy's per-id
    /// tables sized alike ([`EvictionPolicy::reserve_ids`]). Doubling alone left a table of
    /// 16,384 slots (88 B each, and 33 B of W-TinyLFU's tables) for a budget of 10,000, and
    /// doubled a budget of a power of two for its door's one slot.
    fn grow_slots(&mut self) {
        let len = self.slots.len();
        let most = usize::try_from(self.max_entries.saturating_add(1)).unwrap_or(usize::MAX);
        let want = len.saturating_mul(2).max(4).min(most).max(len + 1);
        self.slots.reserve_exact(want - len);
        self.policy.reserve_ids(self.slots.capacity());
    }

    /// Evicts in policy order while `over` holds (or until the policy tracks nothing).
    fn evict_while(&mut self, over: impl Fn(&Self) -> bool) {
        while over(self) {
            let Some(victim) = self.policy.evict() else {
                break;
            };
            self.evict(victim);
        }
    }

    /// Whether replacing slot `id`'s value with one charged `charge` keeps the budget
    /// without evicting (evicting could pick the entry being replaced).
    fn fits_in_place(&self, id: EntryId, charge: u64) -> bool {
        let old = self.slots[id as usize]
            .as_ref()
            .map_or(0, |slot| slot.charge);
        self.bytes - old + charge <= self.max_bytes
    }

    /// Swaps the value of an existing key: no new slot, key allocation or index change.
    fn replace_in_place(&mut self, id: EntryId, value: Bytes, charge: u64) {
        let slot = self.slots[id as usize]
            .as_mut()
            .expect("replaced slot is occupied");
        self.bytes = self.bytes - slot.charge + charge;
        slot.charge = charge;
        slot.value = value;
        self.policy.update(id, charge);
        self.stats.stores += 1;
    }

    pub(crate) fn remove(&mut self, key_hash: u64, key: &[u8]) -> bool {
        if !self.contains(key_hash, key) {
            return false;
        }
        let id = self.id_of(key_hash).expect("contained key is indexed");
        self.policy.remove(id);
        self.free_slot(id);
        true
    }

    /// Evicts in policy order until at most `target_bytes` are charged.
    pub(crate) fn evict_to(&mut self, target_bytes: u64) {
        self.evict_while(|s| s.bytes > target_bytes);
    }

    pub(crate) fn clear(&mut self) {
        self.index.clear();
        self.slots.clear();
        self.free.clear();
        self.policy.clear();
        // The slot table keeps its size; the policy's tables were freed and would otherwise
        // grow on their own again.
        self.policy.reserve_ids(self.slots.capacity());
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
            f(slot.key.as_slice(), &slot.value);
        }
    }

    /// What was evicted since the last call (empty unless built to keep it).
    pub(crate) fn take_evicted(&mut self) -> Vec<(StoredKey, Bytes)> {
        std::mem::take(&mut self.evicted)
    }

    /// Frees `victim`, which the policy has already given up.
    fn evict(&mut self, victim: EntryId) {
        let slot = self.free_slot(victim);
        self.stats.evictions += 1;
        if self.keep_evicted {
            self.evicted.push((slot.key, slot.value));
        }
    }

    fn free_slot(&mut self, id: EntryId) -> Slot {
        let key_hash = slot_hash(&self.slots, id);
        if let Ok(entry) = self.index.find_entry(key_hash, |&other| other == id) {
            entry.remove();
        }
        let slot = self.slots[id as usize]
            .take()
            .expect("freed slot is occupied");
        self.bytes -= slot.charge;
        self.entries -= 1;
        self.free.push(id);
        slot
    }
}

impl Shard {
    /// Slots made so far, occupied or free (tests).
    #[cfg(test)]
    pub(crate) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Slots the shard has room for without growing, and ids W-TinyLFU's tables have room
    /// for (tests).
    #[cfg(test)]
    pub(crate) fn slot_capacity(&self) -> (usize, Option<usize>) {
        let policy = match &self.policy {
            BuiltinPolicy::TinyLfu(p) => Some(p.id_capacity()),
            _ => None,
        };
        (self.slots.capacity(), policy)
    }

    /// Checks the invariants in the module documentation and the policy's own; panics with
    /// a description when one fails (tests and fuzzing only).
    #[cfg(any(test, fuzzing))]
    pub(crate) fn validate(&self) {
        let mut bytes = 0;
        let mut entries = 0u64;
        for (id, slot) in self.slots.iter().enumerate() {
            let Some(slot) = slot else { continue };
            let id = id as EntryId;
            bytes += slot.charge;
            entries += 1;
            assert_eq!(
                slot.charge,
                charge_of(slot.key.as_slice().len(), slot.value.len())
            );
            assert_eq!(self.id_of(slot.key_hash), Some(id), "slot {id} not indexed");
            assert!(
                !self.free.contains(&id),
                "occupied slot {id} on the free list"
            );
        }
        assert_eq!(
            (bytes, entries),
            (self.bytes, self.entries),
            "charges disagree"
        );
        assert!(self.bytes <= self.max_bytes, "over the byte budget");
        assert!(self.entries <= self.max_entries, "over the entry budget");
        assert_eq!(self.index.len() as u64, entries, "index holds stale ids");
        let mut free = self.free.clone();
        free.sort_unstable();
        free.dedup();
        assert_eq!(
            free.len(),
            self.free.len(),
            "a slot is on the free list twice"
        );
        assert_eq!(
            free.len() + entries as usize,
            self.slots.len(),
            "slots leaked"
        );
        assert_eq!(self.policy.len() as u64, entries, "policy tracks other ids");
        self.policy
            .validate(&|id| self.slots.get(id as usize).is_some_and(Option::is_some));
    }

    /// The slot holding a key with this hash, if any.
    #[inline]
    fn id_of(&self, key_hash: u64) -> Option<EntryId> {
        let slots = &self.slots;
        self.index
            .find(key_hash, |&id| slot_hash(slots, id) == key_hash)
            .copied()
    }
}

/// The key hash of an occupied slot (the index's rehash function).
#[inline]
fn slot_hash(slots: &[Option<Slot>], id: EntryId) -> u64 {
    slots[id as usize].as_ref().map_or(0, |slot| slot.key_hash)
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
        // (W-TinyLFU, the largest: 24 B meta, 8 B links, 1 B pending hits, 16 B sketch and
        // 4 B regret table at least) + two allocator headers of 16 B.
        // A bucket holds one id; the table keeps at most 7 of every 8 buckets full.
        let bucket = size_of::<EntryId>();
        let index_bucket = bucket + bucket.div_ceil(7) + 1;
        let policy = 24 + 8 + 1 + 16 + 4;
        let alloc_headers = 2 * 16;
        let free_list = size_of::<EntryId>();
        let need = size_of::<Option<Slot>>() + index_bucket + policy + alloc_headers + free_list;
        assert!(
            need as u64 <= ENTRY_OVERHEAD,
            "ENTRY_OVERHEAD {ENTRY_OVERHEAD} < {need}"
        );
    }
}
