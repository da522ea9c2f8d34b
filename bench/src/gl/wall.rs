//! Process wall time, paired: the question "is gpucache's whole process no slower than the
//! best Mesa back end's?" is decided by a few milliseconds out of hundreds, inside this
//! kind of machine's run-to-run noise, so the warm-start table's medians of separate runs
//! cannot settle it. Here every round runs each case once per condition (hot page cache,
//! cold page cache, each storage profile) back to back in a rotating order, and the answer
//! is the median over rounds of the ratio of two runs made seconds apart, with the number
//! of rounds each side won (a sign test: under "no difference" each round is a coin toss).
//!
//! Only whole-process wall time is compared; the cases are the warm-start benchmark's own
//! ([`super::cases`]), populated once each from an empty cache.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context as _, Result};

use super::cases::{run, Case, Run};
use super::pagecache;
use super::throttle::Profile;
use super::warm_start::{slow_run, throttle_or_note, Settings};
use crate::disk::measure::{median, ms};

/// A measuring condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// Cache files in the page cache.
    Hot,
    /// Cache files evicted from the page cache.
    Cold,
    /// Evicted, then read through the block-I/O throttle with this profile.
    Slow(Profile),
}

impl Condition {
    fn label(self) -> String {
        match self {
            Condition::Hot => "hot".to_string(),
            Condition::Cold => "cold".to_string(),
            Condition::Slow(p) => format!("cold, {}", p.name),
        }
    }
}

/// Every case's wall time per round, for each condition.
#[derive(Debug)]
pub struct Paired {
    /// The cases, in the order given.
    pub cases: Vec<Case>,
    /// The conditions measured.
    pub conditions: Vec<Condition>,
    /// `walls[condition][case][round]`: process wall time, milliseconds.
    pub walls: Vec<Vec<Vec<f64>>>,
    /// The same runs' compile+link+draw inside the process (issue 13's cold-start figure),
    /// milliseconds.
    pub clds: Vec<Vec<Vec<f64>>>,
    /// The same runs' context creation, milliseconds.
    pub creates: Vec<Vec<Vec<f64>>>,
    /// Why the storage profiles were skipped, when they were.
    pub profiles_skipped: Option<String>,
}

fn log(line: &str) {
    eprintln!("wall_time: {line}");
}

/// Populates each case once, then runs `settings.warm_runs` rounds.
pub fn measure(settings: &Settings, cases: &[Case]) -> Result<Paired> {
    for &case in cases {
        let home = settings.dir.join(case.slug());
        if home.exists() {
            std::fs::remove_dir_all(&home)?;
        }
        std::fs::create_dir_all(&home)?;
        for _ in 0..settings.populate_runs.max(1) {
            run(case, &settings.gl_run, &home, &settings.workload)?;
        }
        case.check_folders(&home)?;
        log(&format!("populated {}", case.label()));
    }
    let (throttle, profiles_skipped) = throttle_or_note(settings);
    // Cold before hot: a case's cold run reads its files back into the page cache, so its
    // hot run in the same round finds them there.
    let mut conditions = vec![Condition::Cold, Condition::Hot];
    if throttle.is_some() {
        conditions.extend(settings.profiles.iter().map(|&p| Condition::Slow(p)));
    }
    let mut walls = vec![vec![Vec::new(); cases.len()]; conditions.len()];
    let mut clds = walls.clone();
    let mut creates = walls.clone();
    let n = cases.len();
    for round in 0..settings.warm_runs {
        // One condition at a time across all cases, so that the runs compared in a round
        // are as close in time as they can be; the case order rotates by round.
        for (c, &condition) in conditions.iter().enumerate() {
            for i in 0..n {
                let k = (i + round) % n;
                let case = cases[k];
                let home = settings.dir.join(case.slug());
                let r: Run = match condition {
                    Condition::Hot => run(case, &settings.gl_run, &home, &settings.workload)?,
                    Condition::Cold => {
                        pagecache::evict(&case.cache_path(&home))
                            .with_context(|| format!("evicting {}", case.label()))?;
                        run(case, &settings.gl_run, &home, &settings.workload)?
                    }
                    Condition::Slow(profile) => slow_run(
                        throttle.as_ref().expect("profiles only with a throttle"),
                        &profile,
                        case,
                        settings,
                        &home,
                    )?,
                };
                walls[c][k].push(ms(r.wall));
                clds[c][k].push(r.report.cld_ms());
                creates[c][k].push(r.report.create_ms);
            }
        }
        log(&format!("round {round} of {}", settings.warm_runs));
    }
    drop(throttle);
    Ok(Paired {
        cases: cases.to_vec(),
        conditions,
        walls,
        clds,
        creates,
        profiles_skipped,
    })
}

/// One side-by-side comparison of `a` against `b` under one condition.
#[derive(Clone, Copy, Debug)]
pub struct Duel {
    /// Median over rounds of a's wall ÷ b's wall.
    pub median_ratio: f64,
    /// Rounds where a was faster.
    pub a_wins: usize,
    /// Rounds counted.
    pub rounds: usize,
    /// Two-sided sign-test p-value of "a and b are equally fast".
    pub p_value: f64,
}

/// `a` against `b`, round by round.
pub fn duel(a: &[f64], b: &[f64]) -> Duel {
    let ratios: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    let a_wins = a.iter().zip(b).filter(|(x, y)| x < y).count();
    let rounds = ratios.len();
    Duel {
        median_ratio: median(&ratios),
        a_wins,
        rounds,
        p_value: sign_test(a_wins, rounds),
    }
}

