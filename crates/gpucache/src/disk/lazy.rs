//! Opening in O(1): lookups through the persisted hash table (`super::table`) until the full
//! in-memory index is built.
//!
//! A process that opens a directory with a table it can trust reads the table's header and
//! only the index-file bytes written after the table (its watermarks, per segment) into the
//! in-memory index, the *overlay*. A lookup then asks, in order:
//!
//! 1. the overlay: a record named after the table was written is newer than anything the
//!    table knows (writers append only to the newest segment, and ids only grow);
//! 2. the hashes the overlay has ever named (a tombstone, or a record whose segment was
//!    deleted since): a miss, never the table's older record;
//! 3. the table's page of the hash (one read): its record is checked like any other.
//!
//! Anything the table cannot answer (a damaged or overflowed page), and an index file
//! replaced since the table was written, make the process build the full index at once
//! ([`DiskTier::ensure_full`]), as do writing, the preload and the statistics.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use super::dir::{self, birth_ns, At};
use super::format::{decode_index_entry, decode_meta, INDEX_ENTRY_LEN, SEGMENT_HEADER_LEN};
use super::index::{Index, Loc};
use super::table::{self, Found, Table, TableSeg};
use super::tier::OpenedIndex;
use super::DiskTier;
use crate::hash::PassThroughBuildHasher;

/// Rewrite the table when the entries written after it reach this many, and an eighth of
/// those it holds (so rewriting costs O(1) per entry written, amortized).
const TABLE_MIN_TAIL: u64 = 64;

/// How long after an open through the table the preload waits for the first lookup.
const FIRST_LOOKUP_WAIT: Duration = Duration::from_millis(200);

/// The table this process serves from until its index is full.
#[derive(Debug)]
pub(super) struct Lazy {
    table: Table,
    /// The table's newest segment: those below it were sealed when it was written.
    sealed_below: u32,
    /// The in-memory index is full (no longer the overlay), but what it found damaged is
    /// not repaired yet: a key it knows no record of is still looked up in the table.
    full: bool,
    /// Key hashes the overlay has named at some point.
    touched: Mutex<HashSet<u64, PassThroughBuildHasher>>,
}

/// What an open through the table leaves to the refresh that follows it.
#[derive(Debug)]
pub(super) enum OpenedLazily {
    /// Nothing: no index entry was written since the table.
    Current,
    /// The entries written since, in these segments (the table's, or those listed).
    Refresh(Vec<u32>),
}

/// What the last table this process read or wrote covers: how much the index files grew
/// since, which decides when a writer rewrites it.
#[derive(Debug, Default)]
pub(super) struct Cover {
    /// Index-file bytes covered, by segment.
    /// Ids ascending (as the table lists them).
    segs: Vec<(u32, u64)>,
    entries: u64,
    /// This process wrote records since it last wrote the table.
    wrote: bool,
}

