//! Verification of every record and index entry of a cache directory.

use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::Path;

use super::super::dir;
use super::super::format::{
    self, SegmentFile, INDEX_ENTRY_LEN, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use super::{file_len, io_at, lock_shared, read_meta, Chunks};
use crate::Result;

/// Problems a [`VerifyReport`] describes in words at most (all are counted).
const MAX_PROBLEMS: usize = 100;

/// What [`verify`] found. Corruption is anything that loses or damages data: a bad segment
/// header, an invalid index entry, a record that fails its checks or is missing. Orphaned
/// records and torn tails are what a killed writer leaves; the next writer removes them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Segments looked at (every id with a data or an index file).
    pub segments: u64,
    /// Records that pass every check and agree with their index entry.
    pub records_ok: u64,
    /// Indexed records that fail a check or are missing, and unreadable gaps between records.
    pub records_corrupt: u64,
    /// Valid records that no index entry points to (invisible; harmless).
    pub records_orphaned: u64,
    /// Index entries that fail their CRC or contradict the data file.
    pub index_entries_corrupt: u64,
    /// Segments with a bad or missing data or index file header.
    pub bad_segment_headers: u64,
    /// Segment files without their partner (a data file without index is invisible), and
    /// index files not yet written (shorter than their header: a segment being created, or
    /// left by a writer killed creating it). Not corruption: the next writer removes them.
    pub orphan_files: u64,
    /// Bytes at the end of files that hold no whole record or index entry.
    pub torn_tail_bytes: u64,
    /// Bytes of segment files read.
    pub bytes_checked: u64,
    /// The first problems, in words (at most 100; all are counted above).
    pub problems: Vec<String>,
}

impl VerifyReport {
    /// Whether nothing is corrupt.
    pub fn is_clean(&self) -> bool {
        self.records_corrupt == 0
            && self.index_entries_corrupt == 0
            && self.bad_segment_headers == 0
    }

    fn problem(&mut self, seg: u32, what: String) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(format!("segment {seg:08x}: {what}"));
        }
    }
}

/// Reads and checks every record and index entry of every segment of the cache directory
/// `dir`: headers, CRCs, key hashes, lengths, and that each index entry describes the record
/// at its offset. `progress(done, total)` is called with bytes read so far and in all.
/// Each segment is read under the shared lock, so writers run between segments.
pub fn verify(dir: &Path, progress: &mut dyn FnMut(u64, u64)) -> Result<VerifyReport> {
    read_meta(dir)?;
    let ids = dir::segment_file_ids(dir).map_err(|e| io_at(dir, e))?;
    let mut total = 0;
    for &id in &ids {
        total += file_len(&dir::data_path(dir, id))?.unwrap_or(0);
        total += file_len(&dir::index_path(dir, id))?.unwrap_or(0);
    }
    let mut report = VerifyReport::default();
    progress(0, total);
    for id in ids {
        let _lock = lock_shared(dir)?;
        verify_segment(dir, id, &mut report, &mut |done| progress(done, total))?;
    }
    // Files may have grown or shrunk since they were measured.
    progress(report.bytes_checked, total.max(report.bytes_checked));
    Ok(report)
}

