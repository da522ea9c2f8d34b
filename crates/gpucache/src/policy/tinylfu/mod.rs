//! W-TinyLFU with an adaptive window (Einziger, Friedman, Manes: "TinyLFU: a highly
//! efficient cache admission policy", 2017; the adaptive window after Caffeine).
//!
//! New entries enter a small *window*. When the window holds more than its share of the
//! tracked weight, its oldest entry becomes a *candidate* for the main space, which is
//! split into *probation* and *protected* (80% of main; less while recency pays strongly,
//! or while entries that went round protected without a hit prove dead once evicted).
//! On eviction the candidate meets the oldest probation entry, the *victim* (and, if the
//! candidate weighs more, the probation entries behind it that it would also push out): a
//! frequency sketch of recent accesses (including keys no longer stored) decides whether
//! the candidate is requested more than all of them, and the loser leaves. A probation
//! entry hit again moves to protected; protected overflows back into probation. So one-hit
//! wonders and scans pass through the window without displacing the popular entries, a loop
//! larger than the cache keeps a stable part of itself resident, and a hill climber
//! ([`climber`]) widens the window when recency pays (up to all the cache: LRU) and narrows
//! it when frequency does (nearly LFU). With unequal weights the victim may instead be a heavier
//! probation entry near the front that the oldest one outweighs (heavier, and estimated fewer
//! accesses or as many from a few up: [`TinyLfu::heavier_victim`]), each access counts
//! for the mean weight plus the entry's own ([`TinyLfu::worth_scale`]: the contest keeps what adds more to hits times
//! bytes hit), and a victim estimated only a few accesses counts them times its weight
//! class's factor: the class's share of misses of keys the sketch had counted over that
//! share over every class, from a quarter to one ([`weight_classes`]).
//!
//! The owner inserts before it evicts ([`EvictionPolicy::inserts_first`]): while the window
//! is smaller than a newcomer (a closed window, as on Zipf and loops), the newcomer itself
//! is the candidate, and one that loses is refused at the door, as moka and Caffeine refuse
//! it, instead of holding a slot (or a large newcomer's bytes) until the next eviction.
//!
//! How high the admission bar stands is learnt ([`regret`]): the contests' recent losers
//! are remembered, and a rejected candidate requested again lowers the bar a little, a
//! displaced victim requested again raises it. After a change of working set the bar drops
//! within a few thousand requests instead of waiting for the sketch to age; on Zipf it
//! stands one count above TinyLFU's. When the bar starts to drop while the hit rate has
//! fallen, the working set has changed: the policy restarts at once ([`surge`]) rather than
//! at the end of the climber's sample, and again a little later if the old set had settled
//! ([`TinyLfu::surged`]); a hit rate still falling as the cache fills restarts it when it
//! is first full ([`TinyLfu::filled`]). While the window is closed and the bar stands low
//! or such entries prove dead, a probation entry that went round protected without a hit
//! counts half its estimate ([`TinyLfu::accesses`]): the favourites of a slowly drifting set
//! die at their most popular. While every weight is equal, a sweep over protected moves
//! down an entry idle for as long as several of its requests would take, and its contests
//! count it as requested never ([`idle`]).
//!
//! Hits are recorded under a shared lock: a hit only bumps the entry's atomic count of
//! pending hits (saturating) and the policy's striped count of hits (the climber's and the
//! surge watch's rates count every hit). Queues are therefore CLOCK-ordered rather than
//! strictly LRU: an entry reaching the front of its queue with pending hits gets its second
//! chance (moved to the back, or promoted) and its pending hits are folded into the sketch
//! at that moment, or earlier by the sweep over protected, which marks the entry
//! [`Meta::referenced`] so that the front still gives it its second chance (while the
//! cache fills nothing reaches a queue's front: the window keeps
//! every entry until the first eviction, [`TinyLfu::end_fill_window`], and the fill's hits
//! wait, pending, until each entry first reaches a queue's front once the sketch is made;
//! those of an entry removed during the fill are dropped).
//!
//! Invariants (checked by [`TinyLfu::validate`]): every tracked id is on exactly one queue,
//! the one its metadata names; each queue's weight is the sum of its entries' weights;
//! pending counts are at most [`MAX_PENDING`]; the candidate queue is empty until the first
//! eviction; a free id has no pending hits (they are folded when it stops being tracked); a
//! stale entry ([`Meta::stale`]) is on probation; a referenced one on probation or
//! protected; the sweep's next entry, if any, on protected.
//! The count of hits is approximate under racing readers (a thread sharing another's stripe
//! may overwrite its count): the rates built on it tolerate that.

