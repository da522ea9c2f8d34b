//! The fleet tier's counters.

use gpucache::Counter;
use parking_lot::Mutex;

use crate::entry::Reject;

/// Counters of a fleet tier since it was built. Every failure is also in
/// [`TierStats::errors`](gpucache::TierStats::errors) (the sum of the `*_errors` and
/// `rejected_*` counts here), which `gpucache stats` and `CacheStats::tiers` show.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetStats {
    /// Lookups answered with a verified value.
    pub hits: u64,
    /// Lookups the fleet did not hold.
    pub misses: u64,
    /// Lookups not sent because the server is unreachable (waiting out the backoff).
    pub reads_skipped: u64,
    /// Failed reads (transport errors, timeouts, server errors).
    pub read_errors: u64,
    /// Entries refused: bad MAC or unknown key id.
    pub rejected_mac: u64,
    /// Entries refused: written for another identity.
    pub rejected_identity: u64,
    /// Entries refused: written for another key.
    pub rejected_key: u64,
    /// Entries refused: malformed, truncated, oversized, or not decompressing.
    pub rejected_format: u64,
    /// Entries received by the bulk pull at open and handed to the local tiers.
    pub pulled: u64,
    /// Whether the bulk pull has finished (or given up).
    pub pull_done: bool,
    /// How long the bulk pull took, in milliseconds.
    pub pull_ms: u64,
    /// Entries written to the fleet.
    pub pushed: u64,
    /// Value bytes of those entries, before compression.
    pub pushed_value_bytes: u64,
    /// Bytes sent for them (the encoded entries: compressed, with header and MAC).
    pub pushed_wire_bytes: u64,
    /// Stores not sent because the fleet already holds the same value for the key.
    pub push_deduplicated: u64,
    /// Stores dropped: the push queue was full, the server refused them (`OOM`), or they
    /// were still queued when the tier closed with the server unreachable.
    pub push_dropped: u64,
    /// Failed pushes (each failed batch counts once).
    pub push_errors: u64,
    /// Failed connection attempts.
    pub connect_errors: u64,
    /// Entries the tier knows the fleet holds (from the pull, hits and pushes).
    pub known_entries: u64,
    /// Encoded bytes of those entries.
    pub known_bytes: u64,
    /// Bytes waiting in the push queue.
    pub queued_bytes: u64,
}

impl FleetStats {
    /// Every failure counted: what `TierStats::errors` reports.
    pub fn errors(&self) -> u64 {
        self.read_errors
            + self.push_errors
            + self.connect_errors
            + self.rejected_mac
            + self.rejected_identity
            + self.rejected_key
            + self.rejected_format
    }

    /// Entries refused, for any reason.
    pub fn rejected(&self) -> u64 {
        self.rejected_mac + self.rejected_identity + self.rejected_key + self.rejected_format
    }
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub hits: Counter,
    pub misses: Counter,
    pub reads_skipped: Counter,
    pub read_errors: Counter,
    pub rejected_mac: Counter,
    pub rejected_identity: Counter,
    pub rejected_key: Counter,
    pub rejected_format: Counter,
    pub pulled: Counter,
    pub pull_ms: Counter,
    pub pull_done: Counter,
    pub pushed: Counter,
    pub pushed_value_bytes: Counter,
    pub pushed_wire_bytes: Counter,
    pub push_deduplicated: Counter,
    pub push_dropped: Counter,
    pub push_errors: Counter,
    pub connect_errors: Counter,
    pub last_error: Mutex<Option<String>>,
}

impl Counters {
    pub(crate) fn reject(&self, why: Reject) {
        match why {
            Reject::Mac => self.rejected_mac.incr(),
            Reject::Identity => self.rejected_identity.incr(),
            Reject::Key => self.rejected_key.incr(),
            Reject::Format => self.rejected_format.incr(),
        }
        self.error(format!("rejected a fleet entry: {why:?}"));
    }

    pub(crate) fn error(&self, what: String) {
        tracing::debug!(target: "gpucache_fleet", "{what}");
        *self.last_error.lock() = Some(what);
    }

    pub(crate) fn snapshot(&self) -> FleetStats {
        FleetStats {
            hits: self.hits.get(),
            misses: self.misses.get(),
            reads_skipped: self.reads_skipped.get(),
            read_errors: self.read_errors.get(),
            rejected_mac: self.rejected_mac.get(),
            rejected_identity: self.rejected_identity.get(),
            rejected_key: self.rejected_key.get(),
            rejected_format: self.rejected_format.get(),
            pulled: self.pulled.get(),
            pull_done: self.pull_done.get() > 0,
            pull_ms: self.pull_ms.get(),
            pushed: self.pushed.get(),
            pushed_value_bytes: self.pushed_value_bytes.get(),
            pushed_wire_bytes: self.pushed_wire_bytes.get(),
            push_deduplicated: self.push_deduplicated.get(),
            push_dropped: self.push_dropped.get(),
            push_errors: self.push_errors.get(),
            connect_errors: self.connect_errors.get(),
            known_entries: 0,
            known_bytes: 0,
            queued_bytes: 0,
        }
    }
}
