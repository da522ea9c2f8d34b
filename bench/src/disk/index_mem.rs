//! Section 2: heap bytes per on-disk entry of the disk index, measured with the counting
//! allocator: the cache opens without preload and with a tiny memory budget, so what the
//! heap grows by, less what an empty directory costs, is the index.

use std::path::Path;

use super::alloc::CountingAlloc;
use super::open::Loaded;
use super::ours::{self, MIB};
use super::table::Table;

/// Target heap bytes per entry.
const TARGET: f64 = 64.0;

/// Heap growth of one open.
#[derive(Clone, Copy, Debug)]
struct Growth {
    /// Live bytes added by the open cache.
    live: usize,
    /// Entries the disk index holds.
    entries: u64,
}

fn measure(alloc: &CountingAlloc, dir: &Path) -> anyhow::Result<Growth> {
    let builder = gpucache::CacheBuilder::new()
        .directory(dir)
        .preload(false)
        .max_memory_bytes(MIB);
    let before = alloc.live();
    let cache = ours::open(builder)?;
    let live = alloc.live().saturating_sub(before);
    let entries = ours::disk_stats(&cache).entries;
    drop(cache);
    Ok(Growth { live, entries })
}

/// Measures every size of `loaded` against an empty directory and prints the table.
pub fn run(alloc: &CountingAlloc, loaded: &Loaded, scratch: &Path) -> anyhow::Result<()> {
    let empty = measure(alloc, &scratch.join("empty"))?;
    let mut table = Table::new(&[
        "entries on disk",
        "heap growth at open B",
        "of which fixed (empty dir) B",
        "index B/entry",
    ]);
    let mut worst: f64 = 0.0;
    for (n, dir) in &loaded.dirs {
        let g = measure(alloc, dir)?;
        anyhow::ensure!(g.entries == *n as u64, "index holds {} of {n}", g.entries);
        let per_entry = g.live.saturating_sub(empty.live) as f64 / *n as f64;
        worst = worst.max(per_entry);
        table.row(vec![
            n.to_string(),
            g.live.to_string(),
            empty.live.to_string(),
            format!("{per_entry:.1}"),
        ]);
    }
    table.print(
        "2. Disk-index memory (counting global allocator; `.preload(false)`, 1 MiB memory tier)",
    );
    let met = if worst <= TARGET { "met" } else { "MISSED" };
    println!("Target index ≤ {TARGET:.0} B per on-disk entry: **{met}** (worst {worst:.1} B).\n");
    Ok(())
}
