//! Admission regret: remembers the recent losers of admission contests and learns from
//! their return how strict the contest should be.
//!
//! Every contest has a loser: the candidate (*rejected*) or the probation entry it displaced
//! (*displaced*). A rejected key requested again soon says the contest was too strict
//! (admitted, that request might have hit); a displaced key requested again says it was too
//! lenient. Each such return moves an admission *bias* a small step up or down: ARC's
//! learning from ghost hits, applied to TinyLFU's filter. The steps are weighted by how
//! common the other kind of loser is (rejections far outnumber displacements), so the bias
//! settles where a rejected key is as likely to return as a displaced one; a rejected key
//! heavier than the mean counts the mean over its weight (admitted, it would have taken the
//! room of several entries). Beyond 2,000 tracked keys each step is smaller in proportion,
//! so that the bias moves about as far per turnover of the cache's contents as in a cache
//! of that size ([`STEP_KEYS`]).
//!
//! The bias is continuous; the contest takes the whole counts it has passed
//! ([`Regret::credit`]), added to the candidate's estimate (estimates are whole counts, so
//! only whole steps change a contest). At -1 the bar is one count above TinyLFU's, at +1 a
//! candidate wins ties, and so on.
//!
//! What it buys: after a change of working set, or while the popular keys slide, the new
//! keys lose their contests against stale counts, return at once, and lower the bar within
//! a few thousand requests rather than at the next sketch aging. On Zipf the bias sits at
//! or just above its strict end; on loops the two kinds return alike and it stays near
//! zero. A bias of [`RECENCY_BIAS`] or more also tells the window's climber that recency
//! pays, and a slow average of the bias at [`LEAN_BIAS`] or more that it may
//! ([`Regret::recency`]). A bias rising while the hit rate has fallen is a
//! change of working set ([`super::surge`]): the policy restarts and the bias starts again
//! from neutral ([`Regret::reset_bias`]).
//!
//! The displaced losers also tell whether protected holds dead entries
//! ([`Regret::stale_entries_die`]): those that had gone round protected without a hit, or that
//! the sweep over protected found dead (stale), are counted apart from the others, and when the
//! stale ones return at under a quarter of the others' rate, such entries are mostly keys that
//! will never be requested again. A slowly drifting set's favourites die so, at their most
//! popular: at 500 entries W-TinyLFU held 34-60 keys dead for 6,250-12,500 requests, where
//! quick_cache, which keeps no counts, held 7-15. The policy then gives protected 10 points
//! less of main, and a stale entry counts half its estimate at a closed window
//! (docs/memory-tier.md). Where the working set cycles back, or on Zipf, stale entries return
//! as often as the others.
//!
//! Losers are kept in a direct-mapped table of one 32-bit word per tracked key (a tag of the
//! key, the kind, and when the contest was): a collision forgets the older loser, and a tag
//! matched by chance (about one in 16,384) reads as a return; either only blurs the evidence
//! a little. O(1) per contest and per miss: one word read and one written, in a table of
//! 4-8 bytes per entry.

#[cfg(test)]
mod tests;