fn verify_segment(
    dir: &Path,
    id: u32,
    r: &mut VerifyReport,
    progress: &mut dyn FnMut(u64),
) -> Result<()> {
    let idx_path = dir::index_path(dir, id);
    let idx = match fs::read(&idx_path) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(io_at(&idx_path, e)),
    };
    let data = match File::open(dir::data_path(dir, id)) {
        Ok(f) => Some(Chunks::new(f).map_err(|e| io_at(dir, e))?),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(io_at(&dir::data_path(dir, id), e)),
    };
    if idx.is_none() && data.is_none() {
        return Ok(()); // Deleted by a writer since we listed it.
    }
    r.segments += 1;
    let Some(idx) = idx else {
        r.orphan_files += 1;
        r.problem(
            id,
            "data file without index file: invisible, but a writer creating this segment fails"
                .into(),
        );
        r.bytes_checked += data.map_or(0, |d| d.len);
        progress(r.bytes_checked);
        return Ok(());
    };
    r.bytes_checked += idx.len() as u64;
    if idx.len() < SEGMENT_HEADER_LEN {
        // Created, its header not yet written: a writer at work, or one killed between
        // creating the segment's two files. Invisible; the next writer removes it.
        r.orphan_files += 1;
        r.problem(
            id,
            "index file not yet written (a segment being created, or left by a killed \
             writer): invisible; the next writer removes it"
                .into(),
        );
        r.bytes_checked += data.map_or(0, |d| d.len);
        progress(r.bytes_checked);
        return Ok(());
    }
    if format::decode_segment_header(SegmentFile::Index, &idx) != Ok(id) {
        r.bad_segment_headers += 1;
        r.problem(id, "bad index file header: segment ignored".into());
        r.bytes_checked += data.map_or(0, |d| d.len);
        progress(r.bytes_checked);
        return Ok(());
    }
    let body = &idx[SEGMENT_HEADER_LEN..];
    let torn = body.len() % INDEX_ENTRY_LEN;
    if torn != 0 {
        r.torn_tail_bytes += torn as u64;
        r.problem(
            id,
            format!("index file ends with {torn} bytes of a partial entry"),
        );
    }
    let mut entries = Vec::new();
    for (i, chunk) in body.chunks_exact(INDEX_ENTRY_LEN).enumerate() {
        match format::decode_index_entry(chunk) {
            Ok(e) => entries.push(e),
            Err(e) => {
                r.index_entries_corrupt += 1;
                r.problem(id, format!("index entry {i}: {e}"));
            }
        }
    }
    let Some(mut data) = data else {
        r.orphan_files += 1;
        r.records_corrupt += entries.len() as u64;
        r.problem(id, "index file without data file".into());
        return Ok(());
    };
    let header = data
        .get(0, SEGMENT_HEADER_LEN as u64)
        .map_err(|e| io_at(dir, e))?;
    if header.map(|h| format::decode_segment_header(SegmentFile::Data, h)) != Some(Ok(id)) {
        r.bad_segment_headers += 1;
        r.problem(id, "bad data file header".into());
    }
    entries.sort_by_key(|e| e.offset);
    let mut pos = SEGMENT_HEADER_LEN as u64;
    for e in entries {
        let off = u64::from(e.offset);
        if off < pos {
            r.index_entries_corrupt += 1;
            r.problem(
                id,
                format!("index entry for offset {off} overlaps a record"),
            );
            continue;
        }
        if off > pos {
            let garbage = scan_unindexed(&mut data, pos, off, r, dir)?;
            if garbage > 0 {
                r.records_corrupt += 1;
                r.problem(
                    id,
                    format!("{garbage} unreadable bytes before offset {off}"),
                );
            }
        }
        let len = e.header.record_len();
        match data.get(off, len).map_err(|err| io_at(dir, err))? {
            None => {
                r.records_corrupt += 1;
                r.problem(
                    id,
                    format!("record at {off} lies past the end of the data file"),
                );
                continue;
            }
            Some(bytes) => match format::decode_record(bytes, len) {
                Ok(h) if h == e.header => {
                    // A compressed value must also decompress (the library checks it on read).
                    match format::record_value(bytes, &h, u64::from(u32::MAX)) {
                        Ok(_) => r.records_ok += 1,
                        Err(err) => {
                            r.records_corrupt += 1;
                            r.problem(id, format!("record at {off}: {err}"));
                        }
                    }
                }
                Ok(_) => {
                    r.records_corrupt += 1;
                    r.problem(
                        id,
                        format!("record at {off} disagrees with its index entry"),
                    );
                }
                Err(err) => {
                    r.records_corrupt += 1;
                    r.problem(id, format!("record at {off}: {err}"));
                }
            },
        }
        pos = off + len;
        progress(r.bytes_checked + pos);
    }
    let data_len = data.len;
    if data_len > pos {
        let garbage = scan_unindexed(&mut data, pos, data_len, r, dir)?;
        if garbage > 0 {
            r.torn_tail_bytes += garbage;
            r.problem(
                id,
                format!("data file ends with {garbage} bytes of no record"),
            );
        }
    }
    r.bytes_checked += data.len;
    progress(r.bytes_checked);
    Ok(())
}

/// Looks for whole, valid records in `[from, to)`, which no index entry covers; counts them
/// as orphaned and returns the bytes left over where no record could be read.
fn scan_unindexed(
    data: &mut Chunks,
    mut from: u64,
    to: u64,
    r: &mut VerifyReport,
    dir: &Path,
) -> Result<u64> {
    while from < to {
        let Some(head) = data
            .get(from, RECORD_HEADER_LEN as u64)
            .map_err(|e| io_at(dir, e))?
        else {
            break;
        };
        let Ok(len) = format::peek_record_len(head) else {
            break;
        };
        if len > to - from {
            break;
        }
        let Some(bytes) = data.get(from, len).map_err(|e| io_at(dir, e))? else {
            break;
        };
        if format::decode_record(bytes, len).is_err() {
            break;
        }
        r.records_orphaned += 1;
        from += len;
    }
    Ok(to - from)
}
