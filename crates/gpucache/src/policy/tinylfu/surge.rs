//! Regret surges: a change of working set seen as soon as two signals agree.
//!
//! After a change of working set the hit rate falls, and the new keys, rejected against the
//! old keys' counts, come back and raise admission regret's bias ([`super::regret`]). Either
//! signal alone misleads: the hit rate dips with the workload's own phases (a scan's keys
//! never come back, so the bias stays put), and the bias stands high for as long as a
//! drifting set keeps sliding (while its hit rate holds). Together they are a change: the hit
//! rate averaged over the last few thousand requests has fallen well below its average over
//! the last tens of thousands, and the bias has risen since the fall began. The policy then
//! restarts at once (forgets the sketch, exposes protected) and sets the bias back to neutral,
//! rather than waiting for the climber's samples (ten requests per entry: 50,000 at 5,000
//! entries) or for the bias to climb count by count past the old keys' stale estimates.
//!
//! One surge per fall: the watch is armed again only once the hit rate is back above the
//! fall's line, so the recovery after a surge, whose rate is still low and whose new keys
//! still return, does not restart the policy again and again. (The climber may still see
//! the same fall in its parts and restart once more: that second forgetting helps when it
//! comes a few thousand requests into the new set, and suppressing it lost up to 0.017 of
//! the best peer's hits on phase changes at 2,000-5,000 entries; with the hit rates counted
//! exactly the climber sees the fall sooner, so the policy spaces its restarts by half its
//! entries' worth of misses: `TinyLfu::restart`. After a workload that had settled, the
//! policy schedules that second restart itself, `TinyLfu::surged`: on some hash seeds the
//! climber's parts did not fall far enough to give it.)
//!
//! The averages are fed by the policy's probes (every `len / 8` misses): from about 20,000
//! entries in a shard a probe spans the short window and the short average is the last
//! probe's rate, and from about 300,000 a probe spans the long one too and no fall is seen.
//! Caches that large rely on the climber's restarts alone.

/// Requests the short average of the hit rate spans: a hit rate over 2,500 requests moves by
/// about a point by chance, inside [`MIN_FALL`].
const FAST_REQUESTS: f64 = 2_500.0;
/// Requests the long average spans: long enough to hold the workload before a change. (Both
/// averages start when the cache is first full, as means until they span their windows; the
/// policy feeds the watch while the cache fills too, for one look at whether the hit rate is
/// falling when the cache is first full, and starts it over then: `TinyLfu::filled`.)
const SLOW_REQUESTS: f64 = 40_000.0;
/// The short average below this fraction of the long one is a fall. When a set returns after
/// another had its turn, the cache still holds part of it and the fall is shallow (one run
/// of `phase_eval`'s phase cycle through 5,000 entries stood at 0.82 of the long average at
/// its lowest). With the policy tests' own Zipf (24 seeds of a phase cycle through 5,000
/// entries), at 0.8 eight runs missed the surges at the returns, each 2,200-3,000 hits short of
/// the same seed at 0.85; at 0.85 one run missed them, a seed that had surged at 0.8 (1,200
/// hits short of it). No drift row moved. At 0.9 a phase cycle through 7,000 entries
/// restarted where keeping the old set paid, and at 0.95 a trace of shared pages at 3,000
/// entries lost hits too (`phase_eval`, docs/memory-tier.md, *A shallower fall*).
const FALL: f64 = 0.85;
/// And by at least this much: at low hit rates a fall to [`FALL`] times the rate is within
/// its noise (15% of 5% is under two standard deviations over 2,500 requests). The
/// climber's restart threshold; no row of `phase_eval` moved with it.
const MIN_FALL: f64 = 0.05;
/// How far the bias must rise during a fall, in counts: a few dozen to a few hundred returning
/// rejected keys (each step is 1/32 count times the share of displacements among the losers,
/// less for keys heavier than the mean and beyond 2,000 tracked keys: proportionally more
/// returns there).
/// From 0.03 to 0.125 the same; at 0.5 or more the surge came late enough to cost a phase
/// cycle at 5,000 entries more than it won.
const RISE: f32 = 0.125;