/// The bias's bounds, in sketch counts: from one count stricter than TinyLFU (Zipf sits
/// there) to nearly every candidate admitted.
const MIN_BIAS: f32 = -1.0;
const MAX_BIAS: f32 = 8.0;
/// A return moves the bias by this much (in counts), times the other kind's share, in a
/// cache of up to [`STEP_KEYS`] tracked keys.
const STEP: f32 = 1.0 / 32.0;
/// Beyond this many tracked keys a return moves the bias by [`STEP`] times this many over
/// the keys: the bias then moves about as far per turnover of the cache as it does at this
/// size. Returns come with the misses, but what a move of the bias does (displaced keys
/// coming back, rejected ones no longer) shows only as the contents turn over, which takes
/// longer the larger the cache; with the step of a small cache the bias ran far past its
/// balance first. A cold cache of 20,000 entries raised it to its upper bound (every
/// candidate admitted) within its first 60,000 requests, which shrank protected to a fifth
/// of main, then let it fall to the lower bound; on Zipf 0.8 the cache took 800,000
/// requests to reach the hit rate its peers had at 300,000 (0.971 of the best peer over
/// 2,000,000 requests, 1.020 with this). 1,000 slowed phase cycles at 2,000 entries (up to
/// -0.044 of the best peer), 3,000 gained less over long traces (docs/memory-tier.md).
const STEP_KEYS: u64 = 2_000;
/// The moving share of displacements among the losers weighs each contest one in this many
/// (the first ones, the mean of those so far).
const SHARE_CONTESTS: u32 = 4096;
/// How far the bias must pass a whole count before the contest takes it. Without the slack
/// a bias hovering at zero (loops) let candidates win ties on every small step up, and
/// loop-2x at 5,000 entries lost 0.01 of the best peer's hits (`phase_eval`'s mean 0.0014).
const SLACK: f32 = 1.0 / 32.0;
/// From this bias on, recency pays: the window's climber climbs (off the smallest window,
/// and a fall does not turn it down unless it is clear enough to refute the hint:
/// `Climber::pays`; nor after a lean's lift failed its trial: `Climber::judge_lift`) rather
/// than hill-climbing both ways (the drifting traces' best window is large; loops and Zipf,
/// which want the smallest, keep a bias near or below zero).
const RECENCY_BIAS: f32 = 2.0;
/// From this average of the bias on ([`Regret::observe`]), recency may pay: the climber tries
/// a window off the smallest one and keeps it only if the hit rate does not fall (a trial of
/// a few samples: `Climber::judge_lift`). A
/// drifting set at 100-300 entries can settle with a zero window and a bias near 1, where
/// rejected and displaced keys return alike, short of [`RECENCY_BIAS`]; a larger window
/// would hit up to a fifth more there, and the climber, which does not turn round at a
/// bound, never tried one (docs/memory-tier.md). Zipf, scans and loops keep the bias at or
/// below zero.
const LEAN_BIAS: f32 = 0.8;
/// The average of the bias takes this many observations (one per probe of the hit rate,
/// about 32 misses per entry in all from 128 entries on; probes come every eighth of the
/// entries' count of misses, at least 16): long enough that the transient rise after a change
/// of working set does not reach [`LEAN_BIAS`] (a lean from the bias itself cost the phase
/// cycles at 1,000 entries 0.007), short enough that a bias held at 1 leans within about 400
/// probes (a sixth of a 200,000-request drift at 300 entries).
const LEAN_OBSERVATIONS: f32 = 256.0;

/// Where a table word's tag starts (its high 15 bits).
const TAG_SHIFT: u32 = 17;
/// Bit of a table word that marks a displaced loser that was stale ([`Loser::StaleDisplaced`]).
const STALE: u32 = 1 << 16;
/// Bit of a table word that marks a displaced loser (clear: rejected).
const DISPLACED: u32 = 1 << 15;
/// A word's low 15 bits: the contest's epoch (its sequence number shifted right by
/// `Regret::shift`), wrapping. The horizon spans at most 2^13 epochs, so ages up to it are
/// exact; a loser older than the wrap may read as recent, which only adds a little noise.
const EPOCH_MASK: u32 = (1 << 15) - 1;
/// The most epochs a horizon spans.
const HORIZON_EPOCHS: u32 = 1 << 13;
/// The displaced losers' counts and returns are halved every this many contests, and
/// [`Regret::stale_entries_die`] is taken at the same moments: it follows the workload
/// within a few windows, and turns at most once per window.
const RETURNS_WINDOW: u32 = 4096;
/// [`Regret::stale_entries_die`] needs this many stale and this many other displaced losers
/// in its counts before it says anything.
const MIN_DISPLACED: u32 = 32;
/// Stale displaced losers that return at under one in this many times the others' rate are
/// taken for dead ([`Regret::stale_entries_die`]). Measured on the traces (returns within
/// the horizon, per displaced loser): drift with Zipf 0.7 at 500 and 1,000 entries 2.8% and
/// 5.5% for stale entries against 20% and 18% for the others (with Zipf 0.9 at 300, 12%
/// against 16%: not under a quarter); Zipf, phase changes and cycles 13-23% against 5-19%,
/// except a phase cycle at 20,000 entries, 3.1% against 5.5%. In a first trial (every loser
/// recorded exactly, a step of 20 points), at one in 2 the phase cycle at 2,000 entries lost
/// 0.03 of the best peer's hits, and at one in 5 drift with Zipf 0.7 at 500 entries gained
/// 0.024 of them against 0.029 at one in 4 and 0.041 at one in 3 (docs/memory-tier.md).
const STALE_RETURN_DIVISOR: u64 = 4;

