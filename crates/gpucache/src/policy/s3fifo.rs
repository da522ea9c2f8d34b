//! S3-FIFO: three static FIFO queues (Yang, Zhang, Qiu, Yue, Vinayak; SOSP 2023).
//!
//! New keys enter a small probationary queue holding about 10% of the tracked weight. A key
//! hit while there is promoted to the main queue when it reaches the front; an unhit key is
//! evicted and remembered in a ghost queue (hashes only). A key found in the ghost queue on
//! insertion goes straight to main. Main is a FIFO with reinsertion: a key with hits left is
//! moved to the back with one hit fewer instead of being evicted. One-hit wonders (scans)
//! never reach main, and a loop slightly larger than the cache keeps most of main resident
//! where LRU would evict every key just before its reuse.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering};

use super::list::{Links, Queue};
use super::{EntryId, EvictionPolicy};
use crate::hash::PassThroughBuildHasher;

/// Hits counted per entry saturate here (two bits, as in the paper).
const MAX_FREQ: u8 = 3;
/// The small queue's share of the tracked weight, in percent.
const SMALL_PERCENT: u64 = 10;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Place {
    #[default]
    Small,
    Main,
}

#[derive(Clone, Copy, Debug, Default)]
struct Meta {
    key_hash: u64,
    weight: u64,
    place: Place,
}

/// The S3-FIFO policy. See the module documentation.
#[derive(Debug, Default)]
pub struct S3Fifo {
    links: Links,
    meta: Vec<Meta>,
    /// Hits since insertion or the last pass of the queue's front, saturating at `MAX_FREQ`.
    /// Atomic so that hits can be recorded under a shared lock; lost updates between racing
    /// readers only make the count approximate, which the algorithm tolerates.
    freq: Vec<AtomicU8>,
    small: Queue,
    main: Queue,
    small_weight: u64,
    main_weight: u64,
    ghost: Ghost,
}

impl S3Fifo {
    fn freq(&mut self, id: EntryId) -> &mut u8 {
        self.freq[id as usize].get_mut()
    }

    /// Checks both queues, that every id is where its metadata says, that the weights are
    /// the sums of the queues' weights, that the ghost queue is consistent and that only ids
    /// `tracked` accepts are queued (tests and fuzzing).
    #[cfg(any(test, fuzzing))]
    pub(crate) fn validate(&self, tracked: &dyn Fn(EntryId) -> bool) {
        let mut seen = std::collections::HashSet::new();
        for (queue, place, weight) in [
            (&self.small, Place::Small, self.small_weight),
            (&self.main, Place::Main, self.main_weight),
        ] {
            let ids = queue.validate(&self.links, &mut seen);
            let mut sum = 0;
            for id in ids {
                assert!(tracked(id), "S3-FIFO tracks a free id {id}");
                let m = self.meta[id as usize];
                assert_eq!(m.place, place, "id {id} is on the other queue");
                assert!(self.freq[id as usize].load(Ordering::Relaxed) <= MAX_FREQ);
                sum += m.weight;
            }
            assert_eq!(sum, weight, "{place:?} weight disagrees with its entries");
        }
        // Every remembered hash is in the ghost's order under its latest sequence number.
        let ordered: std::collections::HashSet<(u64, u64)> =
            self.ghost.order.iter().copied().collect();
        for (&hash, &seq) in &self.ghost.live {
            assert!(
                ordered.contains(&(hash, seq)),
                "ghost {hash:x} lost its place"
            );
        }
    }

    fn untrack(&mut self, id: EntryId) {
        let m = self.meta[id as usize];
        match m.place {
            Place::Small => self.small_weight -= m.weight,
            Place::Main => self.main_weight -= m.weight,
        }
    }
}

impl EvictionPolicy for S3Fifo {
    fn insert(&mut self, id: EntryId, key_hash: u64, weight: u64) {
        let slot = id as usize;
        if self.meta.len() <= slot {
            self.meta.resize(slot + 1, Meta::default());
            self.freq.resize_with(slot + 1, AtomicU8::default);
        }
        *self.freq(id) = 0;
        let place = if self.ghost.take(key_hash) {
            Place::Main
        } else {
            Place::Small
        };
        self.meta[slot] = Meta {
            key_hash,
            weight,
            place,
        };
        match place {
            Place::Small => {
                self.small.push_back(&mut self.links, id);
                self.small_weight += weight;
            }
            Place::Main => {
                self.main.push_back(&mut self.links, id);
                self.main_weight += weight;
            }
        }
    }

    fn touch(&mut self, id: EntryId) {
        let f = self.freq(id);
        *f = (*f + 1).min(MAX_FREQ);
    }

    #[inline]
    fn touch_shared(&self, id: EntryId) -> bool {
        let f = &self.freq[id as usize];
        // Load first: a saturated counter is not written, so hot entries keep their cache
        // line clean across cores.
        let v = f.load(Ordering::Relaxed);
        if v < MAX_FREQ {
            f.store(v + 1, Ordering::Relaxed);
        }
        true
    }

    fn shared_touch(&self) -> bool {
        true
    }

    fn update(&mut self, id: EntryId, weight: u64) {
        let m = &mut self.meta[id as usize];
        match m.place {
            Place::Small => self.small_weight = self.small_weight - m.weight + weight,
            Place::Main => self.main_weight = self.main_weight - m.weight + weight,
        }
        m.weight = weight;
        self.touch(id);
    }

    fn remove(&mut self, id: EntryId) {
        self.untrack(id);
        match self.meta[id as usize].place {
            Place::Small => self.small.unlink(&mut self.links, id),
            Place::Main => self.main.unlink(&mut self.links, id),
        }
    }

