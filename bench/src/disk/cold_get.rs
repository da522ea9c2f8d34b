//! Section 4: gets that miss memory and read from disk: page cache cold (evicted before
//! opening, no preload), then a second pass over the same keys with the page cache hot.

use std::path::Path;
use std::time::Instant;

use gpucache::Cache;

use super::data::{Dataset, VALUE_LEN};
use super::fsutil::{evict, resident};
use super::measure::{median, median_range, Latencies};
use super::ours::{self, MIB};
use super::settings::Settings;
use super::table::Table;

/// Memory tier of the get benchmark: small, so that gets go to disk.
pub const GET_MEMORY: u64 = 16 * MIB;

/// One pass over the sampled keys.
#[derive(Clone, Debug)]
struct Pass {
    latency_us: [f64; 4],
    gets_per_s: f64,
    hit_pct: f64,
    from_disk_pct: f64,
    wrong: u64,
    /// Page cache the pass filled, KiB per get (per `fincore`).
    read_kib_per_get: Option<f64>,
}

fn pass(cache: &Cache, dir: &Path, data: &Dataset, keys: &[usize]) -> Pass {
    let resident_before = resident(dir);
    let disk_before = ours::disk_stats(cache).read_hits;
    let mut lat = Latencies::with_capacity(keys.len());
    let (mut hits, mut wrong) = (0u64, 0u64);
    let start = Instant::now();
    for &i in keys {
        let got = lat.time(|| cache.get(data.key(i)));
        match got {
            Some(v) if v == data.value(i, 0) => hits += 1,
            Some(_) => wrong += 1,
            None => {}
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let from_disk = ours::disk_stats(cache).read_hits - disk_before;
    let filled = resident(dir)
        .zip(resident_before)
        .map(|(after, before)| after.saturating_sub(before));
    Pass {
        latency_us: lat.summary(),
        gets_per_s: keys.len() as f64 / secs,
        hit_pct: 100.0 * hits as f64 / keys.len() as f64,
        from_disk_pct: 100.0 * from_disk as f64 / keys.len() as f64,
        wrong,
        read_kib_per_get: filled.map(|b| b as f64 / 1024.0 / keys.len() as f64),
    }
}

/// Evicts, opens without preload, and runs a cold then a hot pass; also returns the bytes
/// that were still resident at open (per `fincore`).
fn round(
    dir: &Path,
    data: &Dataset,
    n: usize,
    sample: usize,
    seed: u64,
) -> anyhow::Result<(Pass, Pass, Option<u64>)> {
    evict(dir)?;
    let resident = resident(dir);
    let cache = ours::open(
        gpucache::CacheBuilder::new()
            .directory(dir)
            .preload(false)
            .max_memory_bytes(GET_MEMORY)
            .max_disk_bytes(2 * ours::GIB),
    )?;
    let keys = &Dataset::shuffled(n, seed)[..sample];
    let cold = pass(&cache, dir, data, keys);
    let mut again = keys.to_vec();
    again.reverse();
    let hot = pass(&cache, dir, data, &again);
    Ok((cold, hot, resident))
}

fn row(name: &str, passes: &[Pass]) -> Vec<String> {
    let col = |f: &dyn Fn(&Pass) -> f64| passes.iter().map(f).collect::<Vec<_>>();
    let gets = col(&|p| p.gets_per_s);
    vec![
        name.into(),
        median_range(&col(&|p| p.latency_us[0]), 1),
        median_range(&col(&|p| p.latency_us[1]), 1),
        median_range(&col(&|p| p.latency_us[2]), 1),
        median_range(&col(&|p| p.latency_us[3]), 0),
        median_range(&gets, 0),
        format!("{:.0}", median(&gets) * VALUE_LEN as f64 / 1e6),
        format!("{:.1}", median(&col(&|p| p.hit_pct))),
        format!("{:.1}", median(&col(&|p| p.from_disk_pct))),
        match passes
            .iter()
            .map(|p| p.read_kib_per_get)
            .collect::<Option<Vec<_>>>()
        {
            Some(v) => format!("{:.1}", median(&v)),
            None => "n/a".into(),
        },
        format!("{:.0}", col(&|p| p.wrong as f64).iter().sum::<f64>()),
    ]
}

/// Runs the rounds on the main load's directory and prints the table.
pub fn run(settings: &Settings, data: &Dataset, dir: &Path, n: usize) -> anyhow::Result<()> {
    let sample = settings.get_sample.min(n);
    let (mut cold, mut hot, mut resident) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..settings.rounds {
        let (c, h, res) = round(dir, data, n, sample, 100 + r as u64)?;
        cold.push(c);
        hot.push(h);
        resident.push(res);
    }
    let mut table = Table::new(&[
        "pass",
        "get p50 µs",
        "p99 µs",
        "p99.9 µs",
        "max µs",
        "gets/s",
        "MB/s",
        "hit %",
        "read from disk %",
        "page cache filled KiB/get",
        "wrong values",
    ]);
    table.row(row("cold (page cache evicted)", &cold));
    table.row(row("hot (second pass)", &hot));
    let res = match resident.iter().copied().collect::<Option<Vec<u64>>>() {
        Some(r) => format!(
            "{:.1} MB resident at open per fincore",
            median(&r.iter().map(|&b| b as f64 / 1e6).collect::<Vec<_>>())
        ),
        None => "eviction not verified: fincore unavailable".into(),
    };
    table.print(&format!(
        "4. Gets from disk ({sample} random present keys of {n}; `.preload(false)`, 16 MiB memory tier; {res}; median (min–max) of {} rounds)",
        settings.rounds
    ));
    Ok(())
}
