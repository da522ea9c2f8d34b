//! The read side of the disk tier: lookups, the multi-process index refresh, and the
//! start-up preload's sequential reads.
//!
//! Reads take no file lock: a record is found through the in-memory index, read with one
//! positioned read and checked (CRC, lengths, key hash, full key) before it is returned, so
//! a record that another process is appending, evicting or compacting is at worst a miss.

use std::fs::File;
use std::io::{self, ErrorKind};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::RwLock;

use super::dir::{self, At, FileStat};
use super::format::{
    decode_index_entry, decode_record, decode_segment_header, disk_hash, peek_key, peek_record_len,
    record_key_value, record_value, RecordHeader, SegmentFile, INDEX_ENTRY_LEN, RECORD_HEADER_LEN,
    SEGMENT_HEADER_LEN,
};
use super::index::{whole_entries, Index, Loc, Repair};
use super::tier::{OpenedIndex, ReadFile};
use super::DiskTier;
use crate::tier::PreloadSink;
use crate::Lookup;

/// How often a miss may re-read the index files for other processes' appends.
const REFRESH_INTERVAL: Duration = Duration::from_millis(20);

impl DiskTier {
    /// Looks `key` up on disk, reading and checking its record.
    pub(crate) fn lookup(&self, key: &[u8]) -> Lookup {
        let hash = disk_hash(key);
        let mut found = self.locate(hash);
        if found.is_none() && self.refresh_due() {
            // Another process may have stored it since we last looked.
            if self.refresh().is_ok() {
                found = self.locate(hash);
            }
        }
        let result = self.lookup_at(key, hash, found);
        self.note_lookup();
        result
    }

    /// Reads `key`'s record at `found`, where the index said it was.
    fn lookup_at(&self, key: &[u8], hash: u64, mut found: Option<Loc>) -> Lookup {
        // Twice at most: compaction or eviction (of this process's writer, or another's)
        // may move the record between the index lookup and the read.
        for _ in 0..2 {
            let Some(loc) = found else {
                return Lookup::Miss;
            };
            if let Some((header, bytes)) = self.read_record(hash, loc) {
                if record_key_value(&bytes, &header).0 != key {
                    return Lookup::Collision;
                }
                if header.is_compressed() {
                    // Sound by its CRC, so a failure here is a bug or a hostile writer.
                    let Ok(value) = record_value(&bytes, &header, self.cfg.segment_bytes) else {
                        self.forget_bad(hash, loc);
                        return Lookup::Miss;
                    };
                    self.counters.add_read_hit();
                    return Lookup::Hit(Bytes::from(value.into_owned()));
                }
                self.counters.add_read_hit();
                let key_end = RECORD_HEADER_LEN + header.key_len as usize;
                return Lookup::Hit(Bytes::from(bytes).slice(key_end..));
            }
            let again = self.locate(hash);
            if again == Some(loc) {
                return Lookup::Miss;
            }
            found = again;
        }
        Lookup::Miss
    }

    /// Forgets a record whose CRC is sound but whose compressed value does not decode.
    fn forget_bad(&self, hash: u64, loc: Loc) {
        let lazy = self.lazy.read().is_some();
        let mut ix = self.index.write();
        if from_table(&ix, lazy, hash) || ix.forget(hash, loc) {
            self.counters.add_corrupt(1);
        }
    }

    /// Whether a key with this key's disk hash is indexed (its record is not read).
    pub(crate) fn has_hash_of(&self, key: &[u8]) -> bool {
        self.locate(disk_hash(key)).is_some()
    }

    /// Reads and checks the value record at `loc`; a bad or vanished record is forgotten,
    /// counted and reported as `None`.
    pub(crate) fn read_record(&self, hash: u64, loc: Loc) -> Option<(RecordHeader, Vec<u8>)> {
        self.read_checked(hash, loc)
            .filter(|(h, _)| !h.is_tombstone())
    }

