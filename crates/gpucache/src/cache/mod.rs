//! The cache: the memory tier over an ordered list of lower tiers (the disk tier, then any
//! tier a front end adds: see [`crate::tier`]).
//!
//! - Opening returns once the disk index is loaded (cost proportional to the number of
//!   entries); a background thread then fills the memory tier from the lower tiers, newest
//!   segments first, until the memory budget is full.
//! - A lookup that misses memory asks the lower tiers in order: the disk with one positioned,
//!   checksum-verified read; a slow tier for at most its read budget. A value found below is
//!   offered to memory (W-TinyLFU may refuse it at the door). Chromium's cache misses until the preload reaches the entry; a read
//!   costs tens of microseconds, a recompile milliseconds.
//! - A store goes into memory and onto the write-behind queue, and returns.
//! - Any failure of a lower tier degrades the cache to memory-only for that operation: it is
//!   counted in the tier's stats ([`DiskStats`] for the disk), logged through `tracing`, and
//!   never surfaces as a panic.
//!
//! Durability: a store is on disk once the write-behind thread has written its batch (within
//! milliseconds) and survives the process being killed from then on; it survives a power cut
//! once fsynced, which happens on [`Cache::flush`], when a segment fills, and on drop.

mod bounded;
mod builder;
mod pending;
mod preload;
mod start;
mod stats;
mod write_behind;

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::disk::DiskTier;
use crate::metrics::Counter;
use crate::store::copy_if_fits;
use crate::tier::{Queued, Tier, TierStats};
use crate::MemoryPressure;
use crate::{Error, Identity, InsertMode, Lookup, Result, Store};
use bounded::BoundedReader;
use pending::{install, Below, Pending};
use start::Background;
use write_behind::WriteBehind;

pub use builder::CacheBuilder;
pub use stats::CacheStats;

/// A lower tier as the cache holds it: its reader thread when its reads are bounded.
#[derive(Debug)]
struct Lower {
    tier: Arc<dyn Tier>,
    reader: Option<BoundedReader>,
}

/// A key/value cache: a memory tier over an ordered list of lower tiers (a disk tier, and
/// any tier added with [`CacheBuilder::tier`]).
#[derive(Debug)]
pub struct Cache {
    memory: Arc<Store>,
    identity: Identity,
    /// Largest value stored in any tier.
    max_value_size: u64,
    /// Largest key + value the disk tier can hold (a record fills a segment at most).
    max_entry_len: u64,
    /// Held from the capacity check of a `NEW_ONLY` store until it is queued, so that two
    /// such stores cannot both take the last room.
    capacity_gate: Mutex<()>,
    /// Lower tiers were configured: the memory tier evicts (they keep what it evicts).
    evicts_memory: bool,
    /// The disk tier, also first in `lower`, for what only it does (compaction, its files).
    disk: Option<Arc<DiskTier>>,
    lower: Vec<Lower>,
    /// The writer and the preload, built as the cache opens or, where the disk opened
    /// through the persisted table, at the first operation after the first lookup, or,
    /// with `preload_at_first_use` (no table), at the first operation.
    background: OnceLock<Background>,
    preload_enabled: bool,
    write_queue_bytes: u64,
    preloaded: Arc<Counter>,
    /// Writes the lower tiers do not have yet (see [`pending`]).
    pending: Arc<Pending>,
    /// Lookups answered from a write not yet in the lower tiers.
    pending_hits: Counter,
    /// A lookup has begun (after an open through the table the writer starts at the next
    /// one, if it has not yet; otherwise at this one).
    looked_up: AtomicBool,
    disk_error: Option<String>,
}

impl Cache {
    /// A builder with default settings.
    pub fn builder() -> CacheBuilder {
        CacheBuilder::new()
    }

    /// The value for `key`: from memory, or from a lower tier and then offered to memory.
    pub fn get(&self, key: &[u8]) -> Option<Bytes> {
        self.lookup(key).hit()
    }

