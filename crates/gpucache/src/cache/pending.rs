//! Writes the lower tiers do not have yet, so that nothing older is served meanwhile.
//!
//! The memory tier answers for a key until it evicts it; the lower tiers answer after that.
//! Between a store (or removal) and the write-behind thread writing it, the lower tiers
//! still hold the key's older value, and a value read from them may be older than a write
//! made while it was read. Every store, removal and clear takes a sequence number here:
//!
//! - a store or removal is recorded (key → sequence number, and the value or a tombstone)
//!   until the writer has written it to every lower tier; a lookup that misses memory asks
//!   here first, and never reads the lower tiers for a key recorded here;
//! - a store that is not queued (queue full, no writer) or whose write failed leaves a
//!   tombstone, kept until a later write of the key is written, or a clear: the older value
//!   below must not answer for it;
//! - a value read from below goes into memory (or up to the tiers above its own) only if
//!   no write of its key, and no clear, came after the read began. A write already written
//!   is no longer recorded, so the highest sequence number written stands for it: a read
//!   that overlapped any write skips the install (a later lookup reads again);
//! - while the start-up preload runs, every key written is remembered, and the preload never
//!   installs one of them (what it read was on disk before they were written).
//!
//! Lock order: a memory shard's lock, then this lock (installs check here under the shard
//! lock, so that no write slips between the check and the insert); writers record here and
//! release the lock before touching memory.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use parking_lot::Mutex;

use super::write_behind::Queue;
use crate::{InsertMode, Store};

/// A value found below memory goes into memory unless a newer one got there first; a full
/// memory tier evicts for it.
const KEEP_NEWER: InsertMode = InsertMode::REPLACE.refuse_existing(true);

/// Keeps `value`, read from tier `tier` since sequence number `since`, in memory and in the
/// tiers above its own, unless a write of `key` or a clear came since (the checks run
/// under the memory shard's lock, so that none slips in before the insert).
pub(crate) fn install(
    memory: &Store,
    pending: &Pending,
    queue: Option<&Queue>,
    key: &[u8],
    value: Bytes,
    since: u64,
    tier: usize,
) {
    let current = || pending.if_current(key, since, || ());
    let _ = memory.insert_if(key, value.clone(), KEEP_NEWER, current);
    if let Some(queue) = queue.filter(|_| tier > 0) {
        pending.if_current(key, since, || {
            queue.put_above(Bytes::copy_from_slice(key), value, tier);
        });
    }
}

/// What is recorded for a key.
#[derive(Clone, Debug)]
struct Entry {
    seq: u64,
    /// `None`: a tombstone (removed, or a newer value the lower tiers do not have).
    value: Option<Bytes>,
    /// The storing thread has yet to put the value into memory: the entry stays until it
    /// has ([`Pending::unpin`]), so that [`Pending::is_latest`] can tell this store from a
    /// newer one of the same key even when the writer was quicker than the memory insert.
    pinned: bool,
    /// Written to every lower tier while pinned: forgotten when unpinned.
    written: bool,
}

#[derive(Debug, Default)]
struct State {
    /// Sequence number of the latest store, removal or clear.
    seq: u64,
    /// Sequence number of the latest clear.
    clear_seq: u64,
    /// Clears queued and not yet applied to the lower tiers: until then they read as empty.
    clearing: u32,
    /// The highest sequence number written to the lower tiers.
    written: u64,
    entries: HashMap<Bytes, Entry>,
    /// Keys written since the preload started; `None` once it has finished.
    touched: Option<HashSet<Bytes>>,
}

/// What a lookup that missed memory does next.
#[derive(Debug)]
pub(crate) enum Below {
    /// The latest write's value, not yet in the lower tiers.
    Value(Bytes),
    /// Removed (or not persisted): the lower tiers' value is older. A miss.
    Removed,
    /// Read the lower tiers; a value read is installed only if nothing was written since
    /// this sequence number.
    Read(u64),
}

/// The pending writes of one cache.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    state: Mutex<State>,
}

impl Pending {
    /// Starts remembering the keys written, for a preload about to start.
    pub(crate) fn preload_started(&self) {
        self.state.lock().touched = Some(HashSet::new());
    }

    /// The preload has finished: forgets the keys written.
    pub(crate) fn preload_finished(&self) {
        self.state.lock().touched = None;
    }

    /// Records a store of `value` (`None`: a removal, or a value that will not reach the
    /// lower tiers) and runs `queue` under the lock, so that the writer sees the writes of
    /// a key in order. `queue` gets the sequence number and says whether it queued the
    /// write; a value not queued is recorded as a tombstone. A `pin`ned store stays
    /// recorded until [`unpin`](Self::unpin), written or not.
    pub(crate) fn record(
        &self,
        key: &[u8],
        value: Option<Bytes>,
        pin: bool,
        queue: impl FnOnce(u64) -> bool,
    ) -> u64 {
        let mut s = self.state.lock();
        s.seq += 1;
        let seq = s.seq;
        let queued = queue(seq);
        let key = Bytes::copy_from_slice(key);
        if let Some(touched) = &mut s.touched {
            touched.insert(key.clone());
        }
        let value = value.filter(|_| queued);
        let entry = Entry {
            seq,
            value,
            pinned: pin,
            written: false,
        };
        s.entries.insert(key, entry);
        seq
    }

    /// The store of sequence number `seq` of `key` is in memory (or was refused there):
    /// its record is no longer pinned, and is forgotten if the writer has written it.
    pub(crate) fn unpin(&self, key: &[u8], seq: u64) {
        let mut s = self.state.lock();
        if let Some(entry) = s.entries.get_mut(key) {
            if entry.seq == seq {
                entry.pinned = false;
                if entry.written {
                    s.entries.remove(key);
                }
            }
        }
    }