mod climber;
mod contest;
mod idle;
mod phases;
mod regret;
mod sketch;
mod surge;
#[cfg(test)]
mod tests;
mod weight_classes;

use std::sync::atomic::{AtomicU8, Ordering};

use super::list::{Links, Queue};
use super::{EntryId, EvictionPolicy};
use crate::metrics::StripedCount;
use climber::Climber;
use idle::Idle;
use regret::{Loser, Regret};
use sketch::Sketch;
use surge::Surge;
use weight_classes::WeightClasses;

/// Pending hits saturate here: a hot entry stops writing its count (its cache line stays
/// clean across cores; the count of hits for the climber is striped by thread instead), and
/// the sketch saturates at the same value anyway.
const MAX_PENDING: u8 = 15;
/// Protected's share of the main space, in percent, while recency does not pay.
const PROTECTED_PERCENT: u64 = 80;
/// Protected gives up this many percent of main for each whole count the admission credit
/// stands above 2 (where it starts to say that recency pays), down to
/// [`MIN_PROTECTED_PERCENT`]: when rejected keys keep coming back, the entries hit twice
/// some time ago are as stale as the rest, and protected kept them from the contests.
const PROTECTED_PERCENT_PER_CREDIT: u64 = 20;
const MIN_PROTECTED_PERCENT: u64 = 20;
/// Protected gives up this many percent of main while its stale entries die
/// ([`Regret::stale_entries_die`]). Half a step of the credit's: at a whole step (the verdict
/// then taken on every displaced loser) drift with Zipf 0.7 gained less at 500 entries
/// (0.981 of the best peer's hits rather than 0.996) and more at 300 (0.983 rather than
/// 0.976), and the phase change at 3,000 entries lost 0.007 (docs/memory-tier.md).
const PROTECTED_PERCENT_IF_STALE_DIE: u64 = 10;
/// A restart comes at least `len / RESTART_SPACING` misses after the last one (`len`
/// the entries tracked), or waits until then ([`TinyLfu::restart`]). With the hit rate
/// counted exactly the climber sees a change of working set within a part of its sample,
/// a few hundred misses after the surge has restarted the policy, and the second forgetting
/// then finds nothing to forget; it used to come about `len / 2` misses later, when it
/// helped (phase change with Zipf 0.8 at 10,000 entries over 1,000,000 requests: 0.977 of
/// the best peer's hits back-to-back, 1.017 deferred; 1.017 at 1 and 4 too, and 4
/// measured alike on every trace: docs/memory-tier.md).
const RESTART_SPACING: u64 = 2;
/// A surge that ends a workload settled for more than this many turnovers of the entries
/// (that many times their count in misses, since the cache was first full or since the last
/// surge) is followed by a second restart [`RESTART_SPACING`] later ([`TinyLfu::surged`]).
/// A set that held for less may come back as soon, and what is left of it is kept. 1 and 2
/// measured alike; at 3 the phase change with Zipf 0.8 at 20,000 entries and the phase
/// cycle at 10,000 lost their gains (docs/memory-tier.md).
const SETTLED_TURNOVERS: u64 = 2;
/// Probes in a row without a contest at a window of all the cache before admission regret's
/// hint that recency pays lapses ([`TinyLfu::lapse_unrenewed_hint`]): 32 misses per tracked
/// entry (a probe every eighth of them), four or more of the climber's samples. After one
/// probe, the climb stepped down from all the cache every sample and a drift at 300
/// entries lost 0.001 of the best peer's hits; after this many a drift keeps its window,
/// and a loop or a settled Zipf after a drift still closes it again (the test
/// `after_a_drift_a_loop_or_a_settled_set_closes_the_window_again`).
const UNRENEWED_HINT_PROBES: u64 = 256;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Place {
    #[default]
    Window,
    /// Left the window, waits for its admission contest.
    Candidate,
    Probation,
    Protected,
}