    /// Reads and checks the record at `loc`, value or tombstone (compaction copies both).
    pub(crate) fn read_raw(&self, hash: u64, loc: Loc) -> Option<(RecordHeader, Vec<u8>)> {
        self.read_checked(hash, loc)
    }

    /// Reads and checks the record at `loc`. A record that fails is forgotten and counted,
    /// unless the key's latest record is elsewhere by now (moved by a compaction or an
    /// eviction while this read ran: not damage, and the caller may look again).
    fn read_checked(&self, hash: u64, loc: Loc) -> Option<(RecordHeader, Vec<u8>)> {
        let mut buf = vec![0u8; loc.record_len() as usize];
        let through_table = !self.index_is_full();
        let read = self
            .open_data_file(loc.seg, through_table)
            .and_then(|f| f.read_exact_at(&mut buf, u64::from(loc.offset)));
        let lazy = self.lazy.read().is_some();
        if let Err(e) = read {
            let mut ix = self.index.write();
            if from_table(&ix, lazy, hash) && e.kind() == ErrorKind::UnexpectedEof {
                self.counters.add_corrupt(1);
            } else if ix.forget(hash, loc) {
                if e.kind() == ErrorKind::UnexpectedEof {
                    // The data file was cut after the index was read.
                    ix.mark(loc.seg, Repair::Rebuild);
                    self.counters.add_corrupt(1);
                } else if e.kind() == ErrorKind::NotFound {
                    self.counters.add_corrupt(1);
                } else {
                    self.counters.add_read_error(&e);
                }
            }
            return None;
        }
        match decode_record(&buf, self.cfg.segment_bytes.max(loc.record_len())) {
            Ok(header) if loc.describes(hash, &header) => Some((header, buf)),
            other => {
                let mut ix = self.index.write();
                if from_table(&ix, lazy, hash) {
                    self.counters.add_corrupt(1); // Damaged, or the table is wrong.
                } else if ix.forget(hash, loc) {
                    self.counters.add_corrupt(1);
                    if other.is_ok() {
                        // A sound record of something else: the index is not this data's.
                        ix.mark(loc.seg, Repair::Rebuild);
                    }
                }
                None
            }
        }
    }

    pub(crate) fn data_file(&self, seg: u32) -> io::Result<Arc<File>> {
        self.open_data_file(seg, false)
    }

    /// Segment `seg`'s data file, opened once and kept. `through_table`: a lookup while the
    /// process still serves through the table (its full index is not built), so the file is
    /// opened through the directory's descriptor, as the table was (a shorter path walk,
    /// and the directory the table describes). Otherwise by path, as the full index reads
    /// the index files: a directory moved or recreated since (by another process, or by
    /// this process's writer, which builds the full index before its first write) is the
    /// one read. A file kept from a descriptor open is not used by path: it is opened again
    /// (so the full index never reads another directory's file for its locations).
    fn open_data_file(&self, seg: u32, through_table: bool) -> io::Result<Arc<File>> {
        if let Some(kept) = self.read_files.lock().get(&seg) {
            if through_table || !kept.through_dir_fd {
                return Ok(Arc::clone(&kept.file));
            }
        }
        let via = self.dir_fd.as_ref().filter(|_| through_table);
        let file = Arc::new(match via {
            Some(fd) => At::new(Some(fd.as_fd()), &self.cfg.dir).open(&dir::data_name(seg))?,
            None => File::open(dir::data_path(&self.cfg.dir, seg))?,
        });
        let kept = ReadFile {
            file: Arc::clone(&file),
            through_dir_fd: via.is_some(),
        };
        self.read_files.lock().insert(seg, kept);
        Ok(file)
    }

    fn refresh_due(&self) -> bool {
        self.refresh_gate.lock().elapsed() >= REFRESH_INTERVAL
    }

    /// Brings the index up to date with the index files: applies entries appended since the
    /// last refresh and forgets segments that were deleted. Takes no lock: what looks
    /// damaged is marked for the next writer.
    pub(crate) fn refresh(&self) -> io::Result<()> {
        self.refresh_with(false)
    }

