//! Section 5: space amplification (file bytes ÷ key and value bytes) after the main load and
//! after a steady-state overwrite workload under a byte limit.

use std::path::Path;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::data::Dataset;
use super::fsutil::{usage, Usage};
use super::ours;
use super::table::Table;

/// Target space amplification.
const TARGET: f64 = 1.15;
/// Stores between flushes of the overwrite workload (keeps the default write queue from
/// overflowing, so every overwrite is persisted).
const FLUSH_EVERY: usize = 4096;

/// What the overwrite workload did.
#[derive(Clone, Debug)]
struct Overwrite {
    limit: u64,
    live_entries: u64,
    user_bytes: u64,
    bytes_written: u64,
    dropped: u64,
    evicted_segments: u64,
    compacted_segments: u64,
    secs: f64,
}

/// Overwrites random keys of the `n`-entry cache in `dir` for twice its data volume under a
/// byte limit of 4/3 of that volume (about 1 GiB for 100,000 entries).
fn overwrite(dir: &Path, data: &Dataset, n: usize) -> anyhow::Result<Overwrite> {
    let limit = Dataset::logical_bytes(n) * 4 / 3;
    let cache = ours::open(
        gpucache::CacheBuilder::new()
            .directory(dir)
            .preload(false)
            .max_disk_bytes(limit),
    )?;
    let mut rng = StdRng::seed_from_u64(5);
    let start = Instant::now();
    for j in 0..2 * n {
        let i = rng.gen_range(0..n);
        cache.insert(data.key(i), data.value(i, 1 + (j / n) as u64))?;
        if j % FLUSH_EVERY == FLUSH_EVERY - 1 {
            cache.flush()?;
        }
    }
    cache.flush()?;
    let secs = start.elapsed().as_secs_f64();
    let s = ours::disk_stats(&cache);
    let dropped = cache.stats().write_queue_dropped;
    Ok(Overwrite {
        limit,
        live_entries: s.entries,
        user_bytes: Dataset::logical_bytes(2 * n),
        bytes_written: s.bytes_written,
        dropped,
        evicted_segments: s.evicted_segments,
        compacted_segments: s.compacted_segments,
        secs,
    })
}

fn row(state: String, entries: u64, u: Usage) -> (Vec<String>, f64) {
    let logical = Dataset::logical_bytes(entries as usize) as f64;
    let amp = |b: u64| b as f64 / logical;
    let worst = amp(u.apparent).max(amp(u.allocated));
    let cells = vec![
        state,
        entries.to_string(),
        format!("{:.1}", logical / 1e6),
        u.files.to_string(),
        format!("{:.1}", u.apparent as f64 / 1e6),
        format!("{:.1}", u.allocated as f64 / 1e6),
        format!("{:.3}", amp(u.apparent)),
        format!("{:.3}", amp(u.allocated)),
    ];
    (cells, worst)
}

/// Measures the main load's directory, overwrites it, measures again; prints the table.
/// The directory's contents are changed.
pub fn run(data: &Dataset, dir: &Path, n: usize) -> anyhow::Result<()> {
    let mut table = Table::new(&[
        "state",
        "live entries",
        "key+value MB",
        "files",
        "apparent MB",
        "allocated MB",
        "apparent amp",
        "allocated amp",
    ]);
    let (load_row, load_amp) = row("after the load".into(), n as u64, usage(dir)?);
    table.row(load_row);
    let w = overwrite(dir, data, n)?;
    let (ow_row, ow_amp) = row(
        format!(
            "after overwriting 2× under a {:.0} MB limit",
            w.limit as f64 / 1e6
        ),
        w.live_entries,
        usage(dir)?,
    );
    table.row(ow_row);
    table.print("5. Space amplification (bytes on disk ÷ key+value bytes of the live entries)");
    println!(
        "Overwrite workload: {} stores of {:.0} MB in {:.1} s ({:.0} MB/s, flushed every {FLUSH_EVERY}); {:.0} MB appended (write amplification {:.2}); {} segments evicted, {} compacted; {} stores not persisted.",
        2 * n,
        w.user_bytes as f64 / 1e6,
        w.secs,
        w.user_bytes as f64 / w.secs / 1e6,
        w.bytes_written as f64 / 1e6,
        w.bytes_written as f64 / w.user_bytes as f64,
        w.evicted_segments,
        w.compacted_segments,
        w.dropped,
    );
    let worst = load_amp.max(ow_amp);
    let met = if worst <= TARGET { "met" } else { "MISSED" };
    println!("Target space amplification ≤ {TARGET}: **{met}** (worst {worst:.3}).\n");
    Ok(())
}