#[derive(Debug, Default)]
pub(super) struct Surge {
    /// Hit-rate averages over about [`FAST_REQUESTS`] and [`SLOW_REQUESTS`] requests, and the
    /// requests they have seen.
    fast: f64,
    slow: f64,
    requests: f64,
    /// Whether the short average is below [`FALL`] times the long one, by [`MIN_FALL`] or
    /// more.
    fallen: bool,
    /// Whether a surge may fire (see the module documentation).
    armed: bool,
    /// Admission regret's bias when the current fall was first seen (the short average lags,
    /// so the bias may have risen a little already).
    bias_at_fall: Option<f32>,
}

impl Surge {
    /// Counts `hits` and `misses` into the averages.
    pub(super) fn record(&mut self, hits: u64, misses: u64) {
        let n = (hits + misses) as f64;
        if n == 0.0 {
            return;
        }
        let rate = hits as f64 / n;
        self.requests += n;
        // A probe longer than a window (large caches probe every len/8 misses) replaces
        // that average.
        let weight = |window: f64| (n / window.min(self.requests)).min(1.0);
        self.fast += weight(FAST_REQUESTS) * (rate - self.fast);
        self.slow += weight(SLOW_REQUESTS) * (rate - self.slow);
        self.fallen = self.fast < FALL * self.slow && self.slow - self.fast >= MIN_FALL;
    }

    /// Whether admission regret's `bias`, just updated by a miss, makes a surge: risen by
    /// [`RISE`] since the fall was first seen, with the watch armed. Disarms it when it does.
    #[inline]
    pub(super) fn fires(&mut self, bias: f32) -> bool {
        if !self.fallen {
            self.armed = true;
            self.bias_at_fall = None;
            return false;
        }
        let base = *self.bias_at_fall.get_or_insert(bias);
        if self.armed && bias - base >= RISE {
            self.armed = false;
            true
        } else {
            false
        }
    }

    /// Starts the watch over, armed and with no averages (the cache is now full); returns
    /// whether the hit rate was in a fall (the short average well below the long one).
    pub(super) fn start_over(&mut self) -> bool {
        let fallen = self.fallen;
        *self = Self {
            armed: true,
            ..Self::default()
        };
        fallen
    }

    /// Whether a surge may fire (tests).
    #[cfg(test)]
    pub(super) fn armed(&self) -> bool {
        self.armed
    }