/// Who lost a contest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Loser {
    /// The candidate: refused admission.
    Rejected,
    /// The probation entry the candidate displaced.
    Displaced,
    /// The probation entry the candidate displaced, stale: it had gone round protected
    /// without a hit, or the sweep found it dead (see [`super::Meta::stale`]).
    StaleDisplaced,
}

/// How many displaced losers of one kind were noted, and how many of them returned within
/// the horizon (both halved every [`RETURNS_WINDOW`] contests).
#[derive(Clone, Copy, Debug, Default)]
struct Returns {
    noted: u32,
    returned: u32,
}

#[derive(Debug, Default)]
pub(super) struct Regret {
    /// Direct-mapped by key hash: tag (high 15 bits, never zero), kind (bits 16 and 15) and the
    /// contest's epoch (low 15 bits); zero is empty. Invariant: empty or a power of two long.
    table: Box<[u32]>,
    /// Contests noted so far (wrapping: a wrap blurs one horizon's ages).
    seq: u32,
    /// Epochs are `seq >> shift`: sized so that a horizon of one contest per tracked key
    /// spans at most [`HORIZON_EPOCHS`].
    shift: u8,
    /// Added to a candidate's estimate, in counts. Invariant: within the bounds.
    bias: f32,
    /// The whole counts of `bias` the contest takes (see [`Regret::credit`]), kept beside
    /// it because every contest and rebalance reads it (a float's `ceil` is a libm call on
    /// baseline x86-64). Invariant: `credit_of(bias)`.
    credit: i8,
    /// Share of displacements among the contests' losers: the mean of the first
    /// [`SHARE_CONTESTS`], a moving average from then on.
    displaced_share: f32,
    /// Contests noted, up to [`SHARE_CONTESTS`].
    contests: u32,
    /// Slow moving average of `bias` ([`Regret::observe`]). Invariant: within the bias's
    /// bounds.
    settled_bias: f32,
    /// Displaced losers that were stale, and the others.
    stale: Returns,
    fresh: Returns,
    /// What [`Regret::stale_entries_die`] says: the rule on the counts at the end of the
    /// last window of [`RETURNS_WINDOW`] contests. Taken only then, so that it turns at most
    /// once a window: each turn on demotes up to a tenth of main to probation, and taken on
    /// every displaced loser it flickered (136 turns in 200,000 requests of a drift at 500
    /// entries), for about the same hits.
    stale_die: bool,
}

/// What admission regret says about recency, for the window's climber
/// ([`super::climber`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Recency {
    /// Not shown to pay (Zipf, scans, loops): hill climbing alone sizes the window.
    Unproven,
    /// It may pay ([`LEAN_BIAS`]): a climber resting at the smallest window tries a larger one.
    Leans,
    /// It pays ([`RECENCY_BIAS`]): the climb points to a larger window.
    Pays,
}

