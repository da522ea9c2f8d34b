//! The write side of the disk tier: everything here runs on the cache's write-behind thread
//! while it holds the directory's exclusive lock.
//!
//! A batch buffers records in memory and writes them with one positioned write to the active
//! segment's data file, then one to its index file (data first: an index entry never points
//! at bytes that were not written before it, barring a power cut, which the checksums catch).
//! A full segment is fsynced and sealed and a new one started. After the batch, the
//! directory's limits are enforced by evicting the oldest segment, first copying forward the
//! records the memory tier still holds (its policy decides what is hot), and dead space is
//! reclaimed by rewriting the sealed segment with the most of it.

use std::fs::{File, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::unix::fs::{FileExt, MetadataExt};

use super::access;
use super::dir;
use super::format::{
    compress_value, decode_segment_header, encode_index_entry, encode_record,
    encode_segment_header, peek_key, IndexEntry, RecordHeader, SegmentFile, FLAG_LZ4,
    FLAG_TOMBSTONE, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use super::index::Loc;
use super::table;
use super::DiskTier;

/// Tells eviction whether a key is still in use (held by the memory tier).
pub(super) type IsHot<'a> = &'a dyn Fn(&[u8]) -> bool;

/// The segment being appended to.
#[derive(Debug)]
pub(super) struct Active {
    id: u32,
    data: File,
    idx: File,
    data_len: u64,
    idx_len: u64,
}

/// Buffers a batch fills; owned by the writer so that their capacity outlives a batch.
#[derive(Debug, Default)]
pub(super) struct WriteBuffers {
    data: Vec<u8>,
    entries: Vec<IndexEntry>,
    index: Vec<u8>,
}

/// One locked batch of writes.
pub(super) struct Batch<'a> {
    disk: &'a DiskTier,
    active: &'a mut Option<Active>,
    data_buf: &'a mut Vec<u8>,
    entries: &'a mut Vec<IndexEntry>,
    idx_buf: &'a mut Vec<u8>,
    /// Whether the active segment was checked against the files in this batch (once is
    /// enough: the lock keeps other writers out until the batch ends).
    active_checked: bool,
    created_segment: bool,
    _lock: File,
}

impl DiskTier {
    /// Takes the directory lock and prepares a batch. Checks that the directory still
    /// belongs to this cache: a vanished directory or meta file is recreated empty; a
    /// directory taken over by another identity stops this process's writing for good.
    pub(super) fn begin_batch<'a>(
        &'a self,
        active: &'a mut Option<Active>,
        buffers: &'a mut WriteBuffers,
    ) -> io::Result<Batch<'a>> {
        if !self.is_writable() {
            return Err(io::Error::new(
                ErrorKind::PermissionDenied,
                "cache directory is not writable by this process",
            ));
        }
        // A writer works on the full index (deduplication, accounting, eviction).
        self.ensure_full()?;
        let lock = match dir::open_lock(&self.cfg.dir) {
            Err(e) if e.kind() == ErrorKind::NotFound => {
                // Removed underneath us: recreated with the configured mode, then counted
                // below (its meta file is gone).
                access::create_dir_all(&self.cfg.dir, self.cfg.access)?;
                dir::open_lock(&self.cfg.dir)?
            }
            other => other?,
        };
        if !self.cfg.allow_foreign_owner {
            // The directory may have been replaced by another user's since it was opened.
            if let Err(e) = access::check_owner_io(&self.cfg.dir) {
                self.set_read_only();
                return Err(e);
            }
        }
        if !lock.1 {
            self.set_read_only();
            return Err(io::Error::new(
                ErrorKind::PermissionDenied,
                "cache directory became read-only",
            ));
        }
        let lock = lock.0;
        lock.lock()?;
        match dir::read_meta(&self.cfg.dir)? {
            Some(meta) if meta == self.cfg.identity => {}
            None => {
                // Removed or cleared underneath us: start afresh.
                dir::remove_contents(&self.cfg.dir)?;
                dir::write_meta(&self.cfg.dir, &self.cfg.identity)?;
                self.index.write().clear();
                self.read_files.lock().clear();
                *active = None;
                self.counters.add_recreated();
                self.counters
                    .set_error("cache directory vanished; recreated it empty");
            }
            Some(_) => {
                self.set_read_only();
                *active = None;
                self.counters.set_error(
                    "cache directory was taken over by another identity; writing stopped",
                );
                return Err(io::Error::other(
                    "cache directory belongs to another identity",
                ));
            }
        }
        self.refresh_locked()?;
        if self.repair_damage()? {
            *active = None; // Its files may have changed: reopened when needed.
        }
        for orphan in dir::orphan_data_files(&self.cfg.dir)? {
            dir::remove_if_present(&orphan)?;
        }
        buffers.data.clear();
        buffers.entries.clear();
        buffers.index.clear();
        Ok(Batch {
            disk: self,
            active,
            data_buf: &mut buffers.data,
            entries: &mut buffers.entries,
            idx_buf: &mut buffers.index,
            active_checked: false,
            created_segment: false,
            _lock: lock,
        })
    }
}

