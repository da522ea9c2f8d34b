//! Dead favourites: entries requested often until they are not requested at all (the most
//! popular keys of a slowly drifting set, the old set after a change of working set).
//!
//! Protected gives entries up only as fast as probation promotes others, and once demoted a
//! dead favourite wins its contests on the count it earned alive until the sketch has halved it
//! away: on drift with Zipf 0.9 at 700 entries dead keys stayed up to 12,000-15,000 requests,
//! and about a quarter of the cache was dead (quick_cache kept nearly as many). The policy
//! therefore watches how long each entry has been idle against how often its count says it is
//! requested. An entry idle for as long as [`DEAD_AFTER`] of its requests would take is taken
//! for dead: a sweep over protected, a couple of entries per miss, demotes it, and its contests
//! count it as requested never.
//!
//! Idle time is counted in hits (a clock advanced at each miss by the hits per miss of the
//! last probe), not in misses or sketch increments: a scan of one-off keys runs those
//! clocks while the popular keys wait, and counted in sketch increments the sweep took
//! popular entries for dead after each scan (scan with Zipf 1.0 at 1,000-5,000 entries,
//! 0.001-0.009 of the best peer's hits lower). An entry's rate is its count when its hits
//! were last folded ([`super::Meta::seen_count`]), not its count now: the sketch halves a
//! dead key's count while it waits, and idle time times a halving count never reached the
//! threshold (docs/memory-tier.md).
//!
//! Only while every weight is equal: with weights, the sweep took hits from the sized
//! traces' bytes (the held-out two-size family at 50 entries: bytes 1.036 -> 0.714 of the
//! best peer's, for hits 0.908 -> 1.000).

use super::{EntryId, Place, TinyLfu};

/// An entry idle for as long as this many of its requests would take is taken for dead.
/// Were requests Poisson at the rate its count says, a live entry would stay idle that long
/// once in e^8 (about 3,000) idle spells; the count says the rate only within about a third
/// either way (it halves every half sample), so about one in 200 at worst. 4 gained more on
/// drift (drift with Zipf 0.9 at 300-1,000 entries 1.03-1.07 of the best peer's hits rather
/// than 1.01-1.03) and cost scans with Zipf 1.0 at 700-3,000 entries (0.992-0.995) and a
/// held-out settled Zipf at 50 entries (0.976; docs/memory-tier.md).
const DEAD_AFTER: u64 = 8;
/// Protected entries the sweep looks at per miss: protected, most of the cache, is swept
/// once every 0.4 times the entries' count in misses. One per miss gained a little less.
const SWEEP_STEPS: usize = 2;
/// Fractional bits of the hit clock and of its rate per miss.
const CLOCK_SHIFT: u32 = 8;

/// The hit clock and the rates the idle test reads. See the module documentation.
#[derive(Debug, Default)]
pub(super) struct Idle {
    /// The protected entry the sweep looks at next (`None`: protected's front). Always a
    /// protected entry: one that leaves protected hands it on ([`TinyLfu::leave_sweep`]).
    pub(super) sweep_at: Option<EntryId>,
    /// Hits served, in 1/2^[`CLOCK_SHIFT`]: advanced at each miss by `hits_per_miss`.
    clock: u64,
    /// Hits per miss at the last probe, in 1/2^[`CLOCK_SHIFT`] (0 until the first probe:
    /// nothing looks idle until the policy knows its hit rate).
    hits_per_miss: u64,
    /// Sketch increments and hits over about the sketch's last sample (both halved when
    /// the increments pass it): how many increments a hit's worth of time brings.
    increments: u64,
    hits: u64,
    /// The sketch's increments at the last probe.
    increments_at_probe: u64,
    /// Entries the sweep found dead (tests).
    #[cfg(test)]
    pub(super) demoted: u64,
}

impl Idle {
    /// A miss: the clock moves on by the hits that came with each miss lately.
    #[inline]
    pub(super) fn miss(&mut self) {
        self.clock += self.hits_per_miss;
    }

    /// The hit clock, wrapping (idle spells longer than 2^32 hits read short).
    pub(super) fn now(&self) -> u32 {
        (self.clock >> CLOCK_SHIFT) as u32
    }

    /// A probe's hits and misses, and the sketch's increments so far and aging sample.
    pub(super) fn probe(&mut self, hits: u64, misses: u64, increments: u64, sample: u64) {
        self.hits_per_miss = (hits << CLOCK_SHIFT) / misses.max(1);
        self.increments += increments - self.increments_at_probe;
        self.increments_at_probe = increments;
        self.hits += hits;
        if self.increments > sample {
            self.increments /= 2;
            self.hits /= 2;
        }
    }

    /// Whether an entry whose count was `count` when last seen, at `seen_at`, has been idle
    /// for [`DEAD_AFTER`] of its requests. A count `c` gained over the sketch's halvings
    /// every half `sample` increments stands at 3/4 of rate times `sample` on average, so
    /// the requests missed are `c * idle * increments_per_hit / (3/4 * sample)`.
    pub(super) fn dead(&self, count: u8, seen_at: u32, sample: u64) -> bool {
        if count == 0 || self.hits == 0 {
            return false;
        }
        let idle = u128::from(self.now().wrapping_sub(seen_at));
        let missed = 4 * u128::from(count) * idle * u128::from(self.increments);
        missed >= 3 * u128::from(DEAD_AFTER) * u128::from(sample) * u128::from(self.hits)
    }
}

impl TinyLfu {
    /// `id` is about to leave its queue (or move to its back): if the sweep was to look at
    /// it next, it looks at the entry after it instead. Only a protected id can be the
    /// sweep's next (`TinyLfu::validate`), so callers need not check where `id` is.
    #[inline]
    pub(super) fn leave_sweep(&mut self, id: EntryId) {
        if self.idle.sweep_at == Some(id) {
            self.idle.sweep_at = self.queues[Place::Protected as usize].next(&self.links, id);
        }
    }

    /// Looks at the next [`SWEEP_STEPS`] protected entries: one with pending hits has them
    /// folded (so that its idle spell starts again) and keeps its second chance at the
    /// front ([`super::Meta::referenced`]); one without that is [`Idle::dead`] moves down
    /// to probation's back, stale, where its contests count it as requested never
    /// ([`TinyLfu::accesses`]). While every weight is equal (module documentation).
    pub(super) fn sweep_protected(&mut self) {
        let sample = self.sketch.sample();
        for _ in 0..SWEEP_STEPS {
            let protected = &self.queues[Place::Protected as usize];
            let Some(id) = self.idle.sweep_at.or_else(|| protected.front()) else {
                return;
            };
            self.idle.sweep_at = protected.next(&self.links, id);
            if self.fold(id) {
                self.meta[id as usize].referenced = true;
            } else {
                let m = self.meta[id as usize];
                if self.idle.dead(m.seen_count, m.seen_at, sample) {
                    self.demote(id);
                    #[cfg(test)]
                    {
                        self.idle.demoted += 1;
                    }
                }
            }
        }
    }
}