impl Regret {
    /// Sizes the table for `keys` tracked keys, one word each (rounded up to a power of two
    /// and at least 64, as the sketch is: the sketch's growth calls this, so it happens
    /// O(log n) times); growing forgets every loser.
    pub(super) fn resize(&mut self, keys: usize) {
        let want = keys.max(64).next_power_of_two();
        if self.table.len() < want {
            self.table = vec![0; want].into_boxed_slice();
            // A horizon is at most the tracked keys, at most the table's length: one epoch
            // per 2^shift contests keeps it within HORIZON_EPOCHS.
            let contests_per_epoch = want.div_ceil(HORIZON_EPOCHS as usize);
            self.shift = contests_per_epoch.next_power_of_two().trailing_zeros() as u8;
        }
    }

    /// The whole counts added to a candidate's estimate: those the bias has passed by more
    /// than [`SLACK`] (from -1 to 8).
    pub(super) fn credit(&self) -> i64 {
        i64::from(self.credit)
    }

    /// The bias, in counts.
    pub(super) fn bias(&self) -> f32 {
        self.bias
    }

    /// What the bias, and its slow average, say about recency.
    pub(super) fn recency(&self) -> Recency {
        if self.bias >= RECENCY_BIAS {
            Recency::Pays
        } else if self.settled_bias >= LEAN_BIAS {
            Recency::Leans
        } else {
            Recency::Unproven
        }
    }

    /// Moves the slow average of the bias a step towards it: once per probe of the hit rate
    /// (the probes are what the window's climber acts on).
    pub(super) fn observe(&mut self) {
        self.settled_bias += (self.bias - self.settled_bias) / LEAN_OBSERVATIONS;
    }

    /// Whether entries that went round protected without a hit are mostly dead: displaced,
    /// they return at under a [`STALE_RETURN_DIVISOR`]th of the other displaced entries'
    /// rate (with at least [`MIN_DISPLACED`] of each kind counted; as of the end of the last
    /// window of [`RETURNS_WINDOW`] contests). Then protected, which gives up such entries
    /// only as fast as it takes in promoted ones, is holding keys that will not be requested
    /// again: the policy gives it 10 points less of main, and a stale entry counts half its
    /// estimate at a closed window.
    pub(super) fn stale_entries_die(&self) -> bool {
        self.stale_die
    }

    /// Remembers that `key_hash` lost a contest as `kind`.
    pub(super) fn note(&mut self, key_hash: u64, kind: Loser) {
        if self.table.is_empty() {
            return;
        }
        self.seq = self.seq.wrapping_add(1);
        let displaced = kind != Loser::Rejected;
        // The mean of the contests so far until there are SHARE_CONTESTS of them, a moving
        // average from then on: started from zero, a cold cache's share took thousands of
        // contests to come up, its rejected keys' returns moved the bias by next to nothing
        // while its displaced keys' moved it by whole steps, and the bias fell (to about
        // -0.5 in a drift at 300 entries: 0.973 of the best peer's hits, 0.995 with this and
        // the round's other two rules; docs/memory-tier.md).
        // (A division only while it counts: a contest runs on every evicting put.)
        let weight = if self.contests < SHARE_CONTESTS {
            self.contests += 1;
            1.0 / self.contests as f32
        } else {
            1.0 / SHARE_CONTESTS as f32
        };
        self.displaced_share += weight * (f32::from(u8::from(displaced)) - self.displaced_share);
        let i = self.index(key_hash);
        let kind_bits = match kind {
            Loser::Rejected => 0,
            Loser::Displaced => {
                self.fresh.noted += 1;
                DISPLACED
            }
            Loser::StaleDisplaced => {
                self.stale.noted += 1;
                DISPLACED | STALE
            }
        };
        self.table[i] = (tag(key_hash) << TAG_SHIFT) | kind_bits | self.epoch();
        if self.seq.is_multiple_of(RETURNS_WINDOW) {
            self.stale_die = stale_die(self.stale, self.fresh);
            for r in [&mut self.stale, &mut self.fresh] {
                r.noted /= 2;
                r.returned /= 2;
            }
        }
    }

