//! Timing helpers: latency samples and their percentiles, medians of rounds.

use std::time::{Duration, Instant};

/// Latency samples in nanoseconds.
#[derive(Clone, Debug, Default)]
pub struct Latencies {
    ns: Vec<u64>,
    sorted: bool,
}

impl Latencies {
    /// Room for `n` samples (so recording does not allocate).
    pub fn with_capacity(n: usize) -> Self {
        Self {
            ns: Vec::with_capacity(n),
            sorted: false,
        }
    }

    /// Records one sample.
    pub fn push(&mut self, d: Duration) {
        self.ns.push(d.as_nanos() as u64);
        self.sorted = false;
    }

    /// Times `f` and records it.
    pub fn time<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = f();
        self.push(start.elapsed());
        out
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.ns.len()
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.ns.is_empty()
    }

    /// The `q` quantile (0..=1) in microseconds; 0 without samples.
    pub fn quantile_us(&mut self, q: f64) -> f64 {
        if self.ns.is_empty() {
            return 0.0;
        }
        if !self.sorted {
            self.ns.sort_unstable();
            self.sorted = true;
        }
        let rank = ((self.ns.len() as f64 * q).ceil() as usize).clamp(1, self.ns.len());
        self.ns[rank - 1] as f64 / 1e3
    }

    /// p50, p99, p99.9 and max in microseconds.
    pub fn summary(&mut self) -> [f64; 4] {
        [
            self.quantile_us(0.5),
            self.quantile_us(0.99),
            self.quantile_us(0.999),
            self.quantile_us(1.0),
        ]
    }
}

/// The median of `xs` (the mean of the middle two for an even count); 0 if empty.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// Milliseconds of a duration.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Median with the range of rounds, e.g. `12.3 (11.9–13.0)`; just the value for one round.
pub fn median_range(xs: &[f64], decimals: usize) -> String {
    let m = median(xs);
    if xs.len() < 2 {
        return format!("{m:.decimals$}");
    }
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{m:.decimals$} ({lo:.decimals$}–{hi:.decimals$})")
}
