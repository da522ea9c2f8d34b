//! The in-memory index of a disk cache: key hash → record location, plus per-segment
//! accounting. Built from the segments' index files at open and extended from their tails
//! as this or another process appends.
//!
//! An index file is checked against its data file as it is applied: an entry counts only if
//! its record lies within the data file's real length, so a forged or stale entry can
//! neither hide records nor enter the byte accounting. What looks damaged is marked
//! ([`Repair`]) for the next writer, which repairs it under the directory lock
//! (`super::repair`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io::{self, ErrorKind};
use std::path::Path;

use super::dir;
use super::format::{
    decode_index_entry, decode_segment_header, IndexEntry, RecordHeader, SegmentFile,
    INDEX_ENTRY_LEN, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use crate::hash::PassThroughBuildHasher;

/// Where one key's latest record is. 16 bytes; with the map's 8-byte key and load factor the
/// index costs about 28 to 56 bytes per entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    pub seg: u32,
    pub offset: u32,
    pub value_len: u32,
    pub key_len: u16,
    /// The latest record is a removal. Kept (and copied forward by compaction) while an older
    /// segment may still hold a record of the key, so that the key cannot come back.
    pub tombstone: bool,
}

impl Loc {
    pub(crate) fn record_len(&self) -> u64 {
        RECORD_HEADER_LEN as u64 + u64::from(self.key_len) + u64::from(self.value_len)
    }

    fn position(&self) -> (u32, u32) {
        (self.seg, self.offset)
    }

    /// Whether a record whose (checked) header is `header` is the one this location and
    /// `key_hash` describe: a reader returns a record only if so.
    pub(crate) fn describes(&self, key_hash: u64, header: &RecordHeader) -> bool {
        header.key_hash == key_hash
            && header.value_len == self.value_len
            && header.key_len == u32::from(self.key_len)
            && header.is_tombstone() == self.tombstone
    }
}

/// What this process knows of one segment.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SegInfo {
    /// Bytes of the index file applied so far (header included once read).
    pub idx_consumed: u64,
    /// End of the last record the applied entries describe (the data file's logical end).
    pub data_end: u64,
    /// Bytes of value records that are the latest for their key.
    pub live_bytes: u64,
    /// Bytes of tombstones that are the latest for their key (needed, so not dead space).
    pub tomb_bytes: u64,
    /// Keys whose latest record, a value, is here.
    pub live_entries: u64,
    /// Inode of the index file applied: a different one means the file was rebuilt (by
    /// rename) and is read again from its start.
    pub idx_ino: u64,
}

impl SegInfo {
    /// Bytes the segment takes on disk as far as the index knows (data + index files).
    pub(crate) fn file_bytes(&self) -> u64 {
        self.data_end.max(SEGMENT_HEADER_LEN as u64)
            + self.idx_consumed.max(SEGMENT_HEADER_LEN as u64)
    }

    pub(crate) fn dead_bytes(&self) -> u64 {
        self.data_end
            .saturating_sub(SEGMENT_HEADER_LEN as u64)
            .saturating_sub(self.live_bytes + self.tomb_bytes)
    }
}

/// What a segment that looks damaged needs from the next writer, the smaller first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Repair {
    /// The data file is longer than its indexed records: index the whole records found
    /// there (a writer killed between its two writes, a truncated index file) and cut the
    /// rest.
    Tail,
    /// The index file disagrees with its data file (bad header, invalid or overlapping
    /// entries, entries past the data's end, another segment's or directory's entries):
    /// check every record, and rebuild the index from the data if it differs.
    Rebuild,
}

#[derive(Debug, Default)]
pub(crate) struct Index {
    map: HashMap<u64, Loc, PassThroughBuildHasher>,
    segs: BTreeMap<u32, SegInfo>,
    /// Segments to repair, found while loading or reading.
    suspect: BTreeMap<u32, Repair>,
    /// Segments ignored because their index file's header is bad (counted once).
    ignored: BTreeSet<u32>,
    /// Segments whose repair failed (an I/O error): not tried again by this process.
    given_up: BTreeSet<u32>,
    /// The highest segment id seen in the directory: a new segment gets a higher one, so
    /// that ids are not reused even after a damaged segment was removed.
    max_id: u32,
}

impl Index {
    /// The location of the key's value, if its latest record is one.
    pub(crate) fn get(&self, key_hash: u64) -> Option<Loc> {
        self.map
            .get(&key_hash)
            .filter(|loc| !loc.tombstone)
            .copied()
    }

