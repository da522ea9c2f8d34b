//! Counters of the memory tier.

/// A snapshot of a store's counters and gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreStats {
    /// Lookups that found the key.
    pub hits: u64,
    /// Lookups that did not (including hash collisions).
    pub misses: u64,
    /// Entries stored (new keys and replacements).
    pub stores: u64,
    /// Entries evicted to make room (including newcomers W-TinyLFU refused at the door), or
    /// trimmed under memory pressure.
    pub evictions: u64,
    /// Stores refused because the value was too large.
    pub rejected_too_large: u64,
    /// Bytes charged now (keys + values + per-entry overhead).
    pub bytes: u64,
    /// Entries held now.
    pub entries: u64,
    /// The byte budget.
    pub max_bytes: u64,
    /// The entry budget.
    pub max_entries: u64,
}

impl StoreStats {
    /// Hits ÷ lookups, or 0 when there were none.
    pub fn hit_ratio(&self) -> f64 {
        let lookups = self.hits + self.misses;
        if lookups == 0 {
            0.0
        } else {
            self.hits as f64 / lookups as f64
        }
    }

    pub(crate) fn add(&mut self, other: &StoreStats) {
        self.hits += other.hits;
        self.misses += other.misses;
        self.stores += other.stores;
        self.evictions += other.evictions;
        self.rejected_too_large += other.rejected_too_large;
        self.bytes += other.bytes;
        self.entries += other.entries;
        self.max_bytes += other.max_bytes;
        self.max_entries += other.max_entries;
    }
}
