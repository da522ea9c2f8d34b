//! Hill climbing on the hit rate to size the admission window (after Caffeine's adaptive
//! W-TinyLFU, Einziger, Eytan, Friedman, Manes: "Adaptive software cache management", 2018).
//!
//! Requests are counted in samples. At the end of each sample the window's share moves by a
//! step; the direction is kept while the hit rate does not fall and reversed when it falls by
//! more than a fraction of its usual swing, and the step shrinks each sample so the share
//! settles. A large change of hit rate (a new workload) restarts with a full step in the
//! same direction (its fall is the workload's doing, not the step's).
//! Recency-heavy workloads climb to a large window (at all the cache, LRU), frequency-heavy
//! ones, loops and scans to a small one (nearly LFU).
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
//! A fall turns the climb round only if it stands out from the usual change between samples
//! and from the error the samples' parts show ([`parts::PartSpread`]): a periodic workload's parts
//! differ widely, and before the usual change is learnt its samples' swings read as falls.
//! Where that error dwarfs the usual change and the change lies within it, the samples
//! cannot measure the step, and the step halves: the share slows to a rest rather than
//! walking on them (but not under the hint below, which sets the direction then, nor while
//! the climb unwinds a window that regret no longer backs, [`Climber::unwind`]).
//!
//! Admission regret hints at recency ([`Recency`]): where it pays, the climb points to a
//! larger window, unless the climb's own samples refute it by a clear fall (two samples in
//! a row), and once the hint ends the climb heads back down; where it only may (a lean), a
//! climber resting at the smallest window takes a step up and hill climbing decides from
//! there, the lift on trial (judged three samples on, and after that while the hint leads
//! the climb of an open window): if its samples stand below the rate at rest by more than
//! the reversal band, the window closes again, and neither the lean nor the hint lifts it
//! until a restart or until regret says recency neither pays nor may ([`LiftTrial`]).
//!
//! The hit rates count every hit, those of entries whose pending count has saturated too
//! (but for the few that threads sharing a stripe of the policy's count may overwrite). They
//! used to be summed from the pending counts, which saturate at 15: the hot entries' hits
//! went uncounted, more of them the fewer entries passed a queue's front, so the measured
//! rate moved with the share itself and the climb followed that.

use super::regret::Recency;
use parts::{part_of, Parts};
use trial::LiftTrial;