    /// Records a clear and runs `queue` (which queues it) under the lock; the lower tiers
    /// read as empty until [`cleared`](Self::cleared).
    pub(crate) fn clear<T>(&self, queue: impl FnOnce() -> T) -> T {
        let mut s = self.state.lock();
        s.seq += 1;
        s.clear_seq = s.seq;
        s.clearing += 1;
        s.entries.clear();
        queue()
    }

    /// The clear queued by [`clear`](Self::clear) has been applied (or has failed).
    pub(crate) fn cleared(&self) {
        let mut s = self.state.lock();
        s.clearing = s.clearing.saturating_sub(1);
    }

    /// The writer has handed these writes to every lower tier: forgets them, or with
    /// `ok` false turns their values into tombstones (the lower tiers may still hold older
    /// values).
    pub(crate) fn written(&self, writes: impl Iterator<Item = (Bytes, u64)>, ok: bool) {
        let mut s = self.state.lock();
        for (key, seq) in writes {
            s.written = s.written.max(seq);
            if let Some(entry) = s.entries.get_mut(&key) {
                if entry.seq != seq {
                    continue; // A newer write of the key is still on its way.
                }
                if !ok {
                    entry.value = None;
                } else if entry.pinned {
                    entry.written = true;
                } else {
                    s.entries.remove(&key);
                }
            }
        }
    }

    /// What a lookup that missed memory finds here.
    pub(crate) fn below(&self, key: &[u8]) -> Below {
        let s = self.state.lock();
        match s.entries.get(key) {
            Some(Entry {
                value: Some(value), ..
            }) => Below::Value(value.clone()),
            Some(Entry { value: None, .. }) => Below::Removed,
            None if s.clearing > 0 => Below::Removed,
            None => Below::Read(s.seq),
        }
    }

    /// Whether the key is recorded: `Some(true)` with a value, `Some(false)` as removed.
    pub(crate) fn holds(&self, key: &[u8]) -> Option<bool> {
        self.state
            .lock()
            .entries
            .get(key)
            .map(|e| e.value.is_some())
    }

    /// Whether a value of `key` read from below since sequence number `since` is still the
    /// latest: no write of the key, no clear, and no write written since then.
    fn current(s: &State, key: &[u8], since: u64) -> bool {
        s.clearing == 0
            && s.clear_seq <= since
            && s.written <= since
            && s.entries.get(key).is_none_or(|e| e.seq <= since)
    }

    /// Runs `f` (an install) if a value of `key` read since `since` is still the latest;
    /// whether it ran. Called under the memory shard's lock.
    pub(crate) fn if_current(&self, key: &[u8], since: u64, f: impl FnOnce()) -> bool {
        let s = self.state.lock();
        let current = Self::current(&s, key, since);
        if current {
            f();
        }
        current
    }

    /// Whether a store of sequence number `seq` is still the key's latest write (its value
    /// may go into memory). Called under the memory shard's lock.
    pub(crate) fn is_latest(&self, key: &[u8], seq: u64) -> bool {
        let s = self.state.lock();
        // The store is pinned until its memory insert is done: no record of `seq` means a
        // newer write of the key or a clear replaced it.
        s.clear_seq < seq && s.entries.get(key).is_some_and(|e| e.seq == seq)
    }

    /// Runs `f` (a preload install) unless `key` was written since the preload started, or
    /// the preload is over; whether it ran.
    pub(crate) fn if_untouched(&self, key: &[u8], f: impl FnOnce()) -> bool {
        let s = self.state.lock();
        let untouched = s.clearing == 0 && s.touched.as_ref().is_some_and(|t| !t.contains(key));
        if untouched {
            f();
        }
        untouched
    }

    /// Keys recorded now (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.state.lock().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_written_before_its_memory_insert_is_still_the_latest() {
        // Two threads store two keys; the writer writes both before the first thread puts
        // its value into memory. Its store is still the key's latest: memory must take it
        // (before pinning, the higher sequence number written of the other key made it look
        // overtaken, and the value reached neither memory nor, with the disk gone, anything).
        let p = Pending::default();
        let a = p.record(b"a", Some(Bytes::from_static(b"1")), true, |_| true);
        let b = p.record(b"b", Some(Bytes::from_static(b"2")), true, |_| true);
        p.written(
            [(Bytes::from_static(b"a"), a), (Bytes::from_static(b"b"), b)].into_iter(),
            true,
        );
        assert!(p.is_latest(b"a", a));
        assert!(p.is_latest(b"b", b));
        p.unpin(b"a", a);
        p.unpin(b"b", b);
        assert_eq!(p.len(), 0, "written and unpinned: forgotten");
    }

    #[test]
    fn a_newer_store_of_the_key_or_a_clear_overtakes_a_pinned_one() {
        let p = Pending::default();
        let old = p.record(b"k", Some(Bytes::from_static(b"old")), true, |_| true);
        let new = p.record(b"k", Some(Bytes::from_static(b"new")), true, |_| true);
        p.written(
            [
                (Bytes::from_static(b"k"), old),
                (Bytes::from_static(b"k"), new),
            ]
            .into_iter(),
            true,
        );
        assert!(!p.is_latest(b"k", old));
        assert!(p.is_latest(b"k", new));
        p.unpin(b"k", old); // Leaves the newer record alone.
        assert!(p.is_latest(b"k", new));
        p.clear(|| ());
        assert!(!p.is_latest(b"k", new));
        p.unpin(b"k", new);
        assert_eq!(p.len(), 0);
    }
}