impl DiskTier {
    /// At open: serves lookups through `table`, which vouched for the meta file (the caller
    /// checked), if it describes this directory's files (`at`: its descriptor, never listed
    /// before, or its path); whether it does, and what the refresh that follows must read
    /// into the overlay (the index-file tails past the table's watermarks), if anything.
    ///
    /// The directory is listed only if the table's newest segment is gone or a segment was
    /// started after it: writers start segments in id order, and one that deletes a segment
    /// other than the oldest that the table may not name removes the table first
    /// ([`Self::forget_table_before_deleting`]), so where the table's newest segment is
    /// there and the next id has no index file, no segment above them exists. Its other
    /// segments are taken as named: one deleted since reads as misses, as a record of a
    /// segment deleted under a reader does.
    pub(super) fn open_lazy(&self, at: At<'_>, table: Table) -> io::Result<Option<OpenedLazily>> {
        let h = &table.header;
        let Some(newest) = h.segs.last() else {
            return Ok(None);
        };
        // Never reuse an id the table names, whether or not it is trusted.
        self.index.write().note_id(newest.id);
        let covered_max = newest.id;
        if newest.idx_len < SEGMENT_HEADER_LEN as u64 {
            return Ok(None);
        }
        // The newest segment's index file: one `stat` (inode, birth time, length) where
        // nothing was written to it since the table, else opened once, its last covered entry
        // checked, and kept for the refresh that follows the open, which reads the entries
        // written after the table.
        let name = dir::index_name(covered_max);
        let opened = match at.stat(&name)? {
            Some(st) => {
                if !same_index_file(&st, newest) || st.len < newest.idx_len {
                    return Ok(None); // Rebuilt, replaced or cut since.
                }
                if st.len == newest.idx_len {
                    // Its bytes are not read: the covered ones were durable before the table
                    // was written, so only a writer's repair of a damaged last entry could
                    // have cut them, and only an append of as many bytes would then bring
                    // it back to this length. Until the full index is built (after the
                    // first lookup) such a file is served through the table, each record
                    // checked; the index files decide from then on.
                    Some((None, st))
                } else {
                    let file = match at.open(&name) {
                        Ok(file) => file,
                        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                        Err(e) => return Err(e),
                    };
                    let m = dir::FileStat::of(&file.metadata()?);
                    if !same_index_file(&m, newest) {
                        return Ok(None); // Replaced since the `stat`.
                    }
                    if covered_tail(&file, newest)? == CoveredTail::Differs {
                        return Ok(None); // Cut and grown again since.
                    }
                    Some((Some(file), m))
                }
            }
            None => None,
        };
        let started_after = match covered_max.checked_add(1) {
            Some(next) => at.exists(&dir::index_name(next))?,
            None => true,
        };
        // Nothing written since the table, in its newest segment or after it: the refresh
        // that follows an open would find nothing to read.
        let current = matches!(opened, Some((None, _))) && !started_after;
        let ids: Vec<u32> = if opened.is_some() && !started_after {
            h.segs.iter().map(|s| s.id).collect()
        } else {
            let ids = at.list_segments()?;
            let in_table = |id: u32| h.segs.binary_search_by_key(&id, |s| s.id).is_ok();
            if ids.iter().any(|&id| id <= covered_max && !in_table(id)) {
                return Ok(None); // A segment the table should know and does not.
            }
            ids
        };
        let mut overlay = Index::default();
        for s in &h.segs {
            if ids.binary_search(&s.id).is_err() {
                continue; // Deleted since: its records read as misses.
            }
            // Sealed segments (below the newest) are not opened: only a repair changes them,
            // and the full index (built in the background right away) reads them afresh. So
            // an open costs the same few I/Os whatever the number of segments.
            overlay.seed_segment(s.id, s.idx_len, s.data_end, s.idx_ino);
        }
        // Kept only where it was opened (it grew since the table): one that was not is
        // opened again by the refresh, if one follows (a segment started after the table).
        if let Some((Some(file), stat)) = opened {
            *self.opened_index.lock() = Some(OpenedIndex {
                seg: covered_max,
                file,
                stat,
            });
        }
        overlay.note_id(self.index.read().max_id());
        if let Some(&newest) = ids.last() {
            overlay.note_id(newest);
        }
        *self.cover.lock() = Cover {
            segs: h.segs.iter().map(|s| (s.id, s.idx_len)).collect(),
            entries: h.entries,
            wrote: false,
        };
        let mut lazy = self.lazy.write();
        *self.index.write() = overlay;
        *lazy = Some(Lazy {
            table,
            sealed_below: covered_max,
            full: false,
            touched: Mutex::default(),
        });
        self.opened_lazily.store(true, Ordering::Release);
        Ok(Some(if current {
            OpenedLazily::Current
        } else {
            OpenedLazily::Refresh(ids)
        }))
    }

    /// Whether this process opened the directory through the persisted table (its lookups
    /// need no thread until the full index is wanted).
    pub(crate) fn opened_through_table(&self) -> bool {
        self.opened_lazily.load(Ordering::Acquire)
    }

    /// Notes that a lookup finished: a preload waiting for the first one may start.
    pub(super) fn note_lookup(&self) {
        if !self.looked_up.load(Ordering::Acquire) {
            self.looked_up.store(true, Ordering::Release);
            *self.first_lookup.0.lock() = true;
            self.first_lookup.1.notify_all();
        }
    }