/// The window's share of the tracked weight at start: TinyLFU's usual 1% (closed once the
/// cache is first full where every weight is equal, no sample has ended and a sample is
/// longer than the least one: [`Climber::close_before_first_sample`]).
pub(super) const INITIAL_SHARE: f64 = 0.01;
/// Bounds of the share. At the upper one the window is all the cache and the policy is LRU
/// (with a second chance for entries hit since they last passed the front). A Zipf sliding
/// through 300 entries wants nearly that (a window held at 97% for the whole trace: 1.005
/// of the best peer's hits; at 80%, the bound before, 0.993). No contest runs there, so
/// admission regret learns nothing: a hint that recency pays holding the climb there lapses
/// after a while without contests (`TinyLfu::lapse_unrenewed_hint`), and a fall from the
/// climb's best refutes it sooner ([`Climber::pays`]).
pub(super) const MIN_SHARE: f64 = 0.0;
pub(super) const MAX_SHARE: f64 = 1.0;
/// First step, as a share of the tracked weight.
const STEP: f64 = 0.0625;
/// Each sample the step is multiplied by this.
const STEP_DECAY: f64 = 0.98;
/// The largest step of a climb the hint that recency pays leads: it doubles on each
/// sample that, like the one before, moved the share and did not lower the hit rate
/// ([`Climber::adjust`]). A drifting set at 300 entries climbs from a closed window to all
/// the cache; at steps of [`STEP`] or less that took 16 samples of 5,000 requests, most of
/// the trace's first half, at windows too small for it (docs/memory-tier.md, *The hint's
/// climb*).
const MAX_HINTED_STEP: f64 = 4.0 * STEP;
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
/// Nor does a fall smaller than this many times its standard error, as the parts of the two
/// samples differ ([`parts::PartSpread`]). The average of the changes needs samples to learn a
/// periodic workload's swing, and a cache of 2,000 entries sees ten samples in 200,000
/// requests: Zipf with a scan after every 8,000 requests swung its first samples by a point
/// or two with the number of scans each caught, the climb took those falls for the step's
/// and turned up, and 12 of 16 runs ended at windows of 7-30% (scan+zipf-0.8@2000: 0.992
/// of the best peer, 1.005 with this). The parts of such samples differ by tens of points,
/// so their climb holds its direction; parts of a steady workload differ by chance alone,
/// and a clear fall still turns the climb. At one error 4 of those 16 runs still turned up;
/// 1.5 and 2 measured alike, 3 lost drifting sets at 50-500 entries (docs/memory-tier.md).
const REVERSE_OVER_ERROR: f64 = 2.0;
/// A change within the samples' error ([`REVERSE_OVER_ERROR`] times it) while that band is
/// at least this many times the usual change says nothing of the step's effect, either way:
/// the step shrinks by [`UNMEASURED_DECAY`] rather than [`STEP_DECAY`], so the share slows
/// to a rest on such samples (about one more step in all) instead of walking on them. Not
/// while the hint that recency pays drives the climb ([`Climber::pays`]): the hint, not the
/// samples, sets its direction then, and its own refutation ends it, while halving stalled
/// it short of where the hint led (a Zipf sliding through 300 entries: the climb came to
/// rest at a window of 51%, where 97% is better by 0.7 points, too little for a sample to
/// measure).
/// Without it, a climb turned by an early fall (Zipf 1.0 with scans at 5,000 entries: a
/// scan read as a change of workload at the second sample) kept
/// its direction through every later sample, whose falls stood within the error, up to
/// the largest window (2,000,000 requests: 0.957 of the best peer, 0.996 with this). At 2,
/// drifting sets at 50-300 entries, whose early rises are as unmeasured, climbed too little
/// (drift-0.9@300 -0.008); 3 and 4 alike (docs/memory-tier.md).
const UNMEASURED_OVER_NOISE: f64 = 3.0;
/// The step's shrink per unmeasured sample (see [`UNMEASURED_OVER_NOISE`]).
const UNMEASURED_DECAY: f64 = 0.5;
/// Weight of the newest sample in the moving average of the changes.
const NOISE_WEIGHT: f64 = 0.25;
/// The usual change assumed before any is measured (a hit rate over [`MIN_SAMPLE`] requests
/// moves by about this much by chance alone).
const INITIAL_NOISE: f64 = 0.02;
/// Requests per sample per tracked entry (the policy's probe passes this many times its
/// entries as the sample, [`Climber::record`], never fewer than [`MIN_SAMPLE`]).
pub(super) const SAMPLE_PER_ENTRY: u64 = 10;
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

