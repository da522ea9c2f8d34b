//! Tests of opening through the table (`super`).

use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;

use super::super::{DiskConfig, DiskTier};
use super::*;
use crate::tier::{Tier, WriteContext, WriteOp};
use crate::{Identity, Lookup};

/// Opens `dir` as a cache does: through the descriptor its owner check opened.
fn open(dir: &Path) -> DiskTier {
    open_as(dir, Identity::default(), true)
}

fn open_as(dir: &Path, identity: Identity, through_fd: bool) -> DiskTier {
    let (dir_stat, dir_fd) = match through_fd {
        true => super::super::check_owner_open(dir).unwrap(),
        false => (None, Default::default()),
    };
    DiskTier::open(DiskConfig {
        dir: dir.to_path_buf(),
        identity,
        max_bytes: 1 << 30,
        max_entries: u64::MAX,
        segment_bytes: 64 << 10,
        access: crate::DirAccess::Private,
        allow_foreign_owner: false,
        table_min_entries: 0,
        dir_stat,
        dir_fd,
    })
    .unwrap()
}

fn key(i: u32) -> Bytes {
    Bytes::from(format!("key-{i}"))
}

fn value(i: u32, generation: u8) -> Bytes {
    Bytes::from(vec![generation ^ (i as u8); 100 + (i as usize % 300)])
}

fn write(disk: &DiskTier, ops: &[(u32, Option<u8>)]) {
    let owned: Vec<(Bytes, Option<Bytes>)> = ops
        .iter()
        .map(|&(i, g)| (key(i), g.map(|g| value(i, g))))
        .collect();
    let ops: Vec<WriteOp<'_>> = owned
        .iter()
        .map(|(k, v)| match v {
            Some(value) => WriteOp::Put { key: k, value },
            None => WriteOp::Remove { key: k },
        })
        .collect();
    disk.write(&ops, &WriteContext::new(&|_| false, true))
        .unwrap();
}

fn get(disk: &DiskTier, i: u32) -> Option<Bytes> {
    match disk.lookup(&key(i)) {
        Lookup::Hit(v) => Some(v),
        _ => None,
    }
}

/// A directory of 1,000 entries whose writer closed (leaving a table that covers them).
fn populated() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let disk = open(dir.path());
    let ops: Vec<_> = (0..1000).map(|i| (i, Some(1))).collect();
    for chunk in ops.chunks(100) {
        write(&disk, chunk);
    }
    drop(disk);
    assert!(table::table_path(dir.path()).exists());
    dir
}

#[test]
fn an_open_serves_through_the_table_without_reading_the_index_files() {
    let dir = populated();
    // By path (an owner check that could not open the directory) as well.
    let by_path = open_as(dir.path(), Identity::default(), false);
    assert!(!by_path.index_is_full(), "served through the table");
    assert_eq!(get(&by_path, 3), Some(value(3, 1)));
    drop(by_path);
    let disk = open(dir.path());
    assert!(!disk.index_is_full(), "served through the table");
    assert_eq!(disk.index.read().totals().0, 0, "no index entry read");
    for i in 0..1000 {
        assert_eq!(get(&disk, i), Some(value(i, 1)), "key {i}");
    }
    assert_eq!(get(&disk, 5000), None);
    assert!(disk.build_full_index());
    assert!(disk.index_is_full() && disk.lazy.read().is_none());
    assert_eq!(disk.disk_stats().entries, 1000);
    assert_eq!(get(&disk, 7), Some(value(7, 1)));
    disk.validate();
}

