//! Eviction policies.
//!
//! A policy only orders entries; its owner (the memory tier, later the disk tier and the
//! discardable manager) keeps the entries, checks the budget and asks the policy for victims
//! until the budget holds. Entries are named by small dense ids that the owner reuses.

mod list;
mod lru;
mod s3fifo;
mod tinylfu;

use std::fmt;

pub use lru::Lru;
pub use s3fifo::S3Fifo;
pub use tinylfu::TinyLfu;

/// A dense id naming one entry tracked by a policy (a slot index of the owner).
pub type EntryId = u32;

/// Grows `table`'s capacity to exactly `ids` entries unless it has that much
/// ([`EvictionPolicy::reserve_ids`]).
fn reserve_exact_ids<T>(table: &mut Vec<T>, ids: usize) {
    if table.capacity() < ids {
        table.reserve_exact(ids - table.len());
    }
}

/// Orders entries for eviction.
///
/// The owner guarantees: `insert` only for an id not tracked, `touch` and `remove` only for a
/// tracked id. `evict` picks a victim, stops tracking it and returns it.
pub trait EvictionPolicy: Send + Sync + fmt::Debug {
    /// Starts tracking `id`. `key_hash` identifies the key across re-insertions (ids are
    /// reused, hashes are not); `weight` is what the entry costs against the budget.
    fn insert(&mut self, id: EntryId, key_hash: u64, weight: u64);
    /// Records a hit on `id`.
    fn touch(&mut self, id: EntryId);
    /// Records a hit on `id` through a shared reference, so that lookups can run under a
    /// read lock. Returns `false` when the policy needs exclusive access (then the owner calls
    /// [`touch`](Self::touch) instead); [`shared_touch`](Self::shared_touch) says which.
    fn touch_shared(&self, _id: EntryId) -> bool {
        false
    }
    /// Whether [`touch_shared`](Self::touch_shared) records hits.
    fn shared_touch(&self) -> bool {
        false
    }
    /// The entry's value was replaced or resized: it now weighs `weight`, and the change
    /// counts as an access.
    fn update(&mut self, id: EntryId, weight: u64);
    /// Stops tracking `id` because its owner removed it (not an eviction).
    fn remove(&mut self, id: EntryId);
    /// Chooses the next victim, stops tracking it and returns it; `None` when empty. The
    /// victim may be the id inserted last (its admission refused: W-TinyLFU does so when an
    /// owner inserts before it evicts).
    fn evict(&mut self) -> Option<EntryId>;
    /// Whether an owner bounded by a budget should insert a new entry before it evicts for
    /// it, so that [`evict`](Self::evict) may refuse the newcomer itself (admission at the
    /// door: the newcomer is weighed against the residents it would displace), rather than
    /// make room first, which always keeps the newcomer at some resident's expense.
    fn inserts_first(&self) -> bool {
        false
    }
    /// Ids below `ids` may be inserted: a hint to size per-id tables as the owner sized its
    /// own, rather than double them on their own when an id first needs room. An owner that
    /// inserts first holds one id beyond a full budget; tables doubled for it would be half
    /// empty for the cache's life. Default: ignored.
    fn reserve_ids(&mut self, _ids: usize) {}
    /// Number of tracked ids.
    fn len(&self) -> usize;
    /// Whether nothing is tracked.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Forgets everything, including any history of evicted keys.
    fn clear(&mut self);
}

/// The policies gpucache ships.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PolicyKind {
    /// Least recently used: the seeds' choice. Thrashes on a loop just larger than the cache.
    Lru,
    /// S3-FIFO (Yang et al., SOSP 2023): a small probationary FIFO, a main FIFO with
    /// reinsertion, and a ghost queue of recently evicted keys. Resists scans and loops.
    S3Fifo,
    /// W-TinyLFU with an adaptive window (Caffeine's design): a small admission window, a
    /// segmented main space, and admission by a frequency sketch that remembers evicted
    /// keys. Keeps the most hits of the three on frequency, scan, loop and shifting traces.
    #[default]
    TinyLfu,
}

impl PolicyKind {
    /// A fresh policy of this kind.
    pub fn build(self) -> Box<dyn EvictionPolicy> {
        Box::new(self.build_builtin())
    }

    /// Whether the policy records hits under a read lock (what its
    /// [`shared_touch`](EvictionPolicy::shared_touch) says), without building one.
    pub(crate) fn records_hits_shared(self) -> bool {
        !matches!(self, PolicyKind::Lru)
    }

    pub(crate) fn build_builtin(self) -> BuiltinPolicy {
        match self {
            PolicyKind::Lru => BuiltinPolicy::Lru(Lru::default()),
            PolicyKind::S3Fifo => BuiltinPolicy::S3Fifo(S3Fifo::default()),
            PolicyKind::TinyLfu => BuiltinPolicy::TinyLfu(TinyLfu::default()),
        }
    }

