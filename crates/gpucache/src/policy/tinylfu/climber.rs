//! Hill climbing on the hit rate to size the admission window (after Caffeine's adaptive
//! W-TinyLFU, Einziger, Eytan, Friedman, Manes: "Adaptive software cache management", 2018).
//!
//! Requests are counted in samples. At the end of each sample the window's share moves by a
//! step; the direction is kept while the hit rate does not fall and reversed when it falls by
//! more than a fraction of its usual swing, and the step shrinks each sample so the share
//! settles. A large change of hit rate (a new workload) restarts with a full step (turning
//! round, like any fall, only if the last step moved the share).
//! Recency-heavy workloads climb to a large window (nearly LRU), frequency-heavy ones, loops
//! and scans to a small one (nearly LFU).
//!
//! "Large" is relative to how much the hit rate usually moves from one sample to the next.
//! Workloads with a period of their own (a loop a few times the cache, scans every so many
//! requests) swing the hit rate of a sample by several points depending on where the sample
//! boundaries fall; with a fixed threshold those swings read as workload changes, and every
//! restart threw the share away from the small window such workloads want (a loop of 3x the
//! cache lost 5% of its hits). The climber therefore keeps a moving average of the size of
//! the sample-to-sample changes and restarts only on a fall well beyond it. A restart's fall
//! and the climb back after it are kept out of that average (unless the next sample undoes
//! the fall, or the climb turns down before it gets back: then they were a swing), so that
//! one change of workload does not hide the next.
//!
//! Every sample (ten requests per entry, at least 5,000: 50,000 at 5,000 entries) is also
//! watched in parts of a quarter of it, 1,250 to 5,000 requests; two consecutive parts each
//! below every part of the last sample by the restart threshold end it early, as a change of
//! workload (periodic workloads' low parts recur every sample). The parts seen while the
//! cache fills are forgotten when it is first full ([`Climber::filled`]).
//!
//! Admission regret hints at recency ([`Recency`]): where it pays, the climb points to a
//! larger window; where it only may (a lean), a climber resting at the smallest window takes
//! a step up and hill climbing decides from there.

use super::regret::Recency;

/// The window's share of the tracked weight at start: TinyLFU's usual 1%.
pub(super) const INITIAL_SHARE: f64 = 0.01;
/// Bounds of the share. The upper one leaves main room to hold protected entries.
pub(super) const MIN_SHARE: f64 = 0.0;
pub(super) const MAX_SHARE: f64 = 0.8;
/// First step, as a share of the tracked weight.
const STEP: f64 = 0.0625;
/// Each sample the step is multiplied by this.
const STEP_DECAY: f64 = 0.98;
/// A change of hit rate at least this large, and at least [`RESTART_OVER_NOISE`] times the
/// usual change, restarts the climb with a full step.
const RESTART: f64 = 0.05;
/// How many times the usual sample-to-sample change a restart takes.
const RESTART_OVER_NOISE: f64 = 3.0;
/// A fall smaller than this many times the usual change does not reverse the direction: it
/// is as likely the sample-to-sample swing as the step's effect, and reversing on it walks
/// the share at random instead of climbing (a drifting working set at 300 entries, whose
/// best window is large, kept its share between 20% and 45%).
const REVERSE_OVER_NOISE: f64 = 0.3;
/// Weight of the newest sample in the moving average of the changes.
const NOISE_WEIGHT: f64 = 0.25;
/// The usual change assumed before any is measured (a hit rate over [`MIN_SAMPLE`] requests
/// moves by about this much by chance alone).
const INITIAL_NOISE: f64 = 0.02;
/// Requests per sample at least, whatever the cache size: a hit rate measured over fewer
/// varies by more than the changes the climber looks for (over 1,000 requests about 1.6
/// points), and the share would walk at random. Over 5,000 requests it varies by about 0.7
/// points; twice that made a small cache's climb too slow to follow recency (Zipf sliding
/// through 100 entries needs a window near 80%, which took most of 200,000 requests: 0.89-0.95
/// of the best peer, 1.04-1.05 with 5,000), and half of it walked the share on phase changes.
const MIN_SAMPLE: u64 = 5_000;
/// Below this the step no longer moves the share meaningfully; it rests until a restart.
const MIN_STEP: f64 = 0.0005;