    /// [`Self::refresh`] by a writer holding the directory lock: nobody is creating or
    /// appending to a segment meanwhile, so an index file shorter than its header and data
    /// past the last indexed record are leftovers, marked for repair.
    pub(crate) fn refresh_locked(&self) -> io::Result<()> {
        self.refresh_with(true)
    }

    /// [`Self::refresh`] given the segments an open just found: its listing, or the
    /// table's segments where it needed none.
    pub(crate) fn refresh_listed(&self, ids: Vec<u32>) -> io::Result<()> {
        self.refresh_with_listing(false, Some(ids))
    }

    fn refresh_with(&self, locked: bool) -> io::Result<()> {
        self.refresh_with_listing(locked, None)
    }

    fn refresh_with_listing(&self, locked: bool, ids: Option<Vec<u32>>) -> io::Result<()> {
        let mut last = self.refresh_gate.lock();
        match ids {
            Some(ids) => self.refresh_ids(&self.index, locked, ids)?,
            None => self.refresh_into(&self.index, locked)?,
        }
        *last = Instant::now();
        if self.lazy_broken() {
            drop(last);
            self.ensure_full()?;
        }
        Ok(())
    }

    /// Brings `target` up to date with the index files (the caller holds `refresh_gate`).
    pub(super) fn refresh_into(&self, target: &RwLock<Index>, locked: bool) -> io::Result<()> {
        drop(self.spent_file.lock().take());
        let ids = match dir::list_segments(&self.cfg.dir) {
            Ok(ids) => ids,
            Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        self.refresh_ids(target, locked, ids)
    }

    /// [`Self::refresh_into`] given the segments that have an index file.
    fn refresh_ids(&self, target: &RwLock<Index>, locked: bool, ids: Vec<u32>) -> io::Result<()> {
        let known: Vec<u32> = target.read().segs().keys().copied().collect();
        for seg in known.into_iter().filter(|s| ids.binary_search(s).is_err()) {
            target.write().drop_segment(seg);
            self.read_files.lock().remove(&seg);
        }
        if let Some(&newest) = ids.last() {
            target.write().note_id(newest);
        }
        let newest = ids.last().copied();
        let sealed_below = self.sealed_below(target);
        for id in ids.into_iter().filter(|&id| id >= sealed_below) {
            self.refresh_segment(target, id, locked, Some(id) == newest)?;
        }
        Ok(())
    }

    /// Applies what is new in segment `id`'s index file. `newest`: the segment is the one
    /// writers append to, so (under the lock) its data file is checked for records that
    /// have no index entry even when its index file did not grow.
    pub(super) fn refresh_segment(
        &self,
        target: &RwLock<Index>,
        id: u32,
        locked: bool,
        newest: bool,
    ) -> io::Result<()> {
        // The index file the open through the table checked, if this is it.
        let opened = self.opened_index.lock().take();
        if let Some(OpenedIndex { file, stat, .. }) = opened.filter(|o| o.seg == id) {
            let result = self.refresh_segment_file(target, id, locked, newest, &file, stat);
            self.defer_close(file);
            return result;
        }
        let file = match File::open(dir::index_path(&self.cfg.dir, id)) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let stat = FileStat::of(&file.metadata()?);
        self.refresh_segment_file(target, id, locked, newest, &file, stat)
    }

    /// Keeps a file the open used until the next refresh or the full index build closes it:
    /// a `close` then costs nothing on the way to the first hit.
    pub(super) fn defer_close(&self, file: File) {
        *self.spent_file.lock() = Some(file);
    }

    /// [`Self::refresh_segment`] of the open index file `file`, whose length and inode are
    /// `stat`'s.
    fn refresh_segment_file(
        &self,
        target: &RwLock<Index>,
        id: u32,
        locked: bool,
        newest: bool,
        file: &File,
        stat: FileStat,
    ) -> io::Result<()> {
        let (len, ino) = (stat.len, stat.ino);
        let known = target.read().segs().get(&id).copied();
        if known.is_some_and(|info| info.idx_ino != ino || info.idx_consumed > len) {
            if self.is_overlay(target) {
                // The table's view of this segment is gone: the full index is needed.
                self.break_lazy();
                return Ok(());
            }
            // Rebuilt by a writer (a new file, renamed over the old one): read it afresh.
            target.write().drop_segment(id);
            self.read_files.lock().remove(&id);
        }
        let consumed = target.read().segs().get(&id).map_or(0, |s| s.idx_consumed);
        let mut start = consumed;
        if consumed == 0 {
            if len < SEGMENT_HEADER_LEN as u64 {
                // Being created; under the lock, left by a writer killed creating it.
                if locked {
                    target.write().mark(id, Repair::Rebuild);
                }
                return Ok(());
            }
            let mut header = [0u8; SEGMENT_HEADER_LEN];
            file.read_exact_at(&mut header, 0)?;
            if decode_segment_header(SegmentFile::Index, &header) != Ok(id) {
                let mut ix = target.write();
                ix.mark(id, Repair::Rebuild);
                if ix.ignore(id) {
                    self.counters.add_corrupt(1);
                }
                return Ok(()); // Ignored until a writer repairs it.
            }
            target.write().unignore(id);
            start = SEGMENT_HEADER_LEN as u64;
        }
        let mut buf = vec![0u8; whole_entries(start, len) as usize];
        file.read_exact_at(&mut buf, start)?;
        if consumed > 0 && buf.is_empty() && !(locked && newest) {
            return Ok(()); // Nothing new.
        }
        if self.is_overlay(target) {
            self.note_tail(&buf);
        }
        // Measured after the entries were read: their records were written before them.
        let data = match self.data_file(id) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                // Deleted (index first, so a reader racing a deletion sees this), or lost.
                target.write().mark(id, Repair::Rebuild);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let data_len = data.metadata()?.len();
        let skipped = {
            let mut ix = target.write();
            let skipped = ix.apply_entries(id, start, &buf, data_len);
            ix.seg_mut(id).idx_ino = ino;
            skipped
        };
        self.counters.add_corrupt(skipped);
        if consumed == 0 {
            let mut header = [0u8; SEGMENT_HEADER_LEN];
            let header_ok = data.read_exact_at(&mut header, 0).is_ok()
                && decode_segment_header(SegmentFile::Data, &header) == Ok(id);
            if !header_ok {
                target.write().mark(id, Repair::Rebuild);
            }
            self.check_first_entry(target, id, &buf, data_len);
        }
        Ok(())
    }

    /// An index file of another segment or directory can have a sound header and entries
    /// that all lie within the data file. Its first entry gives it away: the record at that
    /// offset is a valid record of something else. (A damaged record there is no reason to
    /// rebuild: the index is right about it.)
    fn check_first_entry(&self, target: &RwLock<Index>, id: u32, entries: &[u8], data_len: u64) {
        let Some(Ok(entry)) = entries.get(..INDEX_ENTRY_LEN).map(decode_index_entry) else {
            return;
        };
        let Ok(file) = self.data_file(id) else {
            return;
        };
        let at = u64::from(entry.offset);
        let mut head = vec![0u8; RECORD_HEADER_LEN + entry.header.key_len as usize];
        if file.read_exact_at(&mut head, at).is_err() {
            return;
        }
        let (key_len, value_len) = (entry.header.key_len, entry.header.value_len);
        if peek_key(&head, entry.header.key_hash, key_len, value_len).is_some() {
            return;
        }
        let Ok(len) = peek_record_len(&head) else {
            return;
        };
        if len > data_len.saturating_sub(at) {
            return;
        }
        let mut record = vec![0u8; len as usize];
        if file.read_exact_at(&mut record, at).is_ok() && decode_record(&record, len).is_ok() {
            target.write().mark(id, Repair::Rebuild);
        }
    }

    /// Streams the live entries to `sink`, newest segment first and in file order within a
    /// segment, with few large reads.
    pub(crate) fn preload_into(&self, sink: &mut PreloadSink<'_>) {
        self.await_first_lookup();
        if !self.build_full_index() {
            return;
        }
        let order = self.index.read().all_newest_first();
        let mut start = 0;
        while start < order.len() {
            let seg = order[start].1.seg;
            let end = start
                + order[start..]
                    .iter()
                    .take_while(|(_, l)| l.seg == seg)
                    .count();
            if !self.read_run(&order[start..end], sink) {
                return;
            }
            start = end;
        }
    }

    /// Reads the records at `locs` (ascending offsets in one segment) in chunks of up to
    /// 256 KiB, passing each record that checks out to `sink`; `false` when `sink` said stop.
    ///
    /// The chunk is small on purpose: on slow storage every read of the process queues
    /// behind the one in flight, and the preload runs while the driver reads its own files
    /// (context creation) and the application its assets. With 8 MiB chunks a driver read
    /// waited up to a whole chunk (160 ms at a hard disk's 50 MB/s; context creation took
    /// 532 ms instead of 54 at 800 programs); 256 KiB costs it at most a few milliseconds,
    /// and the kernel's readahead keeps the sequential chunks streaming.
    fn read_run(&self, locs: &[(u64, Loc)], sink: &mut PreloadSink<'_>) -> bool {
        const CHUNK: u64 = 256 << 10;
        let mut i = 0;
        while i < locs.len() {
            let seg = locs[i].1.seg;
            let start = u64::from(locs[i].1.offset);
            let mut j = i;
            while j < locs.len()
                && locs[j].1.seg == seg
                && u64::from(locs[j].1.offset) + locs[j].1.record_len() - start
                    <= CHUNK.max(locs[i].1.record_len())
            {
                j += 1;
            }
            let end = u64::from(locs[j - 1].1.offset) + locs[j - 1].1.record_len();
            let mut buf = vec![0u8; (end - start) as usize];
            // A short read (a data file cut since the index was read) costs only the records
            // past the cut: each record is checked on its own.
            let got = self
                .data_file(seg)
                .and_then(|file| read_up_to(&file, &mut buf, start))
                .unwrap_or(0);
            for &(hash, loc) in &locs[i..j] {
                let at = (u64::from(loc.offset) - start) as usize;
                let record = buf[..got].get(at..at + loc.record_len() as usize);
                match record.map(|r| (r, decode_record(r, loc.record_len()))) {
                    Some((record, Ok(h))) if loc.describes(hash, &h) => {
                        let (key, _) = record_key_value(record, &h);
                        match record_value(record, &h, self.cfg.segment_bytes) {
                            Ok(value) => {
                                if !sink(key, &value) {
                                    return false;
                                }
                            }
                            Err(_) => self.forget_bad(hash, loc),
                        }
                    }
                    found => {
                        let mut ix = self.index.write();
                        if ix.forget(hash, loc) {
                            self.counters.add_corrupt(1);
                            // Cut short, or a sound record of something else.
                            if !matches!(found, Some((_, Err(_)))) {
                                ix.mark(seg, Repair::Rebuild);
                            }
                        }
                    }
                }
            }
            i = j;
        }
        true
    }
}

/// Whether a location of `hash` came from the persisted table (`lazy`: this process serves
/// through one, and the in-memory index knows no record of the key).
fn from_table(ix: &Index, lazy: bool, hash: u64) -> bool {
    lazy && ix.latest(hash).is_none()
}

/// Reads into `buf` from `offset` until it is full or the file ends; the bytes read.
pub(super) fn read_up_to(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::super::{DiskConfig, DiskTier};
    use super::*;
    use crate::tier::{Tier, WriteContext, WriteOp};
    use crate::Identity;

    fn open(dir: &tempfile::TempDir, max_bytes: u64, segment_bytes: u64) -> DiskTier {
        DiskTier::open(DiskConfig {
            dir: dir.path().to_path_buf(),
            identity: Identity::default(),
            max_bytes,
            max_entries: u64::MAX,
            segment_bytes,
            access: crate::DirAccess::Private,
            allow_foreign_owner: false,
            table_min_entries: 0,
            dir_stat: None,
            dir_fd: Default::default(),
        })
        .unwrap()
    }

    fn put(disk: &DiskTier, key: &[u8], value: &[u8]) {
        let (key, value) = (Bytes::copy_from_slice(key), Bytes::copy_from_slice(value));
        let ops = [WriteOp::Put {
            key: &key,
            value: &value,
        }];
        disk.write(&ops, &WriteContext::new(&|_| false, true))
            .unwrap();
    }

    /// A data file cut after the index was loaded costs the preload only the records past
    /// the cut, not every record read in the same chunk.
    #[test]
    fn a_data_file_cut_under_the_preload_costs_only_the_cut_record() {
        let dir = tempfile::tempdir().unwrap();
        let disk = open(&dir, 1 << 30, 1 << 20);
        for i in 0..100u32 {
            put(&disk, &i.to_le_bytes(), &[i as u8; 300]);
        }
        let dat = dir::data_path(dir.path(), 1);
        let len = std::fs::metadata(&dat).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&dat)
            .unwrap()
            .set_len(len - 1)
            .unwrap();
        let mut seen = 0;
        disk.preload_into(&mut |key, value| {
            let i = u32::from_le_bytes(key.try_into().unwrap());
            assert_eq!(value, &[i as u8; 300][..]);
            seen += 1;
            true
        });
        assert_eq!(seen, 99);
        assert_eq!(disk.disk_stats().corrupt_dropped, 1);
        disk.validate();
    }