    /// The policy's short name, as printed by tools.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Lru => "lru",
            PolicyKind::S3Fifo => "s3-fifo",
            PolicyKind::TinyLfu => "w-tinylfu",
        }
    }

    /// Every shipped policy, the default last.
    pub const ALL: [PolicyKind; 3] = [PolicyKind::Lru, PolicyKind::S3Fifo, PolicyKind::TinyLfu];
}

/// The shipped policies behind static dispatch, so that the lookup path inlines `touch`.
// One per shard, built when the shard is and never moved after: W-TinyLFU's variant being
// larger costs nothing, while boxing it would add a pointer chase to every lookup.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum BuiltinPolicy {
    Lru(Lru),
    S3Fifo(S3Fifo),
    TinyLfu(TinyLfu),
}

impl BuiltinPolicy {
    /// Checks the policy's structures; `tracked` says which ids its owner holds.
    #[cfg(any(test, fuzzing))]
    pub(crate) fn validate(&self, tracked: &dyn Fn(EntryId) -> bool) {
        match self {
            BuiltinPolicy::Lru(p) => p.validate(tracked),
            BuiltinPolicy::S3Fifo(p) => p.validate(tracked),
            BuiltinPolicy::TinyLfu(p) => p.validate(tracked),
        }
    }
}

macro_rules! dispatch {
    ($self:ident, $p:ident => $e:expr) => {
        match $self {
            BuiltinPolicy::Lru($p) => $e,
            BuiltinPolicy::S3Fifo($p) => $e,
            BuiltinPolicy::TinyLfu($p) => $e,
        }
    };
}

impl EvictionPolicy for BuiltinPolicy {
    #[inline]
    fn insert(&mut self, id: EntryId, key_hash: u64, weight: u64) {
        dispatch!(self, p => p.insert(id, key_hash, weight))
    }
    #[inline]
    fn touch(&mut self, id: EntryId) {
        dispatch!(self, p => p.touch(id))
    }
    #[inline]
    fn touch_shared(&self, id: EntryId) -> bool {
        dispatch!(self, p => p.touch_shared(id))
    }
    #[inline]
    fn shared_touch(&self) -> bool {
        dispatch!(self, p => p.shared_touch())
    }
    #[inline]
    fn update(&mut self, id: EntryId, weight: u64) {
        dispatch!(self, p => p.update(id, weight))
    }
    #[inline]
    fn remove(&mut self, id: EntryId) {
        dispatch!(self, p => p.remove(id))
    }
    #[inline]
    fn evict(&mut self) -> Option<EntryId> {
        dispatch!(self, p => p.evict())
    }
    #[inline]
    fn inserts_first(&self) -> bool {
        dispatch!(self, p => p.inserts_first())
    }

    fn reserve_ids(&mut self, ids: usize) {
        dispatch!(self, p => p.reserve_ids(ids))
    }
    #[inline]
    fn len(&self) -> usize {
        dispatch!(self, p => p.len())
    }
    #[inline]
    fn clear(&mut self) {
        dispatch!(self, p => p.clear())
    }
}

impl std::str::FromStr for PolicyKind {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "lru" => Ok(PolicyKind::Lru),
            "s3-fifo" | "s3fifo" => Ok(PolicyKind::S3Fifo),
            "w-tinylfu" | "tinylfu" | "wtinylfu" => Ok(PolicyKind::TinyLfu),
            other => Err(crate::Error::InvalidArgument(format!(
                "unknown eviction policy {other:?} (expected lru, s3-fifo or w-tinylfu)"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Behaviour every policy must have, whatever its order.
    fn check_contract(kind: PolicyKind) {
        let mut p = kind.build();
        assert!(p.is_empty());
        assert_eq!(p.evict(), None);
        for id in 0..10 {
            p.insert(id, u64::from(id) * 7919, 1);
        }
        p.touch(3);
        p.update(4, 3);
        p.remove(5);
        assert_eq!(p.len(), 9);
        let mut seen = Vec::new();
        while let Some(id) = p.evict() {
            seen.push(id);
        }
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1, 2, 3, 4, 6, 7, 8, 9], "{kind:?}");
        assert!(p.is_empty());
        // Ids are reusable after eviction or removal.
        p.insert(5, 1, 1);
        p.insert(0, 2, 1);
        assert_eq!(p.len(), 2);
        p.clear();
        assert!(p.is_empty());
        assert_eq!(p.evict(), None);
    }

    #[test]
    fn every_policy_keeps_the_contract() {
        for kind in PolicyKind::ALL {
            check_contract(kind);
        }
    }

    #[test]
    fn the_kind_tells_whether_hits_are_recorded_under_a_read_lock() {
        for kind in PolicyKind::ALL {
            assert_eq!(
                kind.records_hits_shared(),
                kind.build_builtin().shared_touch(),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn kinds_parse_by_name() {
        for kind in PolicyKind::ALL {
            assert_eq!(kind.name().parse::<PolicyKind>().unwrap(), kind);
        }
        assert!("arc".parse::<PolicyKind>().is_err());
    }
}
