//! The admission contest: how many accesses a resident entry is estimated to have, whether
//! a candidate displaces the victims it would push out, what an access is worth once weights
//! vary, and which probation entry goes when the front outweighs another. The rules are
//! described on [`TinyLfu`]'s module (`super`) and in docs/memory-tier.md.

use std::sync::atomic::Ordering;

use super::weight_classes::FACTOR_SHIFT;
use super::{EntryId, EvictionPolicy, Place, TinyLfu};

#[cfg(test)]
mod tests;

/// A candidate must be estimated this many accesses above the victim to displace it (per
/// byte). Estimates of keys requested equally often differ by one depending on where the
/// last halving fell between their accesses; without the margin a loop just larger than
/// the cache would trade resident keys for candidates on that noise, losing a hit each time.
const ADMIT_MARGIN: u64 = 1;
/// The most probation entries one candidate is weighed against.
const MAX_VICTIMS: usize = 16;
/// How many entries from probation's front [`TinyLfu::heavier_victim`] looks at (the front
/// included). Bounds the walk per eviction; more found better victims on sized traces
/// (docs/memory-tier.md) at a walk per eviction too long for large caches.
const VICTIM_SCAN: usize = 64;
/// How many entries [`TinyLfu::heavier_victim`] looks at in a probation longer than
/// [`VICTIM_SKIP_LEN`]. There the walk covers a sliver of probation whatever its length, and
/// its chain of cache misses was most of a mixed-size evicting put's cost over S3-FIFO's: 8
/// rather than 64 cut the put from 2.2x to about 1.7x S3-FIFO's, and moved the sized traces
/// at 1,000-20,000 entries by at most 0.004 of the best peer (docs/memory-tier.md).
pub(super) const LONG_VICTIM_SCAN: usize = 8;
/// Above this many probation entries [`TinyLfu::heavier_victim`] skips its walk when the
/// front weighs at least probation's average (docs/memory-tier.md: the walk's cost on
/// large caches halved; on small ones, where the walk covers much of probation and is
/// cheap, skipping it cost bytes).
pub(super) const VICTIM_SKIP_LEN: usize = 1024;

/// Whether an entry weighing `w` and estimated `f` accesses is dominated by one weighing
/// `wo` and estimated `fo`: it is strictly heavier and requested no more often, so it has
/// fewer accesses per byte. With equal weights nothing is dominated (nor [`outweighed`]),
/// which keeps the size rules ([`TinyLfu::loses_unseen`], [`TinyLfu::heavier_victim`]) out
/// of unit-weight caches entirely.
pub(super) fn dominated(w: u64, f: u64, wo: u64, fo: u64) -> bool {
    w > wo && f <= fo
}

/// Equal estimates from this many accesses up count as evidence that the heavier entry is
/// requested no more often ([`outweighed`]). Below it the sketch has counted either key only
/// a few times since its counts were last halved, and a tie says little: most of the ties
/// that sent popular heavy entries first (held-out set, sized-heavypopular) were at 0 or 1.
/// From it on both keys are requested again and again, as every resource of a frame loop
/// is; the discardable demo's ties at its evictions stand at 6-13, below the sketch's
/// ceiling of 15 (its sketch halves every few frames). Counted only at the ceiling, its
/// failed locks a frame rose from 22.2 / 21.0 / 15.7 to 25.9 / 22.7 / 18.0 on seeds 1-3;
/// from 2, 4 and 8 they stood at 22.5 / 20.7 / 15.7, 22.2 / 21.0 / 15.7 and 24.1 / 21.8 /
/// 16.1, and 4 kept more of the held-out set's gain than 2 (docs/memory-tier.md). For the
/// same reason a contest's victim estimated under it counts at its weight class's factor
/// rather than whole ([`TinyLfu::admits`]): too few counts to speak for the key itself.
pub(super) const TIES_COUNT_FROM: u64 = 4;

/// Whether an entry weighing `w` and estimated `f` accesses is outweighed by one weighing
/// `wo` and estimated `fo`: strictly heavier, and estimated strictly fewer accesses or as
/// many from [`TIES_COUNT_FROM`] up. What [`TinyLfu::heavier_victim`] asks before it evicts
/// out of queue order. Equal low estimates, most often 0 or 1 where the sketch knows little
/// of either key, are no evidence that the heavier entry is requested less: counting them,
/// as [`dominated`] does, took heavy entries first whatever their popularity, and where the
/// popular keys are the heavy ones (sized-heavypopular of `phase_eval --extra`, 300
/// entries, trace seeds 0-2) the policy stood at 0.956-0.965 of the best peer's hits and
/// 0.961-0.976 of its bytes (0.983-0.991 and 0.990-1.005 without them).
pub(super) fn outweighed(w: u64, f: u64, wo: u64, fo: u64) -> bool {
    w > wo && (f < fo || (f == fo && fo >= TIES_COUNT_FROM))
}

