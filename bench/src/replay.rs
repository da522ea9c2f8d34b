//! Replays a trace through a cache as an application sees it (`get`, and `insert` on a
//! miss) and counts the hits: gpucache's `Store` with each of its policies, and the peers
//! moka (W-TinyLFU) and quick_cache (S3-FIFO-like with a ghost queue), each bounded the same
//! way (entries, or bytes for a sized trace) and each as one unsharded cache.

use std::sync::Arc;

use bytes::Bytes;
use gpucache::{PolicyKind, StoreBuilder, Xxh3KeyHasher};

use crate::traces::{charge, Trace};

/// A cache in the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contender {
    /// gpucache's memory tier with this policy.
    Gpucache(PolicyKind),
    /// `moka::sync::Cache`, maintenance run after every insertion so that it never holds
    /// more than its bound.
    Moka,
    /// `quick_cache::unsync::Cache` (one shard).
    QuickCache,
}

impl Contender {
    /// Every contender: gpucache's policies, then the peers.
    pub fn all() -> Vec<Contender> {
        let mut all: Vec<_> = PolicyKind::ALL
            .into_iter()
            .map(Contender::Gpucache)
            .collect();
        all.extend([Contender::Moka, Contender::QuickCache]);
        all
    }

    /// The name printed in tables.
    pub fn name(self) -> String {
        match self {
            Contender::Gpucache(kind) => kind.name().to_string(),
            Contender::Moka => "moka".into(),
            Contender::QuickCache => "quick_cache".into(),
        }
    }

    /// Whether this is a peer (not gpucache).
    pub fn is_peer(self) -> bool {
        !matches!(self, Contender::Gpucache(_))
    }
}

/// Hits of one replay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hits {
    /// Requests that hit.
    pub hits: u64,
    /// Value bytes of the requests that hit (equal to `hits` for a unit trace).
    pub bytes: u64,
}

/// Zero bytes that sized values are cut from, so that a replay holds no value memory.
static ZEROS: [u8; (1 << 20) + 1] = [0; (1 << 20) + 1];

/// Replays `trace` through `contender`.
pub fn replay(trace: &Trace, contender: Contender) -> Hits {
    replay_observed(trace, contender, None, None)
}

/// Replays `trace` through gpucache's store with `kind`, its key hasher seeded with `seed`:
/// the same hits on every run and machine (the store's default seed is random, and with it
/// the hits move by a few tenths of a percent from run to run).
pub fn replay_seeded(trace: &Trace, kind: PolicyKind, seed: u64) -> Hits {
    replay_observed(trace, Contender::Gpucache(kind), Some(seed), None)
}

/// One request of a replay, as [`replay_observed`] reports it: whether it hit, its value's
/// size, and what the cache held right after it (entries, and their total charge).
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub hit: bool,
    pub size: u64,
    pub entries: u64,
    pub weight: u64,
}

/// [`replay`], with gpucache's hasher seeded by `seed` (ignored for the peers), calling
/// `observe` after every request.
pub fn replay_observed(
    trace: &Trace,
    contender: Contender,
    seed: Option<u64>,
    mut observe: Option<&mut dyn FnMut(Step)>,
) -> Hits {
    let mut hits = Hits::default();
    let mut record = |i: usize, hit: bool, held: &dyn Fn() -> (u64, u64)| {
        if hit {
            count(&mut hits, trace, i);
        }
        if let Some(observe) = observe.as_mut() {
            let (entries, weight) = held();
            observe(Step {
                hit,
                size: size_at(trace, i),
                entries,
                weight,
            });
        }
    };
    match contender {
        Contender::Gpucache(kind) => replay_gpucache(trace, kind, seed, &mut record),
        Contender::Moka => replay_moka(trace, &mut record),
        Contender::QuickCache => replay_quick_cache(trace, &mut record),
    }
    hits
}

/// What a replay reports for request `i`: whether it hit, and a way to ask what the cache
/// holds (asked only when someone observes).
type Record<'a> = dyn FnMut(usize, bool, &dyn Fn() -> (u64, u64)) + 'a;

