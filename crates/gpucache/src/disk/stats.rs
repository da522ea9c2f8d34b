//! Counters of the disk tier.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

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
    /// Whether the directory takes writes now: writable, and the last write did not fail (a
    /// full or read-only file system, a directory that cannot be recreated). `false` means
    /// stores are kept in memory only; the memory tier keeps serving.
    pub available: bool,
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
    /// Batches that failed to write (full disk, read-only directory, I/O error); their
    /// entries stay in memory.
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
            /// Writes fail now: the first failure of a run is logged, the rest only counted.
            failing: AtomicBool,
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
                    available: writable && !self.failing.load(Ordering::Relaxed),
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
    /// Counts a failed batch; logs only the first of a run of failures (a full disk fails
    /// every batch until space is freed).
    pub(crate) fn add_write_error(&self, e: &io::Error) {
        self.write_errors.incr();
        let message = format!("write failed, keeping stores in memory only: {e}");
        if self.failing.swap(true, Ordering::Relaxed) {
            tracing::debug!(target: "gpucache", "{message}");
            *self.last_error.lock() = Some(message);
        } else {
            self.set_error(&message);
        }
    }
    /// A batch was written: ends a run of failures.
    pub(crate) fn note_write_ok(&self) {
        if self.failing.swap(false, Ordering::Relaxed) {
            tracing::info!(target: "gpucache", "disk writes work again");
        }
    }
    /// The directory cannot be written from the start: already logged by the caller.
    pub(crate) fn set_failing(&self) {
        self.failing.store(true, Ordering::Relaxed);
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
    pub(crate) fn last_error(&self) -> Option<String> {
        self.last_error.lock().clone()
    }
    pub(crate) fn set_error(&self, message: &str) {
        tracing::warn!(target: "gpucache", "{message}");
        *self.last_error.lock() = Some(message.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata};

    use super::*;

    /// Counts warnings: enough to see what a run of failures logs.
    struct Warnings(Arc<AtomicUsize>);

    impl tracing::Subscriber for Warnings {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            if *event.metadata().level() == Level::WARN {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn a_run_of_write_failures_is_logged_once_and_counted_in_full() {
        let warnings = Arc::new(AtomicUsize::new(0));
        let c = DiskCounters::default();
        let full = io::Error::other("no space left");
        tracing::subscriber::with_default(Warnings(Arc::clone(&warnings)), || {
            for _ in 0..5 {
                c.add_write_error(&full);
            }
            assert_eq!(warnings.load(Ordering::Relaxed), 1);
            assert!(!c.snapshot(0, 0, 0, 0, true).available);
            c.note_write_ok();
            assert!(c.snapshot(0, 0, 0, 0, true).available);
            c.add_write_error(&full);
        });
        assert_eq!(
            warnings.load(Ordering::Relaxed),
            2,
            "one per run of failures"
        );
        let s = c.snapshot(0, 0, 0, 0, true);
        assert_eq!(s.write_errors, 6);
        assert!(s.last_error.unwrap().contains("no space left"));
    }
}