/// Two-sided binomial p-value of `k` successes in `n` fair coin tosses.
fn sign_test(k: usize, n: usize) -> f64 {
    if n == 0 {
        return 1.0;
    }
    let tail = k.min(n - k);
    // P(X <= tail) with X ~ Binomial(n, 1/2), summed in logs to stay finite for large n.
    let ln_half_n = n as f64 * 0.5f64.ln();
    let mut ln_choose = 0.0f64; // ln C(n, 0)
    let mut p = 0.0;
    for i in 0..=tail {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        p += (ln_choose + ln_half_n).exp();
    }
    (2.0 * p).min(1.0)
}

impl Paired {
    fn series(&self, metric: Metric, condition: usize, case: Case) -> &[f64] {
        let k = self.cases.iter().position(|&c| c == case).expect("case");
        match metric {
            Metric::Wall => &self.walls[condition][k],
            Metric::Cld => &self.clds[condition][k],
            Metric::Create => &self.creates[condition][k],
        }
    }

    /// For each metric: medians per case and condition, then every gpucache case against
    /// every Mesa back end, with verdicts (hot: no slower than the best; cold and slow
    /// storage: ahead of every one).
    pub fn render(&self) -> String {
        let mut out = String::new();
        for metric in [Metric::Wall, Metric::Cld, Metric::Create] {
            out.push_str(&self.render_metric(metric));
        }
        if let Some(note) = &self.profiles_skipped {
            let _ = writeln!(out, "\nNote: {note}");
        }
        out
    }

    fn render_metric(&self, metric: Metric) -> String {
        let mut out = String::new();
        let rounds = self.walls[0].first().map_or(0, Vec::len);
        let _ = writeln!(
            out,
            "### {}, paired rounds ({rounds} rounds): medians (ms)\n",
            metric.title()
        );
        let _ = write!(out, "| case |");
        for c in &self.conditions {
            let _ = write!(out, " {} |", c.label());
        }
        let _ = write!(out, "\n|---|");
        for _ in &self.conditions {
            let _ = write!(out, "---:|");
        }
        out.push('\n');
        for &case in &self.cases {
            let _ = write!(out, "| {} |", case.label());
            for c in 0..self.conditions.len() {
                let _ = write!(out, " {:.0} |", median(self.series(metric, c, case)));
            }
            out.push('\n');
        }
        let mesa: Vec<Case> = self
            .cases
            .iter()
            .copied()
            .filter(|c| c.mesa_folder().is_some())
            .collect();
        let ours = self
            .cases
            .iter()
            .copied()
            .filter(|c| matches!(c, Case::Gpucache | Case::Dropin));
        for g in ours {
            let _ = writeln!(
                out,
                "\n{}, {} against each Mesa back end: median of the per-round ratio (rounds it was faster, sign-test p):\n",
                metric.title(),
                g.label(),
            );
            let _ = write!(out, "| condition |");
            for m in &mesa {
                let _ = write!(out, " vs {} |", m.label());
            }
            let _ = write!(out, " verdict |\n|---|");
            for _ in &mesa {
                let _ = write!(out, "---:|");
            }
            out.push_str("---|\n");
            for (c, condition) in self.conditions.iter().enumerate() {
                let _ = write!(out, "| {} |", condition.label());
                let mut met = true;
                for &m in &mesa {
                    let d = duel(self.series(metric, c, g), self.series(metric, c, m));
                    let _ = write!(
                        out,
                        " {:.3} ({}/{}, p {:.2}) |",
                        d.median_ratio, d.a_wins, d.rounds, d.p_value
                    );
                    // Hot: no slower than the best back end; cold: ahead of every one.
                    met &= if *condition == Condition::Hot {
                        d.median_ratio <= 1.0
                    } else {
                        d.median_ratio < 1.0
                    };
                }
                let _ = writeln!(out, " {} |", if met { "met" } else { "MISSED" });
            }
        }
        out.push('\n');
        out
    }
}

/// What is compared.
#[derive(Clone, Copy, Debug)]
enum Metric {
    /// Whole-process wall time, spawn to exit.
    Wall,
    /// Compile+link+draw as the process measures it.
    Cld,
    /// `eglCreateContext` as the process measures it.
    Create,
}

impl Metric {
    fn title(self) -> &'static str {
        match self {
            Metric::Wall => "Process wall time",
            Metric::Cld => "Compile+link+draw",
            Metric::Create => "Context creation",
        }
    }
}

/// Parses `--cases`: the warm-start benchmark's case slugs.
pub fn parse_cases(list: &[String]) -> Result<Vec<Case>> {
    list.iter()
        .map(|s| {
            Case::ALL
                .iter()
                .copied()
                .find(|c| c.slug() == s)
                .with_context(|| {
                    let names: Vec<&str> = Case::ALL.iter().map(|c| c.slug()).collect();
                    format!("unknown case {s:?}: one of {}", names.join(", "))
                })
        })
        .collect()
}

/// Where the caches live by default.
pub fn default_dir() -> PathBuf {
    super::corpus::workspace_root().join(".cache/wall-time")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_test_matches_the_binomial() {
        // 0 of 5: 2 * (1/32).
        assert!((sign_test(0, 5) - 0.0625).abs() < 1e-12);
        // Balanced: no evidence.
        assert_eq!(sign_test(10, 20), 1.0);
        // 18 of 21: 2 * P(X <= 3) = 2 * (1 + 21 + 210 + 1330) / 2^21.
        let want = 2.0 * 1562.0 / 2f64.powi(21);
        assert!((sign_test(18, 21) - want).abs() < 1e-12);
        assert_eq!(sign_test(0, 0), 1.0);
    }

    #[test]
    fn duel_pairs_rounds() {
        let d = duel(&[90.0, 100.0, 120.0], &[100.0, 100.0, 100.0]);
        assert_eq!(d.a_wins, 1);
        assert_eq!(d.rounds, 3);
        assert!((d.median_ratio - 1.0).abs() < 1e-12);
    }
}
