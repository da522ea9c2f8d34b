//! Repair of damaged segments, by a writer holding the directory's exclusive lock.
//!
//! Records are self-describing (lengths, the full key, CRC32C over all of it), so a segment's
//! data file is the truth and its index file a summary that may be rebuilt from it. The
//! readers mark what looks damaged ([`Repair`]); the next writer, before appending, checks
//! those segments against their data files:
//!
//! - **tail**: records after the last indexed one (a writer killed between writing a batch's
//!   records and their index entries, an index file cut short) are indexed if they check out;
//!   the bytes after the last whole record are cut off;
//! - **rebuild**: every record of the data file is read and checked; if the index file does
//!   not describe exactly the sound records (bad header, another segment's or directory's
//!   entries, entries past the data's end or overlapping), a new one is written and renamed
//!   over it. Readers notice the new file by its inode and read it afresh;
//! - a data file with a bad header whose index file describes it exactly gets a new header;
//!   otherwise nothing says its records are this directory's. Such a segment, one whose data
//!   file is missing and one without a single sound record are removed, index file first, so
//!   that damaged files never hold space outside the limits.
//!
//! A record that fails its checks costs that record only: the scan resumes after it (at
//! the length its header claims, or at the next offset the old index names). Temporary files
//! of killed processes are removed here too.