    /// The location of the key's latest record, value or tombstone.
    pub(crate) fn latest(&self, key_hash: u64) -> Option<Loc> {
        self.map.get(&key_hash).copied()
    }

    pub(crate) fn segs(&self) -> &BTreeMap<u32, SegInfo> {
        &self.segs
    }

    pub(crate) fn seg_mut(&mut self, seg: u32) -> &mut SegInfo {
        self.segs.entry(seg).or_default()
    }

    /// Applies one entry read from segment `seg`'s index file. The latest record of a key
    /// wins, by (segment, offset); a tombstone removes the key.
    pub(crate) fn apply(&mut self, seg: u32, entry: &IndexEntry) {
        let loc = Loc {
            seg,
            offset: entry.offset,
            value_len: entry.header.value_len,
            key_len: entry.header.key_len as u16,
            tombstone: entry.header.is_tombstone(),
        };
        let end = u64::from(entry.offset) + loc.record_len();
        let info = self.segs.entry(seg).or_default();
        info.data_end = info.data_end.max(end);
        let hash = entry.header.key_hash;
        if let Some(old) = self.map.get(&hash).copied() {
            if old.position() >= loc.position() {
                return; // Already know a newer record.
            }
            self.unaccount(old);
        }
        self.map.insert(hash, loc);
        let info = self.segs.entry(seg).or_default();
        if loc.tombstone {
            info.tomb_bytes += loc.record_len();
        } else {
            info.live_bytes += loc.record_len();
            info.live_entries += 1;
        }
    }

    /// Applies the index entries in `body`, which starts `start` bytes into segment `seg`'s
    /// index file, and records how far the file was applied. `data_len` is the length of
    /// the segment's data file, measured after `body` was read (a writer writes records
    /// before their entries, so every sound entry lies within it).
    ///
    /// An invalid entry followed by valid ones, an entry whose record would lie past
    /// `data_len`, and entries that go back or overlap are damage: the first two are
    /// skipped and counted, and the segment is marked for a rebuild. Invalid entries at the
    /// end may be an append in progress: not applied, so the next refresh reads them again.
    /// Returns the number of entries skipped.
    pub(crate) fn apply_entries(
        &mut self,
        seg: u32,
        start: u64,
        body: &[u8],
        data_len: u64,
    ) -> u64 {
        let entries: Vec<_> = body
            .chunks_exact(INDEX_ENTRY_LEN)
            .map(decode_index_entry)
            .collect();
        let valid_end = entries.iter().rposition(|e| e.is_ok()).map_or(0, |i| i + 1);
        let mut skipped = 0;
        let mut damaged = false;
        self.seg_mut(seg); // Known from now on, even if empty.
        for entry in &entries[..valid_end] {
            let Ok(entry) = entry else {
                skipped += 1;
                damaged = true;
                continue;
            };
            let end = u64::from(entry.offset) + entry.header.record_len();
            if end > data_len {
                skipped += 1;
                damaged = true;
                continue;
            }
            // Records are appended: each entry starts at or after the end of the last.
            if u64::from(entry.offset) < self.segs.get(&seg).map_or(0, |s| s.data_end) {
                damaged = true;
            }
            self.apply(seg, entry);
        }
        let info = self.seg_mut(seg);
        info.idx_consumed = start + (valid_end * INDEX_ENTRY_LEN) as u64;
        let data_end = info.data_end.max(SEGMENT_HEADER_LEN as u64);
        if damaged {
            self.mark(seg, Repair::Rebuild);
        } else if data_len > data_end {
            self.mark(seg, Repair::Tail);
        }
        skipped
    }

    /// Marks segment `seg` for repair by the next writer.
    pub(crate) fn mark(&mut self, seg: u32, repair: Repair) {
        let level = self.suspect.entry(seg).or_insert(repair);
        *level = (*level).max(repair);
    }

    pub(crate) fn has_suspects(&self) -> bool {
        !self.suspect.is_empty()
    }

    /// The segments marked for repair, unmarking them.
    pub(crate) fn take_suspects(&mut self) -> BTreeMap<u32, Repair> {
        let mut suspects = std::mem::take(&mut self.suspect);
        suspects.retain(|seg, _| !self.given_up.contains(seg));
        suspects
    }

    /// Notes that segment `seg` could not be repaired: it is not tried again.
    pub(crate) fn give_up(&mut self, seg: u32) {
        self.given_up.insert(seg);
    }