    /// Copies the value for `key` into `buf` if it fits; returns its size if present.
    /// Nothing is written to `buf` unless it is large enough.
    pub fn get_into(&self, key: &[u8], buf: &mut [u8]) -> Option<usize> {
        let value = self.get(key)?;
        copy_if_fits(&value, buf);
        Some(value.len())
    }

    /// What the cache holds for `key`: from memory, else from a write not yet in the lower
    /// tiers, else from the lower tiers in order (a value found below is offered to memory,
    /// whose policy may refuse it at the door, and written to the tiers above its own, unless
    /// a write of the key came meanwhile).
    pub fn lookup(&self, key: &[u8]) -> Lookup {
        self.start_after_first_lookup();
        match self.memory.lookup(key) {
            Lookup::Miss => {}
            found => return found,
        }
        if self.lower.is_empty() {
            return Lookup::Miss;
        }
        let since = match self.pending.below(key) {
            Below::Value(value) => {
                self.pending_hits.incr();
                return Lookup::Hit(value);
            }
            Below::Removed => return Lookup::Miss,
            Below::Read(since) => since,
        };
        for (i, lower) in self.lower.iter().enumerate() {
            let found = match &lower.reader {
                Some(reader) => reader.read(key, since),
                None => lower.tier.read(key),
            };
            match found {
                Lookup::Miss => continue,
                Lookup::Hit(value) => {
                    // Only a value from below the first tier is written above it. The writer
                    // is started here, not by that write: the write is queued under the
                    // pending lock, which a failed spawn (its preload ending inline) takes.
                    let queue = if i > 0 { self.started_writer() } else { None };
                    let queue = queue.map(|w| w.queue());
                    install(
                        &self.memory,
                        &self.pending,
                        queue,
                        key,
                        value.clone(),
                        since,
                        i,
                    );
                    return Lookup::Hit(value);
                }
                Lookup::Collision => return Lookup::Collision,
            }
        }
        Lookup::Miss
    }

    /// Stores `value` for `key`: into memory now, into the lower tiers in the background.
    /// The newest value wins. Fails only if the value is too large for every tier. With
    /// W-TinyLFU (the default policy), a full memory tier may refuse a newcomer at the door,
    /// keeping residents requested more often: the lower tiers still take it (memory keeps
    /// it after all when the write-behind queue has no room for it or its write fails, as
    /// no other tier holds it then), and a memory-only cache keeps nothing, as after an
    /// eviction ([`Cache::in_memory`] tells). A stored key's new value is never refused.
    pub fn insert(&self, key: &[u8], value: impl Into<Bytes>) -> Result<()> {
        self.insert_with(key, value, InsertMode::REPLACE)
    }