impl TinyLfu {
    /// A resident entry's estimated accesses: its sketch count plus the hits not yet
    /// folded into it, the count halved for a [`Meta::stale`] entry without pending hits
    /// while the window is closed and either rejected keys return more than displaced ones
    /// (a credit of 1 or more: a bias above 1/32 count) or displaced stale entries prove
    /// dead ([`Regret::stale_entries_die`]).
    /// Such an entry went round protected without a hit, yet the count it earned while it
    /// was popular would win its contests until the sketch ages: in a slowly drifting set
    /// the most popular keys are the next to die, and at a closed window (no recency on the
    /// way in) they kept the newly popular ones out (drift at 700-1,000 entries). With a
    /// window open, recency is the window's to give: halving there as well cost the drifts
    /// at 150-300 entries, whose best windows are wide, up to 0.03 of the best peer's hits
    /// (docs/memory-tier.md). A drift at 1,000 entries, or a change of working set at
    /// 20,000, keeps a credit near 0 while its stale entries die: taken on the credit alone
    /// there, drift-0.9@1000 stood at 0.993 of the best peer's hits and the phase change
    /// with Zipf 0.8 at 20,000 entries over 2,000,000 requests at 0.982 (0.996 and 1.015
    /// with the verdict, before the round's other rules: docs/memory-tier.md). Loops and
    /// Zipf keep a credit of 0 or less and their stale entries return, so their contests
    /// never see it.
    ///
    /// A stale entry without pending hits that has been idle for as long as its count says
    /// eight of its requests would take ([`Idle::dead`], while every weight is equal) is
    /// estimated none: a dead favourite, moved down by the sweep (`super::idle`) or by
    /// protected's overflow.
    ///
    /// [`Meta::stale`]: super::Meta::stale
    /// [`Regret::stale_entries_die`]: super::regret::Regret::stale_entries_die
    /// [`Idle::dead`]: super::idle::Idle::dead
    pub(super) fn accesses(&self, id: EntryId) -> u64 {
        let m = self.meta[id as usize];
        let pending = u64::from(self.pending[id as usize].load(Ordering::Relaxed));
        // Stale and settled: no hit since protected let it go.
        let idle_stale = m.stale && pending == 0;
        if idle_stale
            && !self.weights_vary
            && self
                .idle
                .dead(m.seen_count, m.seen_at, self.sketch.sample())
        {
            return 0;
        }
        let count = self.sketch.estimate(m.key_hash);
        let halved = idle_stale
            && self.climber.closed()
            && (self.regret.credit() >= 1 || self.regret.stale_entries_die());
        (if halved { count / 2 } else { count }) + pending
    }