    /// The preload reads in bounded chunks: records on both sides of chunk boundaries and
    /// a record larger than a chunk all arrive intact, each once.
    #[test]
    fn the_preload_reads_across_chunks_and_oversized_records() {
        let dir = tempfile::tempdir().unwrap();
        let disk = open(&dir, 1 << 30, 8 << 20);
        let value = |i: u32| -> Vec<u8> {
            let len = if i == 7 {
                700 << 10
            } else {
                10_000 + i as usize * 37
            };
            (0..len).map(|b| (b as u32 ^ i) as u8).collect()
        };
        for i in 0..120u32 {
            put(&disk, &i.to_le_bytes(), &value(i));
        }
        let mut seen = vec![0u32; 120];
        disk.preload_into(&mut |key, v| {
            let i = u32::from_le_bytes(key.try_into().unwrap());
            assert_eq!(v, &value(i)[..], "record {i}");
            seen[i as usize] += 1;
            true
        });
        assert!(seen.iter().all(|&n| n == 1), "{seen:?}");
        assert_eq!(disk.disk_stats().corrupt_dropped, 0);
        disk.validate();
    }

    /// A lookup that found a record's location just before a compaction moved it (the
    /// interleaving the `cache_ops` fuzz target hit) reads the new location, and the failed
    /// read is not counted as damage.
    #[test]
    fn a_lookup_racing_a_compaction_finds_the_moved_record() {
        let dir = tempfile::tempdir().unwrap();
        let disk = open(&dir, 1 << 20, 4096);
        put(&disk, b"stable", &[1; 1000]);
        put(&disk, b"churn", &[2; 1000]);
        let hash = disk_hash(b"stable");
        let before = disk.index.read().get(hash).unwrap();
        put(&disk, b"churn", &[3; 2500]); // The first segment is now half dead.
        disk.compact().unwrap();
        let after = disk.index.read().get(hash).unwrap();
        assert_ne!(before.seg, after.seg, "compaction moved the record");
        assert!(!dir::data_path(dir.path(), before.seg).exists());

        let found = disk.lookup_at(b"stable", hash, Some(before));
        assert!(
            matches!(&found, Lookup::Hit(v) if v[..] == [1u8; 1000]),
            "{}",
            found.is_hit()
        );
        assert_eq!(disk.disk_stats().corrupt_dropped, 0, "a move is no damage");
        assert_eq!(disk.index.read().get(hash), Some(after));
    }
}