/// Every sample is watched in [`PARTS_PER_SAMPLE`] parts of at least [`MIN_PART`] and at most
/// [`MAX_PART`] requests, so that a new workload that starts early enough in a sample for
/// [`FALLEN_PARTS`] parts to close before its end need not wait for it (samples are ten
/// requests per entry: 50,000 at 5,000 entries, 10,000 at 1,000; at 1,000 a change in the
/// first half of a sample ends it early, one later ends the next). A part of 1,250 requests
/// varies by about 1.3 points by chance, well inside the restart threshold. Parts of 5,000
/// at every size left samples of 10,000 requests unwatched, and a phase change at 1,000
/// entries waited 8,000 requests for its restart; parts of 2,500 at every size lost hits at
/// 2,000 entries (phase change 0.990 -> 0.983 of the best peer; docs/memory-tier.md).
const PARTS_PER_SAMPLE: u64 = 4;
const MIN_PART: u64 = 1_250;
const MAX_PART: u64 = MIN_SAMPLE;
// Even the shortest sample has room for a fall of FALLEN_PARTS parts.
const _: () = assert!(FALLEN_PARTS as u64 * MIN_PART <= MIN_SAMPLE);
/// Consecutive parts, each below every part of the last sample by the restart threshold, that
/// end a sample early as a change of workload.
const FALLEN_PARTS: u32 = 2;

/// The most samples a climb back after a restart is followed for.
const MAX_HELD: usize = 8;

/// A restart's fall of the hit rate, while the rate climbs back: what the average of the
/// changes has not learnt yet.
#[derive(Clone, Debug)]
struct Recovery {
    /// The hit rate before the fall (back within the usual swing of it ends the climb).
    before: f64,
    /// The changes not learnt since (the fall first), as the average would have.
    held: Vec<f64>,
}

#[derive(Debug)]
pub(super) struct Climber {
    /// Invariant: within [MIN_SHARE, MAX_SHARE].
    share: f64,
    /// Signed: the sign is the current direction.
    step: f64,
    hits: u64,
    misses: u64,
    previous_rate: Option<f64>,
    /// Whether the last adjustment changed the share.
    moved: bool,
    /// Moving average of the size of the hit rate's changes between samples (each counted
    /// at most at the restart threshold).
    noise: f64,
    /// Set by a restart, while the hit rate climbs back.
    recovery: Option<Recovery>,
    /// The parts of the sample, from the first request recorded (boxed and none until then:
    /// a memory tier builds a policy per shard on every open, and shards never used need
    /// none).
    parts: Option<Box<Parts>>,
    /// Whether the last adjustment was a lean's lift off the smallest window: a fall right
    /// after it is the lift's own doing, not a new workload.
    lifted: bool,
}

/// A sample watched in parts ([`part_of`]).
#[derive(Debug, Default)]
struct Parts {
    /// The current part: hits and misses.
    part: (u64, u64),
    /// The lowest hit rate of a whole part in the last sample and in this one.
    last_lowest: Option<f64>,
    lowest: Option<f64>,
    /// Consecutive parts fallen below `last_lowest`, and their hits and misses.
    fallen: u32,
    fallen_counts: (u64, u64),
}

impl Default for Climber {
    fn default() -> Self {
        Self {
            share: INITIAL_SHARE,
            // Shrinking first: from 1% a full step down reaches the frequency-only end,
            // which loops and scans want; a falling hit rate turns the climb upwards.
            step: -STEP,
            hits: 0,
            misses: 0,
            previous_rate: None,
            moved: false,
            noise: INITIAL_NOISE,
            recovery: None,
            parts: None,
            lifted: false,
        }
    }
}