/// Records written after the table (newer values, removals, records moved by a
/// compaction) win over what the table says, in a process that opens afterwards and in
/// one that was already open.
#[test]
fn what_was_written_after_the_table_wins() {
    let dir = populated();
    let early = open(dir.path());
    assert!(!early.index_is_full());
    let writer = open(dir.path());
    writer.ensure_full().unwrap();
    // Few enough not to rewrite the table.
    write(
        &writer,
        &[(1, Some(2)), (2, None), (3, Some(2)), (1000, Some(2))],
    );
    write(&writer, &[(3, None)]);
    let late = open(dir.path());
    assert!(!late.index_is_full(), "the table is still trusted");
    std::thread::sleep(Duration::from_millis(25)); // Past the refresh interval.
    for disk in [&late, &early] {
        // A miss reads what other processes appended (as with a full index, a key
        // found is not looked for again).
        assert_eq!(get(disk, 99_999), None);
        assert_eq!(get(disk, 1), Some(value(1, 2)));
        assert_eq!(get(disk, 2), None);
        assert_eq!(get(disk, 3), None);
        assert_eq!(get(disk, 1000), Some(value(1000, 2)));
        assert_eq!(get(disk, 4), Some(value(4, 1)));
    }
    // Every record moved: the table names only deleted segments.
    writer.compact().unwrap();
    let after = open(dir.path());
    std::thread::sleep(Duration::from_millis(25));
    for disk in [&after, &late, &early] {
        assert_eq!(get(disk, 99_999), None);
        for i in (0..1000).step_by(7) {
            let expected = match i {
                1 => Some(value(1, 2)),
                2 | 3 => None,
                _ => Some(value(i, 1)),
            };
            assert_eq!(get(disk, i), expected, "key {i}");
        }
    }
}

#[test]
fn a_damaged_table_page_falls_back_to_the_full_index() {
    let dir = populated();
    let path = table::table_path(dir.path());
    let mut bytes = fs::read(&path).unwrap();
    let header = table::decode_header(&bytes).unwrap();
    let page = table::page_of(disk_hash_of(7), header.pages) as usize;
    bytes[header.header_len as usize + page * table::PAGE_LEN + 40] ^= 0xff;
    fs::write(&path, &bytes).unwrap();
    let disk = open(dir.path());
    assert!(!disk.index_is_full());
    assert_eq!(get(&disk, 7), Some(value(7, 1)));
    assert!(
        disk.index_is_full(),
        "the damaged page made it read the index files"
    );
    // A cut table is no table.
    fs::write(&path, &bytes[..100]).unwrap();
    let disk = open(dir.path());
    assert!(disk.index_is_full());
    assert_eq!(get(&disk, 8), Some(value(8, 1)));
}

/// A data file whose header was destroyed: its records are sound, so they are served through
/// the table as through the full index (each checked when read), without reading the header
/// first; the full index finds the bad header and marks the segment for repair, which
/// rewrites the header (the index file describes the data exactly).
#[test]
fn a_data_file_with_a_bad_header_is_served_as_without_a_table_and_repaired() {
    let dir = populated();
    let seg = match table::Table::open(dir.path())
        .unwrap()
        .unwrap()
        .find(disk_hash_of(7))
    {
        Found::At(slot) => slot.seg,
        other => panic!("{other:?}"),
    };
    let path = dir::data_path(dir.path(), seg);
    let data = fs::OpenOptions::new().write(true).open(&path).unwrap();
    data.write_all_at(&[0xee; 8], 0).unwrap();
    let disk = open(dir.path());
    assert!(!disk.index_is_full());
    assert_eq!(get(&disk, 7), Some(value(7, 1)), "a sound record");
    assert!(
        !disk.index_is_full(),
        "served without reading the index files"
    );
    assert!(disk.build_full_index());
    let header = fs::read(&path).unwrap();
    assert_eq!(
        super::super::format::decode_segment_header(
            super::super::format::SegmentFile::Data,
            &header[..SEGMENT_HEADER_LEN]
        ),
        Ok(seg),
        "the repair rewrote the header"
    );
    let in_seg = |i: u32| disk.index.read().get(disk_hash_of(i)).map(|l| l.seg) == Some(seg);
    let neighbour = (0..1000)
        .find(|&i| i != 7 && in_seg(i))
        .expect("a key beside 7");
    assert_eq!(get(&disk, neighbour), Some(value(neighbour, 1)));
    assert_eq!(get(&disk, 7), Some(value(7, 1)));
}