impl Batch<'_> {
    /// Whether a record of `len` bytes can ever fit in a segment.
    fn fits(&self, len: u64) -> bool {
        len + SEGMENT_HEADER_LEN as u64 <= self.disk.cfg.segment_bytes
    }

    /// Buffers a record for `key`: a value (compressed when that pays), or a tombstone when
    /// `value` is `None`. A record byte-identical to the key's latest one on disk is not
    /// written again (processes populating one directory store the same values).
    pub(super) fn push(&mut self, key: &[u8], value: Option<&[u8]>) -> io::Result<()> {
        let compressed = value.and_then(compress_value);
        let (flags, stored) = match (value, &compressed) {
            (None, _) => (FLAG_TOMBSTONE, &[][..]),
            (Some(_), Some(c)) => (FLAG_LZ4, &c[..]),
            (Some(v), None) => (0, v),
        };
        let header = RecordHeader::for_entry(key, stored.len(), flags);
        if !self.fits(header.record_len()) {
            self.disk.counters.add_too_large();
            // The key's older record must not answer for the value that was not stored.
            return match flags {
                0 => self.push(key, None),
                _ => Ok(()),
            };
        }
        if self.is_latest_on_disk(&header, key, stored) {
            self.disk.counters.add_duplicate();
            return Ok(());
        }
        if compressed.is_some() {
            self.disk.counters.add_compressed();
        }
        let offset = self.reserve(header.record_len())?;
        encode_record(self.data_buf, key, stored, flags);
        self.entries.push(IndexEntry { header, offset });
        Ok(())
    }

    /// Whether the record `header`, `key` and `stored` would make is byte for byte the latest
    /// record of its key in the directory (the index is up to date: the batch holds the
    /// lock). A key with a record buffered in this batch is never skipped: that record,
    /// not the one on disk, is its latest.
    fn is_latest_on_disk(&self, header: &RecordHeader, key: &[u8], stored: &[u8]) -> bool {
        let Some(loc) = self.disk.index.read().latest(header.key_hash) else {
            return false;
        };
        if loc.record_len() != header.record_len()
            || loc.tombstone != header.is_tombstone()
            || self
                .entries
                .iter()
                .any(|e| e.header.key_hash == header.key_hash)
        {
            return false;
        }
        let mut ours = Vec::with_capacity(header.record_len() as usize);
        encode_record(&mut ours, key, stored, header.flags);
        let mut on_disk = vec![0u8; ours.len()];
        self.disk
            .data_file(loc.seg)
            .and_then(|f| f.read_exact_at(&mut on_disk, u64::from(loc.offset)))
            .is_ok_and(|()| on_disk == ours)
    }

    /// Buffers an already encoded and checked record (a copy made by eviction or compaction).
    fn push_raw(&mut self, header: RecordHeader, record: &[u8]) -> io::Result<()> {
        let offset = self.reserve(header.record_len())?;
        self.data_buf.extend_from_slice(record);
        self.entries.push(IndexEntry { header, offset });
        Ok(())
    }

    /// Makes room for a record in the active segment (rotating if needed); returns its offset.
    fn reserve(&mut self, len: u64) -> io::Result<u32> {
        self.ensure_active()?;
        let seg_bytes = self.disk.cfg.segment_bytes;
        let (data_len, empty) = {
            let a = self.active.as_ref().expect("ensured");
            (a.data_len, a.data_len <= SEGMENT_HEADER_LEN as u64)
        };
        if data_len + self.data_buf.len() as u64 + len > seg_bytes
            && !(empty && self.data_buf.is_empty())
        {
            self.write_out()?;
            self.rotate()?;
        }
        let a = self.active.as_ref().expect("ensured");
        let offset = a.data_len + self.data_buf.len() as u64;
        u32::try_from(offset).map_err(|_| io::Error::other("segment offset beyond 4 GiB"))
    }

    /// Writes the buffered records and index entries, then applies them to the index.
    pub(super) fn write_out(&mut self) -> io::Result<()> {
        if self.entries.is_empty() {
            return Ok(());
        }
        let a = self
            .active
            .as_mut()
            .expect("records imply an active segment");
        let idx_buf = &mut *self.idx_buf;
        idx_buf.clear();
        for e in self.entries.iter() {
            idx_buf.extend_from_slice(&encode_index_entry(e));
        }
        let written = a
            .data
            .write_all_at(self.data_buf, a.data_len)
            .and_then(|()| a.idx.write_all_at(idx_buf, a.idx_len));
        if let Err(e) = written {
            // Leave the files as they were, so the next append lines up.
            let _ = a.data.set_len(a.data_len);
            let _ = a.idx.set_len(a.idx_len);
            self.data_buf.clear();
            self.entries.clear();
            return Err(e);
        }
        {
            let mut ix = self.disk.index.write();
            for e in self.entries.iter() {
                ix.apply(a.id, e);
            }
            ix.seg_mut(a.id).idx_consumed = a.idx_len + idx_buf.len() as u64;
        }
        self.disk
            .counters
            .add_written(self.entries.len() as u64, self.data_buf.len() as u64);
        a.data_len += self.data_buf.len() as u64;
        a.idx_len += idx_buf.len() as u64;
        self.data_buf.clear();
        self.entries.clear();
        Ok(())
    }

    /// fsyncs the active segment (and the directory if segments were created).
    pub(super) fn sync(&mut self) -> io::Result<()> {
        self.write_out()?;
        if let Some(a) = self.active.as_ref() {
            a.data.sync_data()?;
            a.idx.sync_data()?;
            self.disk.counters.add_fsync();
        }
        if self.created_segment {
            dir::sync_dir(&self.disk.cfg.dir)?;
            self.created_segment = false;
        }
        Ok(())
    }

    /// Opens the newest segment for appending, repairing a torn tail, or starts a segment.
    fn ensure_active(&mut self) -> io::Result<()> {
        if self.active_checked && self.active.is_some() {
            return Ok(());
        }
        self.active_checked = true;
        let newest = self.disk.index.read().segs().keys().next_back().copied();
        let info = newest.and_then(|id| self.disk.index.read().segs().get(&id).copied());
        let mut reuse = matches!((&*self.active, newest), (Some(a), Some(id)) if a.id == id);
        if let (true, Some(a), Some(info)) = (reuse, self.active.as_ref(), info) {
            // Another process may have rebuilt the index file (a new one renamed over ours).
            reuse = a.idx.metadata()?.ino() == info.idx_ino;
        }
        if !reuse {
            *self.active = match (newest, info) {
                (Some(id), Some(info)) => {
                    self.open_for_append(id, info.idx_consumed, info.data_end)?
                }
                _ => None,
            };
        } else if let (Some(a), Some(info)) = (self.active.as_mut(), info) {
            // Another process may have appended since our last batch.
            a.data_len = a.data.metadata()?.len();
            a.idx_len = a.idx.metadata()?.len();
            if !repair(a, info.idx_consumed, info.data_end)? {
                *self.active = None;
            }
        }
        if self.active.is_none() {
            let next = self.disk.index.read().next_id();
            *self.active = Some(self.create_segment(next)?);
        }
        Ok(())
    }

    /// Opens segment `id` for appending if its files are sound and consistent.
    fn open_for_append(
        &self,
        id: u32,
        idx_consumed: u64,
        data_end: u64,
    ) -> io::Result<Option<Active>> {
        let open = |path| OpenOptions::new().read(true).write(true).open(path);
        let (Ok(data), Ok(idx)) = (
            open(dir::data_path(&self.disk.cfg.dir, id)),
            open(dir::index_path(&self.disk.cfg.dir, id)),
        ) else {
            return Ok(None);
        };
        let mut header = [0u8; SEGMENT_HEADER_LEN];
        if data.read_exact_at(&mut header, 0).is_err()
            || decode_segment_header(SegmentFile::Data, &header) != Ok(id)
            || idx_consumed < SEGMENT_HEADER_LEN as u64
        {
            return Ok(None);
        }
        let mut a = Active {
            id,
            data_len: data.metadata()?.len(),
            idx_len: idx.metadata()?.len(),
            data,
            idx,
        };
        Ok(repair(&mut a, idx_consumed, data_end)?.then_some(a))
    }

    fn create_segment(&mut self, id: u32) -> io::Result<Active> {
        // We hold the lock and `id` is past every indexed segment, so a file of that name is
        // a leftover of a writer that died while creating it (or a damaged segment that was
        // never indexed): replace it.
        let create = |path| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(path)
        };
        // The data file first: a segment becomes visible to readers with its index file.
        let data = create(dir::data_path(&self.disk.cfg.dir, id))?;
        access::set_file_mode(&data, &self.disk.cfg.dir)?;
        data.write_all_at(&encode_segment_header(SegmentFile::Data, id), 0)?;
        let idx = create(dir::index_path(&self.disk.cfg.dir, id))?;
        access::set_file_mode(&idx, &self.disk.cfg.dir)?;
        idx.write_all_at(&encode_segment_header(SegmentFile::Index, id), 0)?;
        let len = SEGMENT_HEADER_LEN as u64;
        let ino = idx.metadata()?.ino();
        {
            let mut ix = self.disk.index.write();
            ix.note_id(id);
            let info = ix.seg_mut(id);
            info.idx_consumed = len;
            info.data_end = len;
            info.idx_ino = ino;
        }
        self.created_segment = true;
        Ok(Active {
            id,
            data,
            idx,
            data_len: len,
            idx_len: len,
        })
    }

    /// Seals the active segment (fsynced) and starts the next one.
    fn rotate(&mut self) -> io::Result<()> {
        self.sync()?;
        let next = self.disk.index.read().next_id();
        *self.active = Some(self.create_segment(next)?);
        Ok(())
    }

    /// Evicts oldest segments until the directory is within its byte and entry limits.
    /// Records still held by the memory tier are copied forward, up to a quarter of the byte
    /// limit per pass so that eviction always makes progress.
    pub(super) fn enforce_limits(&mut self, is_hot: IsHot<'_>) -> io::Result<()> {
        self.write_out()?;
        // Know the append target first, so that it is never taken for a victim.
        self.ensure_active()?;
        let cfg = &self.disk.cfg;
        let mut reinsert_budget = cfg.max_bytes / 4;
        loop {
            let (entries, _, file_bytes) = self.disk.index.read().totals();
            if file_bytes <= cfg.max_bytes && entries <= cfg.max_entries {
                return Ok(());
            }
            let segs: Vec<u32> = self.disk.index.read().segs().keys().copied().collect();
            let active = self.active.as_ref().map(|a| a.id);
            match segs.first() {
                None => return Ok(()),
                Some(&oldest) if Some(oldest) == active => {
                    if segs.len() > 1 {
                        return Ok(());
                    }
                    // One segment over the limit: seal it so it can go.
                    self.rotate()?;
                    reinsert_budget = 0;
                }
                Some(&oldest) => self.evict_segment(oldest, &mut reinsert_budget, is_hot)?,
            }
        }
    }

    fn evict_segment(&mut self, seg: u32, budget: &mut u64, is_hot: IsHot<'_>) -> io::Result<()> {
        let live = self.disk.index.read().entries_of(seg);
        let mut kept = 0;
        for (hash, loc) in live {
            // The oldest segment's tombstones have no older record left to hide: dropped.
            if loc.tombstone || loc.record_len() > *budget || !self.key_is_hot(hash, loc, is_hot) {
                continue;
            }
            if let Some((header, record)) = self.disk.read_record(hash, loc) {
                self.push_raw(header, &record)?;
                *budget -= loc.record_len();
                kept += 1;
            }
        }
        // The copies are made durable before the originals go.
        if kept > 0 {
            self.sync()?;
        } else {
            self.write_out()?;
        }
        self.delete_segment(seg)?;
        self.disk.counters.add_evicted_segment();
        self.disk.counters.add_reinserted(kept);
        Ok(())
    }

    fn key_is_hot(&self, hash: u64, loc: Loc, is_hot: IsHot<'_>) -> bool {
        let mut head = vec![0u8; RECORD_HEADER_LEN + usize::from(loc.key_len)];
        let Ok(file) = self.disk.data_file(loc.seg) else {
            return false;
        };
        file.read_exact_at(&mut head, u64::from(loc.offset)).is_ok()
            && peek_key(&head, hash, u32::from(loc.key_len), loc.value_len).is_some_and(is_hot)
    }

    /// Reclaims dead space by rewriting sealed segments, the one with the most dead bytes
    /// first. With `force`, every segment holding dead records (the active one is sealed
    /// first); otherwise until dead
    /// space is at most a tenth of the files (each dead byte is copied over at most once, so
    /// the work is proportional to what was overwritten).
    pub(super) fn compact(&mut self, force: bool) -> io::Result<()> {
        self.write_out()?;
        // Know the append target first, so that it is never taken for a victim.
        self.ensure_active()?;
        // Seal the active segment if it holds dead records and compaction is due for them
        // (forced, or the active segment holds the most dead bytes, as after processes
        // populated one directory at once with values that differ), so that they are
        // reclaimed too.
        let (active_dead, sealed_dead, total_dead, total_bytes) = {
            let ix = self.disk.index.read();
            let active = self.active.as_ref().map(|a| a.id);
            let dead_of = |id| ix.segs().get(&id).map_or(0, |s| s.dead_bytes());
            let sealed = ix
                .segs()
                .iter()
                .filter(|(&id, _)| Some(id) != active)
                .map(|(_, s)| s.dead_bytes())
                .max()
                .unwrap_or(0);
            let total: u64 = ix.segs().values().map(|s| s.dead_bytes()).sum();
            (active.map_or(0, dead_of), sealed, total, ix.totals().2)
        };
        // Unforced, the active segment waits for 1 MiB of dead bytes (an eighth of a smaller
        // segment): small directories are not rewritten for a few overwrites.
        let floor = (self.disk.cfg.segment_bytes / 8).min(1 << 20);
        let due = force
            || (total_dead * 10 > total_bytes && active_dead > sealed_dead && active_dead >= floor);
        if active_dead > 0 && due {
            self.rotate()?;
        }
        loop {
            let active = self.active.as_ref().map(|a| a.id);
            let (worst, total_dead, total_bytes) = {
                let ix = self.disk.index.read();
                let worst = ix
                    .segs()
                    .iter()
                    .filter(|(&id, s)| Some(id) != active && s.dead_bytes() > 0)
                    .max_by_key(|(_, s)| s.dead_bytes())
                    .map(|(&id, _)| id);
                let dead: u64 = ix.segs().values().map(|s| s.dead_bytes()).sum();
                (worst, dead, ix.totals().2)
            };
            let Some(seg) = worst else {
                return Ok(());
            };
            if !force && total_dead * 10 <= total_bytes {
                return Ok(());
            }
            // Bound first: a guard in the loop header would live through the loop.
            let (live, oldest) = {
                let ix = self.disk.index.read();
                (ix.entries_of(seg), ix.segs().keys().next() == Some(&seg))
            };
            for (hash, loc) in live {
                if loc.tombstone {
                    // Needed only while an older segment may hold the key.
                    if oldest {
                        self.disk.index.write().forget(hash, loc);
                    } else if let Some((header, record)) = self.disk.read_raw(hash, loc) {
                        self.push_raw(header, &record)?;
                    }
                } else if let Some((header, record)) = self.disk.read_record(hash, loc) {
                    self.push_raw(header, &record)?;
                }
            }
            // The copies are made durable before the originals go.
            self.sync()?;
            if !oldest {
                self.disk.forget_table_before_deleting(seg)?;
            }
            self.delete_segment(seg)?;
            self.disk.counters.add_compacted();
        }
    }

    /// Removes every segment.
    pub(super) fn clear(&mut self) -> io::Result<()> {
        self.data_buf.clear();
        self.entries.clear();
        *self.active = None;
        let segs: Vec<u32> = self.disk.index.read().segs().keys().copied().collect();
        let next = self.disk.index.read().next_id();
        // The table first: it must never outlive the segments it names.
        table::remove_table(&self.disk.cfg.dir)?;
        for seg in segs {
            self.delete_segment(seg)?;
        }
        dir::remove_contents(&self.disk.cfg.dir)?;
        self.disk.index.write().clear();
        // Segment ids are never reused: another process may still index the old ones.
        *self.active = Some(self.create_segment(next)?);
        Ok(())
    }

    fn delete_segment(&mut self, seg: u32) -> io::Result<()> {
        if self.active.as_ref().is_some_and(|a| a.id == seg) {
            *self.active = None;
        }
        // Index file first: readers stop seeing the segment before its data goes.
        dir::remove_if_present(&dir::index_path(&self.disk.cfg.dir, seg))?;
        dir::remove_if_present(&dir::data_path(&self.disk.cfg.dir, seg))?;
        self.disk.index.write().drop_segment(seg);
        self.disk.read_files.lock().remove(&seg);
        Ok(())
    }
}

/// Makes an open segment's files agree with what its index says: drops a torn or damaged
/// index tail and data appended without index entries (a writer killed mid-batch). Returns
/// `false` if the index points past the data (lost writes after a power cut): such a segment
/// is left alone and appends go to a new one.
fn repair(a: &mut Active, idx_consumed: u64, data_end: u64) -> io::Result<bool> {
    if a.idx_len != idx_consumed {
        a.idx.set_len(idx_consumed)?;
        a.idx_len = idx_consumed;
    }
    let expected = data_end.max(SEGMENT_HEADER_LEN as u64);
    if a.data_len > expected {
        a.data.set_len(expected)?;
        a.data_len = expected;
    }
    Ok(a.data_len == expected)
}
