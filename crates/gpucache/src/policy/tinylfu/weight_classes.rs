//! Weight classes: for each class of weights (powers of two), how often a key that missed
//! had been seen before, against the same rate over every class.
//!
//! A miss of a key the sketch has counted is one a larger share of the cache might have
//! turned into a hit; a miss of a key never seen could not have been. Where the misses of a
//! class are mostly first requests, either its keys seldom come back (the light keys of a
//! trace whose popular keys are the heavy ones) or the policy already keeps its returning
//! keys (the light keys of most traces, which the contest favours per byte). Either way its
//! residents with little evidence of their own are worth less than their count says, and
//! the contest weighs them by the class's rate over the mean ([`WeightClasses::factor`],
//! at most 1: `TinyLfu::admits`). It is the size-aware admission of AdaptSize and LHD in
//! one number per class, learnt from the misses the policy sees anyway.
//!
//! Only while weights vary (the owner notes misses then): with one weight there is one
//! class, at the mean.

/// Factors are fixed-point, in units of `2^-FACTOR_SHIFT`.
pub(super) const FACTOR_SHIFT: u32 = 12;
/// A factor of one: a class without evidence, or one whose misses return at least as often
/// as the mean.
const ONE: u16 = 1 << FACTOR_SHIFT;
/// Every this many noted misses the factors are taken from the counts, which are then
/// halved: a class's rate follows the workload within a few periods, and the contest's
/// weighing changes at most once a period.
pub(super) const PERIOD: u32 = 8192;
/// A class with fewer misses in its counts (as halved) keeps a factor of one: below it the
/// rate's sampling error (about `0.5 / sqrt(n)`) is a large part of the rate itself.
const MIN_MISSES: u32 = 256;

/// The number of classes: one per bit of a weight.
const CLASSES: usize = 64;
/// A class's count of misses is the low half of its word, of seen keys among them the high
/// half: a miss is one addition.
const SEEN: u64 = 1 << 32;
const HALF: u64 = SEEN - 1;

/// The counts and factors of every class, made at the first miss noted.
#[derive(Debug)]
struct Tables {
    /// Per class, since last halved: misses (low half) and seen keys among them (high half).
    /// Invariant: each half under `2 * PERIOD`, seen at most misses.
    counts: [u64; CLASSES],
    /// Per class, in units of `2^-FACTOR_SHIFT`, as of the end of the last period.
    /// Invariant: at most [`ONE`].
    factors: [u16; CLASSES],
}

#[derive(Debug, Default)]
pub(super) struct WeightClasses {
    /// None until the first miss is noted: a cache of one weight carries none.
    tables: Option<Box<Tables>>,
    /// Misses noted in this period. Invariant: under [`PERIOD`].
    noted: u32,
}

impl WeightClasses {
    /// Notes a miss of a key weighing `weight`, `seen` if the sketch counted it before.
    #[inline]
    pub(super) fn note_miss(&mut self, weight: u64, seen: bool) {
        let t = self.tables.get_or_insert_with(|| {
            Box::new(Tables {
                counts: [0; CLASSES],
                factors: [ONE; CLASSES],
            })
        });
        t.counts[class_of(weight)] += 1 + u64::from(seen) * SEEN;
        self.noted += 1;
        if self.noted == PERIOD {
            self.end_period();
        }
    }

    /// What an access to a resident weighing `weight` with little evidence of its own is
    /// worth, in units of `2^-FACTOR_SHIFT`: its class's rate of seen keys among its
    /// misses over the rate of every class, at most one (as of the end of the last period).
    #[inline]
    pub(super) fn factor(&self, weight: u64) -> u16 {
        self.tables
            .as_ref()
            .map_or(ONE, |t| t.factors[class_of(weight)])
    }

    /// Takes each class's factor from the counts, then halves them.
    #[cold]
    fn end_period(&mut self) {
        self.noted = 0;
        let Some(t) = self.tables.as_mut() else {
            return;
        };
        let misses: u64 = t.counts.iter().map(|c| c & HALF).sum();
        let seen: u64 = t.counts.iter().map(|c| c >> 32).sum();
        for (c, f) in t.counts.iter_mut().zip(&mut t.factors) {
            let (class_misses, class_seen) = (*c & HALF, *c >> 32);
            *f = if class_misses < u64::from(MIN_MISSES) || seen == 0 {
                ONE
            } else {
                // (class_seen / class_misses) / (seen / misses), in units of 1 / ONE.
                let rate = class_seen * misses * u64::from(ONE) / (class_misses * seen);
                rate.min(u64::from(ONE)) as u16
            };
            *c = (*c >> 1) & !(1 << 31);
        }
    }

