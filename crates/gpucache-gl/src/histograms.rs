//! The seed's histograms: what tunes a program cache.
//!
//! Recorded per process into two sets: the whole run, and what has not been merged into the
//! cache directory yet. A flush merges the second into the `gl-histograms` metadata stream,
//! which keeps the totals of every run and the last run alone.

use std::sync::Arc;
use std::time::Duration;

use gpucache::codec::{FormatError, LeReader, LeWriter};
use gpucache::{Histogram, HistogramSnapshot};
use parking_lot::Mutex;

/// One of the seven histograms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Bytes of each binary stored (per linked binary, not per use).
    BinarySize,
    /// Bytes of binaries in memory before each store.
    CacheSizeBefore,
    /// Bytes of binaries in memory after each store.
    CacheSizeAfter,
    /// Microseconds from asking for a cached program to having it linked from its binary.
    BinaryHitTime,
    /// Microseconds to link a program whose binary was not cached.
    BinaryMissLinkTime,
    /// Microseconds to answer a shader compile from the status cache.
    StatusHitTime,
    /// Microseconds to compile a shader whose status was not cached.
    StatusMissCompileTime,
}

impl Metric {
    /// Every metric, in the order they are stored and printed.
    pub const ALL: [Metric; 7] = [
        Metric::BinarySize,
        Metric::CacheSizeBefore,
        Metric::CacheSizeAfter,
        Metric::BinaryHitTime,
        Metric::BinaryMissLinkTime,
        Metric::StatusHitTime,
        Metric::StatusMissCompileTime,
    ];

    /// A stable name (used in reports and the C API's documentation).
    pub const fn name(self) -> &'static str {
        match self {
            Metric::BinarySize => "program binary size",
            Metric::CacheSizeBefore => "cache size before store",
            Metric::CacheSizeAfter => "cache size after store",
            Metric::BinaryHitTime => "binary cache hit time",
            Metric::BinaryMissLinkTime => "binary cache miss link time",
            Metric::StatusHitTime => "status cache hit time",
            Metric::StatusMissCompileTime => "status cache miss compile time",
        }
    }

    /// "bytes" or "µs".
    pub const fn unit(self) -> &'static str {
        match self {
            Metric::BinarySize | Metric::CacheSizeBefore | Metric::CacheSizeAfter => "bytes",
            _ => "µs",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The seven histograms at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistogramSet {
    snapshots: [HistogramSnapshot; 7],
}

impl HistogramSet {
    /// One histogram.
    pub fn get(&self, metric: Metric) -> &HistogramSnapshot {
        &self.snapshots[metric.index()]
    }

    /// Adds `other`'s values.
    pub fn merge(&mut self, other: &HistogramSet) {
        for (a, b) in self.snapshots.iter_mut().zip(&other.snapshots) {
            a.merge(b);
        }
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.snapshots.iter().all(|s| s.count() == 0)
    }

    fn encode(&self, w: &mut LeWriter<'_>) {
        w.u32(self.snapshots.len() as u32);
        for s in &self.snapshots {
            s.encode(w);
        }
    }

    fn decode(r: &mut LeReader<'_>) -> Result<Self, FormatError> {
        if r.u32()? as usize != Metric::ALL.len() {
            return Err(FormatError::Invalid("histogram count"));
        }
        let mut set = HistogramSet::default();
        for s in &mut set.snapshots {
            *s = HistogramSnapshot::decode(r)?;
        }
        Ok(set)
    }
}

/// What the `gl-histograms` stream holds: every run's values, and the last run's alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PersistedHistograms {
    /// Every run merged.
    pub total: HistogramSet,
    /// The last process that recorded anything (since its start, as of its last flush).
    pub last_run: HistogramSet,
    /// Runs merged into `total`.
    pub runs: u64,
}

impl PersistedHistograms {
    /// `runs:u64 total last_run`, each set `count:u32` then its snapshots.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = LeWriter::new(&mut out);
        w.u64(self.runs);
        self.total.encode(&mut w);
        self.last_run.encode(&mut w);
        out
    }

    /// Reads what [`encode`](Self::encode) wrote.
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        let mut r = LeReader::new(bytes);
        let runs = r.u64()?;
        let total = HistogramSet::decode(&mut r)?;
        let last_run = HistogramSet::decode(&mut r)?;
        if r.remaining() != 0 {
            return Err(FormatError::Invalid("histogram stream length"));
        }
        Ok(Self {
            total,
            last_run,
            runs,
        })
    }
}