/// A climb up under the hint that recency pays, standing below its best by this many times
/// the band a fall must leave to reverse it, refutes the hint ([`Climber::pays`]). At 1 a
/// refuted hint and a reversal are the same fall; 2 and 3 measured alike
/// (docs/memory-tier.md).
const REFUTE_OVER_BAND: f64 = 2.0;

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
    /// `share` in units of 2^-48, kept beside it (set wherever it is): the window's target
    /// is computed on every insert and eviction, and in integers it stays off the
    /// floating-point unit's long conversion chain.
    fraction: u64,
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
    /// The standard error of the last sample's hit rate, as its parts spread
    /// ([`parts::PartSpread::standard_error`]).
    last_error: f64,
    /// The best hit rate since the climb last turned (or restarted, or rested).
    run_best: Option<f64>,
    /// Whether the last adjustment followed the hint that recency pays ([`Climber::pays`]).
    paid: bool,
    /// Whether the current hint was refuted by the climb's own fall ([`Climber::pays`]).
    pays_refuted: bool,
    /// Whether the last sample under the hint already stood below the climb's best by the
    /// refutation's margin: one such sample is a swing, two in a row refute ([`Climber::pays`]).
    fell_from_best: bool,
    /// Whether the last sample under the hint moved the share and did not lower the hit
    /// rate (two in a row double the step: [`MAX_HINTED_STEP`]).
    held_under_hint: bool,
    /// A lean's lift being judged.
    trial: Option<LiftTrial>,
    /// Whether a lift failed its trial: neither the lean nor the hint lifts the window until a
    /// restart or until recency is [`Recency::Unproven`] ([`Climber::judge_lift`]).
    lift_refuted: bool,
    /// Set when a lift fails its trial, until the policy takes it
    /// ([`Climber::take_failed_lift`]).
    lift_failed: bool,
    /// What regret said of recency at the last sample.
    last_recency: Recency,
    /// Whether the climb is heading down from a window open when regret stopped saying that
    /// recency pays or may ([`Climber::unwind`]): unmeasured samples do not slow it.
    unwinding: bool,
}

impl Default for Climber {
    fn default() -> Self {
        Self {
            share: INITIAL_SHARE,
            fraction: fraction_of(INITIAL_SHARE),
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
            last_error: 0.0,
            run_best: None,
            paid: false,
            pays_refuted: false,
            fell_from_best: false,
            held_under_hint: false,
            trial: None,
            lift_refuted: false,
            lift_failed: false,
            last_recency: Recency::Unproven,
            unwinding: false,
        }
    }
}

/// Bits of [`Climber`]'s `fraction`: fine enough that a target of up to 2^40 weight units
/// (a terabyte) is off by less than one from the exact product.
const FRACTION_BITS: u32 = 48;

/// `share` in units of 2^-48, rounded up (shares are within [0, 1]): a share such as 1% is
/// not a whole number of units, and rounded down it made a target of a whole number of
/// entries (1% of 100, 80% of 500) one short. Rounded up, a target is the exact product
/// rounded down, unless that product falls within 2^-8 of a unit below a whole number (at
/// totals up to 2^40).
fn fraction_of(share: f64) -> u64 {
    (share * (1u64 << FRACTION_BITS) as f64).ceil() as u64
}

impl Climber {
    /// The window's current share of the tracked weight.
    pub(super) fn share(&self) -> f64 {
        self.share
    }

    /// The window's share of `total` (rounded down).
    #[inline]
    pub(super) fn window_target(&self, total: u64) -> u64 {
        ((u128::from(total) * u128::from(self.fraction)) >> FRACTION_BITS) as u64
    }

    /// Whether the window is closed (its share at the smallest).
    pub(super) fn closed(&self) -> bool {
        self.share <= MIN_SHARE
    }