    /// Stores `value` for `key` as `mode` says. With [`InsertMode::NEW_ONLY`], a key held in
    /// memory or on disk is `AlreadyExists` (or `HashCollision`), and an entry that would take
    /// the bottom tier past its capacity is `CacheFull`: for a memory-only cache the memory
    /// budget, else the lower tiers' limits (counting the stores not written yet).
    pub fn insert_with(&self, key: &[u8], value: impl Into<Bytes>, mode: InsertMode) -> Result<()> {
        let value = value.into();
        if !self.evicts_memory {
            return match self.memory.insert_with(key, value, mode) {
                // The memory tier counted the refusal; report the cache's own limit.
                Err(Error::ValueTooLarge { size, .. }) => Err(Error::ValueTooLarge {
                    size,
                    limit: self.max_value_size,
                }),
                other => other,
            };
        }
        let too_large = (key.len() + value.len()) as u64 > self.max_entry_len
            || value.len() as u64 > self.max_value_size;
        if too_large {
            // Refused whole: the key's previous value is kept.
            return Err(Error::ValueTooLarge {
                size: value.len() as u64,
                limit: self.max_value_size(),
            });
        }
        let value_len = value.len();
        let _gate = mode.refuses_when_full().then(|| self.capacity_gate.lock());
        if mode.refuses_existing() {
            self.refuse_existing(key)?;
        }
        if mode.refuses_when_full() && self.lower_would_overflow(key.len(), value.len()) {
            return Err(Error::CacheFull {
                needed: (key.len() + value.len()) as u64,
                available: 0,
            });
        }
        // The lower tiers keep what memory evicts: memory never refuses for room.
        let memory_mode = mode.refuse_when_full(false);
        if mode.refuses_existing() {
            // No older value of the key is anywhere (checked above): memory first, so that
            // a refusal there (a colliding key) leaves nothing queued. Kept whatever memory's
            // policy says (D3D12's StoreValue: a store that succeeds is found), and with room
            // made first, so that no eviction of the newcomer is reported.
            let in_memory =
                match self
                    .memory
                    .insert_with(key, value.clone(), memory_mode.keep_newcomer(true))
                {
                    Ok(()) => true,
                    Err(Error::ValueTooLarge { .. }) => false,
                    Err(e) => return Err(e),
                };
            let (_, kept_below) = self.record_put(key, value, false);
            return match in_memory || kept_below {
                true => Ok(()),
                false => Err(self.too_large_for_memory(value_len)),
            };
        }
        // Recorded before memory changes: a lookup that misses memory meanwhile finds this
        // value (or its tombstone) rather than an older one below. A value not queued below
        // is kept in memory whatever its policy's admission says: no other tier holds it.
        let (seq, kept_below) = self.record_put(key, value.clone(), true);
        let latest = || self.pending.is_latest(key, seq);
        let memory_mode = memory_mode.keep_newcomer(!kept_below);
        let inserted = self.memory.insert_if(key, value, memory_mode, latest);
        self.pending.unpin(key, seq);
        if inserted.is_err() {
            // Too large for a memory shard: kept below only, and memory must not answer
            // with the key's older value.
            self.memory.remove(key);
            if !kept_below {
                return Err(self.too_large_for_memory(value_len));
            }
        }
        Ok(())
    }

    /// A value too large for memory that no lower tier will get either.
    fn too_large_for_memory(&self, size: usize) -> Error {
        Error::ValueTooLarge {
            size: size as u64,
            limit: self.memory.max_value_size(),
        }
    }

    /// Records a store and queues it for the lower tiers: `(its sequence number, whether it
    /// was queued)`. One that is not queued leaves a tombstone, and a removal is queued in
    /// its place if it can be, so that the key's older value below is not served.
    /// A `pin`ned store stays recorded until [`Pending::unpin`].
    fn record_put(&self, key: &[u8], value: Bytes, pin: bool) -> (u64, bool) {
        let mut queued = false;
        // Started before the pending lock is taken (a failed spawn starts the preload here,
        // which takes that lock when it ends).
        let writer = self.started_writer();
        let seq = self.pending.record(key, Some(value.clone()), pin, |seq| {
            let Some(queue) = writer.map(|w| w.queue()) else {
                return false;
            };
            let key = Bytes::copy_from_slice(key);
            queued = queue.put(key.clone(), value, seq);
            if !queued {
                queue.tombstone(key, seq);
            }
            queued
        });
        (seq, queued)
    }

    /// With [`InsertMode::NEW_ONLY`]: refuses a key held in memory, not yet written, or on
    /// disk (a key whose hash memory holds for another key is refused by the memory insert).
    fn refuse_existing(&self, key: &[u8]) -> Result<()> {
        if self.memory.contains(key) {
            return Err(Error::AlreadyExists("an entry with this key is stored"));
        }
        match self.pending.holds(key) {
            Some(true) => return Err(Error::AlreadyExists("an entry with this key is stored")),
            // Removed, or a newer value not written: what the disk holds is not current.
            Some(false) => return Ok(()),
            None => {}
        }
        let Some(disk) = &self.disk else {
            return Ok(());
        };
        if !disk.has_hash_of(key) {
            return Ok(());
        }
        match disk.lookup(key) {
            Lookup::Hit(_) => Err(Error::AlreadyExists("an entry with this key is stored")),
            Lookup::Collision => Err(Error::HashCollision),
            Lookup::Miss => Ok(()),
        }
    }

