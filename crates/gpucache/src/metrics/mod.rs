//! Counters and histograms: the one way gpucache and its front ends count.
//!
//! A [`Counter`] is a relaxed atomic: counts are monotonic and read as a snapshot, never
//! used to synchronise. A [`Histogram`] records a distribution of `u64` values (durations in
//! microseconds, sizes in bytes) in log-linear buckets; its [`HistogramSnapshot`] merges,
//! answers quantiles and persists in a metadata stream through [`crate::codec`].

mod histogram;
mod striped;

use std::sync::atomic::{AtomicU64, Ordering};

pub use histogram::{Bucket, Histogram, HistogramSnapshot};
pub(crate) use striped::{HitMissCounters, StripedCount};

/// A monotonic event count, shared between threads.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// A counter at zero.
    pub const fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    /// Adds one.
    #[inline]
    pub fn incr(&self) {
        self.add(1);
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The count now.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
