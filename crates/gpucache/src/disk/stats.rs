//! Counters of the disk tier.

use std::io;

use parking_lot::Mutex;

use crate::metrics::Counter;

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
    /// Stores not persisted because the key is longer than 65,535 bytes or the entry
    /// cannot fit in a segment.
    pub too_large_skipped: u64,
    /// Records not written because the key's latest record on disk was byte-identical
    /// (another process had stored the same value).
    pub duplicates_skipped: u64,
    /// Records written with their value LZ4-compressed.
    pub compressed_records: u64,
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
    /// Damaged segments whose index was rebuilt or completed from their data file.
    pub repaired_segments: u64,
    /// Damaged segments removed because their data file could not be trusted or held no
    /// sound record.
    pub removed_segments: u64,
    /// The last error, for logs and `gpucache stats`.
    pub last_error: Option<String>,
}

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        #[derive(Debug, Default)]
        pub(crate) struct DiskCounters {
            $($name: Counter,)*
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
                    $($name: self.$name.get(),)*
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
    too_large_skipped,
    duplicates_skipped,
    compressed_records,
    evicted_segments,
    reinserted,
    compacted_segments,
    fsyncs,
    recreated,
    repaired_segments,
    removed_segments,
);

impl DiskCounters {
    pub(crate) fn add_read_hit(&self) {
        self.read_hits.incr();
    }
    pub(crate) fn add_corrupt(&self, n: u64) {
        self.corrupt_dropped.add(n);
    }
    pub(crate) fn add_read_error(&self, e: &io::Error) {
        self.read_errors.incr();
        self.set_error(&format!("read failed: {e}"));
    }
    pub(crate) fn add_written(&self, records: u64, bytes: u64) {
        self.records_written.add(records);
        self.bytes_written.add(bytes);
    }
    pub(crate) fn add_write_error(&self, e: &io::Error) {
        self.write_errors.incr();
        self.set_error(&format!("write failed: {e}"));
    }
    pub(crate) fn add_too_large(&self) {
        self.too_large_skipped.incr();
    }
    pub(crate) fn add_duplicate(&self) {
        self.duplicates_skipped.incr();
    }
    pub(crate) fn add_compressed(&self) {
        self.compressed_records.incr();
    }
    pub(crate) fn add_evicted_segment(&self) {
        self.evicted_segments.incr();
    }
    pub(crate) fn add_reinserted(&self, n: u64) {
        self.reinserted.add(n);
    }
    pub(crate) fn add_compacted(&self) {
        self.compacted_segments.incr();
    }
    pub(crate) fn add_fsync(&self) {
        self.fsyncs.incr();
    }
    pub(crate) fn add_recreated(&self) {
        self.recreated.incr();
    }
    pub(crate) fn add_repaired_segment(&self) {
        self.repaired_segments.incr();
    }
    pub(crate) fn add_removed_segment(&self) {
        self.removed_segments.incr();
    }
    pub(crate) fn set_error(&self, message: &str) {
        tracing::warn!(target: "gpucache", "{message}");
        *self.last_error.lock() = Some(message.to_owned());
    }
}
