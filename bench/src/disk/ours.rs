//! gpucache set up the way the benchmarks use it.

use std::path::Path;

use anyhow::{bail, Context};
use gpucache::{Cache, CacheBuilder, DiskStats};

use super::data::Dataset;

/// One gibibyte.
pub const GIB: u64 = 1 << 30;
/// One mebibyte.
pub const MIB: u64 = 1 << 20;

/// Stores between flushes when every store must be persisted: half of the 65,536 operations
/// gpucache's write-behind queue holds at most, whatever its byte limit.
pub const PACE: usize = 32_768;

/// A builder for a cache in `dir` with room for the whole load: 1 GiB of memory, 2 GiB of
/// disk, and a write queue that holds the whole load of `n` entries.
pub fn roomy(dir: &Path, n: usize) -> CacheBuilder {
    CacheBuilder::new()
        .directory(dir)
        .max_memory_bytes(GIB)
        .max_disk_bytes(2 * GIB)
        .write_queue_bytes(queue_for(n))
}

/// A write queue that holds `n` entries, and never less than 1 GiB.
pub fn queue_for(n: usize) -> u64 {
    (Dataset::logical_bytes(n) + 64 * MIB).max(GIB)
}

/// Opens `builder`, failing if the disk tier is not there.
pub fn open(builder: CacheBuilder) -> anyhow::Result<Cache> {
    let cache = builder.open().context("opening gpucache")?;
    if let Some(e) = cache.disk_error() {
        bail!("gpucache has no disk tier: {e}");
    }
    Ok(cache)
}

/// The disk tier's counters.
pub fn disk_stats(cache: &Cache) -> DiskStats {
    cache.stats().disk.unwrap_or_default()
}

/// Stores the first `n` entries of `data` (generation 0) in a new cache in `dir`, flushed
/// every [`PACE`] stores.
pub fn load(dir: &Path, data: &Dataset, n: usize) -> anyhow::Result<()> {
    let cache = open(roomy(dir, n).max_memory_bytes(64 * MIB).preload(false))?;
    for i in 0..n {
        cache.insert(data.key(i), data.value(i, 0))?;
        if (i + 1).is_multiple_of(PACE) {
            cache.flush()?;
        }
    }
    cache.flush()?;
    let stats = disk_stats(&cache);
    if stats.entries != n as u64 {
        bail!("loaded {} of {n} entries: {stats:?}", stats.entries);
    }
    Ok(())
}