    /// Notes that segment `seg`'s index file has a bad header; whether it is news (to be
    /// counted).
    pub(crate) fn ignore(&mut self, seg: u32) -> bool {
        self.ignored.insert(seg)
    }

    pub(crate) fn unignore(&mut self, seg: u32) {
        self.ignored.remove(&seg);
    }

    /// Notes a segment id seen in the directory.
    pub(crate) fn note_id(&mut self, seg: u32) {
        self.max_id = self.max_id.max(seg);
    }

    /// The highest segment id seen.
    pub(crate) fn max_id(&self) -> u32 {
        self.max_id
    }

    /// Starts segment `seg` as if its index file had been applied up to `idx_consumed`
    /// bytes, describing records up to `data_end` (what a persisted table covers): later
    /// refreshes apply only the entries after it.
    pub(crate) fn seed_segment(&mut self, seg: u32, idx_consumed: u64, data_end: u64, ino: u64) {
        let info = self.seg_mut(seg);
        info.idx_consumed = idx_consumed;
        info.data_end = data_end;
        info.idx_ino = ino;
    }

    /// Whether nothing is marked for repair or ignored: the map describes every index file.
    pub(crate) fn is_clean(&self) -> bool {
        self.suspect.is_empty() && self.ignored.is_empty() && self.given_up.is_empty()
    }

    /// Every key whose latest record is a value, with its location.
    pub(crate) fn live_entries(&self) -> Vec<(u64, Loc)> {
        self.map
            .iter()
            .filter(|(_, loc)| !loc.tombstone)
            .map(|(&h, &loc)| (h, loc))
            .collect()
    }

    /// The id for a new segment: above every id seen.
    pub(crate) fn next_id(&self) -> u32 {
        let newest = self.segs.keys().next_back().copied().unwrap_or(0);
        newest.max(self.max_id) + 1
    }