/// The value size of request `i` (1 for a unit trace).
fn size_at(trace: &Trace, i: usize) -> u64 {
    trace.sizes.get(i).map_or(1, |&s| u64::from(s))
}

fn count(hits: &mut Hits, trace: &Trace, i: usize) {
    hits.hits += 1;
    hits.bytes += size_at(trace, i);
}

fn replay_gpucache(trace: &Trace, kind: PolicyKind, seed: Option<u64>, record: &mut Record<'_>) {
    let builder = StoreBuilder::new().shards(1).policy(kind);
    let builder = match seed {
        Some(seed) => builder.hasher(Arc::new(Xxh3KeyHasher::with_seed(seed))),
        None => builder,
    };
    let builder = if trace.sized() {
        builder.max_bytes(trace.byte_budget())
    } else {
        builder
            .max_entries(trace.capacity as u64)
            .max_bytes(u64::MAX / 2)
    };
    let store = builder.build().expect("valid store settings");
    let held = || {
        let stats = store.stats();
        (stats.entries, stats.bytes)
    };
    for (i, key) in trace.keys.iter().enumerate() {
        let key = key.to_le_bytes();
        let hit = store.get(&key).is_some();
        if !hit {
            let len = if trace.sized() {
                size_at(trace, i) as usize
            } else {
                1
            };
            store
                .insert(&key, Bytes::from_static(&ZEROS[..len]))
                .expect("value fits");
        }
        record(i, hit, &held);
    }
}

fn replay_moka(trace: &Trace, record: &mut Record<'_>) {
    let builder = moka::sync::Cache::builder();
    let cache: moka::sync::Cache<u64, u32> = if trace.sized() {
        builder
            .max_capacity(trace.byte_budget())
            .weigher(|_, &size: &u32| u32::try_from(charge(u64::from(size))).unwrap_or(u32::MAX))
            .build()
    } else {
        builder.max_capacity(trace.capacity as u64).build()
    };
    let held = || (cache.entry_count(), cache.weighted_size());
    for (i, &key) in trace.keys.iter().enumerate() {
        let hit = cache.get(&key).is_some();
        if !hit {
            cache.insert(key, size_at(trace, i) as u32);
            cache.run_pending_tasks();
        }
        record(i, hit, &held);
    }
}

/// quick_cache's weigher: the same charge as gpucache's.
#[derive(Clone)]
struct ByCharge;

impl quick_cache::Weighter<u64, u32> for ByCharge {
    fn weight(&self, _key: &u64, size: &u32) -> u64 {
        charge(u64::from(*size))
    }
}

fn replay_quick_cache(trace: &Trace, record: &mut Record<'_>) {
    if trace.sized() {
        let mut cache = quick_cache::unsync::Cache::with_weighter(
            trace.capacity,
            trace.byte_budget(),
            ByCharge,
        );
        for (i, &key) in trace.keys.iter().enumerate() {
            let hit = cache.get(&key).is_some();
            if !hit {
                cache.insert(key, size_at(trace, i) as u32);
            }
            record(i, hit, &|| (cache.len() as u64, cache.weight()));
        }
    } else {
        let mut cache = quick_cache::unsync::Cache::new(trace.capacity);
        for (i, &key) in trace.keys.iter().enumerate() {
            let hit = cache.get(&key).is_some();
            if !hit {
                cache.insert(key, 1u32);
            }
            record(i, hit, &|| (cache.len() as u64, cache.len() as u64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traces::{loop_over, sized_zipf};

    #[test]
    fn every_contender_hits_a_loop_that_fits() {
        let t = loop_over(0.5, 1000, 100);
        for c in Contender::all() {
            let h = replay(&t, c);
            assert_eq!(h.hits, 1000 - 50, "{}", c.name());
            assert_eq!(h.bytes, h.hits);
        }
    }

    #[test]
    fn sized_replays_count_bytes() {
        let t = sized_zipf(0.9, 3000, 30, 5);
        for c in Contender::all() {
            let h = replay(&t, c);
            assert!(
                h.hits > 0 && h.bytes >= 1024 * h.hits,
                "{}: {h:?}",
                c.name()
            );
        }
    }
}
