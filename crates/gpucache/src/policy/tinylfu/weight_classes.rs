//! Weight classes: for each class of weights (powers of two), the share of its misses whose
//! key the sketch had counted (*seen*), against that share over every class.
//!
//! A miss of a seen key is one a larger share of the cache might have turned into a hit; a
//! miss of a key the sketch has no count for mostly could not have been (a count halved
//! away, or forgotten at a restart or when the sketch grows, reads as unseen; a collision
//! in the sketch as seen).
//! Where a class's share of seen misses is below the share over every class, either its
//! keys come back less often (the light keys of a trace whose popular keys are the heavy
//! ones) or the policy already keeps more of its returning keys (the light keys of most
//! traces, which the contest favours per byte). Either way its residents with little
//! evidence of their own are worth less than their count says, and the contest weighs them
//! by the ratio of the two shares ([`WeightClasses::factor`], at most 1 and at least a
//! quarter: `TinyLfu::admits`). Size classes learnt online, as AdaptSize and LHD learn
//! what entries of each size are worth, here from the misses the policy sees anyway.
//!
//! Only while weights vary (the owner notes misses then, once the cache is full): with one
//! weight there is one class, whose share is the share over every class.

/// Factors are fixed-point, in units of `2^-FACTOR_SHIFT`.
pub(super) const FACTOR_SHIFT: u32 = 12;
/// A factor of one: a class without evidence, or one whose share of seen misses is at least
/// the share over every class.
const ONE: u16 = 1 << FACTOR_SHIFT;
/// The least factor: a class's residents count at least a quarter of their estimate. The
/// ratio of two shares measured on samples can read near zero for a class of few returning
/// keys, and a victim counted as nothing would let any candidate past a run of them (the
/// contest extrapolates beyond its 16 victims at their rate). A floor of a quarter or an
/// eighth measured the same as no floor on every set (docs/memory-tier.md).
const MIN_FACTOR: u16 = ONE / 4;
/// Every this many noted misses the factors are taken from the counts, which are then
/// halved: a class's share follows the workload within a few periods, and the contest's
/// weighing changes at most once a period.
pub(super) const PERIOD: u32 = 8192;
/// A class with fewer misses in its counts (as halved) keeps a factor of one: below it the
/// share's sampling error (at most `0.5 / sqrt(n)`) is a large part of the share itself.
const MIN_MISSES: u32 = 256;
/// A class keeps a factor of one unless the share over every class would have it count at
/// least this many seen misses: where few misses are seen at all (just after the sketch is
/// forgotten or grown, or among many keys requested once), a class's count of seen misses
/// is a handful, and its ratio swings by half from one period to the next on chance alone
/// (a class of 300 misses seen at the mean's 2% fell under a half in one period of nine).
const MIN_EXPECTED_SEEN: u64 = 32;

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
    /// Invariant: from [`MIN_FACTOR`] to [`ONE`].
    factors: [u16; CLASSES],
}

impl Tables {
    /// Takes each class's factor from the counts, then halves them.
    #[cold]
    fn end_period(&mut self) {
        let misses: u64 = self.counts.iter().map(|c| c & HALF).sum();
        let seen: u64 = self.counts.iter().map(|c| c >> 32).sum();
        for (c, f) in self.counts.iter_mut().zip(&mut self.factors) {
            let (class_misses, class_seen) = (*c & HALF, *c >> 32);
            // The seen misses the class would have at the share over every class: at least
            // MIN_EXPECTED_SEEN, i.e. class_misses * seen / misses >= MIN_EXPECTED_SEEN.
            let expected_enough = class_misses * seen >= MIN_EXPECTED_SEEN * misses;
            *f = if class_misses < u64::from(MIN_MISSES) || !expected_enough {
                ONE
            } else {
                // (class_seen / class_misses) / (seen / misses), in units of 1 / ONE: under
                // 2^14 * 2^14 * 2^12 before the division (the totals over every class stay
                // under 2 * PERIOD, and seen > 0 here).
                let ratio = class_seen * misses * u64::from(ONE) / (class_misses * seen);
                ratio.clamp(u64::from(MIN_FACTOR), u64::from(ONE)) as u16
            };
            *c = (*c >> 1) & !(1 << 31);
        }
    }
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
            self.noted = 0;
            t.end_period();
        }
    }

    /// What an access to a resident weighing `weight` with little evidence of its own is
    /// worth, in units of `2^-FACTOR_SHIFT`: its class's share of seen misses over the share
    /// over every class, from [`MIN_FACTOR`] to one (as of the end of the last period).
    #[inline]
    pub(super) fn factor(&self, weight: u64) -> u16 {
        self.tables
            .as_ref()
            .map_or(ONE, |t| t.factors[class_of(weight)])
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
                seen <= misses && misses < 2 * u64::from(PERIOD) && (MIN_FACTOR..=ONE).contains(f),
                "class of {misses} misses, {seen} seen, factor {f}"
            );
        }
    }
}

/// A weight's class: the exponent of the power of two at or below it (0 for weights 0 and
/// 1), under [`CLASSES`].
fn class_of(weight: u64) -> usize {
    (weight | 1).ilog2() as usize
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
        // Half the misses light and seen 20% of the time, half heavy and seen 60%: the share
        // over every class is 40%, the light class's half of it, the heavy one's above it
        // (capped at one).
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
        // A class whose misses are never seen: the floor, not zero.
        let mut never = WeightClasses::default();
        period(&mut never, PERIOD / 2, 0, 60);
        assert_eq!(never.factor(1_000), MIN_FACTOR);
    }

    #[test]
    fn equal_shares_and_thin_evidence_keep_one() {
        let mut c = WeightClasses::default();
        period(&mut c, PERIOD / 2, 30, 30);
        let light = c.factor(1_000);
        assert!(light >= ONE - ONE / 50, "equal shares: {light}");
        // A class with fewer than MIN_MISSES misses: its share is not trusted; with that
        // many it is.
        let mut thin = WeightClasses::default();
        period(&mut thin, MIN_MISSES - 1, 0, 50);
        assert_eq!(thin.factor(1_000), ONE);
        let mut enough = WeightClasses::default();
        period(&mut enough, MIN_MISSES, 0, 50);
        assert_eq!(enough.factor(1_000), MIN_FACTOR);
    }

    #[test]
    fn a_class_expected_to_see_few_misses_keeps_one() {
        // Misses seen at 2% over every class: a class of 300 misses would see 6 at that
        // share, too few to tell its own share from chance, even at none.
        let mut c = WeightClasses::default();
        period(&mut c, 300, 0, 2);
        assert_eq!(c.factor(1_000), ONE);
        // At 20% over every class it would see about 60: its none is believed.
        let mut d = WeightClasses::default();
        period(&mut d, 300, 0, 20);
        assert_eq!(d.factor(1_000), MIN_FACTOR);
    }

    #[test]
    fn the_factors_follow_the_workload() {
        let mut c = WeightClasses::default();
        period(&mut c, PERIOD / 2, 10, 60);
        assert!(c.factor(1_000) < ONE / 2);
        // The light keys now return as often as the heavy ones: within a few periods the
        // light class counts nearly whole again (about 0.97 after three, 0.99 after four).
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
        assert_eq!(class_of(u64::MAX), CLASSES - 1);
    }

    #[test]
    fn nothing_is_kept_until_a_miss_is_noted() {
        let c = WeightClasses::default();
        assert_eq!(c.heap_bytes(), 0);
        c.validate();
    }
}
