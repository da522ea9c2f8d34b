//! What a [`Cache`](super::Cache) counts.

use crate::disk::DiskStats;
use crate::store::StoreStats;
use crate::tier::TierStats;

/// Counters of a [`Cache`](super::Cache).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Lookups answered, from memory or a lower tier.
    pub hits: u64,
    /// Lookups that found nothing in any tier.
    pub misses: u64,
    /// The memory tier's counters (its misses include lookups a lower tier then answered).
    pub memory: StoreStats,
    /// The disk tier's counters, if there is a disk tier.
    pub disk: Option<DiskStats>,
    /// Every lower tier's counters, in order (the disk tier first, when there is one).
    pub tiers: Vec<TierStats>,
    /// Entries loaded into memory by the start-up preload.
    pub preloaded: u64,
    /// Bytes of stores waiting for the write-behind thread now.
    pub write_queue_bytes: u64,
    /// Stores kept in memory only because the write-behind queue was full.
    pub write_queue_dropped: u64,
    /// Why there is no disk tier, if one was asked for.
    pub disk_error: Option<String>,
}
