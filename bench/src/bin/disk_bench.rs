//! Disk-tier benchmarks (issue "The engine, part 2"): open-to-first-hit and preload time,
//! disk-index memory per entry, store latency and persistence throughput, gets from disk,
//! space amplification, and with `--features peers` the same work done by foyer, cacache and
//! redb. Prints Markdown tables.
//!
//! Usage: `cargo run --release -p gpucache-bench --bin disk_bench -- [--entries N] [--quick]
//! [--rounds R] [--dir PARENT]`.

use gpucache_bench::disk::alloc::CountingAlloc;
use gpucache_bench::disk::settings::Settings;

/// Counts live heap bytes for the index-memory section.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

fn main() -> anyhow::Result<()> {
    let settings = Settings::from_args(std::env::args().skip(1))?;
    gpucache_bench::disk::run(&settings, &ALLOC)
}
