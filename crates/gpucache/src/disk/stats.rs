//! Counters of the disk tier.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;

/// A snapshot of a disk cache's state and counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiskStats {
    /// Live entries (the latest record of each key).
    pub entries: u64,
    /// Bytes of live records (headers, keys and values).
    pub live_bytes: u64,
    /// Bytes of the segment files (data and index).
    pub file_bytes: u64,
    /// Segments in the directory.
    pub segments: u64,
    /// Whether this process writes to the directory.
    pub writable: bool,
    /// Lookups answered from disk.
    pub read_hits: u64,
    /// Records found corrupt, truncated or gone, and dropped (never returned).
    pub corrupt_dropped: u64,
    /// Reads that failed with an I/O error.
    pub read_errors: u64,
    /// Records written (stores, removals, and copies made by eviction or compaction).
    pub records_written: u64,
    /// Bytes appended to data files.
    pub bytes_written: u64,
    /// Batches that failed to write (full disk, I/O error); their entries stay in memory.
    pub write_errors: u64,
    /// Stores not persisted because the write-behind queue was full.
    pub queue_dropped: u64,
    /// Stores not persisted because the entry cannot fit in a segment.
    pub too_large_skipped: u64,
    /// Segments evicted to keep the directory within its limits.
    pub evicted_segments: u64,
    /// Records kept through an eviction because the memory tier still held them.
    pub reinserted: u64,
    /// Segments rewritten to reclaim dead space.
    pub compacted_segments: u64,
    /// fsync calls made.
    pub fsyncs: u64,
    /// Times the directory vanished and was recreated.
    pub recreated: u64,
    /// Entries loaded into memory by the start-up preload.
    pub preloaded: u64,
    /// The last error, for logs and `gpucache stats`.
    pub last_error: Option<String>,
}

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        #[derive(Debug, Default)]
        pub(crate) struct DiskCounters {
            $($name: AtomicU64,)*
            last_error: Mutex<Option<String>>,
        }

        impl DiskCounters {
            pub(crate) fn snapshot(
                &self,
                entries: u64,
                live_bytes: u64,
                file_bytes: u64,
                segments: u64,
                writable: bool,
            ) -> DiskStats {
                DiskStats {
                    entries,
                    live_bytes,
                    file_bytes,
                    segments,
                    writable,
                    $($name: self.$name.load(Relaxed),)*
                    last_error: self.last_error.lock().clone(),
                }
            }
        }
    };
}

counters!(
    read_hits,
    corrupt_dropped,
    read_errors,
    records_written,
    bytes_written,
    write_errors,
    queue_dropped,
    too_large_skipped,
    evicted_segments,
    reinserted,
    compacted_segments,
    fsyncs,
    recreated,
    preloaded,
);

impl DiskCounters {
    pub(crate) fn add_read_hit(&self) {
        self.read_hits.fetch_add(1, Relaxed);
    }
    pub(crate) fn add_corrupt(&self) {
        self.corrupt_dropped.fetch_add(1, Relaxed);
    }
    pub(crate) fn add_read_error(&self, e: &io::Error) {
        self.read_errors.fetch_add(1, Relaxed);
        self.set_error(&format!("read failed: {e}"));
    }
    pub(crate) fn add_written(&self, records: u64, bytes: u64) {
        self.records_written.fetch_add(records, Relaxed);
        self.bytes_written.fetch_add(bytes, Relaxed);
    }
    pub(crate) fn add_write_error(&self, e: &io::Error) {
        self.write_errors.fetch_add(1, Relaxed);
        self.set_error(&format!("write failed: {e}"));
    }
    pub(crate) fn add_queue_dropped(&self) {
        self.queue_dropped.fetch_add(1, Relaxed);
    }
    pub(crate) fn add_too_large(&self) {
        self.too_large_skipped.fetch_add(1, Relaxed);
    }
    pub(crate) fn add_evicted_segment(&self) {
        self.evicted_segments.fetch_add(1, Relaxed);
    }
    pub(crate) fn add_reinserted(&self, n: u64) {
        self.reinserted.fetch_add(n, Relaxed);
    }
    pub(crate) fn add_compacted(&self) {
        self.compacted_segments.fetch_add(1, Relaxed);
    }
    pub(crate) fn add_fsync(&self) {
        self.fsyncs.fetch_add(1, Relaxed);
    }
    pub(crate) fn add_recreated(&self) {
        self.recreated.fetch_add(1, Relaxed);
    }
    pub(crate) fn add_preloaded(&self, n: u64) {
        self.preloaded.fetch_add(n, Relaxed);
    }
    pub(crate) fn set_error(&self, message: &str) {
        tracing::warn!(target: "gpucache", "{message}");
        *self.last_error.lock() = Some(message.to_owned());
    }
}
