//! A count-min sketch of 4-bit counters that ages by halving (TinyLFU's frequency filter).
//!
//! Each key has one counter in each of four rows; its estimate is the least of the four, so
//! collisions can only raise it. All rows share one table of `u64` words, 16 counters a word.
//! After `sample` recorded increments every counter is halved, so old popularity fades and a
//! change of working set is followed within a few samples. The table has two words (32
//! counters) per key it is sized for, so that a universe several times larger than the
//! cache still collides little.

/// Counters saturate here (4 bits).
const MAX_COUNT: u64 = 15;
/// Keeps the low three bits of every nibble after a shift right by one: halves all 16
/// counters of a word at once.
const HALF_MASK: u64 = 0x7777_7777_7777_7777;
/// Odd multipliers that give each row its own counter for a key.
const SEEDS: [u64; 4] = [
    0x9E37_79B9_7F4A_7C15,
    0xC2B2_AE3D_27D4_EB4F,
    0x1656_67B1_9E37_79F9,
    0xD6E8_FEB8_6659_FD93,
];

#[derive(Debug, Default)]
pub(super) struct Sketch {
    /// Invariant: empty or a power of two long.
    table: Vec<u64>,
    /// Increments recorded since the last halving (roughly: halving halves it).
    size: u64,
    /// Increments between halvings: ten per key the table is sized for.
    sample: u64,
    /// Increments recorded since the sketch was made, never halved or reset: the clock the
    /// idle test reads counts against (`super::idle`).
    increments: u64,
}

impl Sketch {
    /// Resizes (and forgets everything) when the table is too small for `keys` keys, so that
    /// the sketch grows with the cache without knowing its budget; returns whether it did.
    /// Resizing doubles, so it happens O(log n) times.
    #[inline]
    pub(super) fn ensure_capacity(&mut self, keys: usize) -> bool {
        if self.fits(keys) {
            return false;
        }
        let keys = keys.max(64).next_power_of_two();
        let want = 2 * keys;
        if self.table.len() >= want {
            return false;
        }
        self.table = vec![0; want];
        self.size = 0;
        self.sample = 10 * keys as u64;
        true
    }

    /// Whether the table is sized for `keys` keys, so that [`Sketch::ensure_capacity`] would
    /// keep it: the check an insert into a full cache makes (the table is empty or a power
    /// of two of at least 128 words, two per key for a power of two of at least 64 keys).
    #[inline]
    pub(super) fn fits(&self, keys: usize) -> bool {
        !self.table.is_empty() && keys <= self.table.len() / 2
    }

    /// The table length, in words (tests and memory accounting).
    pub(super) fn words(&self) -> usize {
        self.table.len()
    }

    /// Where row `row`'s counter of `key_hash` lives: (word index, bit shift).
    #[inline]
    fn slot(&self, key_hash: u64, row: usize) -> (usize, u32) {
        let h = (key_hash ^ (key_hash >> 29)).wrapping_mul(SEEDS[row]);
        let h = h ^ (h >> 32);
        let mask = self.table.len() as u64 - 1;
        // High bits pick the nibble, low bits the word: the two are independent.
        ((h & mask) as usize, ((h >> 60) as u32) * 4)
    }

    /// Every row's slot of `key_hash`; the table must not be empty.
    #[inline]
    fn slots(&self, key_hash: u64) -> [(usize, u32); 4] {
        [
            self.slot(key_hash, 0),
            self.slot(key_hash, 1),
            self.slot(key_hash, 2),
            self.slot(key_hash, 3),
        ]
    }

    /// The least of the counters at `slots`. Written out rather than as an iterator so
    /// that the four loads (usually cache misses) issue together: this is most of an
    /// evicting put's sketch cost.
    #[inline]
    fn least(&self, slots: &[(usize, u32); 4]) -> u64 {
        let count = |(i, shift): (usize, u32)| (self.table[i] >> shift) & MAX_COUNT;
        let [a, b, c, d] = *slots;
        count(a).min(count(b)).min(count(c).min(count(d)))
    }

    /// The estimated count of `key_hash` (0 for an empty sketch).
    pub(super) fn estimate(&self, key_hash: u64) -> u64 {
        if self.table.is_empty() {
            return 0;
        }
        self.least(&self.slots(key_hash))
    }