/// Requests per part of a sample of `sample` requests (at least [`MIN_SAMPLE`]): a quarter
/// of it, within [`MIN_PART`]..=[`MAX_PART`]. At least [`FALLEN_PARTS`] parts fit in any sample.
fn part_of(sample: u64) -> u64 {
    debug_assert!(sample >= MIN_SAMPLE, "a sample of {sample} requests");
    (sample / PARTS_PER_SAMPLE).clamp(MIN_PART, MAX_PART)
}

impl Climber {
    /// The window's current share of the tracked weight.
    pub(super) fn share(&self) -> f64 {
        self.share
    }

    /// Whether the window is closed (its share at the smallest).
    pub(super) fn closed(&self) -> bool {
        self.share <= MIN_SHARE
    }

    /// Records `hits` hits and `misses` misses; at the end of a sample of `sample` requests,
    /// adjusts the share. Returns whether the hit rate just fell by [`RESTART`] or more (the
    /// workload changed).
    /// `recency` (admission regret's hint, [`super::regret`]): where it pays, the climb
    /// points to a larger window (off the smallest one too); where it may, a climber resting
    /// at the smallest window tries a larger one; unless it pays, a climber resting at the
    /// largest window tries a smaller one.
    pub(super) fn record(&mut self, hits: u64, misses: u64, sample: u64, recency: Recency) -> bool {
        self.hits += hits;
        self.misses += misses;
        let sample = sample.max(MIN_SAMPLE);
        if self.hits + self.misses >= sample {
            return self.adjust(recency);
        }
        if self.watch_part(hits, misses, part_of(sample)) {
            // The new workload's parts alone make the sample: its fall is not diluted.
            (self.hits, self.misses) = self.parts.as_ref().map_or((0, 0), |p| p.fallen_counts);
            return self.adjust(recency);
        }
        false
    }

    /// The cache is full for the first time: the parts seen so far, while it filled, are
    /// no baseline for a fall (a cold cache's first part was the lowest of its sample, so
    /// low that a change of workload right after was not seen below it).
    pub(super) fn filled(&mut self) {
        if let Some(parts) = &mut self.parts {
            **parts = Parts::default();
        }
    }

    /// Counts requests into the current part of the sample; returns whether the last
    /// [`FALLEN_PARTS`] parts each fell below every part of the last sample by the restart
    /// threshold. Workloads with a period of their own swing part by part (a loop three times
    /// the cache hits nearly all of one part and little of the next), but their low parts
    /// recur in every sample; a new workload's fall is below all of them.
    fn watch_part(&mut self, hits: u64, misses: u64, part: u64) -> bool {
        let threshold = self.restart_threshold();
        let p = self.parts.get_or_insert_with(Box::default);
        p.part.0 += hits;
        p.part.1 += misses;
        let (h, m) = p.part;
        if h + m < part {
            return false;
        }
        p.part = (0, 0);
        let rate = h as f64 / (h + m) as f64;
        p.lowest = Some(p.lowest.map_or(rate, |l| l.min(rate)));
        match p.last_lowest {
            Some(low) if rate <= low - threshold => {
                p.fallen += 1;
                p.fallen_counts.0 += h;
                p.fallen_counts.1 += m;
            }
            _ => {
                p.fallen = 0;
                p.fallen_counts = (0, 0);
            }
        }
        p.fallen >= FALLEN_PARTS
    }