    #[cfg(any(test, fuzzing))]
    pub(super) fn validate(&self) {
        for rate in [self.fast, self.slow] {
            assert!((0.0..=1.0).contains(&rate), "hit-rate average {rate}");
        }
        assert!(self.requests >= 0.0, "requests {}", self.requests);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `requests` requests at hit rate `rate` in probes of 500.
    fn feed(s: &mut Surge, requests: u64, rate: f64) {
        for _ in 0..requests / 500 {
            let hits = (rate * 500.0).round() as u64;
            s.record(hits, 500 - hits);
        }
        s.validate();
    }

    #[test]
    fn fires_once_when_the_bias_rises_during_a_fall() {
        let mut s = Surge::default();
        feed(&mut s, 50_000, 0.7);
        // At rest: a rising bias without a fall does nothing.
        assert!(!s.fires(0.0));
        assert!(!s.fires(3.0));
        // The workload changes: the rate falls, then rejected keys come back.
        feed(&mut s, 5_000, 0.3);
        assert!(!s.fires(-0.5), "the fall's starting bias");
        assert!(!s.fires(-0.5 + RISE / 2.0));
        assert!(s.fires(-0.5 + RISE));
        // Once per fall: the bias set back to neutral and rising again during the recovery
        // does not fire again.
        assert!(!s.fires(0.0));
        feed(&mut s, 2_000, 0.4);
        assert!(!s.fires(2.0));
        // Back at the old rate: armed for the next change, from the next fall's own bias.
        feed(&mut s, 20_000, 0.7);
        assert!(!s.fires(2.0));
        feed(&mut s, 5_000, 0.3);
        assert!(!s.fires(2.0));
        assert!(s.fires(2.0 + RISE));
    }

    #[test]
    fn a_shallow_fall_is_one_and_a_swing_is_not() {
        // A set that returns: part of it is still held, so the rate falls by less than a
        // fifth of the long average; the surge fires when the returning keys raise the bias.
        let mut s = Surge::default();
        feed(&mut s, 50_000, 0.74);
        assert!(!s.fires(1.0), "at rest: armed");
        feed(&mut s, 5_000, 0.58);
        assert!(s.fast > 0.8 * s.slow, "shallower than a fifth");
        assert!(s.fallen, "fast {} slow {}", s.fast, s.slow);
        assert!(!s.fires(2.0));
        assert!(s.fires(2.0 + RISE));
        // A swing of a tenth of the rate is no fall.
        let mut s = Surge::default();
        feed(&mut s, 50_000, 0.74);
        feed(&mut s, 5_000, 0.67);
        assert!(!s.fallen, "fast {} slow {}", s.fast, s.slow);
    }

    #[test]
    fn starting_over_says_whether_the_rate_was_falling() {
        let mut s = Surge::default();
        feed(&mut s, 20_000, 0.7);
        feed(&mut s, 5_000, 0.3);
        assert!(s.start_over(), "in a fall");
        assert!(s.armed() && s.requests == 0.0 && !s.fallen);
        // A fall that has recovered, or a steady rate, is not one.
        feed(&mut s, 20_000, 0.7);
        feed(&mut s, 5_000, 0.3);
        feed(&mut s, 10_000, 0.7);
        assert!(!s.start_over(), "recovered");
        feed(&mut s, 20_000, 0.5);
        assert!(!s.start_over(), "steady");
    }

    #[test]
    fn a_fall_alone_or_a_high_bias_alone_does_not_fire() {
        // A scan: the rate falls but its keys never come back, so the bias stays put.
        let mut s = Surge::default();
        feed(&mut s, 50_000, 0.6);
        assert!(!s.fires(-1.0));
        assert!(s.armed());
        feed(&mut s, 5_000, 0.1);
        assert!(s.fallen);
        for _ in 0..100 {
            assert!(!s.fires(-1.0));
        }
        // A drifting set: the bias stays high and moves, the rate holds.
        let mut s = Surge::default();
        for i in 0..100 {
            feed(&mut s, 1_000, 0.3);
            assert!(!s.fires(4.0 + (i % 3) as f32));
        }
        assert!(s.armed() && !s.fallen);
        // A low hit rate: a fall of two points is under MIN_FALL, no fall at all.
        let mut s = Surge::default();
        feed(&mut s, 50_000, 0.05);
        feed(&mut s, 5_000, 0.03);
        assert!(!s.fallen);
    }

    #[test]
    fn probes_longer_than_a_window_stay_within_bounds() {
        let mut s = Surge::default();
        for rate in [0.9, 0.1, 0.9, 0.0, 1.0] {
            s.record(
                (rate * 10_000.0) as u64,
                (10_000.0 - rate * 10_000.0) as u64,
            );
            s.validate();
        }
        assert_eq!(s.fast, 1.0);
    }

    #[test]
    fn the_averages_start_as_means() {
        // No history: the first requests set both averages, so a cold start is no fall.
        let mut s = Surge::default();
        feed(&mut s, 1_000, 0.5);
        assert!((s.fast - 0.5).abs() < 1e-9 && (s.slow - 0.5).abs() < 1e-9);
        assert!(!s.fallen);
    }
}