    /// Records `times` accesses to `key_hash` (conservative update: only the rows at the
    /// minimum grow, which keeps over-estimates from collisions small). One increment at a
    /// time, the rows at the minimum grow by one; so `n` of them (saturating) leave every
    /// row at least `min + n` and change none above it, which is how they are applied, a
    /// run at a time up to a halving that falls due among them: without a branch on which
    /// rows stand at the minimum (a coin toss for the branch predictor, whose misses were
    /// most of an increment's cost when each row was tested).
    pub(super) fn increment(&mut self, key_hash: u64, times: u64) {
        if self.table.is_empty() {
            return;
        }
        let slots = self.slots(key_hash);
        let mut left = times;
        while left > 0 {
            let min = self.least(&slots);
            // `size < sample` between calls: at least one step fits before the halving.
            let steps = left
                .min(MAX_COUNT.saturating_sub(min))
                .min(self.sample - self.size);
            if steps == 0 {
                return;
            }
            let target = min + steps;
            for &(i, shift) in &slots {
                // Read again: two rows may share a counter, which must grow only once.
                // Counters stay at most 15, so no addition carries into the next nibble.
                let count = (self.table[i] >> shift) & MAX_COUNT;
                self.table[i] += (target.max(count) - count) << shift;
            }
            self.size += steps;
            self.increments += steps;
            left -= steps;
            if self.size >= self.sample {
                self.halve();
            }
        }
    }

    /// Records one access to `key_hash`: what `increment(key_hash, 1)` does, without the
    /// run's arithmetic (each insert counts its key once, and a mixed-size put spent about
    /// a tenth of its instructions in [`Sketch::increment`]). The rows at the minimum grow by
    /// one, added without a branch on which they are (see there). Returns the key's estimate
    /// before the access (0 for an empty sketch).
    #[inline]
    pub(super) fn increment_once(&mut self, key_hash: u64) -> u64 {
        if self.table.is_empty() {
            return 0;
        }
        let slots = self.slots(key_hash);
        let min = self.least(&slots);
        if min == MAX_COUNT {
            return min;
        }
        for &(i, shift) in &slots {
            // Read again: two rows may share a counter, which must grow only once. Every
            // counter here is at least `min`, and stays at most 15.
            let count = (self.table[i] >> shift) & MAX_COUNT;
            self.table[i] += u64::from(count == min) << shift;
        }
        // `size < sample` between calls (see `increment`).
        self.size += 1;
        self.increments += 1;
        if self.size >= self.sample {
            self.halve();
        }
        min
    }

    /// Increments between halvings.
    pub(super) fn sample(&self) -> u64 {
        self.sample
    }

    /// Increments recorded since the sketch was made.
    pub(super) fn increments(&self) -> u64 {
        self.increments
    }

    /// Sets every counter to zero (as four halvings would).
    pub(super) fn forget(&mut self) {
        self.table.fill(0);
        self.size = 0;
    }

    /// Halves every counter. Out of line: once per sample, and inlined into
    /// [`Sketch::increment`] it crowded the registers of every call.
    #[cold]
    #[inline(never)]
    pub(super) fn halve(&mut self) {
        for w in &mut self.table {
            *w = (*w >> 1) & HALF_MASK;
        }
        self.size /= 2;
    }

