//! The policy's phases: the fill and the first eviction that ends it (the sketch made, the
//! window's overflow handed to probation), the probes that hand the climber and the surge
//! watch their rates, and the restarts that follow a change of working set.

use super::{climber, Place, TinyLfu, RESTART_SPACING, SETTLED_TURNOVERS, UNRENEWED_HINT_PROBES};
use crate::metrics::StripedCount;
use crate::policy::{EntryId, EvictionPolicy};

impl TinyLfu {
    /// Counts a miss; every so many misses hands the hits and misses since the last probe
    /// to the climber and to the surge watch (which starts over when the cache is first
    /// full: [`TinyLfu::filled`]); each probe also moves admission regret's slow average of
    /// its bias ([`Regret::observe`](super::regret::Regret::observe)) and lets a hint that
    /// no contest renews lapse ([`TinyLfu::lapse_unrenewed_hint`]). Hits alone cannot drive
    /// the count: they arrive under a shared lock. Inline, the probe and a restart that
    /// waited out of line: every insert counts a miss, and few probe.
    #[inline]
    pub(super) fn count_miss(&mut self, len: u64) {
        self.misses_since_probe += 1;
        self.misses += 1;
        self.idle.miss();
        if self.restart_deferred {
            self.restart_if_due();
        }
        if self.misses_since_probe >= (len / 8).max(16) {
            self.probe(len);
        }
    }

    /// A restart that waited ([`TinyLfu::restart`]), once [`RESTART_SPACING`] has passed.
    #[inline(never)]
    fn restart_if_due(&mut self) {
        if !self.restart_too_soon(self.len() as u64) {
            self.restart();
        }
    }

    /// Hands the hits and misses since the last probe on ([`TinyLfu::count_miss`]).
    #[inline(never)]
    fn probe(&mut self, len: u64) {
        let counted = self.hits.as_mut().map_or(0, StripedCount::sum_mut);
        let hits = counted.wrapping_sub(self.hits_at_probe);
        self.hits_at_probe = counted;
        let misses = std::mem::take(&mut self.misses_since_probe);
        self.idle
            .probe(hits, misses, self.sketch.increments(), self.sketch.sample());
        self.lapse_unrenewed_hint();
        self.surge.record(hits, misses);
        self.regret.observe();
        if self.climber.record(
            hits,
            misses,
            climber::SAMPLE_PER_ENTRY * len,
            self.regret.recency(),
        ) {
            self.restart();
        }
        if self.climber.take_failed_lift() {
            self.regret.fall_back_to_settled();
        }
    }

    /// At a window of all the cache no contest runs, so admission regret, whose evidence is
    /// the contests' losers, cannot renew or end its hint that recency pays, which took the
    /// climb there: after [`UNRENEWED_HINT_PROBES`] probes in a row without a contest the
    /// hint lapses ([`Regret::lapse_recency`]), the climb takes a step down, contests run
    /// again, and the hint comes back if recency still pays. Without it, once a drift had
    /// taken the window to all the cache, a loop or a settled Zipf that followed stayed LRU
    /// (docs/memory-tier.md, *The hint's climb*).
    ///
    /// [`Regret::lapse_recency`]: super::regret::Regret::lapse_recency
    pub(super) fn lapse_unrenewed_hint(&mut self) {
        let contests = self.regret.contest_seq();
        let contested = std::mem::replace(&mut self.contests_at_probe, contests) != contests;
        if contested || self.climber.share() < climber::MAX_SHARE {
            self.uncontested_probes = 0;
            return;
        }
        self.uncontested_probes += 1;
        if self.uncontested_probes > UNRENEWED_HINT_PROBES {
            self.regret.lapse_recency();
        }
    }