    fn adjust(&mut self, recency: Recency) -> bool {
        if let Some(parts) = &mut self.parts {
            **parts = Parts {
                last_lowest: parts.lowest.take(),
                ..Parts::default()
            };
        }
        let rate = self.hits as f64 / (self.hits + self.misses) as f64;
        self.hits = 0;
        self.misses = 0;
        let Some(previous) = self.previous_rate.replace(rate) else {
            // First sample: nothing to compare with; take the first step.
            self.move_share();
            return false;
        };
        let change = rate - previous;
        // While the hit rate climbs back after a restart, its rises are the new workload
        // being learnt rather than the usual swing, and the fall that started them is the
        // change itself: learning them would raise the restart threshold so far that the
        // next change goes unnoticed (a phase cycle's later switches did). A fall undone by
        // the very next sample, or a climb that turns down again before it gets back, was
        // a swing after all: what was held back is learnt then.
        let restart_at = self.restart_threshold();
        // The sample after a lean's lift: its fall is the lift's doing (turned round below).
        let lifted = std::mem::take(&mut self.lifted);
        let restart = change <= -restart_at && !lifted;
        let mut before = previous;
        // Whether this change ends a climb back of several samples (not learnt either).
        let mut climbing = false;
        if let Some(mut r) = self.recovery.take() {
            if restart {
                // The change goes on (it fell across a sample boundary): still the same fall.
                before = before.max(r.before);
            } else if change > 0.0 && rate < r.before - self.noise {
                // Still climbing back; a climb that never gets back is a new workload too.
                if r.held.len() < MAX_HELD {
                    r.held.push(change.min(restart_at));
                    self.recovery = Some(r);
                }
            } else if change <= 0.0 || r.held.len() == 1 {
                for c in r.held {
                    self.learn_noise(c);
                }
            } else {
                climbing = true;
            }
        }
        let restart_at = self.restart_threshold();
        if restart {
            self.recovery = Some(Recovery {
                before,
                held: vec![restart_at],
            });
        }
        let recovering = self.recovery.is_some();
        if !recovering && !climbing {
            // A change beyond the threshold counts as one of the threshold's size: swings
            // just above it are still learnt, while one workload change does not inflate
            // the average.
            self.learn_noise(change.abs().min(restart_at));
        }
        // A fall reverses the direction only if the last step moved the share (at a bound
        // the share stands still, so its hit rate moves only by noise; reversing on noise
        // there would walk the share away from the bound) and the fall stands out from the
        // usual swing. A restart's fall is no exception: at a bound (most restarts find the
        // share at the small end, which the new workload usually wants as well) turning
        // round threw a well-placed share away with a full step.
        let reverse_at = REVERSE_OVER_NOISE * self.noise;
        if change < -reverse_at && self.moved {
            self.step = -self.step;
        }
        let pays = recency == Recency::Pays;
        // A lean does not lift on a restart: at a bound a restart keeps its place (above).
        let leans = recency == Recency::Leans && !restart;
        if (pays || leans) && !self.moved && self.share <= MIN_SHARE && self.step < MIN_STEP {
            // Resting at the smallest window while rejected keys keep coming back: the one
            // way off the bound (a fall there does not turn the climb, see above). Without
            // it a drifting working set at 100 entries stayed at a zero window in 6 of 8
            // runs once admission regret had smoothed the fall that used to turn it round.
            // Where recency only may pay, the climb decides after this step: a fall turns
            // it back down, and it lifts again each time it comes to rest while the lean
            // holds (a single try per rest failed on noise: drift-0.7@150 -0.03).
            self.step = STEP;
            self.lifted = !pays;
        } else if !pays && !self.moved && self.share >= MAX_SHARE && self.step > -MIN_STEP {
            // Resting at the largest window once recency no longer pays: the way back down
            // (the hint takes a drifting set's climb there, and nothing else would turn it
            // at the bound; a loop or Zipf that follows wants a small window again).
            self.step = -STEP;
        } else if restart || change.abs() >= restart_at {
            self.step = STEP.copysign(self.step);
        } else {
            self.step *= STEP_DECAY;
        }
        if pays {
            // While recency pays the climb points to a larger window, whatever the last
            // sample did: the learnt bias buys recency too, and with both adapting a fall
            // was as often the bias's doing as the step's, so the share walked near zero
            // (drift at 100 entries, 32 hash seeds: 55,900-72,400 hits, 65,000-72,400 with
            // this; the best peer 61,400). Loops and Zipf never give the hint.
            self.step = self.step.abs();
        }
        self.move_share();
        restart
    }

    /// Moves the average of the sample-to-sample changes towards `change` (its size).
    fn learn_noise(&mut self, change: f64) {
        self.noise += NOISE_WEIGHT * (change - self.noise);
    }