    /// Whether a lower tier would go past its capacity, counting what is queued for it.
    fn lower_would_overflow(&self, key_len: usize, value_len: usize) -> bool {
        let queued = self
            .built_writer()
            .map_or_else(Queued::default, |w| w.queue().queued_puts());
        self.lower
            .iter()
            .any(|l| l.tier.would_overflow(key_len, value_len, queued))
    }

    /// Whether the memory tier holds `key` now (lower tiers are not asked). Counts nothing
    /// and changes no order. W-TinyLFU, the default policy, may refuse a newcomer to a full
    /// memory tier at the door (an insert, or a value read from below), so a caller that
    /// tracks what memory holds asks here rather than assume.
    pub fn in_memory(&self, key: &[u8]) -> bool {
        self.memory.contains(key)
    }

    /// Removes `key` from every tier; returns whether memory held it.
    pub fn remove(&self, key: &[u8]) -> bool {
        if !self.lower.is_empty() {
            // Recorded first: from now on no lookup installs the value read from below.
            let writer = self.started_writer();
            self.pending.record(key, None, false, |seq| {
                writer.is_some_and(|w| w.queue().remove(Bytes::copy_from_slice(key), seq))
            });
        }
        self.memory.remove(key)
    }

    /// Removes every entry from every tier. Fails if the disk tier exists but this process
    /// cannot write to it (memory is cleared all the same). A start-up preload still running
    /// is stopped first, so that it cannot put back what was cleared; a lookup meanwhile
    /// finds nothing below, and a value read before the clear is not kept.
    pub fn clear(&self) -> Result<()> {
        // Built before it is stopped: a preload built later would start after the clear.
        if let Some(preload) = &self.background().preload {
            preload.stop();
        }
        let writer = match self.writer_or_read_only() {
            Ok(Some(writer)) => writer,
            other => {
                self.memory.clear();
                return other.map(|_| ());
            }
        };
        writer.start();
        let reply = self.pending.clear(|| writer.start_clear());
        self.memory.clear();
        let result = reply.and_then(write_behind::wait);
        self.pending.cleared();
        Ok(result?)
    }

