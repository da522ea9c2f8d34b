//! A climber's sample watched in parts ([`part_of`]): the parts' spread gives the sample's
//! error, and parts fallen below every part of the last sample end it early, as a change of
//! workload ([`Climber::watch_part`]).

use super::{Climber, FALLEN_PARTS, MAX_PART, MIN_PART, MIN_SAMPLE, PARTS_PER_SAMPLE};

/// A sample watched in parts ([`part_of`]).
#[derive(Debug, Default)]
pub(super) struct Parts {
    /// The current part: hits and misses.
    pub(super) part: (u64, u64),
    /// The lowest hit rate of a whole part in the last sample and in this one.
    pub(super) last_lowest: Option<f64>,
    pub(super) lowest: Option<f64>,
    /// Consecutive parts fallen below `last_lowest`, and their hits and misses.
    pub(super) fallen: u32,
    pub(super) fallen_counts: (u64, u64),
    /// How this sample's whole parts spread.
    pub(super) spread: PartSpread,
}

/// The hit rates of a sample's whole parts: how many, the last one, and the sum of the
/// squared changes between consecutive ones.
#[derive(Debug, Default)]
pub(super) struct PartSpread {
    parts: u32,
    last: f64,
    squared_changes: f64,
}

impl PartSpread {
    pub(super) fn add(&mut self, rate: f64) {
        if self.parts > 0 {
            self.squared_changes += (rate - self.last) * (rate - self.last);
        }
        self.parts += 1;
        self.last = rate;
    }

    /// The standard error of the sample's hit rate, taking its parts for independent draws
    /// whose variance is half the mean squared change between consecutive ones (von
    /// Neumann's estimate); 0 with fewer than two parts. A workload with a period of its own
    /// (scans every so many requests) swings from part to part, and its samples' rates
    /// differ with how many low parts each one caught. From consecutive changes rather than
    /// the spread about the mean: a change of rate within the sample (the step's own effect)
    /// moves one part from the next once, and read as error it would keep that very fall
    /// from turning the climb.
    pub(super) fn standard_error(&self) -> f64 {
        if self.parts < 2 {
            return 0.0;
        }
        let n = f64::from(self.parts);
        let variance = self.squared_changes / (2.0 * (n - 1.0));
        (variance / n).sqrt()
    }
}

/// Requests per part of a sample of `sample` requests (at least [`MIN_SAMPLE`]): a quarter
/// of it, within [`MIN_PART`]..=[`MAX_PART`]. At least [`FALLEN_PARTS`] parts fit in any sample.
pub(super) fn part_of(sample: u64) -> u64 {
    debug_assert!(sample >= MIN_SAMPLE, "a sample of {sample} requests");
    (sample / PARTS_PER_SAMPLE).clamp(MIN_PART, MAX_PART)
}

impl Climber {
    /// At the end of a sample: the part still open, with `hits` and `misses` of this
    /// record, joins the sample's spread if it is at least half a part (a sample of four
    /// parts would otherwise give three rates; the fall watch keeps to whole parts).
    pub(super) fn close_part(&mut self, hits: u64, misses: u64, part: u64) {
        if let Some(p) = &mut self.parts {
            let (h, m) = (p.part.0 + hits, p.part.1 + misses);
            if 2 * (h + m) >= part {
                p.spread.add(h as f64 / (h + m) as f64);
            }
        }
    }

    /// Counts requests into the current part of the sample; returns whether the last
    /// [`FALLEN_PARTS`] parts each fell below every part of the last sample by the restart
    /// threshold. Workloads with a period of their own swing part by part (a loop three times
    /// the cache hits nearly all of one part and little of the next), but their low parts
    /// recur in every sample; a new workload's fall is below all of them.
    pub(super) fn watch_part(&mut self, hits: u64, misses: u64, part: u64) -> bool {
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
        p.spread.add(rate);
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
}
