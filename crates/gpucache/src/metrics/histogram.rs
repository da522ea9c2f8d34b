//! Log-linear histograms of `u64` values.
//!
//! Values below 8 have a bucket each; above, every power of two is split into 8 equal
//! buckets, so a bucket's bounds are within 12.5% of any value in it, for the whole `u64`
//! range, in 496 buckets. Recording is two relaxed atomic adds and two atomic min/max
//! updates; no lock.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::codec::{FormatError, LeReader, LeWriter};

/// Sub-buckets per power of two, as a power of two.
const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
/// Buckets in all: the exact ones below `SUB`, then `SUB` per power of two up to 2^63.
const BUCKETS: usize = SUB + (64 - SUB_BITS as usize) * SUB;

fn bucket_of(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= SUB_BITS
    let mantissa = (v >> (exp - SUB_BITS)) as usize & (SUB - 1);
    SUB + (exp - SUB_BITS) as usize * SUB + mantissa
}

/// The smallest and largest value of bucket `i`.
fn bounds_of(i: usize) -> (u64, u64) {
    if i < SUB {
        return (i as u64, i as u64);
    }
    let exp = ((i - SUB) / SUB) as u32 + SUB_BITS;
    let mantissa = ((i - SUB) % SUB) as u64;
    let width = 1u64 << (exp - SUB_BITS);
    let low = (1u64 << exp) + mantissa * width;
    (low, low + (width - 1))
}

/// A distribution of values, recorded from any thread.
#[derive(Debug)]
pub struct Histogram {
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
    min: AtomicU64,
    max: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    /// An empty histogram (4 KiB).
    pub fn new() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            min: AtomicU64::new(u64::MAX),
            max: AtomicU64::new(0),
        }
    }

    /// Records one value.
    pub fn record(&self, value: u64) {
        self.buckets[bucket_of(value)].fetch_add(1, Relaxed);
        self.sum.fetch_add(value, Relaxed);
        self.min.fetch_min(value, Relaxed);
        self.max.fetch_max(value, Relaxed);
    }

    /// Records a duration in microseconds.
    pub fn record_micros(&self, duration: std::time::Duration) {
        self.record(u64::try_from(duration.as_micros()).unwrap_or(u64::MAX));
    }

    /// The values recorded so far. Records running meanwhile may be partly included (the
    /// count is always the buckets' sum).
    pub fn snapshot(&self) -> HistogramSnapshot {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        HistogramSnapshot {
            count: counts.iter().sum(),
            sum: self.sum.load(Relaxed),
            min: self.min.load(Relaxed),
            max: self.max.load(Relaxed),
            counts,
        }
    }
}

/// One non-empty bucket of a [`HistogramSnapshot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Smallest value the bucket holds.
    pub low: u64,
    /// Largest value the bucket holds.
    pub high: u64,
    /// Values recorded in it.
    pub count: u64,
}

/// A histogram's values at one moment: mergeable, queryable, persistable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistogramSnapshot {
    count: u64,
    sum: u64,
    /// `u64::MAX` while empty.
    min: u64,
    max: u64,
    counts: Vec<u64>,
}

impl Default for HistogramSnapshot {
    fn default() -> Self {
        Self {
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
            counts: vec![0; BUCKETS],
        }
    }
}

impl HistogramSnapshot {
    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of the values recorded (wrapping past `u64::MAX`).
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// Smallest value recorded.
    pub fn min(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }

    /// Largest value recorded.
    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    /// Mean of the values recorded.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// The value below which a fraction `q` (0 to 1) of the values lie, to within a bucket
    /// (12.5%), clamped to the recorded minimum and maximum.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(bounds_of(i).1.clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }

    /// The non-empty buckets, smallest values first.
    pub fn buckets(&self) -> impl Iterator<Item = Bucket> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &count)| {
                let (low, high) = bounds_of(i);
                Bucket { low, high, count }
            })
    }

    /// Adds `other`'s values to these.
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a = a.saturating_add(*b);
        }
        self.count = self.count.saturating_add(other.count);
        self.sum = self.sum.wrapping_add(other.sum);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Appends the snapshot: `count sum min max:u64 buckets:u32`, then per non-empty bucket
    /// `index:u16 count:u64`, ascending.
    pub fn encode(&self, w: &mut LeWriter<'_>) {
        let buckets: Vec<(usize, u64)> = self
            .counts
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| (i, n))
            .collect();
        w.u64(self.count).u64(self.sum).u64(self.min).u64(self.max);
        w.u32(buckets.len() as u32);
        for (i, n) in buckets {
            w.u16(i as u16).u64(n);
        }
    }

    /// Reads what [`encode`](Self::encode) wrote, checking that it is consistent.
    pub fn decode(r: &mut LeReader<'_>) -> Result<Self, FormatError> {
        let mut s = HistogramSnapshot {
            count: r.u64()?,
            sum: r.u64()?,
            min: r.u64()?,
            max: r.u64()?,
            ..Default::default()
        };
        let n = r.u32()? as usize;
        if n > BUCKETS {
            return Err(FormatError::Invalid("histogram bucket count"));
        }
        let mut total = 0u64;
        let mut next = 0;
        for _ in 0..n {
            let i = usize::from(r.u16()?);
            let count = r.u64()?;
            if i < next || i >= BUCKETS || count == 0 {
                return Err(FormatError::Invalid("histogram bucket"));
            }
            s.counts[i] = count;
            total = total.saturating_add(count);
            next = i + 1;
        }
        if total != s.count || (s.count > 0 && s.min > s.max) {
            return Err(FormatError::Invalid("histogram totals"));
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_within_an_eighth() {
        let mut prev_high = None;
        for i in 0..BUCKETS {
            let (low, high) = bounds_of(i);
            assert_eq!(bucket_of(low), i);
            assert_eq!(bucket_of(high), i);
            if let Some(p) = prev_high {
                assert_eq!(low, p + 1, "contiguous at {i}");
            }
            assert!((high - low) as f64 <= low as f64 / 8.0 + 1.0, "bucket {i}");
            prev_high = Some(high);
        }
        assert_eq!(prev_high, Some(u64::MAX));
    }

    #[test]
    fn quantiles_merge_and_round_trip() {
        let h = Histogram::new();
        for v in 1..=1000u64 {
            h.record(v);
        }
        let s = h.snapshot();
        assert_eq!((s.count(), s.min(), s.max()), (1000, Some(1), Some(1000)));
        assert_eq!(s.sum(), 500_500);
        let median = s.quantile(0.5).unwrap();
        assert!((500..=563).contains(&median), "{median}");
        assert_eq!(s.quantile(1.0), Some(1000));
        assert_eq!(s.quantile(0.0), Some(1));
        let mut merged = s.clone();
        merged.merge(&s);
        assert_eq!(merged.count(), 2000);
        assert_eq!(merged.buckets().map(|b| b.count).sum::<u64>(), 2000);

        let mut bytes = Vec::new();
        merged.encode(&mut LeWriter::new(&mut bytes));
        let back = HistogramSnapshot::decode(&mut LeReader::new(&bytes)).unwrap();
        assert_eq!(back, merged);
        for len in 0..bytes.len() {
            assert!(HistogramSnapshot::decode(&mut LeReader::new(&bytes[..len])).is_err());
        }
        let empty = HistogramSnapshot::default();
        assert_eq!((empty.quantile(0.5), empty.mean()), (None, None));
    }
}