use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Write};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use super::access;
use super::dir;
use super::format::{
    decode_index_entry, decode_record, decode_segment_header, encode_index_entry,
    encode_segment_header, peek_record_len, IndexEntry, RecordHeader, SegmentFile, INDEX_ENTRY_LEN,
    RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use super::index::Repair;
use super::inspect::Chunks;
use super::stream::{remove_stale_temp_files, STALE_TEMP_AGE};
use super::DiskTier;

/// How often a writer looks for stale temporary files.
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// What a scan of a data file found.
#[derive(Debug, Default)]
struct Scan {
    /// The sound records, in file order.
    entries: Vec<IndexEntry>,
    /// Offsets where a record was looked for and failed its checks.
    damaged: Vec<u64>,
    /// End of the last sound record (the scan's start if none).
    end: u64,
}

impl DiskTier {
    /// Repairs the segments marked as damaged and removes stale temporary files. Called
    /// under the directory lock, after a refresh. Returns whether a segment's files changed
    /// (the caller's open append target must then be reopened).
    pub(super) fn repair_damage(&self) -> io::Result<bool> {
        let suspects = self.index.write().take_suspects();
        let mut changed = false;
        for (id, repair) in suspects {
            let newest = self.index.read().segs().keys().next_back() == Some(&id);
            // A segment that cannot be repaired (an I/O error) is left as it is, not tried
            // again, and read afresh in case the repair got halfway; the writer goes on.
            let repaired = self.repair_segment(id, repair).unwrap_or_else(|e| {
                self.counters
                    .set_error(&format!("segment {id:08x}: repair failed: {e}"));
                self.index.write().give_up(id);
                true
            });
            if repaired {
                changed = true;
                self.index.write().drop_segment(id);
                self.read_files.lock().remove(&id);
                self.refresh_segment(&self.index, id, true, newest)?;
            }
        }
        let due = {
            let mut last = self.last_sweep.lock();
            let due = last.is_none_or(|t| t.elapsed() >= SWEEP_INTERVAL);
            if due {
                *last = Some(Instant::now());
            }
            due
        };
        if let Err(e) = due
            .then(|| remove_stale_temp_files(&self.cfg.dir, STALE_TEMP_AGE))
            .transpose()
        {
            tracing::warn!(target: "gpucache", "looking for stale temporary files: {e}");
        }
        Ok(changed)
    }

    /// Repairs segment `id`; whether its files changed.
    fn repair_segment(&self, id: u32, repair: Repair) -> io::Result<bool> {
        let data_path = dir::data_path(&self.cfg.dir, id);
        let data = match OpenOptions::new().read(true).write(true).open(&data_path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                // Deleted since it was marked, or lost: an index without data serves nothing.
                let idx = dir::index_path(&self.cfg.dir, id);
                if !idx.exists() {
                    return Ok(false);
                }
                self.remove_damaged(id, "its data file is missing")?;
                return Ok(true);
            }
            Err(e) => return Err(e),
        };
        let data_len = data.metadata()?.len();
        let mut header = [0u8; SEGMENT_HEADER_LEN];
        let header_ok = data.read_exact_at(&mut header, 0).is_ok()
            && decode_segment_header(SegmentFile::Data, &header) == Ok(id);
        let known = self.index.read().segs().get(&id).copied();
        if (repair == Repair::Rebuild || !header_ok)
            && self.rebuild(id, &data, data_len, header_ok)?
        {
            return Ok(true);
        }
        match known {
            Some(info) => self.recover_tail(id, &data, data_len, info),
            None => Ok(false),
        }
    }

    /// Indexes the sound records after the last indexed one and cuts off what follows them.
    fn recover_tail(
        &self,
        id: u32,
        data: &File,
        data_len: u64,
        info: super::index::SegInfo,
    ) -> io::Result<bool> {
        let from = info.data_end.max(SEGMENT_HEADER_LEN as u64);
        if data_len <= from || info.idx_consumed < SEGMENT_HEADER_LEN as u64 {
            return Ok(false);
        }
        let scan = scan(data, from, data_len.min(u64::from(u32::MAX)), &[])?;
        let idx = OpenOptions::new()
            .write(true)
            .open(dir::index_path(&self.cfg.dir, id))?;
        // Entries past those applied are torn or invalid: replaced by the scan's.
        idx.set_len(info.idx_consumed)?;
        idx.write_all_at(&encode_entries(&scan.entries), info.idx_consumed)?;
        idx.sync_data()?;
        data.set_len(scan.end)?;
        data.sync_data()?;
        if !scan.entries.is_empty() {
            self.counters.add_repaired_segment();
            tracing::info!(
                target: "gpucache",
                "segment {id:08x}: indexed {} records found after its last index entry",
                scan.entries.len()
            );
        }
        Ok(true)
    }

    /// Checks every record of the data file and rewrites the index file if it does not
    /// describe exactly the sound ones. A data file whose header is bad (`data_header_ok`
    /// false) gets a new header if its index file describes it exactly (the two belong
    /// together), and is removed otherwise.
    fn rebuild(
        &self,
        id: u32,
        data: &File,
        data_len: u64,
        data_header_ok: bool,
    ) -> io::Result<bool> {
        let idx_path = dir::index_path(&self.cfg.dir, id);
        let old = match fs::read(&idx_path) {
            Ok(b) => b,
            // A data file without index: an orphan, removed as such.
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        let header_ok = old.len() >= SEGMENT_HEADER_LEN
            && decode_segment_header(SegmentFile::Index, &old) == Ok(id);
        let body = old.get(SEGMENT_HEADER_LEN..).unwrap_or_default();
        let old_entries: Vec<_> = if header_ok {
            body.chunks_exact(INDEX_ENTRY_LEN)
                .map(decode_index_entry)
                .collect()
        } else {
            Vec::new()
        };
        let mut hints: Vec<u64> = old_entries
            .iter()
            .flatten()
            .map(|e| u64::from(e.offset))
            .collect();
        hints.sort_unstable();
        hints.dedup();
        // Offsets are 32-bit: nothing past 4 GiB can be indexed.
        let to = data_len.min(u64::from(u32::MAX));
        let scan = scan(data, SEGMENT_HEADER_LEN as u64, to, &hints)?;
        let sound = header_ok
            && body.len() % INDEX_ENTRY_LEN == 0
            && old_entries.iter().all(Result::is_ok)
            && old_entries
                .iter()
                .flatten()
                .all(|e| u64::from(e.offset) + e.header.record_len() <= data_len)
            && old_entries
                .iter()
                .flatten()
                .filter(|e| scan.damaged.binary_search(&u64::from(e.offset)).is_err())
                .eq(scan.entries.iter());
        if sound {
            // Right about every record, damaged ones included: keeping their entries keeps
            // those keys missing rather than bringing back older values of theirs.
            if data_header_ok {
                return Ok(false);
            }
            data.write_all_at(&encode_segment_header(SegmentFile::Data, id), 0)?;
            data.sync_data()?;
            self.counters.add_repaired_segment();
            self.counters.set_error(&format!(
                "segment {id:08x}: data file header damaged; rewrote it"
            ));
            return Ok(true);
        }
        if !data_header_ok {
            // Nothing says these records are this directory's.
            self.remove_damaged(id, "its data file's header is bad")?;
            return Ok(true);
        }
        if scan.entries.is_empty() {
            self.remove_damaged(id, "no record in it is sound")?;
            return Ok(true);
        }
        let mut bytes = encode_segment_header(SegmentFile::Index, id).to_vec();
        bytes.extend_from_slice(&encode_entries(&scan.entries));
        let tmp = dir::index_path(&self.cfg.dir, id)
            .with_extension(format!("idx.tmp.{}", std::process::id()));
        let written = (|| {
            let mut f = access::create_file(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            fs::rename(&tmp, &idx_path)
        })();
        if let Err(e) = written {
            let _ = dir::remove_if_present(&tmp);
            return Err(e);
        }
        dir::sync_dir(&self.cfg.dir)?;
        if data_len > scan.end {
            data.set_len(scan.end)?;
            data.sync_data()?;
        }
        self.counters.add_repaired_segment();
        self.counters.set_error(&format!(
            "segment {id:08x}: index file damaged; rebuilt it from the data file ({} records, \
             {} damaged)",
            scan.entries.len(),
            scan.damaged.len()
        ));
        Ok(true)
    }

    /// Removes a segment that cannot be repaired, index file first (readers stop seeing it
    /// before its data goes).
    fn remove_damaged(&self, id: u32, why: &str) -> io::Result<()> {
        // It may lie between others: the table goes first if it may not name it.
        self.forget_table_before_deleting(id)?;
        dir::remove_if_present(&dir::index_path(&self.cfg.dir, id))?;
        dir::remove_if_present(&dir::data_path(&self.cfg.dir, id))?;
        self.index.write().note_id(id);
        self.counters.add_removed_segment();
        self.counters
            .set_error(&format!("segment {id:08x} removed: {why}"));
        Ok(())
    }
}

fn encode_entries(entries: &[IndexEntry]) -> Vec<u8> {
    entries.iter().flat_map(encode_index_entry).collect()
}

/// Finds the sound records of `data` in `[from, to)`. After a record that fails, it goes on
/// at the length that record's header claims if a sound record starts there, else at the
/// next offset in `hints` (an old index's), else at the next byte where a sound record
/// starts, so that damage costs only the damaged records. The bytes read for records that
/// fail are bounded by a multiple of the file's length, whatever the file and the hints.
fn scan(data: &File, from: u64, to: u64, hints: &[u64]) -> io::Result<Scan> {
    let mut chunks = Chunks::new(data.try_clone()?)?;
    let to = to.min(chunks.len);
    let mut budget = to.saturating_mul(4);
    let mut out = Scan {
        end: from,
        ..Scan::default()
    };
    let mut pos = from;
    let mut found = try_record(&mut chunks, pos, to, &mut budget)?;
    while pos < to {
        match found {
            Ok(header) => {
                out.entries.push(IndexEntry {
                    header,
                    offset: pos as u32, // `to` is at most u32::MAX.
                });
                pos += header.record_len();
                out.end = pos;
                found = try_record(&mut chunks, pos, to, &mut budget)?;
            }
            Err(claimed) => {
                out.damaged.push(pos);
                if let Some(len) = claimed {
                    let next = try_record(&mut chunks, pos + len, to, &mut budget)?;
                    if next.is_ok() {
                        (pos, found) = (pos + len, next);
                        continue;
                    }
                }
                let hint = hints.get(hints.partition_point(|&h| h <= pos)).copied();
                if let Some(next) = hint.filter(|&h| h < to) {
                    pos = next;
                    found = try_record(&mut chunks, pos, to, &mut budget)?;
                    continue;
                }
                // Nothing says where the next record starts: look for one, byte by byte.
                loop {
                    pos += 1;
                    if pos >= to || budget == 0 {
                        return Ok(out);
                    }
                    found = try_record(&mut chunks, pos, to, &mut budget)?;
                    if found.is_ok() {
                        break;
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The record at `pos` if it is sound; otherwise the length its header claims, if that
/// fits before `to`. The bytes of a record that fails are taken from `budget`.
fn try_record(
    chunks: &mut Chunks,
    pos: u64,
    to: u64,
    budget: &mut u64,
) -> io::Result<Result<RecordHeader, Option<u64>>> {
    if pos >= to {
        return Ok(Err(None));
    }
    let Some(head) = chunks.get(pos, RECORD_HEADER_LEN as u64)? else {
        return Ok(Err(None));
    };
    let Ok(len) = peek_record_len(head) else {
        return Ok(Err(None));
    };
    if len > to - pos {
        return Ok(Err(None));
    }
    let Some(bytes) = chunks.get(pos, len)? else {
        return Ok(Err(None));
    };
    let record = decode_record(bytes, len);
    if record.is_err() {
        *budget = budget.saturating_sub(len);
    }
    Ok(record.map_err(|_| Some(len)))
}