#[cfg(any(test, fuzzing))]
const PLACES: [Place; 4] = [
    Place::Window,
    Place::Candidate,
    Place::Probation,
    Place::Protected,
];

#[derive(Clone, Copy, Debug, Default)]
struct Meta {
    key_hash: u64,
    weight: u64,
    place: Place,
    /// Moved down from protected ([`TinyLfu::demote`]: it went round protected without a
    /// hit, or the sweep found it dead) and not moved since ([`TinyLfu::relocate`] clears
    /// it). Hits fold into a
    /// probation entry only as it is promoted, so a stale entry has had none folded since;
    /// hits still pending are checked by [`TinyLfu::accesses`], which reads it.
    stale: bool,
    /// Had its pending hits folded by the sweep ([`TinyLfu::sweep_protected`]) since it last
    /// passed its queue's front: the front gives it its second chance as it would for
    /// pending hits. Protected's or, once protected is exposed, probation's.
    referenced: bool,
    /// The sketch's estimate when hits were last folded into it ([`TinyLfu::fold`]; 0
    /// until then), and the hit clock then ([`Idle::now`]): the rate and the start of the
    /// idle spell that [`Idle::dead`] weighs.
    seen_count: u8,
    seen_at: u32,
}

/// The W-TinyLFU policy. See the module documentation.
#[derive(Debug, Default)]
pub struct TinyLfu {
    links: Links,
    meta: Vec<Meta>,
    /// Hits since the entry last passed a queue front, saturating at `MAX_PENDING`. Atomic so
    /// that hits can be recorded under a shared lock; a lost update between racing readers
    /// only makes the count approximate.
    pending: Vec<AtomicU8>,
    /// Indexed by `Place as usize`.
    queues: [Queue; 4],
    weights: [u64; 4],
    /// The sum of `weights`, kept rather than summed: every insert and eviction reads it
    /// right after writing one of them, and summing the array then (a wide load over
    /// narrow stores) stalled the evicting put by a few nanoseconds.
    total: u64,
    sketch: Sketch,
    climber: Climber,
    /// Learns from the contests' losers how strict admission should be.
    regret: Regret,
    /// How often a missed key of each weight class had been seen, while weights vary: what
    /// the contest's residents with little evidence of their own are worth.
    classes: WeightClasses,
    /// Restarts at once when a fall of the hit rate meets returning rejected keys.
    surge: Surge,
    /// Finds dead favourites ([`idle`]).
    idle: Idle,
    /// Whether nothing moved since the last [`TinyLfu::rebalance`] (set at its end, or by
    /// an insert while the cache fills, which has nothing to rebalance): the owner that
    /// inserts first calls [`EvictionPolicy::evict`] right after [`EvictionPolicy::insert`]
    /// rebalanced, and the second rebalance cost an evicting put about 3 ns. Cleared
    /// wherever an entry moves or a weight leaves or changes ([`TinyLfu::relocate`],
    /// [`TinyLfu::untrack`], [`EvictionPolicy::update`]) and when the cache is first full
    /// ([`TinyLfu::filled`]). A rebalance ends at a fixed point of the weights and the two
    /// targets; the targets move only with the total weight (the same places), the
    /// climber's share and the admission credit (both in inserts, before their rebalance,
    /// or in evictions, which untrack) and restarts (the same). Hits change none of them.
    balanced: bool,
    /// Set by the first eviction: until then the cache is filling, the window keeps every
    /// entry (its overflow goes to probation without a contest, in one splice, at the first
    /// eviction: [`TinyLfu::end_fill_window`]), and there is no sketch or regret table
    /// ([`TinyLfu::grow_sketch`]).
    full: bool,
    /// Hit accounting for the climber and the surge watch: every hit recorded, the count
    /// at the last probe, and the misses since.
    hits: Option<StripedCount>,
    hits_at_probe: u64,
    /// Misses since the policy was made, the count at the last restart (none yet: `None`),
    /// and whether a restart waits for [`RESTART_SPACING`] to pass ([`TinyLfu::restart`]).
    misses: u64,
    restarted_at: Option<u64>,
    restart_deferred: bool,
    /// The count of misses when the workload last started: when the cache was first full,
    /// then at each surge ([`TinyLfu::surged`]).
    settled_since: Option<u64>,
    misses_since_probe: u64,
    /// [`Regret::contest_seq`] at the last probe.
    ///
    /// [`Regret::contest_seq`]: regret::Regret::contest_seq
    contests_at_probe: u32,
    /// Probes in a row at a window of all the cache without a contest
    /// ([`TinyLfu::lapse_unrenewed_hint`]).
    uncontested_probes: u64,
    /// The weight of the first entry inserted, and whether any entry since weighed
    /// otherwise: while every weight is equal nothing can be [`dominated`], so the size
    /// rules are skipped (unit-weight caches pay nothing for them).
    ///
    /// [`dominated`]: contest::dominated
    first_weight: Option<u64>,
    weights_vary: bool,
}