    /// The classes' heap bytes (memory accounting).
    pub(super) fn heap_bytes(&self) -> usize {
        self.tables
            .as_ref()
            .map_or(0, |_| std::mem::size_of::<Tables>())
    }

    #[cfg(any(test, fuzzing))]
    pub(super) fn validate(&self) {
        assert!(self.noted < PERIOD, "{} misses in a period", self.noted);
        let Some(t) = self.tables.as_ref() else {
            return;
        };
        for (c, f) in t.counts.iter().zip(&t.factors) {
            let (misses, seen) = (c & HALF, c >> 32);
            assert!(
                seen <= misses && misses < 2 * u64::from(PERIOD) && *f <= ONE,
                "class of {misses} misses, {seen} seen, factor {f}"
            );
        }
    }
}

/// A weight's class: the power of two at or below it (0 for weights 0 and 1).
fn class_of(weight: u64) -> usize {
    (u64::BITS - 1 - (weight | 1).leading_zeros()) as usize % CLASSES
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A period of misses: the first `light` of weight 1,000, seen at `light_rate` percent,
    /// the rest of weight 100,000, seen at `heavy_rate` percent.
    fn period(classes: &mut WeightClasses, light: u32, light_rate: u32, heavy_rate: u32) {
        for i in 0..PERIOD {
            let (weight, rate, j) = if i < light {
                (1_000, light_rate, i)
            } else {
                (100_000, heavy_rate, i - light)
            };
            classes.note_miss(weight, j % 100 < rate);
        }
        classes.validate();
    }

    #[test]
    fn a_class_whose_misses_are_seldom_seen_counts_less() {
        let mut c = WeightClasses::default();
        assert_eq!(c.factor(1_000), ONE, "no evidence yet");
        // Half the misses light and seen 20% of the time, half heavy and seen 60%: the mean
        // is 40%, the light class half of it, the heavy one above it (capped at one).
        period(&mut c, PERIOD / 2, 20, 60);
        let light = f64::from(c.factor(1_000)) / f64::from(ONE);
        assert!((light - 0.5).abs() < 0.02, "light factor {light}");
        assert_eq!(c.factor(100_000), ONE);
        assert_eq!(
            c.factor(1_023),
            c.factor(1_000),
            "one class per power of two"
        );
        assert_eq!(c.factor(50), ONE, "a class with no misses");
    }

    #[test]
    fn equal_rates_and_thin_evidence_keep_one() {
        let mut c = WeightClasses::default();
        period(&mut c, PERIOD / 2, 30, 30);
        let light = c.factor(1_000);
        assert!(light >= ONE - ONE / 50, "equal rates: {light}");
        // A class with fewer than MIN_MISSES misses: its rate is not trusted.
        let mut thin = WeightClasses::default();
        period(&mut thin, MIN_MISSES - 1, 0, 50);
        assert_eq!(thin.factor(1_000), ONE);
    }

    #[test]
    fn the_rates_follow_the_workload() {
        let mut c = WeightClasses::default();
        period(&mut c, PERIOD / 2, 10, 60);
        assert!(c.factor(1_000) < ONE / 2);
        // The light keys now return as often as the heavy ones: within a few periods the
        // light class counts whole again.
        for _ in 0..4 {
            period(&mut c, PERIOD / 2, 60, 60);
        }
        assert!(c.factor(1_000) > ONE - ONE / 10, "{}", c.factor(1_000));
    }

    #[test]
    fn classes_are_powers_of_two() {
        assert_eq!(class_of(0), 0);
        assert_eq!(class_of(1), 0);
        assert_eq!(class_of(2), 1);
        assert_eq!(class_of(1 << 20), 20);
        assert_eq!(class_of((1 << 21) - 1), 20);
        assert_eq!(class_of(u64::MAX), 63);
    }
}
