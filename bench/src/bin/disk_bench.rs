//! Disk-tier benchmarks (issue "The engine, part 2"): open-to-first-hit and preload time,
//! disk-index memory per entry, store latency and persistence throughput, gets from disk,
//! space amplification, and with `--features peers` the same work done by foyer, cacache and
//! redb. Prints Markdown tables.
//!
//! Usage: `cargo run --release -p gpucache-bench --bin disk_bench -- [--entries N] [--quick]
//! [--rounds R] [--dir PARENT] [--only 1,...,7] [--scale-sizes N,M] [--value-len B]
//! [--data DIR] [--storage hdd|emmc|ssd|IOPS:BPS|none]`. Section 7 (open to first hit at
//! 100k and 1M entries, hot and throttled) runs only when `--only` names it.

use gpucache_bench::disk::alloc::CountingAlloc;
use gpucache_bench::disk::settings::Settings;

/// Counts live heap bytes for the index-memory section.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--probe") {
        return gpucache_bench::disk::open_scale::probe_main(&args[1..]);
    }
    let settings = Settings::from_args(args)?;
    gpucache_bench::disk::run(&settings, &ALLOC)
}