impl TinyLfu {
    fn total_weight(&self) -> u64 {
        self.total
    }

    /// Moves `id` from wherever it is to the back of `to`, no longer stale
    /// ([`TinyLfu::demote`] marks it after).
    fn relocate(&mut self, id: EntryId, to: Place) {
        self.balanced = false;
        let m = self.meta[id as usize];
        self.leave_sweep(id);
        self.queues[m.place as usize].unlink(&mut self.links, id);
        self.weights[m.place as usize] -= m.weight;
        self.queues[to as usize].push_back(&mut self.links, id);
        self.weights[to as usize] += m.weight;
        let m = &mut self.meta[id as usize];
        m.place = to;
        m.stale = false;
    }

    /// Moves protected's settled front `id` (no pending hits, not referenced), or an entry
    /// the sweep found dead, down to probation's back, stale. A dead entry's `referenced`
    /// mark (hits the sweep folded before its idle spell began) goes: kept, probation's
    /// front would promote it straight back.
    fn demote(&mut self, id: EntryId) {
        self.relocate(id, Place::Probation);
        let m = &mut self.meta[id as usize];
        m.stale = true;
        m.referenced = false;
    }

    /// Takes `id`'s pending hits into the sketch; returns whether it had any. An entry with
    /// hits was seen: its idle spell starts again at the sketch's new estimate.
    fn fold(&mut self, id: EntryId) -> bool {
        let hits = std::mem::take(self.pending[id as usize].get_mut());
        if hits == 0 {
            return false;
        }
        let key_hash = self.meta[id as usize].key_hash;
        self.sketch.increment(key_hash, u64::from(hits));
        // Only the idle test reads these, and only while every weight is equal (once weights
        // vary they never stop varying): a mixed-size put spares the estimate.
        if !self.weights_vary {
            let m = &mut self.meta[id as usize];
            // At most 15 (4-bit counters).
            m.seen_count = self.sketch.estimate(key_hash) as u8;
            m.seen_at = self.idle.now();
        }
        true
    }