    /// Loads the index of the cache directory `dir` from its index files, as a process
    /// opening it does (entries are checked against their data files' lengths). Returns the
    /// index, the segments ignored because their index file's header is bad, and the
    /// invalid entries skipped. An index file shorter than its header is a segment being
    /// created (or left by a writer killed while creating it): not visible, not damage.
    pub(crate) fn load(dir: &Path) -> io::Result<(Index, u64, u64)> {
        let mut index = Index::default();
        let (mut bad_segments, mut skipped) = (0, 0);
        for id in dir::list_segments(dir)? {
            let bytes = match fs::read(dir::index_path(dir, id)) {
                Ok(b) => b,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if bytes.len() < SEGMENT_HEADER_LEN {
                continue;
            }
            if decode_segment_header(SegmentFile::Index, &bytes) != Ok(id) {
                bad_segments += 1;
                continue;
            }
            let data_len = match fs::metadata(dir::data_path(dir, id)) {
                Ok(m) => m.len(),
                // Every entry points past the end of a missing file.
                Err(e) if e.kind() == ErrorKind::NotFound => 0,
                Err(e) => return Err(e),
            };
            let body = &bytes[SEGMENT_HEADER_LEN..];
            skipped += index.apply_entries(id, SEGMENT_HEADER_LEN as u64, body, data_len);
        }
        Ok((index, bad_segments, skipped))
    }

    /// Forgets `key_hash` if it still points at `loc` (a record found bad or gone); whether
    /// it did (`false`: the key's latest record is elsewhere now, so `loc` was not damage).
    pub(crate) fn forget(&mut self, key_hash: u64, loc: Loc) -> bool {
        if self.map.get(&key_hash) != Some(&loc) {
            return false;
        }
        self.map.remove(&key_hash);
        self.unaccount(loc);
        true
    }

    /// Forgets a segment and every key whose latest record is in it.
    pub(crate) fn drop_segment(&mut self, seg: u32) {
        if self.segs.remove(&seg).is_some() {
            self.map.retain(|_, loc| loc.seg != seg);
        }
    }

    /// Forgets every segment (the ids seen are kept: they are never reused).
    pub(crate) fn clear(&mut self) {
        self.map.clear();
        self.segs.clear();
        self.suspect.clear();
        self.ignored.clear();
        self.given_up.clear();
    }

    /// The latest records (values and tombstones) in one segment, in file order.
    pub(crate) fn entries_of(&self, seg: u32) -> Vec<(u64, Loc)> {
        let mut out: Vec<(u64, Loc)> = self
            .map
            .iter()
            .filter(|(_, loc)| loc.seg == seg)
            .map(|(&h, &loc)| (h, loc))
            .collect();
        out.sort_unstable_by_key(|(_, loc)| loc.offset);
        out
    }

    /// Every live entry, newest segment first and in file order within a segment.
    pub(crate) fn all_newest_first(&self) -> Vec<(u64, Loc)> {
        let mut out: Vec<(u64, Loc)> = self
            .map
            .iter()
            .filter(|(_, l)| !l.tombstone)
            .map(|(&h, &l)| (h, l))
            .collect();
        out.sort_unstable_by(|a, b| b.1.seg.cmp(&a.1.seg).then(a.1.offset.cmp(&b.1.offset)));
        out
    }

    /// Totals: (live entries, live record bytes, file bytes).
    pub(crate) fn totals(&self) -> (u64, u64, u64) {
        self.segs.values().fold((0, 0, 0), |(e, l, f), s| {
            (e + s.live_entries, l + s.live_bytes, f + s.file_bytes())
        })
    }

    /// Checks the invariants: every location is in a known segment and within its data;
    /// each segment's live and tombstone accounting is the sum of the locations in it.
    /// Panics with a description when one fails (tests and fuzzing only).
    #[cfg(any(test, fuzzing))]
    pub(crate) fn validate(&self) {
        let mut sums: BTreeMap<u32, (u64, u64, u64)> = BTreeMap::new();
        for (&hash, loc) in &self.map {
            let info = self
                .segs
                .get(&loc.seg)
                .unwrap_or_else(|| panic!("{hash:x} points into unknown segment {}", loc.seg));
            assert!(
                u64::from(loc.offset) + loc.record_len() <= info.data_end,
                "{hash:x}: record past its segment's data end"
            );
            let sum = sums.entry(loc.seg).or_default();
            if loc.tombstone {
                sum.1 += loc.record_len();
            } else {
                sum.0 += loc.record_len();
                sum.2 += 1;
            }
        }
        for (seg, info) in &self.segs {
            let (live, tomb, entries) = sums.get(seg).copied().unwrap_or_default();
            assert_eq!(
                (info.live_bytes, info.tomb_bytes, info.live_entries),
                (live, tomb, entries),
                "segment {seg}: accounting disagrees with the map"
            );
        }
    }

    fn unaccount(&mut self, loc: Loc) {
        if let Some(info) = self.segs.get_mut(&loc.seg) {
            if loc.tombstone {
                info.tomb_bytes = info.tomb_bytes.saturating_sub(loc.record_len());
            } else {
                info.live_bytes = info.live_bytes.saturating_sub(loc.record_len());
                info.live_entries = info.live_entries.saturating_sub(1);
            }
        }
    }
}

/// Bytes of index file that hold whole entries past `consumed`.
pub(crate) fn whole_entries(consumed: u64, file_len: u64) -> u64 {
    let avail = file_len.saturating_sub(consumed);
    avail - avail % INDEX_ENTRY_LEN as u64
}

#[cfg(test)]
mod tests {
    use super::super::format::RecordHeader;
    use super::*;

    fn entry(key: &[u8], offset: u32, value_len: u32, flags: u32) -> IndexEntry {
        IndexEntry {
            header: RecordHeader::for_entry(key, value_len as usize, flags),
            offset,
        }
    }

    #[test]
    fn latest_record_wins_and_accounting_follows() {
        let mut ix = Index::default();
        ix.apply(1, &entry(b"a", 32, 10, 0));
        ix.apply(1, &entry(b"b", 67, 10, 0));
        ix.apply(2, &entry(b"a", 32, 20, 0));
        // An older record applied late changes nothing.
        ix.apply(1, &entry(b"a", 40, 99, 0));
        let a = super::super::format::disk_hash(b"a");
        assert_eq!(ix.get(a).unwrap().seg, 2);
        assert_eq!(ix.segs()[&1].live_entries, 1);
        assert_eq!(ix.segs()[&1].live_bytes, 12 + 1 + 10);
        assert_eq!(ix.segs()[&1].data_end, 40 + 12 + 1 + 99);
        ix.apply(
            2,
            &entry(b"a", 100, 0, super::super::format::FLAG_TOMBSTONE),
        );
        assert_eq!(ix.get(a), None);
        assert_eq!(ix.segs()[&2].live_entries, 0);
        ix.validate();
        ix.drop_segment(1);
        ix.validate();
        assert_eq!(ix.totals().0, 0);
        assert_eq!(whole_entries(32, 32 + 70), 48);
    }
}