    /// `key_hash` was requested and missed: if it lost a contest within the last `horizon`
    /// contests, move the bias (up for a rejected key, down for a displaced one). The
    /// horizon is the tracked keys' count, which also scales the step ([`STEP_KEYS`]).
    /// A rejected key's step is also times `rejected_worth()` (at most 1, asked only then):
    /// the mean entry's weight over its own, as the policy reckons it. Admitted, a key of
    /// four times the mean weight would have pushed out about four entries for its one hit,
    /// so its return argues a quarter as much for a lower bar. Counted whole, large program
    /// binaries refused at the door held the bias up on sized traces, and the bar let in
    /// large entries at the cost of hits (sized Zipf at 50 entries, another draw of the
    /// trace: 0.963 of moka's hits, 1.017 with this; docs/memory-tier.md). A displaced
    /// key's return counts whole, whatever it weighs: the bar that let its displacer in was
    /// too low.
    pub(super) fn returned(
        &mut self,
        key_hash: u64,
        horizon: u64,
        rejected_worth: impl FnOnce() -> f32,
    ) {
        if self.table.is_empty() {
            return;
        }
        let i = self.index(key_hash);
        let word = self.table[i];
        if word >> TAG_SHIFT != tag(key_hash) {
            return;
        }
        self.table[i] = 0;
        let age = self.epoch().wrapping_sub(word) & EPOCH_MASK;
        if u64::from(age) > horizon >> self.shift {
            return;
        }
        if word & DISPLACED != 0 {
            let returns = if word & STALE != 0 {
                &mut self.stale
            } else {
                &mut self.fresh
            };
            returns.returned += 1;
        }
        // Weighted by the other kind's share: at rest, returns per loser are equal.
        let step = step_for(horizon);
        self.bias = if word & DISPLACED == 0 {
            (self.bias + step * rejected_worth() * self.displaced_share).min(MAX_BIAS)
        } else {
            (self.bias - step * (1.0 - self.displaced_share)).max(MIN_BIAS)
        };
        self.credit = credit_of(self.bias);
    }

    /// How many contests have ended (wrapping): the owner compares two readings to tell
    /// whether any contest ran in between.
    pub(super) fn contest_seq(&self) -> u32 {
        self.seq
    }

    /// Lowers the bias to just under [`RECENCY_BIAS`], ending the hint that recency pays
    /// where no contest can renew it (a window of all the cache: `TinyLfu::count_miss`).
    /// Once contests run again, returning rejected keys raise it back if recency still pays.
    pub(super) fn lapse_recency(&mut self) {
        self.bias = self.bias.min(RECENCY_BIAS - STEP);
        self.credit = credit_of(self.bias);
    }

    /// Lowers the bias to its slow average, if it stands above it: a lean's lift of the window
    /// failed its trial (`Climber::take_failed_lift`), and the window's own losers, which come
    /// back because they were just requested, had raised the bias since. Kept higher, the
    /// bias went on admitting the window's kind of candidate at a closed window (drift with
    /// Zipf 0.9 at 400 entries 0.9824 of the best peer's hits rather than 0.9839).
    pub(super) fn fall_back_to_settled(&mut self) {
        self.bias = self.bias.min(self.settled_bias);
        self.credit = credit_of(self.bias);
    }

    /// Sets the bias and its slow average back to neutral, TinyLFU's own bar (after a change
    /// of working set, what was learnt about the old one no longer holds). The losers stay
    /// remembered: those rejected just before are mostly the new set's keys, and their
    /// return after the restart is evidence about the new set.
    pub(super) fn reset_bias(&mut self) {
        self.bias = 0.0;
        self.settled_bias = 0.0;
        self.credit = credit_of(0.0);
    }

    /// Forgets the displaced losers' counts and the verdict on stale entries (at a restart:
    /// the old workload's stale entries say nothing about the new one's).
    pub(super) fn forget_returns(&mut self) {
        self.stale = Returns::default();
        self.fresh = Returns::default();
        self.stale_die = false;
    }