    /// The oldest entry of `place` without pending hits or a [`Meta::referenced`] mark,
    /// giving each entry found with either its second chance: back of the window, or
    /// promotion (probation to protected; protected to its back). At most one pass over the
    /// queue, so this ends.
    /// Inline for the usual front without hits (the call was about 40 instructions, and a
    /// mixed-size put settles two fronts); the pass out of line.
    #[inline]
    fn settle_front(&mut self, place: Place) -> Option<EntryId> {
        let id = self.queues[place as usize].front()?;
        if *self.pending[id as usize].get_mut() == 0 && !self.meta[id as usize].referenced {
            return Some(id);
        }
        self.settle_front_pass(place)
    }

    /// [`TinyLfu::settle_front`] once its front has pending hits or is referenced.
    #[inline(never)]
    fn settle_front_pass(&mut self, place: Place) -> Option<EntryId> {
        let again = match place {
            Place::Probation => Place::Protected,
            other => other,
        };
        for _ in 0..self.queues[place as usize].len() {
            let id = self.queues[place as usize].front()?;
            let referenced = std::mem::take(&mut self.meta[id as usize].referenced);
            if !self.fold(id) && !referenced {
                return Some(id);
            }
            self.relocate(id, again);
        }
        self.queues[place as usize].front()
    }

    /// Moves window overflow out of the window to the candidates once the cache is full
    /// (while it fills the window keeps every entry: [`TinyLfu::end_fill_window`]) and
    /// protected overflow down to probation.
    fn rebalance(&mut self) {
        let total = self.total_weight();
        // While the cache fills the window keeps every entry; its overflow goes to probation
        // in one splice when the cache is first full ([`TinyLfu::end_fill_window`]).
        if self.full {
            let window_target = self.climber.window_target(total);
            while self.weights[Place::Window as usize] > window_target {
                let Some(id) = self.settle_front(Place::Window) else {
                    break;
                };
                self.relocate(id, Place::Candidate);
            }
        }
        if self.weights[Place::Protected as usize] == 0 {
            // Nothing to move down (as while the cache fills): spare the target.
            self.balanced = true;
            return;
        }
        let main = total - self.weights[Place::Window as usize];
        // Multiplied before it is divided: `main / 100 * percent` rounded main down to whole
        // hundreds first, which left an owner of unit weights with under 100 entries of main
        // no protected at all (and 65% rather than 80% of a main of 495).
        // In u64 unless that would overflow: a 128-bit division was 3% of an evicting put.
        let percent = self.protected_percent();
        let protected_target = main.checked_mul(percent).map_or_else(
            || (u128::from(main) * u128::from(percent) / 100) as u64,
            |p| p / 100,
        );
        while self.weights[Place::Protected as usize] > protected_target {
            let Some(id) = self.settle_front(Place::Protected) else {
                break;
            };
            self.demote(id);
        }
        self.balanced = true;
    }

    /// Protected's share of main, in percent: [`PROTECTED_PERCENT`], less
    /// [`PROTECTED_PERCENT_PER_CREDIT`] for each whole count of admission credit above 2,
    /// and less [`PROTECTED_PERCENT_IF_STALE_DIE`] while stale entries die
    /// ([`Regret::stale_entries_die`]: protected gave up its dead only as fast as it
    /// promoted, and a slow drift's dead favourites sat there for 125-250 shifts of its
    /// popular set; while every weight is equal the sweep now moves them down sooner,
    /// [`idle`], and its demotions count towards the verdict as the others do). Zipf, loops
    /// and the sized traces keep a credit of 2 or less and their stale entries return, so
    /// only workloads whose popular keys slide or change shrink it.
    /// A shrink moves a fifth (a credit step) or a tenth (the verdict) of main down to
    /// probation in one rebalance (linear in those entries, as exposing protected is; credit
    /// steps need dozens of returning losers each, and the verdict turns at most once per
    /// window of 4,096 contests, so this is rare).
    fn protected_percent(&self) -> u64 {
        let above = u64::try_from(self.regret.credit() - 2).unwrap_or(0);
        let dead = u64::from(self.regret.stale_entries_die());
        PROTECTED_PERCENT
            .saturating_sub(
                PROTECTED_PERCENT_PER_CREDIT * above + PROTECTED_PERCENT_IF_STALE_DIE * dead,
            )
            .max(MIN_PROTECTED_PERCENT)
    }