#[test]
fn a_replaced_index_file_or_a_foreign_table_is_not_trusted() {
    let dir = populated();
    let idx = newest_index_file(dir.path());
    let copy = dir.path().join("copy");
    fs::copy(&idx, &copy).unwrap();
    fs::rename(&copy, &idx).unwrap();
    let disk = open(dir.path());
    assert!(disk.index_is_full(), "a new inode: the table is not used");
    assert_eq!(get(&disk, 9), Some(value(9, 1)));
    drop(disk);
    // Replaced and grown since (a torn entry after the copy): the same.
    fs::copy(&idx, &copy).unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(&copy)
        .unwrap()
        .write_all(&[0xab; 5])
        .unwrap();
    fs::rename(&copy, &idx).unwrap();
    let disk = open(dir.path());
    assert!(disk.index_is_full(), "a new inode: the table is not used");
    assert_eq!(get(&disk, 9), Some(value(9, 1)));
    drop(disk);
    // Another directory's table.
    let other = populated();
    fs::copy(
        table::table_path(other.path()),
        table::table_path(dir.path()),
    )
    .unwrap();
    let disk = open(dir.path());
    assert!(disk.index_is_full());
    assert_eq!(get(&disk, 10), Some(value(10, 1)));
}

/// A writer's repair of a damaged last entry cuts the newest index file below the table's
/// watermark (the covered bytes were durable before the table was written, so nothing else
/// can), and later appends grow it past it again: the open, which reads the last covered
/// entry before the new ones, no longer trusts the table.
#[test]
fn an_index_file_cut_and_grown_past_the_watermark_is_not_trusted() {
    let dir = populated();
    let idx = newest_index_file(dir.path());
    let n = fs::metadata(&idx).unwrap().len();
    let file = fs::OpenOptions::new().write(true).open(&idx).unwrap();
    // Another entry where the last one was (here: the last one with another offset), and
    // one more after it.
    let mut entry = [0u8; INDEX_ENTRY_LEN];
    FileExt::read_exact_at(&File::open(&idx).unwrap(), &mut entry, n - 24).unwrap();
    entry[8] ^= 1;
    file.write_all_at(&entry, n - INDEX_ENTRY_LEN as u64)
        .unwrap();
    let disk = open(dir.path());
    assert!(
        !disk.index_is_full(),
        "as long as the table says: its bytes are not read"
    );
    drop(disk);
    file.write_all_at(&entry, n).unwrap();
    let disk = open(dir.path());
    assert!(disk.index_is_full(), "the table was not trusted");
}

#[test]
fn clear_removes_the_table_and_writers_rewrite_it() {
    let dir = populated();
    let disk = open(dir.path());
    disk.clear().unwrap();
    assert!(!table::table_path(dir.path()).exists());
    let fresh = open(dir.path());
    assert_eq!(get(&fresh, 1), None);
    // Enough new entries make a durable write rewrite it.
    let ops: Vec<_> = (0..200).map(|i| (i, Some(3))).collect();
    write(&disk, &ops);
    let reopened = open(dir.path());
    assert!(!reopened.index_is_full());
    assert_eq!(get(&reopened, 150), Some(value(150, 3)));
    assert_eq!(get(&reopened, 500), None);
}

/// The table vouches for the meta file while its copy of the meta bytes holds the
/// opener's identity: every wipe removes it before writing another meta file.
#[test]
fn a_table_vouches_for_the_meta_file_while_it_holds_the_openers_identity() {
    let dir = populated();
    let meta = dir.path().join(dir::META_FILE);
    // The same bytes under a new inode: the table is still used.
    let copy = dir.path().join("meta.copy");
    fs::copy(&meta, &copy).unwrap();
    fs::rename(&copy, &meta).unwrap();
    let disk = open(dir.path());
    assert!(!disk.index_is_full(), "the table is used");
    assert_eq!(get(&disk, 4), Some(value(4, 1)));
    drop(disk);
    // A table holding another identity: not used, the meta file decides.
    let path = table::table_path(dir.path());
    let mut bytes = fs::read(&path).unwrap();
    let mut header = table::decode_header(&bytes).unwrap();
    header.meta = super::super::format::encode_meta(&Identity::new(b"other".to_vec()));
    let encoded = table::encode_header(&header);
    bytes[..encoded.len()].copy_from_slice(&encoded);
    fs::write(&path, &bytes).unwrap();
    let disk = open(dir.path());
    assert!(
        disk.index_is_full(),
        "the table vouched for another identity"
    );
    assert_eq!(get(&disk, 5), Some(value(5, 1)));
    // Another identity opening: the table does not vouch, the meta file is read, and
    // the directory is wiped for it, the table first.
    let dir = populated();
    let other = open_as(dir.path(), Identity::new(b"other".to_vec()), true);
    assert!(
        !table::table_path(dir.path()).exists(),
        "the wipe left the table"
    );
    assert_eq!(get(&other, 5), None);
    assert_eq!(other.disk_stats().entries, 0);
    drop(other);
    // And back: the first identity finds no table of the other's and wipes again.
    let back = open(dir.path());
    assert!(back.index_is_full());
    assert_eq!(get(&back, 5), None);
}