    /// The table's heap bytes (memory accounting).
    pub(super) fn heap_bytes(&self) -> usize {
        self.table.len() * std::mem::size_of::<u32>()
    }

    fn epoch(&self) -> u32 {
        (self.seq >> self.shift) & EPOCH_MASK
    }

    fn index(&self, key_hash: u64) -> usize {
        // Its own mixing, so that the slot does not follow the sketch's or the store's bits.
        let h = key_hash.wrapping_mul(0xA076_1D64_78BD_642F);
        (h >> 17) as usize & (self.table.len() - 1)
    }

    /// A regret whose bias is `bias` and whose verdict on stale entries is `stale_die`
    /// (tests of the rules that read both).
    #[cfg(test)]
    pub(super) fn with_verdict(bias: f32, stale_die: bool) -> Regret {
        Regret {
            stale_die,
            ..Regret::with_bias(bias)
        }
    }

    /// A regret whose bias is `bias` (tests of the rules that read the credit).
    #[cfg(test)]
    pub(super) fn with_bias(bias: f32) -> Regret {
        let bias = bias.clamp(MIN_BIAS, MAX_BIAS);
        Regret {
            bias,
            credit: credit_of(bias),
            ..Regret::default()
        }
    }

    #[cfg(any(test, fuzzing))]
    pub(super) fn validate(&self) {
        assert!(
            self.table.is_empty() || self.table.len().is_power_of_two(),
            "regret table of {} words",
            self.table.len()
        );
        assert!(
            (MIN_BIAS..=MAX_BIAS).contains(&self.bias),
            "admission bias {} out of bounds",
            self.bias
        );
        assert_eq!(
            self.credit,
            credit_of(self.bias),
            "credit of bias {}",
            self.bias
        );
        assert!(
            (MIN_BIAS..=MAX_BIAS).contains(&self.settled_bias),
            "settled bias {} out of bounds",
            self.settled_bias
        );
        assert!(
            self.contests <= SHARE_CONTESTS,
            "{} contests counted",
            self.contests
        );
        assert!(
            (0.0..=1.0).contains(&self.displaced_share),
            "displaced share {}",
            self.displaced_share
        );
    }
}

/// [`Regret::stale_entries_die`]'s rule: stale returns per stale loser under a
/// [`STALE_RETURN_DIVISOR`]th of the other displaced losers' rate.
fn stale_die(stale: Returns, fresh: Returns) -> bool {
    stale.noted >= MIN_DISPLACED
        && fresh.noted >= MIN_DISPLACED
        && STALE_RETURN_DIVISOR * u64::from(stale.returned) * u64::from(fresh.noted)
            < u64::from(stale.noted) * u64::from(fresh.returned)
}

/// A return's step in a cache tracking `keys` keys: [`STEP`], less beyond [`STEP_KEYS`], and
/// no less than at 1,024 times that: a smaller step, times a small share, would fall below
/// half the bias's rounding unit near its upper bound (f32) and be lost one way only. A
/// rejected key many times the mean weight can still shrink its step below that in a very
/// large cache; its return is then lost, which errs the way its worth points (the bar stays
/// higher).
fn step_for(keys: u64) -> f32 {
    if keys <= STEP_KEYS {
        STEP
    } else {
        STEP * (STEP_KEYS as f32 / keys.min(1024 * STEP_KEYS) as f32)
    }
}

/// The whole counts of `bias` past [`SLACK`]: -1 to 8 within the bias's bounds.
fn credit_of(bias: f32) -> i8 {
    (bias - SLACK).ceil() as i8
}

/// A key's tag: the top 15 bits of its hash, never zero (zero marks an empty slot). The
/// slot comes from other bits ([`Regret::index`] takes them after its own mixing).
fn tag(key_hash: u64) -> u32 {
    (key_hash >> (64 - (32 - TAG_SHIFT))) as u32 | 1
}