    /// The first eviction: the cache is full. The sketch and the regret table are made
    /// ([`TinyLfu::size_sketch`]; the stored keys counted in while every weight is equal,
    /// below), window overflow from now on waits for a contest, and hit
    /// rates describe a full cache (the climber's parts and the surge watch's averages start
    /// over). While a
    /// steady workload fills the cache its hit rate only rises; if the surge watch finds it
    /// in a fall now (its short average well below its long one), the working set changed as
    /// the cache filled, and the stored keys the sketch was just made from are mostly the
    /// old set's: the policy restarts (which forgets that count, if any).
    ///
    /// While every weight is equal each stored key is counted once into the new sketch (it
    /// was requested once to be stored, and a doubling of the sketch counts it so too).
    /// While weights vary the sketch starts empty: in a contest weighed by size, a heavy
    /// resident counted once outweighs several requests of a light newcomer (about eight at
    /// the two ends of 1 KiB-1 MiB), so a count the fill gave every resident kept whatever
    /// mix of sizes the fill happened to store for the sketch's first aging period. Without
    /// it the sized rows of `phase_eval` under 0.995 of the best peer went from 28 to 25 of
    /// 104 (shortfall 0.361 to 0.303), its held-out set's shortfall from 1.471 to 1.295
    /// (every sized family gained) and the other draws' rows under from 46 to 43; with equal
    /// weights not counting lost (13 to 16 rows under on the usual draws; drift with Zipf
    /// 0.7 at 500 entries 1.000 to 0.962 of the best peer's hits), and leaving the stored
    /// keys uncounted at the sketch's later doublings too cost the held-out set (1.368)
    /// (docs/memory-tier.md). The surge watch cannot see that change once full (its averages
    /// start then), nor the climber (its parts start over too), and the admission regret
    /// lowered the bar only slowly at large sizes: the phase cycle with Zipf 1.0 at 20,000
    /// entries, whose second set comes as the cache fills, stood at 0.992-0.994 of the best
    /// peer's hits on four draws of the traces, and 0.995-0.997 with the restart; no other
    /// row of `phase_eval` moved by more than 0.005 (docs/memory-tier.md).
    ///
    /// A policy of equal weights tracking over 500 entries (one shard's, in a sharded
    /// store) whose climber has ended no sample yet closes its window here, before the
    /// overflow moves, and starts its first sample; `Climber::filled`, after it, starts the
    /// sample's parts over ([`climber::Climber::close_before_first_sample`]).
    pub(super) fn filled(&mut self) {
        // The owner inserts first, so the newcomer is one entry beyond the budget (as in
        // `insert`).
        let len = self.len().saturating_sub(1);
        if !self.weights_vary {
            self.climber.close_before_first_sample(len as u64);
        }
        self.end_fill_window();
        self.full = true;
        // Made only now (see `grow_sketch`). The stored keys are counted into it only while
        // every weight is equal (see above).
        if self.weights_vary {
            self.size_sketch(len);
        } else {
            self.grow_sketch(len, None);
        }
        self.settled_since = Some(self.misses);
        self.climber.filled();
        self.balanced = false;
        if self.surge.start_over() {
            self.restart();
        }
    }