    /// Stops tracking `id` (unlinks it and takes its weight off its queue); its pending hits
    /// are folded, so that a free id has none.
    fn untrack(&mut self, id: EntryId) {
        self.balanced = false;
        self.fold(id);
        let m = self.meta[id as usize];
        self.leave_sweep(id);
        self.queues[m.place as usize].unlink(&mut self.links, id);
        self.weights[m.place as usize] -= m.weight;
        self.total -= m.weight;
    }

    /// Adds an access to `id`'s pending count (saturating), with exclusive access.
    fn bump_pending(&mut self, id: EntryId) {
        let p = self.pending[id as usize].get_mut();
        *p = (*p + 1).min(MAX_PENDING);
    }

    /// Notes `weight` for [`Self::weights_vary`].
    fn note_weight(&mut self, weight: u64) {
        match self.first_weight {
            None => self.first_weight = Some(weight),
            Some(w) if w != weight => self.weights_vary = true,
            Some(_) => {}
        }
    }

    /// The window's current share of the tracked weight (tests and tools).
    pub fn window_share(&self) -> f64 {
        self.climber.share()
    }

    /// Heap bytes the policy holds now: per-id metadata, links and pending counts, the
    /// sketch and the regret table, and the weight classes' 640 bytes from the first miss a
    /// full cache of varied weights notes (the figure reported as policy memory per entry).
    pub fn heap_bytes(&self) -> usize {
        self.meta.capacity() * std::mem::size_of::<Meta>()
            + self.pending.capacity()
            + self.links.heap_bytes()
            + self.sketch.words() * std::mem::size_of::<u64>()
            + self.regret.heap_bytes()
            + self.classes.heap_bytes()
            + self.hits.as_ref().map_or(0, StripedCount::heap_bytes)
    }

    /// How many ids the per-id tables have room for without growing (tests).
    #[cfg(test)]
    pub(crate) fn id_capacity(&self) -> usize {
        self.meta
            .capacity()
            .min(self.pending.capacity())
            .min(self.links.capacity())
    }

    /// Checks the invariants in the module documentation and the sketch's and climber's
    /// own; only ids `tracked` accepts may be queued (tests and fuzzing).
    #[cfg(any(test, fuzzing))]
    pub(crate) fn validate(&self, tracked: &dyn Fn(EntryId) -> bool) {
        let mut seen = std::collections::HashSet::new();
        for place in PLACES {
            let ids = self.queues[place as usize].validate(&self.links, &mut seen);
            let mut sum = 0;
            for id in ids {
                assert!(tracked(id), "W-TinyLFU tracks a free id {id}");
                let m = self.meta[id as usize];
                assert_eq!(m.place, place, "id {id} is on another queue");
                assert!(
                    !m.stale || place == Place::Probation,
                    "stale id {id} on {place:?}"
                );
                assert!(
                    !m.referenced || matches!(place, Place::Probation | Place::Protected),
                    "referenced id {id} on {place:?}"
                );
                assert!(!(m.stale && m.referenced), "id {id} stale and referenced");
                assert!(self.pending[id as usize].load(Ordering::Relaxed) <= MAX_PENDING);
                sum += m.weight;
            }
            assert_eq!(
                sum, self.weights[place as usize],
                "{place:?} weight disagrees with its entries"
            );
        }
        assert_eq!(self.total, self.weights.iter().sum::<u64>(), "total weight");
        assert!(
            self.full || self.queues[Place::Candidate as usize].len() == 0,
            "candidates before the first eviction"
        );
        if let Some(id) = self.idle.sweep_at {
            assert_eq!(
                self.meta[id as usize].place,
                Place::Protected,
                "sweep off protected"
            );
        }
        self.sketch.validate();
        self.climber.validate();
        self.regret.validate();
        self.classes.validate();
        self.surge.validate();
    }
}