    /// Checks the table shape and the aging bound (tests and fuzzing).
    #[cfg(any(test, fuzzing))]
    pub(super) fn validate(&self) {
        assert!(
            self.table.is_empty() || self.table.len().is_power_of_two(),
            "sketch table of {} words",
            self.table.len()
        );
        assert!(
            self.table.is_empty() || self.size < self.sample,
            "sketch missed its halving"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_saturate_and_halve() {
        let mut s = Sketch::default();
        assert_eq!(s.estimate(1), 0);
        s.increment(1, 3); // no table yet: nothing recorded
        assert_eq!(s.estimate(1), 0);
        s.ensure_capacity(10);
        assert_eq!(s.words(), 128);
        s.increment(42, 5);
        assert_eq!(s.estimate(42), 5);
        s.increment(42, 100);
        assert_eq!(s.estimate(42), MAX_COUNT);
        assert_eq!(
            s.increment_once(42),
            MAX_COUNT,
            "saturated: the count, unchanged"
        );
        assert_eq!(Sketch::default().increment_once(42), 0, "no table: none");
        s.halve();
        assert_eq!(s.estimate(42), 7);
        s.validate();
    }

    /// One access the textbook way: every row at the minimum grows by one (a counter two
    /// rows share, once), and a full sample halves.
    fn increment_once_by_the_book(s: &mut Sketch, key_hash: u64) {
        let slots = s.slots(key_hash);
        let min = s.least(&slots);
        if min >= MAX_COUNT {
            return;
        }
        for &(i, shift) in &slots {
            if (s.table[i] >> shift) & MAX_COUNT == min {
                s.table[i] += 1 << shift;
            }
        }
        s.size += 1;
        if s.size >= s.sample {
            s.halve();
        }
    }

    /// One xorshift step of `x`, returned.
    fn next(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// Drives two sketches sized for 64 keys through 20,000 xorshift steps from `seed`, the
    /// key of each step one of `keys` (times `spread`): `step` records it in `tested` and in
    /// `book` (with the step's value), and both must then hold the same table and count.
    /// Few keys over a small table: shared words and counters, saturation, and a halving
    /// every 640 increments.
    fn against_the_book(
        seed: u64,
        keys: u64,
        spread: u64,
        mut step: impl FnMut(&mut Sketch, &mut Sketch, u64, u64),
    ) {
        let (mut tested, mut book) = (Sketch::default(), Sketch::default());
        tested.ensure_capacity(64);
        book.ensure_capacity(64);
        let mut state = seed;
        for _ in 0..20_000 {
            let x = next(&mut state);
            let key = (x % keys).wrapping_mul(spread);
            step(&mut tested, &mut book, key, x);
            assert_eq!((&tested.table, tested.size), (&book.table, book.size));
        }
        tested.validate();
    }

    #[test]
    fn a_run_of_increments_is_as_many_single_ones() {
        // Runs of up to 16, so halvings often fall inside one.
        against_the_book(
            0x2545_F491_4F6C_DD1D,
            300,
            0x9E37_79B9_7F4A_7C15,
            |runs, singles, key, x| {
                let times = (x >> 40) % 17;
                runs.increment(key, times);
                for _ in 0..times {
                    increment_once_by_the_book(singles, key);
                }
            },
        );
    }

    #[test]
    fn one_increment_is_one_by_the_book() {
        against_the_book(
            0x9E37_79B9_7F4A_7C15,
            200,
            0x2545_F491_4F6C_DD1D,
            |fast, book, key, _| {
                let before = book.estimate(key);
                assert_eq!(
                    fast.increment_once(key),
                    before,
                    "the count before the access"
                );
                increment_once_by_the_book(book, key);
            },
        );
    }

    #[test]
    fn a_run_grows_a_counter_two_rows_share_once() {
        // A key two of whose rows land on one counter (and the other two elsewhere): a run
        // raises it once per step, as single increments do.
        let mut s = Sketch::default();
        s.ensure_capacity(64);
        let key = (0..1_000_000u64)
            .map(|k| k.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .find(|&h| {
                let slots = s.slots(h);
                let shared = (0..4)
                    .flat_map(|a| (a + 1..4).map(move |b| (a, b)))
                    .filter(|&(a, b)| slots[a] == slots[b])
                    .count();
                shared == 1
            })
            .expect("some key has exactly two rows on one counter");
        let mut singles = Sketch::default();
        singles.ensure_capacity(64);
        for times in [3, 1, 7, 9] {
            s.increment(key, times);
            for _ in 0..times {
                increment_once_by_the_book(&mut singles, key);
            }
            assert_eq!(s.table, singles.table);
            assert_eq!(s.estimate(key), singles.estimate(key));
        }
        assert_eq!(s.estimate(key), MAX_COUNT);
    }

    #[test]
    fn ages_after_a_sample_of_increments() {
        let mut s = Sketch::default();
        s.ensure_capacity(64);
        s.increment(7, 8);
        // Fill one sample with other keys: 7's count must have been halved at least once.
        for k in 0..s.sample {
            s.increment(k.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1 << 63, 1);
            s.validate();
        }
        assert!(s.estimate(7) <= 4, "{}", s.estimate(7));
    }

    #[test]
    fn distinguishes_frequent_from_rare_keys() {
        let mut s = Sketch::default();
        s.ensure_capacity(1000);
        for k in 0..1000u64 {
            let h = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            s.increment(h, if k < 10 { 12 } else { 1 });
        }
        let hot = (0..10u64)
            .map(|k| s.estimate(k.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
            .min();
        let cold_over = (10..1000u64)
            .filter(|k| s.estimate(k.wrapping_mul(0x9E37_79B9_7F4A_7C15)) > 2)
            .count();
        assert_eq!(hot, Some(12));
        assert!(cold_over < 20, "{cold_over} cold keys look warm");
    }

    #[test]
    fn forgetting_zeroes_every_count() {
        let mut s = Sketch::default();
        s.ensure_capacity(100);
        for k in 0..500u64 {
            s.increment(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), 3);
        }
        s.forget();
        s.validate();
        for k in 0..500u64 {
            assert_eq!(s.estimate(k.wrapping_mul(0x9E37_79B9_7F4A_7C15)), 0);
        }
    }

    #[test]
    fn fits_says_whether_ensure_capacity_keeps_the_table() {
        for sized_for in [0, 1, 64, 65, 100, 128, 1000, 4096] {
            let mut s = Sketch::default();
            if sized_for > 0 {
                s.ensure_capacity(sized_for);
            }
            for keys in 0..10_000usize {
                // `ensure_capacity`'s rule written out (it asks `fits` first itself).
                let kept = s.words() >= 2 * keys.max(64).next_power_of_two();
                assert_eq!(s.fits(keys), kept, "sized for {sized_for}, {keys} keys");
            }
        }
    }

    #[test]
    fn growing_forgets_and_keeps_power_of_two() {
        let mut s = Sketch::default();
        s.ensure_capacity(100);
        s.increment(9, 4);
        s.ensure_capacity(100);
        assert_eq!(s.estimate(9), 4);
        s.ensure_capacity(1000);
        assert_eq!(s.words(), 2048);
        assert_eq!(s.estimate(9), 0);
    }
}