    /// The least change of hit rate that counts as a new workload: [`RESTART`], or
    /// [`RESTART_OVER_NOISE`] times the usual change if that is more.
    fn restart_threshold(&self) -> f64 {
        RESTART.max(RESTART_OVER_NOISE * self.noise)
    }

    fn move_share(&mut self) {
        let before = self.share;
        if self.step.abs() >= MIN_STEP {
            self.share = (self.share + self.step).clamp(MIN_SHARE, MAX_SHARE);
        }
        self.moved = self.share != before;
    }

    /// A climber whose window share is `share` (tests of the rules that read it).
    #[cfg(test)]
    pub(super) fn with_share(share: f64) -> Climber {
        Climber {
            share: share.clamp(MIN_SHARE, MAX_SHARE),
            ..Climber::default()
        }
    }

    #[cfg(any(test, fuzzing))]
    pub(super) fn validate(&self) {
        assert!(
            (MIN_SHARE..=MAX_SHARE).contains(&self.share),
            "window share {} out of bounds",
            self.share
        );
        assert!(
            self.noise.is_finite() && (0.0..=1.0).contains(&self.noise),
            "noise {}",
            self.noise
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds samples whose hit rate `rate_at(share)` depends on the share.
    fn climb(c: &mut Climber, samples: usize, rate_at: impl FnMut(f64) -> f64) {
        climb_hinted(c, samples, Recency::Unproven, rate_at);
    }

    /// [`climb`], with admission regret's hint `recency`; returns the restarts.
    fn climb_hinted(
        c: &mut Climber,
        samples: usize,
        recency: Recency,
        mut rate_at: impl FnMut(f64) -> f64,
    ) -> usize {
        let mut restarts = 0;
        // Hits and misses interleaved in chunks, as the policy hands them over (a sample's
        // hits all at once would make its parts all hits, then all misses).
        const CHUNK: u64 = 100;
        for _ in 0..samples {
            let rate = rate_at(c.share());
            let hits_by = |requests: u64| (rate * requests as f64).round() as u64;
            for i in 0..MIN_SAMPLE / CHUNK {
                let hits = hits_by((i + 1) * CHUNK) - hits_by(i * CHUNK);
                restarts += usize::from(c.record(hits, CHUNK - hits, MIN_SAMPLE, recency));
            }
            c.validate();
        }
        restarts
    }

    #[test]
    fn the_recency_hint_lifts_a_climber_resting_at_the_smallest_window() {
        // A flat hit rate turns nothing: the climb walks down to a zero window and rests.
        let mut rested = Climber::default();
        climb(&mut rested, 20, |_| 0.5);
        assert_eq!(rested.share(), MIN_SHARE);
        // Then recency starts to pay (best at half the cache). Without the hint the share
        // stands still, so the hit rate never falls and nothing turns the climb round.
        let mut stuck = Climber::default();
        climb(&mut stuck, 20, |_| 0.5);
        climb(&mut stuck, 40, |s| 0.9 - (s - 0.5).abs());
        assert_eq!(stuck.share(), MIN_SHARE);
        // With the hint it leaves the bound and climbs; while the hint holds a fall does
        // not turn it, so it ends at the largest window.
        climb_hinted(&mut rested, 40, Recency::Pays, |s| 0.9 - (s - 0.5).abs());
        assert_eq!(rested.share(), MAX_SHARE);
    }

    #[test]
    fn a_lean_to_recency_tries_a_larger_window_and_the_climb_decides() {
        // Resting at the smallest window where a larger one pays (best at half the cache):
        // the lean lifts it, and hill climbing, not the hint, takes it to the best share.
        let mut lifted = Climber::default();
        climb(&mut lifted, 20, |_| 0.5);
        assert_eq!(lifted.share(), MIN_SHARE);
        climb_hinted(&mut lifted, 60, Recency::Leans, |s| 0.9 - (s - 0.5).abs());
        assert!((lifted.share() - 0.5).abs() < 0.15, "{}", lifted.share());
        // Where the smallest window is best, the lift is turned back by the fall it causes:
        // the share stays near the bound rather than climbing, and that fall (a step's worth,
        // beyond the restart threshold of a steady rate) is not taken for a new workload.
        let mut tried = Climber::default();
        climb(&mut tried, 20, |_| 0.5);
        let (mut highest, mut restarts, mut lifts) = (0.0f64, 0, 0);
        for _ in 0..60 {
            let before = tried.share();
            restarts += climb_hinted(&mut tried, 1, Recency::Leans, |s| 0.6 - s);
            lifts += usize::from(before <= MIN_SHARE && tried.share() > MIN_SHARE);
            highest = highest.max(tried.share());
        }
        assert!(highest <= STEP + 1e-9, "climbed to {highest}");
        assert!(lifts > 1, "the lean tries again at each rest: {lifts}");
        assert_eq!(restarts, 0);
    }

    #[test]
    fn a_climber_resting_at_the_largest_window_comes_down_without_the_hint() {
        let mut c = Climber::default();
        climb_hinted(&mut c, 20, Recency::Unproven, |_| 0.5);
        climb_hinted(&mut c, 40, Recency::Pays, |_| 0.5);
        assert_eq!(c.share(), MAX_SHARE);
        // Recency no longer pays, and a small window is best (a loop after the drift).
        climb(&mut c, 60, |s| 0.6 - s / 2.0);
        assert!(c.share() < 0.1, "{}", c.share());
    }

    #[test]
    fn climbs_towards_the_best_share() {
        let mut c = Climber::default();
        // Best at 40%: a recency-heavy workload.
        climb(&mut c, 200, |s| 0.9 - (s - 0.4).abs());
        assert!((c.share() - 0.4).abs() < 0.1, "{}", c.share());
    }

    #[test]
    fn falls_back_to_a_small_window() {
        let mut c = Climber::default();
        climb(&mut c, 30, |s| 0.9 - (s - 0.5).abs());
        assert!(c.share() > 0.2, "{}", c.share());
        // The workload changes: now a small window is best (a loop).
        climb(&mut c, 300, |s| 0.9 - s);
        assert!(c.share() < 0.05, "{}", c.share());
    }

    #[test]
    fn share_stays_in_bounds() {
        let mut c = Climber::default();
        climb(&mut c, 200, |s| s);
        assert!(c.share() <= MAX_SHARE);
        climb(&mut c, 400, |s| 1.0 - s);
        assert!(c.share() >= MIN_SHARE);
    }

    #[test]
    fn periodic_swings_do_not_restart_but_a_new_workload_does() {
        let mut c = Climber::default();
        // A loop a few times the cache: best at zero, and the sample's hit rate swings by
        // six points with where its boundaries fall, whatever the share (more than the
        // fixed threshold).
        let mut flip = false;
        climb(&mut c, 60, |s| {
            flip = !flip;
            0.35 - s + if flip { 0.03 } else { -0.03 }
        });
        assert!(c.share() < 0.02, "{}", c.share());
        // Swings keep coming but read as noise: no restart moves the share away.
        let mut restarts = 0;
        for i in 0..40 {
            let rate = 0.35 - c.share() + if i % 2 == 0 { 0.03 } else { -0.03 };
            let hits = (rate * MIN_SAMPLE as f64).round() as u64;
            restarts +=
                usize::from(c.record(hits, MIN_SAMPLE - hits, MIN_SAMPLE, Recency::Unproven));
        }
        assert_eq!(restarts, 0);
        assert!(c.share() < 0.02, "{}", c.share());
        // The workload changes: the hit rate falls by a third.
        let hits = (0.12 * MIN_SAMPLE as f64) as u64;
        assert!(c.record(hits, MIN_SAMPLE - hits, MIN_SAMPLE, Recency::Unproven));
        c.validate();
    }

    #[test]
    fn only_a_fall_beyond_the_usual_swing_reverses() {
        // Climbing: the last step moved the share up, and samples swing by about two points.
        let mut c = Climber {
            share: 0.3,
            step: 0.05,
            previous_rate: Some(0.5),
            moved: true,
            noise: 0.02,
            ..Climber::default()
        };
        let sample = |c: &mut Climber, rate: f64| {
            let hits = (rate * MIN_SAMPLE as f64).round() as u64;
            assert!(!c.record(hits, MIN_SAMPLE - hits, MIN_SAMPLE, Recency::Unproven));
            c.validate();
        };
        // A third of a point lower: within the swing, the climb goes on.
        sample(&mut c, 0.497);
        assert!(c.share() > 0.3, "{}", c.share());
        // Three points lower: beyond it, the step turns round.
        let before = c.share();
        sample(&mut c, 0.465);
        assert!(c.share() < before, "{} -> {}", before, c.share());
    }

    /// One sample at hit rate `rate`; returns whether it restarted the climb.
    fn sample(c: &mut Climber, rate: f64) -> bool {
        let hits = (rate * MIN_SAMPLE as f64).round() as u64;
        let restarted = c.record(hits, MIN_SAMPLE - hits, MIN_SAMPLE, Recency::Unproven);
        c.validate();
        restarted
    }

    #[test]
    fn the_climb_back_after_a_change_does_not_hide_the_next() {
        // A phase cycle at 1,000 entries, as the climber saw it: steady near 46%, the
        // popular set switches (a fall of 20 points), the hit rate climbs back over three
        // samples, and the set switches back, spread over two samples.
        let mut c = Climber::default();
        for rate in [0.43, 0.46, 0.46, 0.461] {
            assert!(!sample(&mut c, rate));
        }
        let calm = c.noise;
        assert!(sample(&mut c, 0.26));
        for rate in [0.33, 0.42, 0.46] {
            assert!(!sample(&mut c, rate));
        }
        assert!(c.noise <= calm + 1e-9, "{calm} -> {}", c.noise);
        // Learnt as swings, those changes would have raised the threshold above 9 points.
        assert!(sample(&mut c, 0.367));
    }

    #[test]
    fn a_restart_at_the_small_end_keeps_the_window_shut() {
        // Resting at the bound, shrinking: a new workload's fall restarts the climb with a
        // full step, but the last step did not move the share, so the direction stays.
        let mut c = Climber {
            share: MIN_SHARE,
            step: -0.01,
            previous_rate: Some(0.6),
            moved: false,
            noise: 0.01,
            ..Climber::default()
        };
        assert!(sample(&mut c, 0.3));
        assert_eq!(c.share(), MIN_SHARE);
        assert_eq!(c.step, -STEP);
        // Climbing when the workload changes: the fall turns the climb round, as any fall.
        let mut c = Climber {
            share: 0.3,
            step: 0.01,
            previous_rate: Some(0.6),
            moved: true,
            noise: 0.01,
            ..Climber::default()
        };
        assert!(sample(&mut c, 0.3));
        assert!((c.share() - (0.3 - STEP)).abs() < 1e-9, "{}", c.share());
    }

    #[test]
    fn a_fall_undone_at_once_is_learnt_as_a_swing() {
        let mut c = Climber::default();
        for rate in [0.45, 0.45, 0.45, 0.45] {
            assert!(!sample(&mut c, rate));
        }
        let calm = c.noise;
        assert!(sample(&mut c, 0.33));
        assert!(c.recovery.is_some());
        assert!(!sample(&mut c, 0.46));
        assert!(c.recovery.is_none());
        assert!(c.noise > calm + 0.015, "{calm} -> {}", c.noise);
        // So is a climb that turns down before it gets back.
        let mut c = Climber::default();
        for rate in [0.45, 0.45, 0.45, 0.45] {
            assert!(!sample(&mut c, rate));
        }
        assert!(sample(&mut c, 0.33));
        assert!(!sample(&mut c, 0.37));
        assert!(!sample(&mut c, 0.36));
        assert!(c.recovery.is_none());
        assert!(c.noise > calm + 0.01, "{calm} -> {}", c.noise);
    }

    #[test]
    fn noise_at_a_bound_does_not_walk_the_share_away() {
        let mut c = Climber::default();
        // Best at zero, with noise of +-2 points alternating.
        let mut flip = false;
        climb(&mut c, 300, |s| {
            flip = !flip;
            0.5 - s + if flip { 0.02 } else { -0.02 }
        });
        assert!(c.share() < 0.01, "{}", c.share());
    }

    /// Feeds `requests` requests at hit rate `rate`, in chunks as the policy hands them over,
    /// to a climber whose sample is `sample`; returns the number of restarts.
    fn feed(c: &mut Climber, requests: u64, rate: f64, sample: u64) -> usize {
        let mut restarts = 0;
        let chunk = 500;
        for _ in 0..requests / chunk {
            let hits = (rate * chunk as f64).round() as u64;
            restarts += usize::from(c.record(hits, chunk - hits, sample, Recency::Unproven));
            c.validate();
        }
        restarts
    }

    /// [`feed`]s `parts` parts ([`part_of`] `sample`) of requests.
    fn parts(c: &mut Climber, parts: u64, rate: f64, sample: u64) -> usize {
        feed(c, parts * part_of(sample), rate, sample)
    }

    #[test]
    fn a_long_sample_ends_early_on_a_sustained_fall() {
        // 5,000 entries: samples of 50,000 requests, ten parts.
        let sample = 50_000;
        let mut c = Climber::default();
        assert_eq!(parts(&mut c, 20, 0.5, sample), 0);
        // The workload changes: two parts below every part of the last sample restart the
        // climb, long before the sample's end.
        assert_eq!(parts(&mut c, 1, 0.15, sample), 0);
        assert_eq!(parts(&mut c, 1, 0.15, sample), 1);
        assert!(c.recovery.is_some());
        // A part's fall alone does not.
        let mut c = Climber::default();
        assert_eq!(parts(&mut c, 20, 0.5, sample), 0);
        assert_eq!(parts(&mut c, 1, 0.15, sample), 0);
        assert_eq!(parts(&mut c, 9, 0.5, sample), 0);
        // A loop a few times the cache swings part by part between most hits and few; its
        // low parts recur in every sample, so they read as no change.
        let mut c = Climber::default();
        for _ in 0..20 {
            for rate in [0.9, 0.1, 0.1, 0.1, 0.5] {
                assert_eq!(parts(&mut c, 1, rate, sample), 0);
            }
        }
    }

    #[test]
    fn a_sample_of_ten_thousand_is_watched_in_parts() {
        // 1,000 entries: samples of 10,000 requests, four parts of 2,500. A change of
        // workload at a sample's start restarts after two parts, half way through the
        // sample, rather than at its end (counted in requests, not parts, so that the test
        // does not follow part_of).
        let sample = 10_000;
        let mut c = Climber::default();
        assert_eq!(feed(&mut c, 2 * sample, 0.6, sample), 0);
        assert_eq!(feed(&mut c, sample / 2, 0.2, sample), 1);
        assert!(c.recovery.is_some());
        // A change a quarter into a sample still ends it early (its second and third parts).
        let mut c = Climber::default();
        assert_eq!(feed(&mut c, 2 * sample + sample / 4, 0.6, sample), 0);
        assert_eq!(feed(&mut c, sample / 2, 0.2, sample), 1);
        // Parts stay within their bounds.
        assert_eq!(part_of(40_000), 10_000_u64.min(MAX_PART));
        assert_eq!(part_of(1_000_000), MAX_PART);
    }

    #[test]
    fn the_fill_is_no_baseline_for_a_fall() {
        // The cold cache's first part is its sample's lowest. Forgotten once the cache is
        // full, it no longer hides a change of workload in the next sample; kept, it does.
        let sample = 50_000;
        for forget_fill in [true, false] {
            let mut c = Climber::default();
            assert_eq!(parts(&mut c, 1, 0.05, sample), 0);
            if forget_fill {
                c.filled();
            }
            assert_eq!(parts(&mut c, 9, 0.6, sample), 0);
            // The workload changes: down to 0.3, far below the full cache's parts.
            let restarts = parts(&mut c, 2, 0.3, sample);
            assert_eq!(
                restarts,
                usize::from(forget_fill),
                "forget_fill {forget_fill}"
            );
        }
    }
}