    fn evict(&mut self) -> Option<EntryId> {
        // Each pass either returns a victim or strictly lowers some entry's frequency or moves
        // one entry from small to main, so the loop ends.
        loop {
            let total = self.small_weight + self.main_weight;
            let small_over_share = self.small_weight * 100 >= total * SMALL_PERCENT;
            if self.small.len() > 0 && (small_over_share || self.main.len() == 0) {
                let id = self.small.pop_front(&mut self.links)?;
                let hit = std::mem::take(self.freq(id)) > 0;
                let m = &mut self.meta[id as usize];
                if hit {
                    m.place = Place::Main;
                    self.small_weight -= m.weight;
                    self.main_weight += m.weight;
                    self.main.push_back(&mut self.links, id);
                    continue;
                }
                self.small_weight -= m.weight;
                let ghost_capacity = self.small.len() + self.main.len() + 1;
                self.ghost.remember(m.key_hash, ghost_capacity);
                return Some(id);
            }
            let id = self.main.pop_front(&mut self.links)?;
            let f = self.freq(id);
            if *f > 0 {
                *f -= 1;
                self.main.push_back(&mut self.links, id);
                continue;
            }
            self.main_weight -= self.meta[id as usize].weight;
            return Some(id);
        }
    }

    fn reserve_ids(&mut self, ids: usize) {
        super::reserve_exact_ids(&mut self.meta, ids);
        super::reserve_exact_ids(&mut self.freq, ids);
        self.links.reserve_ids(ids);
    }

    fn len(&self) -> usize {
        self.small.len() + self.main.len()
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

/// Hashes of keys recently evicted from the small queue, bounded to about as many entries as
/// the cache tracks.
#[derive(Debug, Default)]
struct Ghost {
    /// Live hashes, each with the sequence number of its latest `remember`.
    live: HashMap<u64, u64, PassThroughBuildHasher>,
    /// Insertion order; an item whose sequence number no longer matches `live` is stale.
    order: VecDeque<(u64, u64)>,
    next_seq: u64,
}

impl Ghost {
    fn remember(&mut self, key_hash: u64, capacity: usize) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.live.insert(key_hash, seq);
        self.order.push_back((key_hash, seq));
        // Drop the oldest until the live set fits, and keep stale items from piling up.
        while self.live.len() > capacity || self.order.len() > 2 * capacity + 16 {
            let Some((hash, seq)) = self.order.pop_front() else {
                break;
            };
            if self.live.get(&hash) == Some(&seq) {
                self.live.remove(&hash);
            }
        }
    }

    /// Whether `key_hash` was remembered; forgets it.
    fn take(&mut self, key_hash: u64) -> bool {
        self.live.remove(&key_hash).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_hit_wonders_leave_before_hit_entries() {
        let mut p = S3Fifo::default();
        for id in 0..10 {
            p.insert(id, 100 + u64::from(id), 1);
        }
        p.touch(0);
        p.touch(1);
        // 0 and 1 were hit in the small queue: promoted, not evicted.
        let first: Vec<_> = (0..8).map(|_| p.evict().unwrap()).collect();
        assert_eq!(first, vec![2, 3, 4, 5, 6, 7, 8, 9]);
        let rest: Vec<_> = std::iter::from_fn(|| p.evict()).collect();
        assert_eq!(rest, vec![0, 1]);
    }

    #[test]
    fn ghost_hit_goes_straight_to_main() {
        let mut p = S3Fifo::default();
        for id in 0..10 {
            p.insert(id, 100 + u64::from(id), 1);
        }
        assert_eq!(p.evict(), Some(0)); // hash 100 is now a ghost
        p.insert(0, 100, 1);
        assert_eq!(p.meta[0].place, Place::Main);
        assert_eq!(p.main_weight, 1);
        // A hash never seen goes to small.
        p.insert(10, 555, 1);
        assert_eq!(p.meta[10].place, Place::Small);
    }

    #[test]
    fn main_reinserts_entries_with_hits_left() {
        let mut p = S3Fifo::default();
        // Put three entries in main through the ghost.
        for id in 0..3 {
            p.insert(id, u64::from(id), 1);
        }
        for _ in 0..3 {
            p.evict().unwrap();
        }
        for id in 0..3 {
            p.insert(id, u64::from(id), 1);
        }
        p.touch(0);
        assert_eq!(p.evict(), Some(1));
        assert_eq!(p.evict(), Some(2));
        assert_eq!(p.evict(), Some(0));
        assert_eq!(p.main_weight + p.small_weight, 0);
    }

    #[test]
    fn shared_touch_counts_like_touch_and_update_reweighs() {
        let mut p = S3Fifo::default();
        p.insert(0, 1, 5);
        p.insert(1, 2, 5);
        assert!(p.shared_touch());
        for _ in 0..10 {
            assert!(p.touch_shared(0));
        }
        assert_eq!(*p.freq(0), MAX_FREQ);
        p.update(1, 8);
        assert_eq!(p.small_weight, 13);
        // Both were hit: both promoted (counts reset), then main evicts in FIFO order.
        assert_eq!(p.evict(), Some(0));
        assert_eq!(p.evict(), Some(1));
    }

    #[test]
    fn ghost_stays_bounded() {
        let mut g = Ghost::default();
        for h in 0..10_000 {
            g.remember(h, 50);
        }
        assert!(g.live.len() <= 50);
        assert!(g.order.len() <= 2 * 50 + 16);
        assert!(g.take(9_999));
        assert!(!g.take(0));
    }
}