    /// In a process that opened through the table, waits until its first lookup has finished
    /// or [`FIRST_LOOKUP_WAIT`] has passed since the open: the preload's reads and copies
    /// would otherwise compete with that lookup for the CPUs (and, cold, for the disk) just
    /// when the application waits for it. The full index is built meanwhile (on the writer
    /// thread, which never waits: writes are not held).
    pub(super) fn await_first_lookup(&self) {
        if !self.opened_lazily.load(Ordering::Acquire) || self.looked_up.load(Ordering::Acquire) {
            return;
        }
        let deadline = self.opened_at + FIRST_LOOKUP_WAIT;
        let mut done = self.first_lookup.0.lock();
        while !*done {
            if self
                .first_lookup
                .1
                .wait_until(&mut done, deadline)
                .timed_out()
            {
                break;
            }
        }
    }

    /// The segments a refresh of the overlay skips: those below the table's newest, which
    /// were sealed when it was written (their deletion shows in the directory listing).
    pub(super) fn sealed_below(&self, target: &RwLock<Index>) -> u32 {
        if !std::ptr::eq(target, &self.index) {
            return 0;
        }
        self.lazy
            .read()
            .as_ref()
            .filter(|lz| !lz.full)
            .map_or(0, |lz| lz.sealed_below)
    }

    /// Where `hash`'s latest value record is, as far as this process knows.
    pub(crate) fn locate(&self, hash: u64) -> Option<Loc> {
        {
            let lazy = self.lazy.read();
            let Some(lz) = lazy.as_ref() else {
                drop(lazy);
                return self.index.read().get(hash);
            };
            if lz.full || !self.lazy_broken.load(Ordering::Acquire) {
                if let Some(loc) = self.index.read().latest(hash) {
                    return (!loc.tombstone).then_some(loc);
                }
                if !lz.full && lz.touched.lock().contains(&hash) {
                    return None;
                }
                // The record is checked when read (CRC, lengths, full key), as one found
                // through the full index is; its data file's header is the full index's to
                // judge (it marks a bad one for repair, as when opening without a table).
                match lz.table.find(hash) {
                    Found::At(slot) => return Some(slot.loc()),
                    Found::Absent => return None,
                    Found::Unknown if lz.full => return None,
                    Found::Unknown => {}
                }
            }
        }
        if let Err(e) = self.ensure_full() {
            self.counters.add_read_error(&e);
            return None;
        }
        self.index.read().get(hash)
    }

    /// Builds the full in-memory index from the index files, if this process still serves
    /// through the table. Lookups keep using the table meanwhile.
    pub(crate) fn ensure_full(&self) -> io::Result<()> {
        if self.index_is_full() {
            return Ok(());
        }
        let mut last = self.refresh_gate.lock();
        if self.index_is_full() {
            return Ok(());
        }
        let full = RwLock::new(Index::default());
        full.write().note_id(self.index.read().max_id());
        self.refresh_into(&full, false)?;
        let mut lazy = self.lazy.write();
        *self.index.write() = full.into_inner();
        if let Some(lz) = lazy.as_mut() {
            lz.full = true;
        }
        self.lazy_broken.store(false, Ordering::Release);
        *last = Instant::now();
        Ok(())
    }

    /// Whether `target` is the overlay of a process still serving through the table.
    pub(super) fn is_overlay(&self, target: &RwLock<Index>) -> bool {
        std::ptr::eq(target, &self.index) && !self.index_is_full()
    }

    /// Whether the in-memory index describes every index file (not only their tails).
    pub(crate) fn index_is_full(&self) -> bool {
        self.lazy.read().as_ref().is_none_or(|lz| lz.full)
    }

    /// Stops consulting the table (the full index is built and repaired).
    pub(super) fn drop_table(&self) {
        *self.lazy.write() = None;
    }

    /// The table no longer describes a segment: lookups stop trusting it.
    pub(super) fn break_lazy(&self) {
        self.lazy_broken.store(true, Ordering::Release);
    }

    pub(super) fn lazy_broken(&self) -> bool {
        self.lazy_broken.load(Ordering::Acquire)
    }

    /// Notes the key hashes of index entries read past the table's watermarks.
    pub(super) fn note_tail(&self, entries: &[u8]) {
        if let Some(lz) = self.lazy.read().as_ref().filter(|lz| !lz.full) {
            let mut touched = lz.touched.lock();
            for entry in entries.chunks_exact(INDEX_ENTRY_LEN) {
                if let Ok(e) = decode_index_entry(entry) {
                    touched.insert(e.header.key_hash);
                }
            }
        }
    }