impl EvictionPolicy for TinyLfu {
    fn insert(&mut self, id: EntryId, key_hash: u64, weight: u64) {
        let slot = id as usize;
        if self.meta.len() <= slot {
            self.meta.resize(slot + 1, Meta::default());
            self.pending.resize_with(slot + 1, AtomicU8::default);
        }
        debug_assert_eq!(
            *self.pending[slot].get_mut(),
            0,
            "free ids have no pending hits"
        );
        // The count of hits is made with the first entry: an owner builds a policy per shard,
        // and shards never used need none.
        self.hits.get_or_insert_with(StripedCount::default);
        self.meta[slot] = Meta {
            key_hash,
            weight,
            place: Place::Window,
            stale: false,
            referenced: false,
            seen_count: 0,
            seen_at: self.idle.now(),
        };
        self.queues[Place::Window as usize].push_back(&mut self.links, id);
        self.weights[Place::Window as usize] += weight;
        self.total += weight;
        self.note_weight(weight);
        // The owner inserts before it evicts ([`EvictionPolicy::inserts_first`]): a full
        // owner holds one entry beyond its budget until then. Sized without it, a budget of
        // a power of two does not double the sketch (and its aging sample) for that moment.
        let len = self.len() - 1;
        // Until the first eviction there is no sketch to count in ([`TinyLfu::grow_sketch`])
        // and no contest loser to return (the regret table is made with the sketch); the
        // surge watch cannot fire on a bias that nothing moves, and starts over when the
        // cache is full ([`TinyLfu::filled`]). A filling cache skips all of it.
        if self.full {
            // The sketch grows at powers of two of the entries: nearly every insert finds it
            // sized, and asks without a call (the call and its checks were about 50 of the
            // 967 instructions the policy spent on a mixed-size evicting put).
            if !self.sketch.fits(len) {
                self.grow_sketch(len, Some(id));
            }
            // A miss: a recent contest loser coming back teaches admission, and may show a
            // change of working set.
            let worth = self.rejected_worth(weight, len as u64);
            self.regret.returned(key_hash, len as u64, worth);
            if self.surge.fires(self.regret.bias()) {
                self.surged(len as u64);
            }
            let seen = self.sketch.increment_once(key_hash) != 0;
            if self.weights_vary {
                self.classes.note_miss(weight, seen);
            } else {
                self.sweep_protected();
            }
        }
        self.count_miss(len as u64);
        if self.full || self.weights[Place::Protected as usize] != 0 {
            self.rebalance();
        } else {
            // While the cache fills nothing reaches protected (promotions come with
            // evictions), so `rebalance` would only set this: done without the call (about
            // 15 of the 216 instructions of a fill's insert).
            self.balanced = true;
        }
    }

    fn touch(&mut self, id: EntryId) {
        if let Some(hits) = &mut self.hits {
            hits.add_one_mut();
        }
        self.bump_pending(id);
    }

    #[inline]
    fn touch_shared(&self, id: EntryId) -> bool {
        if let Some(hits) = &self.hits {
            hits.add_one();
        }
        let p = &self.pending[id as usize];
        // Load first: a saturated count is not written.
        let v = p.load(Ordering::Relaxed);
        if v < MAX_PENDING {
            p.store(v + 1, Ordering::Relaxed);
        }
        true
    }

    fn shared_touch(&self) -> bool {
        true
    }

