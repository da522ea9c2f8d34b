//! Hit and miss counts of the memory tier's lookup path, at the cost of a plain store per
//! lookup rather than a locked read-modify-write: the one place where a shared [`Counter`]
//! (one atomic) would cost the hot path measurably when threads look up at once.
//!
//! [`Counter`]: super::Counter
//!
//! Each thread leases a stripe index from a process-wide pool on its first count and gives
//! it back when it exits. A leased stripe has exactly one writer in every store, so the
//! writer may add with a relaxed load and store and no update is lost; readers sum the
//! stripes. Threads beyond the pool's size, and threads counting while their thread-locals
//! are being torn down, share one overflow stripe with atomic adds.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Stripes leased to threads; one more overflow stripe follows them.
const LEASED: usize = 32;

#[derive(Debug, Default)]
#[repr(align(64))]
struct Stripe {
    hits: AtomicU64,
    misses: AtomicU64,
}

/// Hit and miss counts of one store.
#[derive(Debug)]
pub(crate) struct HitMissCounters {
    stripes: Box<[Stripe]>,
}

impl Default for HitMissCounters {
    fn default() -> Self {
        Self {
            stripes: (0..=LEASED).map(|_| Stripe::default()).collect(),
        }
    }
}

impl HitMissCounters {
    #[inline]
    pub(crate) fn hit(&self) {
        self.count(|s| &s.hits);
    }

    #[inline]
    pub(crate) fn miss(&self) {
        self.count(|s| &s.misses);
    }

    #[inline]
    fn count(&self, field: impl Fn(&Stripe) -> &AtomicU64) {
        match leased_stripe() {
            Some(i) => {
                let c = field(&self.stripes[i]);
                // Sole writer of this stripe (see the module docs): no lost update.
                c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            }
            None => {
                field(&self.stripes[LEASED]).fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// (hits, misses), summed over the stripes.
    pub(crate) fn get(&self) -> (u64, u64) {
        self.stripes.iter().fold((0, 0), |(h, m), s| {
            (
                h + s.hits.load(Ordering::Relaxed),
                m + s.misses.load(Ordering::Relaxed),
            )
        })
    }
}

/// One count that many threads add to, for a structure of its own rather than a whole
/// store (a policy's count of hits under a shared lock): a stripe per lease, modulo a few
/// stripes sized to the machine's parallelism ([`count_stripes`]), each on a cache line of
/// its own. Threads whose leases share a stripe (more threads than stripes) may lose an
/// update to each other: the count is for rates, which tolerate that.
#[derive(Debug)]
pub(crate) struct StripedCount {
    /// A power-of-two number of stripes.
    stripes: Box<[PaddedCount]>,
}

#[derive(Debug, Default)]
#[repr(align(64))]
struct PaddedCount(AtomicU64);

impl Default for StripedCount {
    fn default() -> Self {
        Self {
            stripes: (0..count_stripes())
                .map(|_| PaddedCount::default())
                .collect(),
        }
    }
}

impl StripedCount {
    /// Adds one, through a shared reference.
    #[inline]
    pub(crate) fn add_one(&self) {
        let i = leased_stripe().unwrap_or(LEASED) & (self.stripes.len() - 1);
        let c = &self.stripes[i].0;
        c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }

    /// Adds one, with exclusive access.
    pub(crate) fn add_one_mut(&mut self) {
        let c = self.stripes[0].0.get_mut();
        *c = c.wrapping_add(1);
    }

    /// Heap bytes held (the stripes).
    pub(crate) fn heap_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.stripes)
    }

    /// The count (wrapping), with exclusive access: every add before it is counted.
    pub(crate) fn sum_mut(&mut self) -> u64 {
        self.stripes
            .iter_mut()
            .fold(0u64, |s, c| s.wrapping_add(*c.0.get_mut()))
    }
}

/// Stripes per [`StripedCount`]: the machine's parallelism rounded up to a power of two,
/// at most 8 (a policy per shard holds one, and there are up to 64 shards).
fn count_stripes() -> usize {
    static STRIPES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *STRIPES.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, 8)
            .next_power_of_two()
    })
}

/// Free stripe indexes.
static POOL: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static POOL_INIT: std::sync::Once = std::sync::Once::new();

/// Not yet leased; `NO_LEASE`: counting through the overflow stripe for good.
const UNASSIGNED: usize = usize::MAX;
const NO_LEASE: usize = usize::MAX - 1;

/// Returns the thread's stripe to the pool when the thread exits.
struct LeaseGuard(usize);

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        // Later counts of this exiting thread go to the overflow stripe.
        let _ = STRIPE.try_with(|s| s.set(NO_LEASE));
        // The pool's mutex orders this thread's last stores before the next lessee's.
        POOL.lock().push(self.0);
    }
}

thread_local! {
    /// The fast path: a const thread-local without a destructor is a plain load.
    static STRIPE: Cell<usize> = const { Cell::new(UNASSIGNED) };
    static GUARD: Cell<Option<LeaseGuard>> = const { Cell::new(None) };
}

#[inline]
fn leased_stripe() -> Option<usize> {
    let stripe = STRIPE.try_with(Cell::get).unwrap_or(NO_LEASE);
    match stripe {
        NO_LEASE => None,
        UNASSIGNED => lease(),
        i => Some(i),
    }
}

#[cold]
fn lease() -> Option<usize> {
    POOL_INIT.call_once(|| POOL.lock().extend((0..LEASED).rev()));
    let leased = POOL.lock().pop();
    let Some(i) = leased else {
        let _ = STRIPE.try_with(|s| s.set(NO_LEASE));
        return None;
    };
    // Registering the guard fails only while the thread's locals are being destroyed.
    if GUARD.try_with(|g| g.set(Some(LeaseGuard(i)))).is_err() {
        POOL.lock().push(i);
        let _ = STRIPE.try_with(|s| s.set(NO_LEASE));
        return None;
    }
    let _ = STRIPE.try_with(|s| s.set(i));
    Some(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_striped_count_sums_every_thread_that_counted_in_turn() {
        let mut c = StripedCount::default();
        assert!(c.stripes.len().is_power_of_two());
        for _ in 0..1000 {
            c.add_one();
        }
        c.add_one_mut();
        // Threads one after another (each joined before the next starts): no update lost,
        // whichever stripes their leases fall on.
        for _ in 0..4 {
            std::thread::scope(|s| {
                s.spawn(|| (0..500).for_each(|_| c.add_one()));
            });
        }
        assert_eq!(c.sum_mut(), 3001);
        // At once, threads sharing a stripe may lose updates to each other (a load and a
        // store, no locked add), never gain any.
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| (0..10_000).for_each(|_| c.add_one()));
            }
        });
        let n = c.sum_mut();
        assert!((3002..=3001 + 40_000).contains(&n), "{n}");
    }

    #[test]
    fn counts_from_many_short_lived_threads() {
        let c = HitMissCounters::default();
        // More threads than stripes, in waves, so leases are reused and overflow is used.
        for _ in 0..3 {
            std::thread::scope(|scope| {
                for _ in 0..(LEASED + 8) {
                    scope.spawn(|| {
                        for _ in 0..1000 {
                            c.hit();
                        }
                        c.miss();
                    });
                }
            });
        }
        assert_eq!(
            c.get(),
            (3 * (LEASED as u64 + 8) * 1000, 3 * (LEASED as u64 + 8))
        );
    }
}