/// `len` bytes that do not compress, of key `i` and generation `g`.
fn large(i: u32, len: usize, g: u8) -> Bytes {
    let mut x = u64::from(i) << 8 | u64::from(g) | 1 << 40;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Writes `large(i, len, g)` for each `i`: two such values of 30,000 bytes fill a test
/// segment (64 KiB).
fn write_large(disk: &DiskTier, ids: &[u32], len: usize, g: u8) {
    let values: Vec<(Bytes, Bytes)> = ids.iter().map(|&i| (key(i), large(i, len, g))).collect();
    let ops: Vec<WriteOp<'_>> = values
        .iter()
        .map(|(k, v)| WriteOp::Put { key: k, value: v })
        .collect();
    disk.write(&ops, &WriteContext::new(&|_| false, true))
        .unwrap();
}

fn get_large(disk: &DiskTier, i: u32, len: usize, g: u8) -> bool {
    get(disk, i) == Some(large(i, len, g))
}

/// The newest segment `dir`'s table names.
fn newest_segment(dir: &Path) -> u32 {
    *dir::list_segments(dir).unwrap().last().expect("a segment")
}

fn newest_index_file(dir: &Path) -> std::path::PathBuf {
    dir::index_path(dir, newest_segment(dir))
}

fn table_top(dir: &Path) -> u32 {
    let table = table::Table::open(dir).unwrap().expect("a table");
    table.header.segs.last().expect("a segment").id
}

/// Segments started after the table (too few entries written to rewrite it) are found by
/// an open that lists nothing: the index file at the id after the table's newest.
#[test]
fn segments_started_after_the_table_are_found() {
    let dir = populated();
    let top = table_top(dir.path());
    let writer = open(dir.path());
    writer.ensure_full().unwrap();
    write_large(&writer, &[5000, 5001, 5002, 5003], 30_000, 1);
    write_large(&writer, &[3], 30_000, 2); // A newer value of a key the table names.
    let newest = newest_segment(dir.path());
    assert!(newest >= top + 2, "segments {top} .. {newest}");
    assert_eq!(table_top(dir.path()), top, "the table was rewritten");
    let disk = open(dir.path());
    assert!(!disk.index_is_full(), "served through the table");
    for i in 5000..5004 {
        assert!(get_large(&disk, i, 30_000, 1), "key {i}");
    }
    assert!(
        get_large(&disk, 3, 30_000, 2),
        "key 3's value written after the table"
    );
    assert_eq!(get(&disk, 4), Some(value(4, 1)));
}

/// A compaction that deletes a segment started after the table, while later ones stay,
/// removes the table first: an open would otherwise find no index file at the id after
/// the table's newest and miss the later segments.
#[test]
fn a_compaction_deleting_a_segment_the_table_does_not_name_removes_the_table() {
    let dir = populated();
    let top = table_top(dir.path());
    let writer = open(dir.path());
    writer.ensure_full().unwrap();
    // Two such values fill a segment: these span at least three segments past the table's.
    write_large(&writer, &[5000, 5001, 5002, 5003, 5004, 5005], 30_000, 1);
    let seg_of = |i: u32| writer.index.read().get(disk_hash_of(i)).unwrap().seg;
    let victim = seg_of(5002);
    assert!(victim > top && seg_of(5005) > victim, "{top} {victim}");
    // Dead bytes in `victim` only.
    write_large(&writer, &[5002], 30_000, 2);
    writer.compact().unwrap();
    assert!(!dir::segment_file_ids(dir.path()).unwrap().contains(&victim));
    let disk = open(dir.path());
    for i in [5000, 5001, 5003, 5004, 5005] {
        assert!(get_large(&disk, i, 30_000, 1), "key {i}");
    }
    assert!(get_large(&disk, 5002, 30_000, 2), "key 5002");
    assert_eq!(get(&disk, 4), Some(value(4, 1)));
}

fn disk_hash_of(i: u32) -> u64 {
    super::super::format::disk_hash(&key(i))
}

/// The table the directory fuzz target builds is one an open trusts, and a hostile page in
/// it (a slot naming a key's hash and the offset of another key's record) is not served.
#[test]
fn the_fuzz_targets_table_is_trusted_and_its_slots_checked() {
    let dir = tempfile::tempdir().unwrap();
    let disk = open(dir.path());
    write(&disk, &[(1, Some(1)), (2, Some(1))]);
    drop(disk);
    table::remove_table(dir.path()).unwrap();
    let seg = *dir::list_segments(dir.path()).unwrap().first().unwrap();
    assert_eq!(seg, 1);
    // Key 1's hash, pointing at key 2's record (the first after the data header).
    let writer = open(dir.path());
    writer.ensure_full().unwrap();
    let loc2 = writer.index.read().get(disk_hash_of(2)).unwrap();
    drop(writer);
    let mut page = vec![0u8; table::PAGE_LEN];
    page[4..6].copy_from_slice(&1u16.to_le_bytes());
    page[8..16].copy_from_slice(&disk_hash_of(1).to_le_bytes());
    page[16..20].copy_from_slice(&1u32.to_le_bytes());
    page[20..24].copy_from_slice(&loc2.offset.to_le_bytes());
    page[24..28].copy_from_slice(&loc2.value_len.to_le_bytes());
    page[28..30].copy_from_slice(&loc2.key_len.to_le_bytes());
    let bytes = trusted_table_for_fuzzing(dir.path(), &page, true).unwrap();
    fs::write(table::table_path(dir.path()), bytes).unwrap();
    let disk = open(dir.path());
    assert!(!disk.index_is_full(), "the table was not trusted");
    assert_eq!(get(&disk, 1), None, "served another key's record");
}

/// The open's one read at the newest index file's watermark tells a file at the watermark
/// from one grown since and from one cut or changed before it, with and without a covered
/// entry.
#[test]
fn the_read_at_the_watermark_tells_unchanged_grown_and_cut_files_apart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idx");
    let header = [7u8; SEGMENT_HEADER_LEN];
    let entry = [9u8; INDEX_ENTRY_LEN];
    let tail_of = |bytes: &[u8], idx_len: u64, last_entry_crc: u32| {
        fs::File::create(&path).unwrap().write_all(bytes).unwrap();
        let seg = TableSeg {
            id: 1,
            idx_len,
            data_end: 0,
            idx_ino: 0,
            idx_btime: 0,
            last_entry_crc,
        };
        covered_tail(&File::open(&path).unwrap(), &seg).unwrap()
    };
    let crc = crc32c::crc32c(&entry);
    let one = [&header[..], &entry[..]].concat();
    let covered = one.len() as u64;
    assert_eq!(tail_of(&one, covered, crc), CoveredTail::AtEnd);
    assert_eq!(
        tail_of(&[&one[..], &[1]].concat(), covered, crc),
        CoveredTail::Grown
    );
    assert_eq!(tail_of(&one, covered, crc ^ 1), CoveredTail::Differs);
    assert_eq!(
        tail_of(&one[..one.len() - 1], covered, crc),
        CoveredTail::Differs
    );
    // No entry covered: the header's end is what must be there.
    let h = SEGMENT_HEADER_LEN as u64;
    assert_eq!(tail_of(&header, h, 0), CoveredTail::AtEnd);
    assert_eq!(tail_of(&one, h, 0), CoveredTail::Grown);
    assert_eq!(tail_of(&header[..10], h, 0), CoveredTail::Differs);
}
