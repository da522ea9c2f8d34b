//! The tier seam: what a tier below the memory tier provides to a [`Cache`](crate::Cache).
//!
//! A cache is its memory tier over an ordered list of lower tiers: the disk tier when a
//! directory is configured, then any tier added with
//! [`CacheBuilder::tier`](crate::CacheBuilder::tier) (a remote tier shared by a fleet). The
//! cache drives them all the same way:
//!
//! - **Reads** go down the list on a memory miss; the first hit (or collision) answers. A
//!   value found in tier *i* is put in memory and written behind to the tiers above *i*.
//!   A tier that declares a [`read_budget`](Tier::read_budget) is read on a thread of its
//!   own and the caller waits at most that long: a late hit is still promoted, so the next
//!   lookup finds it in memory.
//! - **Writes** go through one write-behind thread that feeds every tier in order
//!   ([`Tier::write`]), in batches, off the caller's path. A tier that talks to a slow
//!   device should hand its batch to a queue of its own and return.
//! - **Preload**: at open, a background thread asks each tier in order to stream its
//!   entries ([`Tier::preload`]) into memory (and, for tiers below the first, into the
//!   tiers above them).
//!
//! Every value a tier returns must have been verified by the tier (checksums, full key):
//! a cache never returns wrong bytes.

use std::fmt;
use std::io;
use std::time::Duration;

use bytes::Bytes;

use crate::Lookup;

/// A tier below the memory tier.
pub trait Tier: Send + Sync + fmt::Debug {
    /// A short name for stats and logs (`"disk"`, `"redis"`).
    fn name(&self) -> &str;

    /// Looks `key` up. Must compare the full key and verify the value.
    fn read(&self, key: &[u8]) -> Lookup;

    /// `Some(budget)` for a tier whose reads may be slow (a network): the cache then never
    /// waits longer than `budget` for one. Default `None`: read on the caller's thread.
    fn read_budget(&self) -> Option<Duration> {
        None
    }

    /// Applies `ops` in order. Called only from the cache's write-behind thread, so calls
    /// never overlap. With [`WriteContext::durable`], everything written so far must be
    /// durable (fsynced) when this returns, even when `ops` is empty. A failure is the
    /// tier's to count and report in its stats: the cache keeps serving from memory.
    fn write(&self, ops: &[WriteOp<'_>], ctx: &WriteContext<'_>) -> io::Result<()>;

    /// Removes every entry. Called from the write-behind thread, after every write queued
    /// before the clear was discarded.
    fn clear(&self) -> io::Result<()>;

    /// Called once on the cache's writer thread as it starts, before any write: work the
    /// tier deferred from its opening so that the first lookups were fast (the disk tier
    /// builds its full index and repairs what that finds damaged). Default: nothing.
    fn warm_up(&self) {}

    /// Streams the tier's entries to `sink`, most useful first, until it returns `false`.
    /// Called once, on the cache's preload thread. Default: nothing to preload.
    fn preload(&self, sink: &mut PreloadSink<'_>) {
        let _ = sink;
    }

    /// Whether storing an entry of these sizes, after the stores `queued` for the tiers and
    /// not yet written, would take the tier past its capacity: a store with
    /// [`InsertMode::NEW_ONLY`](crate::InsertMode::NEW_ONLY) is then refused with
    /// `CacheFull` instead of evicting. Default `false` (the tier evicts on its own).
    fn would_overflow(&self, key_len: usize, value_len: usize, queued: Queued) -> bool {
        let _ = (key_len, value_len, queued);
        false
    }

    /// Counters and gauges.
    fn stats(&self) -> TierStats;
}

/// Stores accepted by the cache and not yet written by its write-behind thread: a capacity
/// check counts them as already held (otherwise stores that report success overflow the
/// tier once written, and it evicts what it accepted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Queued {
    /// Stores waiting.
    pub entries: u64,
    /// Their key and value bytes.
    pub bytes: u64,
}

impl Queued {
    /// `entries` stores of `bytes` key and value bytes in all.
    pub fn new(entries: u64, bytes: u64) -> Self {
        Self { entries, bytes }
    }
}

/// Receives preloaded entries: `(key, value)`; returns whether to go on.
pub type PreloadSink<'a> = dyn FnMut(&[u8], &[u8]) -> bool + 'a;

/// One write handed to [`Tier::write`].
#[derive(Clone, Copy, Debug)]
pub enum WriteOp<'a> {
    /// Store `value` for `key`; the newest value wins.
    Put {
        /// The key.
        key: &'a Bytes,
        /// The value (cheap to clone: reference-counted).
        value: &'a Bytes,
    },
    /// Remove `key`.
    Remove {
        /// The key.
        key: &'a Bytes,
    },
}

impl WriteOp<'_> {
    /// The key written.
    pub fn key(&self) -> &Bytes {
        match self {
            WriteOp::Put { key, .. } | WriteOp::Remove { key } => key,
        }
    }
}

/// What the cache tells a tier about a batch of writes.
pub struct WriteContext<'a> {
    hot: &'a (dyn Fn(&[u8]) -> bool + 'a),
    durable: bool,
}

impl<'a> WriteContext<'a> {
    /// A context whose hot keys are those `hot` accepts.
    pub fn new(hot: &'a (dyn Fn(&[u8]) -> bool + 'a), durable: bool) -> Self {
        Self { hot, durable }
    }

    /// Whether the memory tier still holds `key`: a tier that must evict keeps such
    /// entries if it can (the memory tier's policy decides what is hot).
    pub fn is_hot(&self, key: &[u8]) -> bool {
        (self.hot)(key)
    }

    /// Whether this batch must be durable when [`Tier::write`] returns (a `flush`, or the
    /// cache closing).
    pub fn durable(&self) -> bool {
        self.durable
    }
}

impl fmt::Debug for WriteContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteContext")
            .field("durable", &self.durable)
            .finish_non_exhaustive()
    }
}

/// Counters and gauges of a tier, as [`CacheStats::tiers`](crate::CacheStats::tiers) shows
/// them. The tier fills what it knows; the cache adds the bounded-read counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TierStats {
    /// The tier's name.
    pub name: String,
    /// Entries held.
    pub entries: u64,
    /// Bytes held.
    pub bytes: u64,
    /// Lookups answered with a value.
    pub hits: u64,
    /// Failed reads and writes.
    pub errors: u64,
    /// The last error, in words.
    pub last_error: Option<String>,
    /// Reads the caller stopped waiting for after the tier's read budget.
    pub reads_timed_out: u64,
    /// Reads not started because the tier's read queue was full (counted as misses).
    pub reads_busy: u64,
    /// Values that arrived after their reader gave up, and were put in memory.
    pub late_hits: u64,
}

impl TierStats {
    /// Empty stats for the tier `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }
}
