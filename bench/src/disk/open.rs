//! Section 1: time from `CacheBuilder::open()` to the first hit, and to the end of the
//! background preload, at three sizes, with the page cache hot and cold.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::ensure;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::data::Dataset;
use super::fsutil::{evict, resident};
use super::measure::{median, median_range, ms};
use super::ours::{self, GIB};
use super::settings::Settings;
use super::table::Table;

/// Target of open-to-first-hit at the largest size, in milliseconds.
const TARGET_MS: f64 = 50.0;

/// One open of a directory.
#[derive(Clone, Debug)]
struct Sample {
    open_ms: f64,
    first_hit_ms: f64,
    preload_ms: f64,
    preloaded: u64,
    resident: Option<u64>,
}

/// Directories loaded with the growth sizes, smallest first.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// (entries, directory) pairs.
    pub dirs: Vec<(usize, PathBuf)>,
}

impl Loaded {
    /// Writes one directory per size of `settings` under `scratch`.
    pub fn write(settings: &Settings, data: &Dataset, scratch: &Path) -> anyhow::Result<Self> {
        let mut dirs = Vec::new();
        for n in settings.sizes() {
            let dir = scratch.join(format!("loaded-{n}"));
            ours::load(&dir, data, n)?;
            dirs.push((n, dir));
        }
        Ok(Self { dirs })
    }

    /// The directory of the main load.
    pub fn largest(&self) -> &(usize, PathBuf) {
        self.dirs.last().expect("three sizes")
    }
}

fn measure(dir: &Path, data: &Dataset, n: usize, cold: bool, seed: u64) -> anyhow::Result<Sample> {
    if cold {
        evict(dir)?;
    }
    let resident = resident(dir);
    let i = StdRng::seed_from_u64(seed).gen_range(0..n);
    let start = Instant::now();
    let cache = ours::open(ours::roomy(dir, n).max_memory_bytes(GIB))?;
    let open_ms = ms(start.elapsed());
    let value = cache.get(data.key(i));
    let first_hit_ms = ms(start.elapsed());
    cache.wait_for_preload();
    let preload_ms = ms(start.elapsed());
    ensure!(
        value == Some(data.value(i, 0)),
        "first get of key {i} missed"
    );
    Ok(Sample {
        open_ms,
        first_hit_ms,
        preload_ms,
        preloaded: cache.stats().preloaded,
        resident,
    })
}

fn row(n: usize, cold: bool, samples: &[Sample]) -> Vec<String> {
    let col = |f: fn(&Sample) -> f64| samples.iter().map(f).collect::<Vec<_>>();
    let resident = match samples
        .iter()
        .map(|s| s.resident)
        .collect::<Option<Vec<_>>>()
    {
        Some(r) => format!(
            "{:.1}",
            median(&r.iter().map(|&b| b as f64 / 1e6).collect::<Vec<_>>())
        ),
        None => "n/a (no fincore)".into(),
    };
    vec![
        n.to_string(),
        format!("{:.0}", Dataset::logical_bytes(n) as f64 / 1e6),
        if cold { "cold" } else { "hot" }.into(),
        resident,
        median_range(&col(|s| s.open_ms), 1),
        median_range(&col(|s| s.first_hit_ms), 1),
        median_range(&col(|s| s.preload_ms), 0),
        format!("{:.0}", median(&col(|s| s.preloaded as f64))),
    ]
}

/// Runs the rounds (cold then hot for each size, sizes interleaved) and prints the table.
pub fn run(settings: &Settings, data: &Dataset, loaded: &Loaded) -> anyhow::Result<()> {
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); loaded.dirs.len() * 2];
    for round in 0..settings.rounds {
        for (k, (n, dir)) in loaded.dirs.iter().enumerate() {
            for (c, cold) in [true, false].into_iter().enumerate() {
                let seed = (round * 10 + k) as u64;
                samples[k * 2 + c].push(measure(dir, data, *n, cold, seed)?);
            }
        }
    }
    let mut table = Table::new(&[
        "entries",
        "data MB",
        "page cache",
        "resident at open MB",
        "open() ms",
        "open→first hit ms",
        "open→preload done ms",
        "preloaded entries",
    ]);
    for (k, (n, _)) in loaded.dirs.iter().enumerate() {
        table.row(row(*n, true, &samples[k * 2]));
        table.row(row(*n, false, &samples[k * 2 + 1]));
    }
    table.print(&format!(
        "1. Open to first hit and full preload (median (min–max) of {} rounds; 20 B keys, 8 KiB values; memory 1 GiB, disk limit 2 GiB)",
        settings.rounds
    ));
    verdict(loaded, &samples);
    Ok(())
}

fn verdict(loaded: &Loaded, samples: &[Vec<Sample>]) {
    let k = loaded.dirs.len() - 1;
    let worst = [&samples[k * 2], &samples[k * 2 + 1]]
        .iter()
        .map(|s| median(&s.iter().map(|x| x.first_hit_ms).collect::<Vec<_>>()))
        .fold(0.0, f64::max);
    let met = if worst <= TARGET_MS { "met" } else { "MISSED" };
    println!(
        "Target open→first hit ≤ {TARGET_MS} ms at {} entries: **{met}** (slower of cold/hot median: {worst:.1} ms).\n",
        loaded.largest().0
    );
}