struct Set([Histogram; 7]);

impl Set {
    fn new() -> Self {
        Self(std::array::from_fn(|_| Histogram::new()))
    }
    fn snapshot(&self) -> HistogramSet {
        HistogramSet {
            snapshots: std::array::from_fn(|i| self.0[i].snapshot()),
        }
    }
}

/// The histograms of this process.
pub(crate) struct Recorder {
    run: Set,
    /// Values not merged into the directory yet; swapped for an empty set on each flush.
    pending: Mutex<Arc<Set>>,
    /// Whether this run has been counted in `runs` on disk.
    counted: Mutex<bool>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").finish_non_exhaustive()
    }
}

impl Recorder {
    pub(crate) fn new() -> Self {
        Self {
            run: Set::new(),
            pending: Mutex::new(Arc::new(Set::new())),
            counted: Mutex::new(false),
        }
    }

    pub(crate) fn record(&self, metric: Metric, value: u64) {
        self.run.0[metric.index()].record(value);
        self.pending.lock().0[metric.index()].record(value);
    }

    pub(crate) fn record_time(&self, metric: Metric, time: Duration) {
        self.record(metric, time.as_micros().min(u128::from(u64::MAX)) as u64);
    }

    /// This run's values.
    pub(crate) fn run(&self) -> HistogramSet {
        self.run.snapshot()
    }

    /// Takes the values not merged yet; [`restore`](Self::restore) puts them back if the
    /// merge fails.
    pub(crate) fn take_pending(&self) -> HistogramSet {
        let old = std::mem::replace(&mut *self.pending.lock(), Arc::new(Set::new()));
        old.snapshot()
    }

    /// `current` (the stream's body, if any) with `pending` and this run merged.
    pub(crate) fn merged(&self, current: Option<&[u8]>, pending: &HistogramSet) -> Vec<u8> {
        let mut persisted = current
            .and_then(|b| PersistedHistograms::decode(b).ok())
            .unwrap_or_default();
        persisted.total.merge(pending);
        let run = self.run();
        if !run.is_empty() {
            let mut counted = self.counted.lock();
            if !*counted {
                persisted.runs += 1;
                *counted = true;
            }
            persisted.last_run = run;
        }
        persisted.encode()
    }

    pub(crate) fn restore(&self, pending: &HistogramSet) {
        // Values recorded since the take stay in the new set; the old ones are re-recorded
        // bucket by bucket (a bucket's low bound stands for its values).
        let set = self.pending.lock().clone();
        for metric in Metric::ALL {
            for bucket in pending.get(metric).buckets() {
                for _ in 0..bucket.count {
                    set.0[metric.index()].record(bucket.low);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushes_merge_totals_and_keep_the_last_run() {
        let a = Recorder::new();
        a.record(Metric::BinarySize, 1000);
        a.record_time(Metric::BinaryHitTime, Duration::from_micros(50));
        let pending = a.take_pending();
        let file = a.merged(None, &pending);
        // A second flush of the same run adds only what is new.
        a.record(Metric::BinarySize, 2000);
        let pending = a.take_pending();
        let file = a.merged(Some(&file), &pending);
        let p = PersistedHistograms::decode(&file).unwrap();
        assert_eq!(p.runs, 1);
        assert_eq!(p.total.get(Metric::BinarySize).count(), 2);
        assert_eq!(p.last_run.get(Metric::BinarySize).count(), 2);

        let b = Recorder::new();
        b.record(Metric::StatusMissCompileTime, 700);
        let pending = b.take_pending();
        let file = b.merged(Some(&file), &pending);
        let p = PersistedHistograms::decode(&file).unwrap();
        assert_eq!(p.runs, 2);
        assert_eq!(p.total.get(Metric::BinarySize).count(), 2);
        assert_eq!(p.total.get(Metric::StatusMissCompileTime).count(), 1);
        assert_eq!(p.last_run.get(Metric::BinarySize).count(), 0);
        assert!(PersistedHistograms::decode(&file[..file.len() - 1]).is_err());
    }

    #[test]
    fn a_failed_flush_keeps_the_values() {
        let a = Recorder::new();
        a.record(Metric::BinarySize, 1000);
        let pending = a.take_pending();
        a.restore(&pending);
        assert_eq!(a.take_pending().get(Metric::BinarySize).count(), 1);
    }
}