    /// Notes that this process wrote records (its table should cover them at close).
    pub(super) fn note_wrote(&self) {
        self.cover.lock().wrote = true;
    }

    /// Whether the table should be rewritten when this process closes.
    pub(super) fn table_due_at_close(&self) -> bool {
        self.cover.lock().wrote && self.index_is_full()
    }

    /// Called by a writer holding the lock before it deletes segment `seg` otherwise than
    /// as the oldest (a compaction, or a repair removing a damaged segment): if the
    /// directory's table may not name `seg` (it was started after the last table this
    /// process read or wrote), the table goes first.
    /// Otherwise an open could find the table's newest segment and no index file at the id
    /// after it, and take the table's segments for all there are while a later one holds
    /// newer records (`Self::open_lazy`). The next durable batch writes a table again.
    pub(super) fn forget_table_before_deleting(&self, seg: u32) -> io::Result<()> {
        let mut cover = self.cover.lock();
        if cover.segs.last().is_some_and(|&(top, _)| seg <= top) {
            return Ok(());
        }
        table::remove_table(&self.cfg.dir)?;
        *cover = Cover::default();
        Ok(())
    }

    /// Rewrites the directory's table from the full index if enough was written since the
    /// last one (`force`: if anything was). Called by a writer holding the directory lock,
    /// after the batch's records were made durable.
    pub(super) fn write_table_if_due(&self, force: bool) -> io::Result<()> {
        if !self.index_is_full() {
            return Ok(());
        }
        let mut cover = self.cover.lock();
        let ix = self.index.read();
        if !ix.is_clean() {
            return Ok(());
        }
        let tail: u64 = ix
            .segs()
            .iter()
            .map(|(id, info)| {
                let from = cover
                    .segs
                    .binary_search_by_key(id, |&(seg, _)| seg)
                    .map_or(0, |i| cover.segs[i].1);
                let from = from.max(SEGMENT_HEADER_LEN as u64);
                info.idx_consumed.saturating_sub(from) / INDEX_ENTRY_LEN as u64
            })
            .sum();
        let due = if force {
            tail > 0
        } else {
            tail >= TABLE_MIN_TAIL && tail >= cover.entries / 8
        };
        if !due {
            return Ok(());
        }
        if ix.totals().0 < self.cfg.table_min_entries {
            // Too few entries for the table to pay for its pages: none, and an older one
            // (the directory shrank) goes, so that its bytes do not outlive its use.
            drop(ix);
            table::remove_table(&self.cfg.dir)?;
            *cover = Cover::default();
            return Ok(());
        }
        let mut segs = Vec::with_capacity(ix.segs().len());
        let newest = ix.segs().keys().next_back().copied();
        for (&id, info) in ix.segs() {
            let path = dir::index_path(&self.cfg.dir, id);
            let file = File::open(&path)?;
            let m = file.metadata()?;
            if m.ino() != info.idx_ino || m.len() != info.idx_consumed {
                return Ok(()); // Not what the index describes: no table this time.
            }
            if Some(id) == newest {
                // Other processes may have appended to it without an fsync yet: the table
                // covers only durable bytes (sealed segments were fsynced when sealed).
                File::open(dir::data_path(&self.cfg.dir, id))?.sync_data()?;
                file.sync_data()?;
            }
            segs.push(TableSeg {
                id,
                idx_len: info.idx_consumed,
                data_end: info.data_end,
                idx_ino: info.idx_ino,
                idx_btime: birth_ns(&m),
                last_entry_crc: last_entry_crc(&file, info.idx_consumed)?,
            });
        }
        let live = ix.live_entries();
        drop(ix);
        // The meta file's inode and bytes, which the table vouches for at open: ours (this
        // writer holds the lock and checked it when the batch began).
        let Some((meta, meta_ino)) = dir::read_meta_ino(&self.cfg.dir)? else {
            return Ok(());
        };
        if decode_meta(&meta).ok().as_ref() != Some(&self.cfg.identity) {
            return Ok(());
        }
        let new_cover = Cover {
            segs: segs.iter().map(|s| (s.id, s.idx_len)).collect(),
            entries: live.len() as u64,
            wrote: false,
        };
        let bytes = table::encode_table(meta_ino, meta, segs, &live)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        table::write_table(&self.cfg.dir, &bytes)?;
        *cover = new_cover;
        Ok(())
    }
}