    /// Records `hits` hits and `misses` misses; at the end of a sample of `sample` requests,
    /// adjusts the share. Returns whether the hit rate just fell by [`RESTART`] or more (the
    /// workload changed).
    /// `recency` (admission regret's hint, [`super::regret`]): where it pays, the climb
    /// points to a larger window (off the smallest one too) unless the climb's own fall has
    /// refuted the hint ([`Climber::pays`]) or a lift has failed its trial
    /// ([`Climber::judge_lift`]), and once it no longer pays (or is refuted) the climb turns
    /// down; where it may, a climber resting at the smallest window tries a larger one, on
    /// trial; unless it pays, a climber resting at the largest window tries a smaller one.
    pub(super) fn record(&mut self, hits: u64, misses: u64, sample: u64, recency: Recency) -> bool {
        self.hits += hits;
        self.misses += misses;
        let sample = sample.max(MIN_SAMPLE);
        if self.hits + self.misses >= sample {
            self.close_part(hits, misses, part_of(sample));
            return self.adjust(recency, false);
        }
        if self.watch_part(hits, misses, part_of(sample)) {
            // The new workload's parts alone make the sample: its fall is not diluted.
            (self.hits, self.misses) = self.parts.as_ref().map_or((0, 0), |p| p.fallen_counts);
            return self.adjust(recency, true);
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
        // Nor is their spread an error of the rate (as the first sample's: see adjust), nor
        // their rates the best of a climb.
        self.last_error = 0.0;
        self.run_best = None;
        self.fell_from_best = false;
        self.held_under_hint = false;
    }

    /// Closes the window when the cache is first full with every weight equal
    /// ([`super::TinyLfu::filled`]), if no sample has ended yet and a sample for `len`
    /// entries ([`SAMPLE_PER_ENTRY`] requests each) is longer than [`MIN_SAMPLE`]: from 501
    /// entries, in each shard's policy. The first sample then starts here, at the closed
    /// window it judges (with the few requests since the policy's last probe).
    ///
    /// The climb's first step would take the share from [`INITIAL_SHARE`] down to the
    /// smallest window too, but only at the end of a sample: a cache of 20,000 entries waits
    /// 200,000 requests for it, and a loop meanwhile misses what the window holds (loop-2x
    /// at 20,000 entries, 200,000 requests: 0.992 of the best peer's hits on two draws,
    /// 1.002 closed). That step also counts as a move, so a fall in the sample after it
    /// turns the climb up; from a closed start a fall at the bound does not, and only a
    /// lean's lift (on trial) or the hint that recency pays opens the window. Smaller caches
    /// keep the 1% start and that first move: their samples are short, and the turn after
    /// it is how some drifts cross the small windows that hit less than a closed one on
    /// their way to the wide ones that hit more (closed from the start at every size, one of
    /// 48 runs of a policy test's drift at 200 entries stayed closed, 5% fewer hits; drift
    /// with Zipf 0.7 at 100-500 entries lost up to 0.017 of the best peer's,
    /// docs/memory-tier.md). Weights that vary keep the window: its free passes are where
    /// the sized traces' hits come from (the sized rows of `phase_eval` under 0.995 went
    /// from 27 to 49 of 104 closed over 500 entries, to 53 closed at every size).
    ///
    /// Counted from the fill's end rather than from the first request, the first sample
    /// measures the closed window instead of the cold cache's misses, the baseline a lift's
    /// trial or the next sample is compared with: the phase cycle with Zipf 1.0 at 7,000
    /// entries 0.9930 -> 0.9954 of the best peer's hits; the phase change with Zipf 1.0 at
    /// 10,000 entries fell, 1.032 -> 1.012, probably as its first sample now straddles the
    /// switch (not traced; docs/memory-tier.md, *a closed start*).
    pub(super) fn close_before_first_sample(&mut self, len: u64) {
        if self.previous_rate.is_none() && SAMPLE_PER_ENTRY * len > MIN_SAMPLE {
            self.close();
            self.hits = 0;
            self.misses = 0;
        }
    }

    /// Sets the share to the smallest window.
    fn close(&mut self) {
        self.share = MIN_SHARE;
        self.fraction = fraction_of(MIN_SHARE);
    }

    /// Ends a sample; `ended_early`: by the fall of its last parts ([`Self::watch_part`]).
    fn adjust(&mut self, recency: Recency, ended_early: bool) -> bool {
        let mut error = 0.0;
        if let Some(parts) = &mut self.parts {
            error = parts.spread.standard_error();
            **parts = Parts {
                last_lowest: parts.lowest.take(),
                ..Parts::default()
            };
        }
        let rate = self.hits as f64 / (self.hits + self.misses) as f64;
        self.hits = 0;
        self.misses = 0;
        let Some(previous) = self.previous_rate.replace(rate) else {
            // First sample: nothing to compare with; take the first step. Its parts spread
            // with the cache's warm-up, a rise that is no swing: the error starts from the
            // next sample (with it, the fall that turns a drifting set's climb up at 50-200
            // entries went unheeded: up to -0.022 of the best peer).
            self.last_error = 0.0;
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
        let lifted = self.trial.is_some_and(|t| t.samples == 0);
        let restart = change <= -restart_at && !lifted;
        // A change of workload within the sample spreads its parts by the change itself, no
        // swing of the rate: a restart's or an early end's sample carries no error (with
        // one, the sample after would not turn round on a fall of its own).
        let error = if restart || ended_early { 0.0 } else { error };
        let last_error = std::mem::replace(&mut self.last_error, error);
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
        // usual swing. Nor a restart's fall: it is the new workload's doing, not the step's
        // (turned round, a climb that had just closed the window from 1% opened it again on
        // the fall of a change of working set, and the hint below took it on up: phase
        // cycle with Zipf 0.8 at 5,000 entries 1.011 -> 0.987 of the best peer's hits).
        // Nor does a fall within the error the two samples' parts show.
        let change_error = error.hypot(last_error);
        let error_band = REVERSE_OVER_ERROR * change_error;
        let reverse_at = (REVERSE_OVER_NOISE * self.noise).max(error_band);
        // Nor only against the last sample: a climb past its peak whose samples each fall
        // within the band (a sized workload's parts swing by a point) walks on and on
        // downhill, so the fall is also measured from the best rate since the climb last
        // turned (sized Zipf at 100 entries: a window walked to 70% while the hit rate fell
        // from 63% to 58%).
        let best = self.run_best.map_or(previous, |b| b.max(previous));
        let direction = self.step.is_sign_positive();
        if (change < -reverse_at || rate < best - reverse_at) && self.moved && !restart {
            self.step = -self.step;
        }
        if restart || recency == Recency::Unproven {
            self.trial = None;
            self.lift_refuted = false;
        }
        self.judge_lift(rate, reverse_at, recency);
        let pays = self.pays(recency, restart, direction, best - rate, reverse_at);
        if std::mem::replace(&mut self.paid, pays) && !pays && self.share > MIN_SHARE {
            // The hint that drove the climb up has ended (or been refuted): the share it
            // reached is no finding of the climb's, so the climb heads back down and the
            // samples decide from there. Left climbing, it walked on up on falls within the
            // band (phase cycles at 20,000 entries over 2,000,000 requests: up to 0.04 of
            // the best peer's hits; docs/memory-tier.md). From the largest window, a full step
            // (as a climber resting there without the hint takes).
            // (The hint's climb may have doubled its step: heading down, no more than a
            // full one.)
            self.step = if self.share >= MAX_SHARE {
                -STEP
            } else {
                -self.step.abs().min(STEP)
            };
        }
        // A lean does not lift on a restart: at a bound a restart keeps its place (above).
        let leans = recency == Recency::Leans && !restart && !self.lift_refuted;
        if (pays || leans) && !self.moved && self.share <= MIN_SHARE && self.step < MIN_STEP {
            // Resting at the smallest window while rejected keys keep coming back: the one
            // way off the bound (a fall there does not turn the climb, see above). Without
            // it a drifting working set at 100 entries stayed at a zero window in 6 of 8
            // runs once admission regret had smoothed the fall that used to turn it round.
            // Where recency only may pay, the climb decides after this step: a fall turns
            // it back down, and it lifts again each time it comes to rest while the lean
            // holds (a single try per rest failed on noise: drift-0.7@150 -0.03), unless a
            // lift failed its trial (`lift_refuted`, see `judge_lift`).
            self.step = STEP;
            if !pays {
                self.trial = Some(LiftTrial {
                    rest: (rate + previous) / 2.0,
                    samples: 0,
                    last: rate,
                    dormant: 0,
                });
            }
        } else if !pays && !self.moved && self.share >= MAX_SHARE && self.step > -MIN_STEP {
            // Resting at the largest window once recency no longer pays: the way back down
            // (the hint takes a drifting set's climb there, and nothing else would turn it
            // at the bound; a loop or Zipf that follows wants a small window again).
            self.step = -STEP;
        } else if restart || change.abs() >= restart_at {
            self.step = STEP.copysign(self.step);
        } else if !pays
            && !self.unwinding
            && change.abs() < error_band
            && error_band > UNMEASURED_OVER_NOISE * self.noise
        {
            // The samples cannot tell the step's effect from their own swing: slow to a rest
            // rather than walk on them.
            self.step *= UNMEASURED_DECAY;
        } else {
            self.step *= STEP_DECAY;
        }
        self.unwind(recency, restart);
        if pays {
            // While recency pays the climb points to a larger window, whatever the last
            // sample did: the learnt bias buys recency too, and with both adapting a fall
            // was as often the bias's doing as the step's, so the share walked near zero
            // (drift at 100 entries, 32 hash seeds: 55,900-72,400 hits, 65,000-72,400 with
            // this; the best peer 61,400). Loops and Zipf never give the hint; a climb that
            // the hint leads downhill refutes it ([`Climber::pays`]).
            self.step = self.step.abs();
            // Two samples in a row that moved the share without lowering the rate: the
            // climb pays its way, so it speeds up (the hint alone had it creep up by a
            // full step a sample at most).
            let held = self.moved && change >= 0.0;
            if held && self.held_under_hint {
                self.step = (2.0 * self.step).min(MAX_HINTED_STEP);
            }
            self.held_under_hint = held;
        } else {
            self.held_under_hint = false;
        }
        // A new climb (turned by any rule, restarted, or set off from rest) starts from this
        // sample.
        // So does one the hint holds at the largest window (its share stands still there), so
        // that its fall from its best can still refute the hint.
        let held_up = pays && self.share >= MAX_SHARE && self.step > 0.0;
        let same_climb =
            self.step.is_sign_positive() == direction && !restart && (self.moved || held_up);
        self.run_best = same_climb.then_some(best.max(rate));
        self.move_share();
        restart
    }

    /// Whether the climb follows admission regret's hint that recency pays: `recency` says
    /// so, the hint is not refuted, and no lift has failed its trial since recency was last
    /// [`Recency::Unproven`] or the climb restarted ([`Climber::judge_lift`]). A climb up
    /// under the hint that stands below its best rate (by `below_best`) by
    /// [`REFUTE_OVER_BAND`] times the reversal band `reverse_at`,
    /// two samples in a row, refutes it until the hint lapses or the climb restarts: the
    /// regret's bias also rises where large entries are refused at the door and come back
    /// (sized Zipf over 1,000,000 requests at 1,000 entries: the hint held for most of the
    /// run and walked the window to 80% while the hit rate fell from 71% to 63%). One such
    /// sample is taken for a swing, as a fall undone at once is elsewhere in the climb: a
    /// drifting set's rate swings by up to 6 points from one sample to the next at 300
    /// entries, and a single swing had refuted the hint as the climb left a closed window,
    /// which put the climb off by three samples (docs/memory-tier.md, *The hint's climb*).
    fn pays(
        &mut self,
        recency: Recency,
        restart: bool,
        climbing_up: bool,
        below_best: f64,
        reverse_at: f64,
    ) -> bool {
        let hinted = recency == Recency::Pays;
        let fell = hinted
            && !restart
            && (self.moved || self.share >= MAX_SHARE)
            && climbing_up
            && below_best > REFUTE_OVER_BAND * reverse_at;
        if !hinted || restart {
            self.pays_refuted = false;
        } else if fell && self.fell_from_best {
            self.pays_refuted = true;
        }
        self.fell_from_best = fell;
        hinted && !self.pays_refuted && !self.lift_refuted
    }

    /// Heads the climb down with a full step when regret stops saying that recency pays or
    /// may ([`Recency::Unproven`] after [`Recency::Pays`] or [`Recency::Leans`]) while the
    /// window stands open, and keeps it heading down, unslowed by samples that cannot measure
    /// its steps ([`UNMEASURED_OVER_NOISE`]), until a fall turns it, regret speaks for
    /// recency again, the climber restarts or the window is closed (a surge's restart of the
    /// policy, [`Climber::forget_best`], leaves it heading down). Whatever opened the window
    /// (the hint or a lean, as a rule), regret no longer backs it; the hint's end turns the climb down ([`Climber::adjust`]), but a hint that
    /// ends and comes back several times, each time a little lower, leaves a small step that
    /// the unmeasured samples halve to a rest: after a drift through 100 entries, a settled
    /// Zipf kept windows of 0.39-0.94 of the cache in six of eight runs of a policy test
    /// (`after_a_drift_a_loop_or_a_settled_set_closes_the_window_again`), its rate rising
    /// by less than a sample's error at each step down, for 179,700-186,500 hits against
    /// 188,700-190,400 closed. With this, seven of the eight close (the eighth stands at
    /// 0.22), 182,500-190,600 hits. Also after a surge's restart, which sets the bias back to
    /// neutral. `phase_eval`'s sets, where it seldom fires, moved by under 0.002 on every
    /// row but one held-out row's hits and bytes (sized popular-heavy at 1,000 entries on one
    /// draw, +0.004).
    fn unwind(&mut self, recency: Recency, restart: bool) {
        if self.step > 0.0 || restart || recency != Recency::Unproven || self.share <= MIN_SHARE {
            self.unwinding = false;
        }
        if recency == Recency::Unproven
            && self.last_recency != Recency::Unproven
            && self.share > MIN_SHARE
            && !restart
        {
            self.step = -STEP;
            self.unwinding = true;
        }
        self.last_recency = recency;
    }

    /// Whether a lean's lift failed its trial since the last call: the policy then sets
    /// admission regret's bias back to its slow average ([`Regret::fall_back_to_settled`]),
    /// as the window's own losers had raised it.
    ///
    /// [`Regret::fall_back_to_settled`]: super::regret::Regret::fall_back_to_settled
    pub(super) fn take_failed_lift(&mut self) -> bool {
        std::mem::take(&mut self.lift_failed)
    }

    /// The policy restarted on a surge: a new workload, whose rates the old climb's best, and
    /// a lift's trial or its failure, say nothing about.
    pub(super) fn forget_best(&mut self) {
        self.run_best = None;
        self.pays_refuted = false;
        self.fell_from_best = false;
        self.trial = None;
        self.lift_refuted = false;
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
            self.fraction = fraction_of(self.share);
        }
        self.moved = self.share != before;
    }

    /// The hit rate of the last whole sample (tests).
    #[cfg(test)]
    pub(super) fn last_rate(&self) -> Option<f64> {
        self.previous_rate
    }

    /// A climber whose window share is `share` (tests of the rules that read it).
    #[cfg(test)]
    pub(super) fn with_share(share: f64) -> Climber {
        let share = share.clamp(MIN_SHARE, MAX_SHARE);
        Climber {
            share,
            fraction: fraction_of(share),
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
        assert_eq!(self.fraction, fraction_of(self.share), "window fraction");
        assert!(
            self.step.is_finite() && self.step.abs() <= MAX_HINTED_STEP,
            "step {}",
            self.step
        );
        assert!(
            self.noise.is_finite() && (0.0..=1.0).contains(&self.noise),
            "noise {}",
            self.noise
        );
        assert!(
            self.run_best.is_none_or(|b| (0.0..=1.0).contains(&b)),
            "best rate {:?}",
            self.run_best
        );
        assert!(
            self.trial
                .is_none_or(|t| t.samples <= trial::LIFT_TRIAL_SAMPLES
                    && t.dormant <= trial::LIFT_TRIAL_DORMANT),
            "a lift's trial counted past its judgement or its wait: {:?}",
            self.trial
        );
        assert!(
            !self.unwinding || self.step <= 0.0,
            "unwinding with a step up: {}",
            self.step
        );
        // A rate's error, from rates within [0, 1], is at most a half.
        assert!(
            (0.0..=0.5).contains(&self.last_error),
            "last sample's error {}",
            self.last_error
        );
    }
}

mod parts;
mod trial;

#[cfg(test)]
mod tests;