    /// Whether the candidate should displace the victim and, if it weighs more, the
    /// probation entries behind the victim and then protected's oldest that it would also
    /// push out (at most [`MAX_VICTIMS`], the rest of its weight counted at their rate; all
    /// of main weighing less, it is refused): its estimated
    /// accesses, less [`ADMIT_MARGIN`] and plus the credit that admission regret has learnt
    /// ([`regret`]: -1 on Zipf, 0 on loops, more after a change of working set), must be
    /// worth more than all of theirs together. With equal weights every access is worth the
    /// same; else as [`TinyLfu::worth_scale`] says, and a victim estimated under
    /// [`TIES_COUNT_FROM`] accesses, too few to speak for itself, counts them times its
    /// weight class's factor ([`WeightClasses::factor`]: from a quarter to one, under one
    /// where that class's share of seen misses is below the share over every class).
    /// Near-ties keep the victims, which are already in main, unless the credit says
    /// otherwise; that is what keeps a loop's resident part stable. (Once weights vary, a
    /// victim of a class under one can lose a near-tie to a candidate of its own class that
    /// has come back: a loop's keys all come back, which keeps its classes at one, and the
    /// sized loop of the held-out set decided as before.)
    /// With an owner that inserts first (the store), the candidate may be the newcomer
    /// itself: a newcomer that loses is refused at the door.
    ///
    /// [`WeightClasses::factor`]: super::weight_classes::WeightClasses::factor
    /// [`regret`]: super::regret
    pub(super) fn admits(&self, candidate: EntryId, victim: EntryId) -> bool {
        let c = self.meta[candidate as usize];
        let fc = self.admission_count(self.sketch.estimate(c.key_hash));
        // None or no count to spare beats nothing: the victims need not be estimated.
        let Ok(fc @ 1..) = u64::try_from(fc) else {
            return false;
        };
        if !self.weights_vary {
            // Every access worth the same and the victim alone makes the room: the walk
            // below in one comparison (its 128-bit products were a nanosecond of every
            // evicting put).
            return fc > self.accesses(victim);
        }
        let worth = self.worth_scale();
        let beats = |freq: u128| u128::from(fc).saturating_mul(worth(c.weight)) > freq;
        let (probation, protected) = (
            &self.queues[Place::Probation as usize],
            &self.queues[Place::Protected as usize],
        );
        // Probation from the victim on, then protected from its oldest: the entries the
        // evictions after this contest take (see `evict`).
        let next = |v: EntryId| match self.meta[v as usize].place {
            Place::Probation => probation.next(&self.links, v).or_else(|| protected.front()),
            _ => protected.next(&self.links, v),
        };
        let (mut weight, mut freq, mut at) = (0u64, 0u128, Some(victim));
        for _ in 0..MAX_VICTIMS {
            let Some(v) = at else { break };
            let vw = self.meta[v as usize].weight;
            weight += vw;
            let av = self.accesses(v);
            let mut worth_v = u128::from(av).saturating_mul(worth(vw));
            if av < TIES_COUNT_FROM {
                // Little evidence of its own: its class's (`super::weight_classes`).
                worth_v =
                    worth_v.saturating_mul(u128::from(self.classes.factor(vw))) >> FACTOR_SHIFT;
            }
            freq = freq.saturating_add(worth_v);
            if weight >= c.weight || !beats(freq) {
                break;
            }
            at = next(v);
        }
        if weight < c.weight {
            if at.is_none() {
                // All of main weighs less: no room to make.
                return false;
            }
            // The walk stopped at MAX_VICTIMS: the rest of the room it needs, made after the
            // contest without another one, is taken as worth as much per unit of weight as
            // the entries walked.
            freq = freq.saturating_mul(u128::from(c.weight)) / u128::from(weight.max(1));
        }
        beats(freq)
    }

    /// Whether `candidate` loses its contest whatever the victims: [`TinyLfu::admits`]
    /// wants its estimate, less [`ADMIT_MARGIN`] and plus the credit, above zero, and folding
    /// its pending hits adds at most their number to the estimate. The victim walk
    /// ([`TinyLfu::heavier_victim`]) is then spared, and nothing else changes: the candidate
    /// is the loser either way.
    pub(super) fn cannot_win(&self, candidate: EntryId) -> bool {
        let m = self.meta[candidate as usize];
        let pending = u64::from(self.pending[candidate as usize].load(Ordering::Relaxed));
        self.admission_count(self.sketch.estimate(m.key_hash) + pending) <= 0
    }

    /// What a candidate estimated `estimate` accesses brings to its contest: less
    /// [`ADMIT_MARGIN`], plus the credit admission regret has learnt. One formula for
    /// [`TinyLfu::admits`] and [`TinyLfu::cannot_win`], whose answers must agree.
    fn admission_count(&self, estimate: u64) -> i64 {
        estimate as i64 + self.regret.credit() - ADMIT_MARGIN as i64
    }

    /// What an access to an entry weighing `w` is worth in a contest, up to a common factor:
    /// 1 while every weight is equal; else the mean entry's weight plus `w` (both times the
    /// entry count, to stay in integers). Weighing each access by the mean plus the entry's
    /// own weight makes the contest keep whichever side adds more to the product of hits and
    /// bytes hit: a contest moves log(hits) + log(bytes hit) by Δf/H + Δ(f·w)/B, and B/H, the
    /// mean weight of a hit, is taken as the mean entry's. Counted alone, accesses favour
    /// many light entries (moka's rule: the most hits, fewer bytes); weighed by bytes alone,
    /// few heavy ones (docs/memory-tier.md).
    pub(super) fn worth_scale(&self) -> impl Fn(u64) -> u128 {
        let vary = self.weights_vary;
        let total = u128::from(self.total_weight());
        let len = self.len() as u128;
        move |w| {
            if vary {
                total.saturating_add(u128::from(w).saturating_mul(len))
            } else {
                1
            }
        }
    }