    /// Empties every tier, stops writing to disk for good and removes the directory
    /// (delete-on-destroy). The cache keeps working from memory.
    pub fn delete_files(&self) -> Result<()> {
        self.clear()?;
        if let Some(disk) = &self.disk {
            disk.stop_writing();
            match std::fs::remove_dir_all(disk.dir()) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        Ok(())
    }

    /// Writes everything stored so far to every lower tier and makes it durable (fsync).
    /// Fails when stores since the previous flush did not reach the disk (a read-only or full
    /// directory: they stay in memory), and always when a directory was configured but could
    /// not be used ([`disk_error`](Self::disk_error)): nothing is durable then.
    pub fn flush(&self) -> Result<()> {
        // A writer not built was never given anything to write.
        if let Some(writer) = self.built_writer() {
            writer.flush()?;
        }
        match &self.disk_error {
            Some(e) => Err(Error::Io(std::io::Error::other(e.clone()))),
            None => Ok(()),
        }
    }

    /// Rewrites every sealed disk segment that holds dead records (reclaims all dead space).
    pub fn compact(&self) -> Result<()> {
        let (Some(writer), Some(disk)) = (self.writer_or_read_only()?, &self.disk) else {
            return Ok(());
        };
        let disk = Arc::clone(disk);
        Ok(writer.run(Box::new(move || disk.compact()))?)
    }

    /// The writer, `None` without a disk tier, or an error for a disk tier this process
    /// cannot write.
    fn writer_or_read_only(&self) -> Result<Option<&WriteBehind>> {
        match (&self.disk, self.writer()) {
            (None, writer) => Ok(writer),
            (Some(disk), Some(writer)) if disk.is_writable() => Ok(Some(writer)),
            (Some(_), _) => Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "the cache directory is not writable by this process",
            ))),
        }
    }

    /// Starts the preload and the write-behind thread now if they have not started (a cache
    /// opened with [`CacheBuilder::preload_at_first_use`], or one whose first hit came
    /// through the persisted table); otherwise does nothing.
    pub fn start_preload(&self) {
        self.started_writer();
    }

    /// Blocks until the start-up preload has finished (starting it if it has not started).
    pub fn wait_for_preload(&self) {
        self.started_writer();
        if let Some(preload) = self.built_preload() {
            preload.wait();
        }
    }

    /// Gives memory back under pressure (see [`Store::trim`]); the lower tiers keep what
    /// memory drops.
    pub fn trim(&self, pressure: MemoryPressure) {
        self.memory.trim(pressure);
    }

    /// Counters of every tier.
    pub fn stats(&self) -> CacheStats {
        let memory = self.memory.stats();
        let tiers: Vec<TierStats> = self
            .lower
            .iter()
            .map(|l| {
                let mut s = l.tier.stats();
                if let Some(r) = &l.reader {
                    let c = r.counts();
                    s.reads_timed_out = c.timed_out.get();
                    s.reads_busy = c.busy.get();
                    s.late_hits = c.late_hits.get();
                }
                s
            })
            .collect();
        let lower_hits: u64 = tiers.iter().map(|t| t.hits).sum::<u64>() + self.pending_hits.get();
        let lookups = memory.hits + memory.misses;
        let queue = self.built_writer().map(|w| w.queue());
        CacheStats {
            hits: memory.hits + lower_hits,
            misses: lookups - memory.hits - lower_hits.min(memory.misses),
            memory,
            disk: self.disk.as_ref().map(|d| d.disk_stats()),
            tiers,
            preloaded: self.preloaded.get(),
            write_queue_bytes: queue.map_or(0, |q| q.queued_bytes()),
            write_queue_dropped: queue.map_or(0, |q| q.dropped()),
            disk_error: self.disk_error.clone(),
        }
    }

    /// Why the disk tier is unavailable, if it is.
    pub fn disk_error(&self) -> Option<&str> {
        self.disk_error.as_deref()
    }

    /// The largest value the cache stores (with an empty key; a key's bytes count against
    /// the disk tier's part of the limit): the configured
    /// [`max_value_size`](CacheBuilder::max_value_size), or for a cache with a disk tier
    /// what one segment holds, whichever is smaller. A larger value is refused with
    /// [`Error::ValueTooLarge`].
    pub fn max_value_size(&self) -> u64 {
        self.max_value_size.min(self.max_entry_len)
    }

    /// The directory of the disk tier, if there is one.
    pub fn directory(&self) -> Option<&Path> {
        self.disk.as_ref().map(|d| d.dir())
    }

    /// The identity and version the cache was opened with: what its tiers namespace their
    /// entries by, and what a front end's [`MetadataStream`](crate::MetadataStream) is
    /// checked against.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The memory tier.
    pub fn memory(&self) -> &Store {
        &self.memory
    }

    /// Checks the invariants of the memory tier and of the disk tier's index; panics with a
    /// description when one fails. Only in builds for tests and fuzzing.
    #[cfg(any(test, fuzzing))]
    #[doc(hidden)]
    pub fn validate(&self) {
        self.memory.validate();
        if let Some(disk) = &self.disk {
            disk.validate();
        }
    }
}

#[cfg(test)]
mod tests;
