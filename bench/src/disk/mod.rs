//! The disk-tier benchmark behind `disk_bench`: gpucache's `Cache` over a directory, measured
//! for open time, index memory, store latency and persistence throughput, gets from disk and
//! space amplification, and (with the `peers` feature) against foyer, cacache and redb doing
//! the same work.
//!
//! Every section prints a Markdown table followed by its targets' verdicts. Data lives in a
//! temporary directory that is removed at the end.

pub mod alloc;
pub mod cold_get;
pub mod data;
pub mod fsutil;
pub mod index_mem;
pub mod measure;
pub mod open;
pub mod open_scale;
pub mod ours;
#[cfg(feature = "peers")]
pub mod peers;
pub mod settings;
pub mod space;
pub mod store;
pub mod table;

use std::time::Instant;

use alloc::CountingAlloc;
use data::Dataset;
use settings::Settings;

/// Runs every section in order and prints their tables.
pub fn run(settings: &Settings, alloc: &CountingAlloc) -> anyhow::Result<()> {
    let started = Instant::now();
    let scratch = match &settings.scratch_parent {
        Some(parent) => tempfile::Builder::new()
            .prefix("disk-bench-")
            .tempdir_in(parent)?,
        None => tempfile::Builder::new().prefix("disk-bench-").tempdir()?,
    };
    let data = Dataset::new(settings.entries);
    print_setup(settings, scratch.path());
    let mut times = Vec::new();
    let mut clock = Instant::now();
    let mut lap = |name: &str| {
        times.push(format!("{name} {:.0} s", clock.elapsed().as_secs_f64()));
        clock = Instant::now();
    };
    let loaded = if [1, 2, 4, 5].iter().any(|&s| settings.runs(s)) {
        let loaded = open::Loaded::write(settings, &data, scratch.path())?;
        lap("loading");
        Some(loaded)
    } else {
        None
    };
    let (n, main_dir) = loaded
        .as_ref()
        .map(|l| l.largest().clone())
        .unwrap_or_default();
    if let (true, Some(loaded)) = (settings.runs(1), &loaded) {
        open::run(settings, &data, loaded)?;
        lap("1");
    }
    if let (true, Some(loaded)) = (settings.runs(2), &loaded) {
        index_mem::run(alloc, loaded, scratch.path())?;
        lap("2");
    }
    if settings.runs(3) {
        store::run(settings, &data, scratch.path())?;
        lap("3");
    }
    if settings.runs(4) {
        cold_get::run(settings, &data, &main_dir, n)?;
        lap("4");
    }
    if settings.runs(5) {
        space::run(&data, &main_dir, n)?;
        lap("5");
    }
    if settings.runs(6) {
        run_peers(settings, &data, scratch.path())?;
        lap("6");
    }
    if settings.runs(7) {
        open_scale::run(settings, scratch.path())?;
        lap("7");
    }
    println!("Section times: {}.", times.join(", "));
    println!("Total run time: {:.0} s.", started.elapsed().as_secs_f64());
    Ok(())
}

#[cfg(feature = "peers")]
fn run_peers(settings: &Settings, data: &Dataset, scratch: &std::path::Path) -> anyhow::Result<()> {
    peers::run(settings, data, scratch)
}

#[cfg(not(feature = "peers"))]
fn run_peers(_: &Settings, _: &Dataset, _: &std::path::Path) -> anyhow::Result<()> {
    println!("### 6. Peers\n\nNot built: run with `--features peers` to compare with foyer, cacache and redb.\n");
    Ok(())
}

fn print_setup(settings: &Settings, scratch: &std::path::Path) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "# disk_bench\n\n{} entries of 20 B keys and 8 KiB values ({:.0} MB), {} rounds{}, {cpus} CPUs, data under {}; page-cache eviction by fsync + POSIX_FADV_DONTNEED, {}.\n",
        settings.entries,
        Dataset::logical_bytes(settings.entries) as f64 / 1e6,
        settings.rounds,
        if settings.quick { " (--quick)" } else { "" },
        scratch.display(),
        if fsutil::have_fincore() {
            "verified with fincore"
        } else {
            "NOT verified (fincore not installed)"
        },
    );
}