    /// Moves the window's overflow, oldest first, to the back of probation in one splice,
    /// their pending hits kept (they fold as each reaches probation's front: promoted, as a
    /// probation entry hit during the fill always was). While the cache fills nothing is
    /// evicted, so the window keeps every entry until now ([`TinyLfu::rebalance`]) rather
    /// than moving one to probation per insert: that move was half of the policy's cost of
    /// a put into a cache with room (the policy alone: 27 ns an insert before, 14 ns after,
    /// S3-FIFO's 10-12, on issue 15's latest round's VM).
    /// What it changes: an entry hit in its first 1% of the fill no longer gets the
    /// window's second chance (moved to its back, the hits dropped for want of a sketch);
    /// its hits wait and promote it instead. Measured on every row of `phase_eval`, neutral:
    /// the usual draws 12 -> 13 rows under 0.995 of the best peer, the held-out set 71 -> 69,
    /// the sum of the shortfalls of all four sets 2.131 -> 2.127 (docs/memory-tier.md);
    /// dropping the fill's pending hits at the splice instead was worse (18 under).
    pub(super) fn end_fill_window(&mut self) {
        let target = self.climber.window_target(self.total);
        let window = Place::Window as usize;
        let (mut moved, mut count, mut last) = (0u64, 0usize, None);
        let mut at = self.queues[window].front();
        while let Some(id) = at {
            if self.weights[window] - moved <= target {
                break;
            }
            at = self.queues[window].next(&self.links, id);
            let m = &mut self.meta[id as usize];
            m.place = Place::Probation;
            moved += m.weight;
            count += 1;
            last = Some(id);
        }
        let Some(last) = last else { return };
        // In `Place` order: window, candidate, probation, protected.
        let [window_queue, _, probation, _] = &mut self.queues;
        window_queue.move_front_run(&mut self.links, probation, last, count);
        self.weights[window] -= moved;
        self.weights[Place::Probation as usize] += moved;
        self.balanced = false;
    }

    /// Sizes the sketch and the regret table for `len` entries; returns whether they grew
    /// (and forgot everything).
    pub(super) fn size_sketch(&mut self, len: usize) -> bool {
        if !self.sketch.ensure_capacity(len) {
            return false;
        }
        self.regret.resize(len);
        true
    }

    /// Sizes the sketch for `len` entries ([`TinyLfu::size_sketch`]), and if it grew counts
    /// every stored key but `except` once into it, so that the entries kept so far do not lose
    /// their contests to newcomers. Called when the cache is first full
    /// ([`TinyLfu::filled`], while every weight is equal), then by an insert that finds it
    /// too small ([`Sketch::fits`](super::sketch::Sketch::fits): a cache bounded by bytes
    /// may go on to hold more, lighter entries). While the cache fills
    /// nothing is evicted and no contest reads the sketch, and the counts a doubling keeps
    /// are its recount's: counting every insert and recounting at each doubling were about
    /// 17 ns of a growing put, a quarter of its cost over S3-FIFO's, and starting at the first
    /// eviction moved no row of `phase_eval`, its held-out set or the sized rows by more than
    /// 0.005 (docs/memory-tier.md). Hits while the cache fills stay pending until the entry
    /// first reaches a queue's front ([`TinyLfu::end_fill_window`]). Caffeine likewise
    /// leaves its sketch unmade until the cache is half full.
    pub(super) fn grow_sketch(&mut self, len: usize, except: Option<EntryId>) {
        if !self.size_sketch(len) {
            return;
        }
        let Self {
            queues,
            links,
            sketch,
            meta,
            ..
        } = self;
        for q in queues.iter() {
            q.for_each(links, |other| {
                if Some(other) != except {
                    sketch.increment_once(meta[other as usize].key_hash);
                }
            });
        }
    }

    /// Whether a restart now would come within [`RESTART_SPACING`] of the last one, for a
    /// policy tracking `len` entries.
    pub(super) fn restart_too_soon(&self, len: u64) -> bool {
        self.restarted_at
            .is_some_and(|at| self.misses - at < len / RESTART_SPACING)
    }

