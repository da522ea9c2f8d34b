//! Section 6's table, notes and verdicts.

use super::engine::Kind;
use super::Sample;
use crate::disk::data::{Dataset, VALUE_LEN};
use crate::disk::fsutil::Usage;
use crate::disk::measure::{median, median_range};
use crate::disk::settings::Settings;
use crate::disk::table::Table;

fn col(samples: &[Sample], f: impl Fn(&Sample) -> f64) -> Vec<f64> {
    samples.iter().map(f).collect()
}

/// The values of the rounds that have one.
fn some_col(samples: &[Sample], f: impl Fn(&Sample) -> Option<f64>) -> Vec<f64> {
    samples.iter().filter_map(f).collect()
}

/// Median page cache filled per cold get, or why it is unknown.
fn kib_per_get(s: &[Sample]) -> String {
    let v = some_col(s, |x| x.read_kib_per_get);
    if v.len() == s.len() {
        format!("{:.1}", median(&v))
    } else {
        "n/a (no fincore)".into()
    }
}

fn amp(u: Option<Usage>, allocated: bool, n: usize) -> Option<f64> {
    let u = u?;
    let bytes = if allocated { u.allocated } else { u.apparent };
    Some(bytes as f64 / Dataset::logical_bytes(n) as f64)
}

pub(super) fn print_table(
    settings: &Settings,
    kinds: &[Kind],
    n: usize,
    sample: usize,
    per_kind: &[Vec<Sample>],
) {
    let mut table = Table::new(&[
        "engine",
        "store MB/s (first insert→durable)",
        "apparent amp",
        "allocated amp",
        "open→first hit cold ms",
        "open→first hit hot ms",
        "cold gets/s",
        "cold MB/s",
        "cold get p99 µs",
        "page cache filled (open + gets) KiB/get",
        "hit %",
        "wrong",
    ]);
    for (kind, s) in kinds.iter().zip(per_kind) {
        let gets = col(s, |x| x.gets_per_s);
        table.row(vec![
            kind.name.into(),
            median_range(&some_col(s, |x| x.store_mbps), 0),
            format!("{:.3}", median(&some_col(s, |x| amp(x.usage, false, n)))),
            format!("{:.3}", median(&some_col(s, |x| amp(x.usage, true, n)))),
            median_range(&col(s, |x| x.open_cold_ms), 1),
            median_range(&col(s, |x| x.open_hot_ms), 1),
            median_range(&gets, 0),
            format!("{:.0}", median(&gets) * VALUE_LEN as f64 / 1e6),
            median_range(&col(s, |x| x.get_p99_us), 0),
            kib_per_get(s),
            format!("{:.1}", median(&col(s, |x| x.hit_pct))),
            format!("{:.0}", col(s, |x| x.wrong as f64).iter().sum::<f64>()),
        ]);
    }
    table.print(&format!(
        "6. Peers: the same work ({n} × 8 KiB stored and made durable; reopen to a first hit; {sample} random gets after page-cache eviction; median (min–max) of {} interleaved rounds)",
        settings.rounds
    ));
    for kind in kinds {
        println!("- {}: {}", kind.name, kind.setup);
    }
    let resident: Vec<String> = kinds
        .iter()
        .zip(per_kind)
        .map(|(kind, s)| {
            match s
                .iter()
                .map(|x| x.resident_at_cold_open)
                .collect::<Option<Vec<u64>>>()
            {
                Some(r) => format!(
                    "{} {:.1} MB",
                    kind.name,
                    r.iter().max().copied().unwrap_or(0) as f64 / 1e6
                ),
                None => format!("{} not verified (no fincore)", kind.name),
            }
        })
        .collect();
    println!(
        "\nPage cache holding each engine's files at the cold opens (most of any round): {}.\n",
        resident.join(", ")
    );
}

/// A comparison gpucache should win.
struct Check {
    what: &'static str,
    metric: fn(&Sample) -> Option<f64>,
    higher_is_better: bool,
}

const CHECKS: [Check; 3] = [
    Check {
        what: "cold open→first hit",
        metric: |x| Some(x.open_cold_ms),
        higher_is_better: false,
    },
    Check {
        what: "allocated space amplification",
        metric: |x| x.usage.map(|u| u.allocated as f64),
        higher_is_better: false,
    },
    Check {
        what: "cold-get throughput",
        metric: |x| Some(x.gets_per_s),
        higher_is_better: true,
    },
];

pub(super) fn verdicts(kinds: &[Kind], per_kind: &[Vec<Sample>]) {
    for check in &CHECKS {
        let m = |k: usize| median(&some_col(&per_kind[k], check.metric));
        let ours = m(0);
        let not_behind: Vec<&str> = (1..kinds.len())
            .filter(|&k| (m(k) >= ours) == check.higher_is_better || m(k) == ours)
            .map(|k| kinds[k].name)
            .collect();
        let what = check.what;
        if not_behind.is_empty() {
            println!("Target gpucache ahead of every peer on {what}: **met**.");
        } else {
            let names = not_behind.join(", ");
            println!(
                "Target gpucache ahead of every peer on {what}: **MISSED** (not ahead of {names})."
            );
        }
    }
    println!();
}