    /// Whether an older candidate, which joins probation without a contest (only the
    /// newest candidate waits for one), should join it at the front, as the next victim,
    /// rather than at the back: when it was not requested since it left the window and is
    /// [`dominated`] by probation's oldest entry (heavier and requested no more often), so
    /// keeping that entry rather than the candidate costs no hits per byte. Newcomers the
    /// window is too small to hold meet their contest at the door; this is the same refusal
    /// for those that passed through a wider window: their bytes go back to the next
    /// eviction instead of displacing a probation entry that is lighter and as popular.
    pub(super) fn loses_unseen(&self, c: EntryId) -> bool {
        if self.pending[c as usize].load(Ordering::Relaxed) != 0 {
            return false;
        }
        let Some(v) = self.queues[Place::Probation as usize].front() else {
            return false;
        };
        let (cm, vm) = (self.meta[c as usize], self.meta[v as usize]);
        if cm.weight <= vm.weight {
            // Not dominated whatever the counts: spare the estimates (unit weights end here).
            return false;
        }
        let fv = self.accesses(v);
        dominated(cm.weight, self.sketch.estimate(cm.key_hash), vm.weight, fv)
    }

    /// The probation entry to evict, or to contest the candidate, instead of `front`
    /// (probation's oldest, settled). The walk goes over the [`VICTIM_SCAN`] entries from
    /// the front and weighs those without pending hits or a referenced mark that are heavier
    /// than every entry it weighed before them (a handful per walk, as the records of a
    /// random sequence are);
    /// the heaviest of them that `front` [`outweighed`] (strictly heavier, estimated
    /// strictly fewer accesses or as many from [`TIES_COUNT_FROM`] up) is the victim, else `front`
    /// itself. Evicting it frees more bytes for no more accesses lost, and leaves `front`,
    /// which is requested at least as often per byte, in place for the next eviction; on
    /// equal estimates below [`TIES_COUNT_FROM`] the queue's order stands.
    /// Weighing every heavier entry instead cost a mixed-size evicting put about 15 ns more
    /// (most estimates tie, and a tie no longer ends the search) for no more hits or bytes
    /// (docs/memory-tier.md). Stands in for moka's refusal of large newcomers on the
    /// side of the residents: a heavy entry nobody asked for since it joined probation
    /// gives its bytes back before lighter, more popular ones near the front. With equal
    /// weights nothing is heavier than `front`: always `front`. In a probation longer than
    /// [`VICTIM_SKIP_LEN`], a `front` weighing at least probation's average is taken without
    /// a walk (few entries are strictly heavier, and the walk is the cost of a mixed-size
    /// evicting put there), and the walk stops after [`LONG_VICTIM_SCAN`] entries.
    pub(super) fn heavier_victim(&self, front: EntryId) -> EntryId {
        if !self.weights_vary {
            return front;
        }
        let probation = &self.queues[Place::Probation as usize];
        let fm = self.meta[front as usize];
        // Settled: its estimate has no pending hits in it (a tied count is the sketch's
        // own, as `outweighed` reads it).
        debug_assert!(
            fm.place == Place::Probation
                && self.pending[front as usize].load(Ordering::Relaxed) == 0,
            "the front is probation's and settled"
        );
        // A front at least as heavy as probation's average has few strictly heavier entries
        // behind it: in a long probation, where the walk is a chain of cache misses, skip it.
        let len = probation.len();
        let long = len > VICTIM_SKIP_LEN;
        if long
            && u128::from(fm.weight) * len as u128
                >= u128::from(self.weights[Place::Probation as usize])
        {
            return front;
        }
        let mut f_front = None;
        let (mut best, mut heaviest) = (front, fm.weight);
        let mut at = probation.next(&self.links, front);
        let scan = if long { LONG_VICTIM_SCAN } else { VICTIM_SCAN };
        for _ in 1..scan {
            let Some(e) = at else { break };
            at = probation.next(&self.links, e);
            let m = self.meta[e as usize];
            // Estimates are taken only for entries heavier than every one weighed before
            // them (a handful per walk, as the records of a random sequence are).
            if m.weight <= heaviest
                || m.referenced
                || self.pending[e as usize].load(Ordering::Relaxed) != 0
            {
                continue;
            }
            heaviest = m.weight;
            let ff = *f_front.get_or_insert_with(|| self.accesses(front));
            if ff == 0 {
                // Nothing is estimated fewer accesses than none.
                break;
            }
            if outweighed(m.weight, self.accesses(e), fm.weight, ff) {
                best = e;
            }
        }
        best
    }

    /// What a rejected key weighing `weight`, just inserted again beside `others` tracked
    /// entries, counts for when it returns ([`Regret::returned`], which asks only then): the
    /// mean weight of the others over its own, at most 1; 1 while every weight is equal.
    ///
    /// [`Regret::returned`]: super::regret::Regret::returned
    pub(super) fn rejected_worth(&self, weight: u64, others: u64) -> impl FnOnce() -> f32 {
        let (vary, rest) = (self.weights_vary, self.total - weight);
        move || {
            if !vary || weight == 0 || others == 0 {
                return 1.0;
            }
            (rest as f32 / others as f32 / weight as f32).min(1.0)
        }
    }
}