    /// A surge ([`surge`]) in a policy tracking `len` entries: restarts at once, sets the
    /// bias back to neutral and, if the workload that ended had settled for more than
    /// [`SETTLED_TURNOVERS`] turnovers, schedules a second restart [`RESTART_SPACING`] later.
    /// The second forgetting (and exposing of protected) flushes what is left of the old
    /// set once the new one has been requested for a while: it raised the phase changes and
    /// cycles at 2,000-20,000 entries by up to 0.036 of the best peer's hits, and ended the
    /// seed-dependent lows of the phase change with Zipf 1.0 over 2,000,000 requests at
    /// 20,000 entries (0.990 on some hash seeds). After a set that held only briefly it cost
    /// the phase cycles whose sets alternate within about two turnovers (10,000 and 20,000
    /// entries: -0.009 to -0.020): a returning set found nothing of itself left, where the
    /// peers, and the policy without it, keep part of it (docs/memory-tier.md).
    ///
    /// [`surge`]: super::surge
    pub(super) fn surged(&mut self, len: u64) {
        // Surges come only once the cache is full, which sets `settled_since`.
        let settled = self
            .settled_since
            .is_none_or(|at| self.misses - at > SETTLED_TURNOVERS * len);
        self.restart();
        if settled {
            self.restart_deferred = true;
        }
        self.settled_since = Some(self.misses);
        self.regret.reset_bias();
    }

    /// After a sharp fall of the hit rate (a new workload): ages the old popularity now
    /// rather than over the next samples, letting the new keys win admission, and exposes
    /// protected. Unless admission regret says the old counts still pay (its credit at the
    /// strict end: displaced keys come back more than rejected ones), the sketch is
    /// forgotten outright rather than halved. Forgetting used to cost a returning set as
    /// much as it won a new one (docs/memory-tier.md); with the regret, a returning set's
    /// keys win their contests back within a few thousand requests, and the new set's no
    /// longer wait for stale counts to halve away. Called by the climber's restarts and by
    /// surges ([`surge`]); a surge comes after the bias rose from at least -1 by an eighth of
    /// a count, so its credit is at least 0 and it forgets (unless its restart waits, below:
    /// the surge resets the bias at once, and the restart that comes later takes the credit
    /// it finds then). The climber forgets its climb's best rate too: the new workload's
    /// rates are not comparable.
    ///
    /// A restart within [`RESTART_SPACING`] of the last one waits until that much has
    /// passed (counted by [`TinyLfu::count_miss`]): a surge and the climber usually both
    /// see a change of working set, and the second forgetting helps when it comes a few
    /// thousand requests into the new set, not when it lands on the first one's heels.
    ///
    /// [`surge`]: super::surge
    pub(super) fn restart(&mut self) {
        let len = self.len() as u64;
        if self.restart_too_soon(len) {
            self.restart_deferred = true;
            return;
        }
        self.restart_deferred = false;
        self.restarted_at = Some(self.misses);
        self.climber.forget_best();
        if self.regret.credit() < 0 {
            self.sketch.halve();
        } else {
            self.sketch.forget();
        }
        self.expose_protected();
        self.regret.forget_returns();
    }

    /// Moves every protected entry to the front of probation, oldest first, ahead of the
    /// entries already there. After a workload change the old favourites sit in protected,
    /// which only gives up entries as new ones are promoted into it; meanwhile the contests
    /// are fought by probation's few entries and the newcomers lose them to stale counts.
    /// Exposed, the old favourites become the next victims: those still requested have
    /// pending hits (or a [`Meta::referenced`](super::Meta::referenced) mark, kept here)
    /// and are promoted back when they reach the front, the others must now
    /// out-count each new candidate. Linear in the entries, once per restart (the climber's
    /// restarts take at least two parts of a sample, 2,500 requests; a surge, one per fall
    /// of the hit rate). No entry is stale afterwards: the counts that let stale entries
    /// win were just forgotten or halved ([`TinyLfu::restart`]).
    pub(super) fn expose_protected(&mut self) {
        let behind = self.queues[Place::Probation as usize].len();
        // An entry keeps its `referenced` mark: it was requested since it last passed
        // protected's front, and keeps its second chance at probation's.
        while let Some(id) = self.queues[Place::Protected as usize].front() {
            self.relocate(id, Place::Probation);
        }
        for _ in 0..behind {
            let probation = &mut self.queues[Place::Probation as usize];
            let Some(id) = probation.front() else { break };
            probation.move_to_back(&mut self.links, id);
            self.meta[id as usize].stale = false;
        }
    }
}