/// A table that an open of `dir` trusts (it holds `dir`'s meta file bytes and names segment
/// 1's index file as it is now), whose one page is `page` (zero-padded or cut to a page; its
/// CRC made sound if `seal`): for the directory fuzz target, which serves hostile slots
/// through it.
#[cfg(any(test, fuzzing))]
pub fn trusted_table_for_fuzzing(
    dir: &std::path::Path,
    page: &[u8],
    seal: bool,
) -> io::Result<Vec<u8>> {
    use table::{TableHeader, PAGE_LEN};
    let meta = std::fs::read(dir.join(dir::META_FILE))?;
    let idx = File::open(dir::index_path(dir, 1))?;
    let m = idx.metadata()?;
    let header = TableHeader {
        header_len: PAGE_LEN as u32,
        pages: 1,
        entries: 1,
        meta_ino: 0,
        segs: vec![TableSeg {
            id: 1,
            idx_len: m.len(),
            data_end: 0,
            idx_ino: m.ino(),
            idx_btime: birth_ns(&m),
            last_entry_crc: last_entry_crc(&idx, m.len())?,
        }],
        meta,
    };
    let mut bytes = table::encode_header(&header);
    bytes.resize(PAGE_LEN, 0);
    let mut p = page[..page.len().min(PAGE_LEN)].to_vec();
    p.resize(PAGE_LEN, 0);
    if seal {
        let crc = crc32c::crc32c(&p[4..]);
        p[..4].copy_from_slice(&crc.to_le_bytes());
    }
    bytes.extend_from_slice(&p);
    Ok(bytes)
}

/// CRC32C of the index entry that ends at `idx_len` (0 if the file has none).
fn last_entry_crc(file: &File, idx_len: u64) -> io::Result<u32> {
    let entry = INDEX_ENTRY_LEN as u64;
    if idx_len < SEGMENT_HEADER_LEN as u64 + entry {
        return Ok(0);
    }
    let mut buf = [0u8; INDEX_ENTRY_LEN];
    file.read_exact_at(&mut buf, idx_len - entry)?;
    Ok(crc32c::crc32c(&buf))
}

/// Whether `st` is of the index file the table's segment `s` names: its inode and (where
/// both are known) birth time.
fn same_index_file(st: &dir::FileStat, s: &TableSeg) -> bool {
    st.ino == s.idx_ino && (st.btime_ns == 0 || s.idx_btime == 0 || st.btime_ns == s.idx_btime)
}

/// What the table's newest segment's index file holds at the table's watermark.
#[derive(Debug, PartialEq, Eq)]
enum CoveredTail {
    /// Shorter than the watermark, or another entry before it than the table's last.
    Differs,
    /// The table's last entry, and nothing after it.
    AtEnd,
    /// The table's last entry, and more after it.
    Grown,
}

/// Reads what segment `s`'s index file (`file`, at least a header long) holds around the
/// table's watermark in one read: the last covered entry (or, with none, the header's last
/// byte) and the next entry. A read of a regular file that returns fewer bytes than asked
/// ended at the end of the file.
fn covered_tail(file: &File, s: &TableSeg) -> io::Result<CoveredTail> {
    let has_entry = s.idx_len >= (SEGMENT_HEADER_LEN + INDEX_ENTRY_LEN) as u64;
    let covered = if has_entry { INDEX_ENTRY_LEN } else { 1 };
    let mut buf = [0u8; 2 * INDEX_ENTRY_LEN];
    let buf = &mut buf[..covered + INDEX_ENTRY_LEN];
    let n = loop {
        match file.read_at(buf, s.idx_len - covered as u64) {
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    };
    let crc = if has_entry {
        crc32c::crc32c(&buf[..covered])
    } else {
        0
    };
    Ok(if n < covered || crc != s.last_entry_crc {
        CoveredTail::Differs
    } else if n == covered {
        CoveredTail::AtEnd
    } else {
        CoveredTail::Grown
    })
}

#[cfg(test)]
mod tests;