    fn update(&mut self, id: EntryId, weight: u64) {
        let m = &mut self.meta[id as usize];
        let w = &mut self.weights[m.place as usize];
        *w = *w - m.weight + weight;
        self.total = self.total - m.weight + weight;
        m.weight = weight;
        self.balanced = false;
        self.note_weight(weight);
        // An access for the sketch, but no hit of a lookup: the climber's rate is the
        // lookups' (and the replacing put stays off the count's cache line).
        self.bump_pending(id);
    }

    fn remove(&mut self, id: EntryId) {
        self.untrack(id);
    }

    fn evict(&mut self) -> Option<EntryId> {
        if !self.full {
            self.filled();
        }
        if !self.balanced {
            self.rebalance();
        }
        // Each eviction settles one contest while each insertion may add a candidate, so a
        // backlog (after the share shrank) would never drain and its entries would hold space that neither the
        // window nor main uses. Only the newest candidate waits for a contest; older ones
        // join probation and compete there as victims.
        while self.queues[Place::Candidate as usize].len() > 1 {
            let Some(c) = self.queues[Place::Candidate as usize].front() else {
                break;
            };
            let lost = self.loses_unseen(c);
            self.relocate(c, Place::Probation);
            if lost {
                let probation = &mut self.queues[Place::Probation as usize];
                probation.unlink(&mut self.links, c);
                probation.push_front(&mut self.links, c);
            }
        }
        loop {
            let candidate = self.queues[Place::Candidate as usize].front();
            // A candidate that cannot win loses to any victim: the walk for one and the
            // contest are spared (the door's refusals of new keys, most of a mixed-size
            // evicting put's). Asked after probation's front settled, so that only the
            // candidate's own fold comes between the answer and the contest; with equal
            // weights there is no walk to spare, and the contest is one comparison.
            let mut doomed = false;
            let victim = match self.settle_front(Place::Probation) {
                Some(v) => {
                    doomed = self.weights_vary && candidate.is_some_and(|c| self.cannot_win(c));
                    Some(if doomed { v } else { self.heavier_victim(v) })
                }
                None => {
                    // Probation is empty: take protected's oldest down to it.
                    match self.settle_front(Place::Protected) {
                        Some(v) => {
                            self.demote(v);
                            Some(v)
                        }
                        None => None,
                    }
                }
            };
            let loser = match (candidate, victim) {
                (Some(c), Some(v)) => {
                    self.fold(c);
                    let (loser, kind) = if !doomed && self.admits(c, v) {
                        // Heavier than all of probation, the victims included: the rest of
                        // its room comes from protected's oldest (the contest counted them),
                        // so it joins protected's back; at probation's, it would be the
                        // next victim itself once the rest of probation was gone.
                        let heavier =
                            self.weights[Place::Probation as usize] < self.meta[c as usize].weight;
                        let to = if heavier {
                            Place::Protected
                        } else {
                            Place::Probation
                        };
                        self.relocate(c, to);
                        let kind = if self.meta[v as usize].stale {
                            Loser::StaleDisplaced
                        } else {
                            Loser::Displaced
                        };
                        (v, kind)
                    } else {
                        (c, Loser::Rejected)
                    };
                    self.regret.note(self.meta[loser as usize].key_hash, kind);
                    loser
                }
                (Some(c), None) => {
                    // Main is empty: admit without a contest and look again.
                    self.fold(c);
                    self.relocate(c, Place::Probation);
                    continue;
                }
                (None, Some(v)) => v,
                // Only the window holds entries: its share is all the cache (LRU), or zero
                // while the cache is tiny.
                (None, None) => self.settle_front(Place::Window)?,
            };
            self.untrack(loser);
            return Some(loser);
        }
    }

    fn len(&self) -> usize {
        self.queues.iter().map(Queue::len).sum()
    }

    fn inserts_first(&self) -> bool {
        true
    }

    fn reserve_ids(&mut self, ids: usize) {
        super::reserve_exact_ids(&mut self.meta, ids);
        super::reserve_exact_ids(&mut self.pending, ids);
        self.links.reserve_ids(ids);
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}
