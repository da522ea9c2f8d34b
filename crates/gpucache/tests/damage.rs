//! Damaged files must cost neither space nor values (issue 11, items 2, 4.3 and 4.4): index
//! files swapped, zeroed, truncated, taken from another directory or forged, data files cut
//! short, segments left half created and temporary files left by killed processes. Every
//! case runs on a real directory and reads it back through a fresh cache, as a new process
//! would; `gpucache::inspect` must agree with the engine afterwards.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use common::{key, listing, seg_path, segment_file_bytes, segment_header, value_for, verify};
use gpucache::{inspect, Cache, CacheBuilder};

const IDENTITY: &[u8] = b"damage-test driver 1";
/// Segments of 64 KiB: a few hundred values fill several.
const SEGMENT: u64 = 64 << 10;

fn builder(dir: &Path) -> CacheBuilder {
    Cache::builder()
        .directory(dir)
        .identity(IDENTITY)
        .max_segment_bytes(SEGMENT)
        .max_disk_bytes(8 << 20)
        .max_memory_bytes(64 << 20)
}

fn value_len(id: u32) -> usize {
    700 + (id as usize * 53) % 600
}

/// Stores keys `ids` (version 1) and closes the cache, which flushes.
fn populate(dir: &Path, ids: std::ops::Range<u32>) {
    let c = builder(dir).open().unwrap();
    for id in ids {
        c.insert(&key(id), value_for(id, 1, value_len(id))).unwrap();
    }
}

/// Opens `dir` without preload (every hit is a disk read) and returns how many of `ids`
/// are served; a value that is served must be exactly the one stored.
fn served(dir: &Path, ids: std::ops::Range<u32>) -> u32 {
    let c = builder(dir).preload(false).open().unwrap();
    count_served(&c, ids)
}

fn count_served(c: &Cache, ids: std::ops::Range<u32>) -> u32 {
    let mut n = 0;
    for id in ids {
        if let Some(v) = c.get(&key(id)) {
            verify(id, &v).unwrap_or_else(|e| panic!("wrong bytes served: {e}"));
            n += 1;
        }
    }
    n
}

fn segment_ids(dir: &Path) -> Vec<u32> {
    let mut ids: Vec<u32> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let hex = name.strip_prefix("seg-")?.strip_suffix(".idx")?;
            u32::from_str_radix(hex, 16).ok()
        })
        .collect();
    ids.sort_unstable();
    ids
}

/// After the damage was repaired: `verify` finds nothing corrupt, the tools see what the
/// engine sees, and the files hold no space the engine does not count.
fn assert_tools_agree(dir: &Path, entries: u64) {
    assert_tools_agree_on_damage(dir, entries, 0);
}

/// [`assert_tools_agree`] where `damaged` records of the data files could not be read back.
fn assert_tools_agree_on_damage(dir: &Path, entries: u64, damaged: u64) {
    let report = inspect::verify(dir, &mut |_, _| {}).unwrap();
    assert_eq!(report.records_corrupt, damaged, "{report:?}");
    assert_eq!(report.index_entries_corrupt, 0, "{report:?}");
    assert_eq!(report.bad_segment_headers, 0, "{report:?}");
    assert_eq!(report.torn_tail_bytes, 0, "{report:?}");
    assert_eq!(report.records_orphaned, 0, "{report:?}");
    assert_eq!(report.orphan_files, 0, "{report:?}");
    let stats = inspect::stats(dir).unwrap();
    assert_eq!(stats.bad_segments, 0, "{stats:?}");
    assert_eq!(stats.live_entries, entries, "{stats:?}");
    let c = builder(dir).preload(false).open().unwrap();
    let disk = c.stats().disk.unwrap();
    assert_eq!(disk.entries, entries);
    assert_eq!(
        disk.file_bytes,
        segment_file_bytes(dir),
        "the engine counts every byte of the segment files: {:?}",
        listing(dir)
    );
    assert_eq!(stats.file_bytes, segment_file_bytes(dir));
}

const N: u32 = 300;

fn populated() -> (tempfile::TempDir, Vec<u32>) {
    let tmp = tempfile::tempdir().unwrap();
    populate(tmp.path(), 0..N);
    let segs = segment_ids(tmp.path());
    assert!(segs.len() >= 4, "{:?}", listing(tmp.path()));
    assert_eq!(served(tmp.path(), 0..N), N);
    (tmp, segs)
}

#[test]
fn swapped_index_files_are_rebuilt_from_their_data() {
    let (tmp, segs) = populated();
    let dir = tmp.path();
    let (a, b) = (seg_path(dir, segs[0], "idx"), seg_path(dir, segs[1], "idx"));
    let swap = dir.join("swap");
    fs::rename(&a, &swap).unwrap();
    fs::rename(&b, &a).unwrap();
    fs::rename(&swap, &b).unwrap();
    assert_eq!(served(dir, 0..N), N, "every intact value is served again");
    assert_tools_agree(dir, u64::from(N));
}

#[test]
fn a_zeroed_index_file_is_rebuilt_from_its_data() {
    let (tmp, segs) = populated();
    let dir = tmp.path();
    let idx = seg_path(dir, segs[1], "idx");
    let len = fs::metadata(&idx).unwrap().len() as usize;
    fs::write(&idx, vec![0u8; len]).unwrap();
    assert_eq!(served(dir, 0..N), N);
    assert_tools_agree(dir, u64::from(N));
}

#[test]
fn a_truncated_index_file_is_completed_from_its_data() {
    let (tmp, segs) = populated();
    let dir = tmp.path();
    // A sealed segment's index cut inside its sixth entry, and the newest one's cut to its
    // header: the records they no longer describe are intact in the data files.
    for (seg, keep) in [(segs[1], 32 + 5 * 24 + 7), (*segs.last().unwrap(), 32)] {
        let idx = seg_path(dir, seg, "idx");
        let bytes = fs::read(&idx).unwrap();
        fs::write(&idx, &bytes[..keep]).unwrap();
    }
    assert_eq!(served(dir, 0..N), N);
    assert_tools_agree(dir, u64::from(N));
}

/// The offsets of the records an index file lists, in file order.
fn record_offsets(idx: &Path) -> Vec<u64> {
    fs::read(idx).unwrap()[32..]
        .chunks_exact(24)
        .map(|e| u64::from(u32::from_le_bytes(e[8..12].try_into().unwrap())))
        .collect()
}

fn flip_byte(path: &Path, at: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at as usize] ^= 0x5A;
    fs::write(path, bytes).unwrap();
}

#[test]
fn a_rebuild_loses_only_the_damaged_records() {
    let (tmp, segs) = populated();
    let dir = tmp.path();
    // Both files of one segment damaged: its index zeroed, and in its data one record's
    // value and, further on, another record's length field.
    let (idx, dat) = (seg_path(dir, segs[1], "idx"), seg_path(dir, segs[1], "dat"));
    let offsets = record_offsets(&idx);
    assert!(offsets.len() > 40);
    flip_byte(&dat, offsets[10] + 12 + 44 + 5);
    flip_byte(&dat, offsets[30] + 9);
    fs::write(&idx, vec![0u8; fs::metadata(&idx).unwrap().len() as usize]).unwrap();
    assert_eq!(served(dir, 0..N), N - 2);
    assert_tools_agree_on_damage(dir, u64::from(N) - 2, 2);
}

#[test]
fn a_foreign_index_file_is_replaced_by_one_rebuilt_from_the_data() {
    let (tmp, segs) = populated();
    let dir = tmp.path();
    // Another directory's first index file: a valid header of the same segment id and
    // valid entries, which describe a few small records of other keys.
    let other = tempfile::tempdir().unwrap();
    {
        let c = builder(other.path()).open().unwrap();
        for id in 10_000..10_020 {
            c.insert(&key(id), value_for(id, 1, 100)).unwrap();
        }
    }
    assert_eq!(segment_ids(other.path()), vec![segs[0]]);
    fs::copy(
        seg_path(other.path(), segs[0], "idx"),
        seg_path(dir, segs[0], "idx"),
    )
    .unwrap();
    assert_eq!(served(dir, 0..N), N);
    assert_eq!(
        served(dir, 10_000..10_020),
        0,
        "nothing of the other directory"
    );
    assert_tools_agree(dir, u64::from(N));
}

#[test]
fn segments_beyond_repair_are_removed() {
    let (tmp, segs) = populated();
    let dir = tmp.path();
    // One segment with both headers destroyed (nothing says which segment the records
    // belong to), and one whose data file is gone.
    for ext in ["dat", "idx"] {
        let path = seg_path(dir, segs[1], ext);
        let mut bytes = fs::read(&path).unwrap();
        bytes[..32].fill(0);
        fs::write(&path, &bytes).unwrap();
    }
    fs::remove_file(seg_path(dir, segs[2], "dat")).unwrap();
    let c = builder(dir).preload(false).open().unwrap();
    // Until the writer thread has built the full index and repaired what it found (a flush
    // waits for that), lookups go through the hash table, which still finds the intact
    // records of the segment about to be removed.
    c.flush().unwrap();
    let n = count_served(&c, 0..N);
    assert!(n < N && n > N / 3, "{n}");
    c.insert(&key(N), value_for(N, 1, 100)).unwrap();
    c.flush().unwrap();
    drop(c);
    for seg in [segs[1], segs[2]] {
        for ext in ["dat", "idx"] {
            assert!(!seg_path(dir, seg, ext).exists(), "{:?}", listing(dir));
        }
    }
    assert_eq!(served(dir, 0..N), n, "the other segments lost nothing");
    assert_tools_agree(dir, u64::from(n) + 1);
}

#[test]
fn a_damaged_data_file_header_is_rewritten_when_the_index_matches_the_data() {
    let (tmp, segs) = populated();
    let dir = tmp.path();
    flip_byte(&seg_path(dir, segs[1], "dat"), 13);
    assert!(!inspect::verify(dir, &mut |_, _| {}).unwrap().is_clean());
    assert_eq!(served(dir, 0..N), N);
    assert_tools_agree(dir, u64::from(N));
}

#[test]
fn damaged_segments_count_toward_the_byte_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let limit: u64 = 512 << 10; // Eight segments of 64 KiB.
    let limited = |dir: &Path| builder(dir).max_disk_bytes(limit);
    {
        let c = limited(dir).open().unwrap();
        for id in 0..350 {
            c.insert(&key(id), value_for(id, 1, value_len(id))).unwrap();
        }
    }
    let segs = segment_ids(dir);
    // Two index files swapped and a third zeroed, then a stream of new stores.
    let (a, b) = (seg_path(dir, segs[0], "idx"), seg_path(dir, segs[1], "idx"));
    let (a_bytes, b_bytes) = (fs::read(&a).unwrap(), fs::read(&b).unwrap());
    fs::write(&a, b_bytes).unwrap();
    fs::write(&b, a_bytes).unwrap();
    let c_idx = seg_path(dir, segs[2], "idx");
    fs::write(
        &c_idx,
        vec![0u8; fs::metadata(&c_idx).unwrap().len() as usize],
    )
    .unwrap();
    let c = limited(dir).open().unwrap();
    for id in 1000..1400 {
        c.insert(&key(id), value_for(id, 1, value_len(id))).unwrap();
        if id % 50 == 0 {
            c.flush().unwrap();
        }
    }
    c.flush().unwrap();
    assert!(
        segment_file_bytes(dir) <= limit,
        "{} bytes of segment files over a limit of {limit}: {:?}",
        segment_file_bytes(dir),
        listing(dir)
    );
    assert_eq!(c.stats().disk.unwrap().file_bytes, segment_file_bytes(dir));
    drop(c);
    // Whatever eviction kept is served, and nothing else is counted.
    let c = limited(dir).preload(false).open().unwrap();
    let on_disk = c.stats().disk.unwrap().entries;
    let n = count_served(&c, 0..350) + count_served(&c, 1000..1400);
    assert_eq!(u64::from(n), on_disk);
    assert!(on_disk > 300, "{on_disk}");
}

/// A process whose active segment's index file another process rebuilt keeps appending to
/// the file that readers see, not to the one the rebuild replaced.
#[test]
fn a_writer_keeps_its_stores_visible_after_another_process_rebuilt_its_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let a = builder(dir).open().unwrap();
    for id in 0..20 {
        a.insert(&key(id), value_for(id, 1, 500)).unwrap();
    }
    a.flush().unwrap();
    let segs = segment_ids(dir);
    assert_eq!(segs.len(), 1);
    let idx = seg_path(dir, segs[0], "idx");
    fs::write(&idx, vec![0u8; fs::metadata(&idx).unwrap().len() as usize]).unwrap();
    // Another process opens the directory and rebuilds the index.
    assert_eq!(served(dir, 0..20), 20);
    for id in 20..40 {
        a.insert(&key(id), value_for(id, 1, 500)).unwrap();
    }
    a.flush().unwrap();
    assert_eq!(served(dir, 0..40), 40);
    drop(a);
    assert_tools_agree(dir, 40);
}

// ---------------------------------------------------------------------------------------
// Item 4.3: what killed processes leave.

#[test]
fn an_empty_index_file_is_no_corruption_and_is_repaired() {
    let (tmp, segs) = populated();
    let dir = tmp.path();
    // A writer killed between creating the next segment's data file (with its header) and
    // writing its index file's header.
    let next = segs.last().unwrap() + 1;
    fs::write(
        seg_path(dir, next, "dat"),
        segment_header(b"GPUCDATA", next),
    )
    .unwrap();
    fs::write(seg_path(dir, next, "idx"), b"").unwrap();
    let report = inspect::verify(dir, &mut |_, _| {}).unwrap();
    assert!(report.is_clean(), "a false alarm: {report:?}");
    assert_eq!(report.bad_segment_headers, 0, "{report:?}");
    assert_eq!(inspect::stats(dir).unwrap().bad_segments, 0);
    // The next writer repairs it.
    {
        let c = builder(dir).preload(false).open().unwrap();
        c.insert(&key(N), value_for(N, 1, 100)).unwrap();
    }
    assert_eq!(served(dir, 0..N + 1), N + 1);
    assert_tools_agree(dir, u64::from(N) + 1);
}

/// The pid of a process that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

fn age(path: &Path, by: Duration) {
    let f = fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - by).unwrap();
}

#[test]
fn temporary_files_of_dead_processes_are_removed() {
    let (tmp, _) = populated();
    let dir = tmp.path();
    let dead = dead_pid();
    let me = std::process::id();
    let stale: Vec<PathBuf> = [
        format!("meta.tmp.{dead}"),
        format!("blob-cache-stats.tmp.{dead}"),
        format!("seg-00000001.idx.tmp.{dead}"),
        // A live pid, but written long ago: no write takes that long.
        format!("gl-histograms.tmp.{me}"),
    ]
    .iter()
    .map(|n| dir.join(n))
    .collect();
    for p in &stale {
        fs::write(p, b"GPUC left by a killed process").unwrap();
    }
    age(&stale[3], Duration::from_secs(3 * 3600));
    // Not stale, or not ours: a fresh file of a live process, and other people's files.
    let kept: Vec<PathBuf> = [
        format!("blob-cache-stats.tmp.{me}"),
        format!("notes.txt.tmp.{dead}"),
        "my-notes".to_string(),
    ]
    .iter()
    .map(|n| dir.join(n))
    .collect();
    for p in &kept {
        fs::write(p, b"keep").unwrap();
    }
    {
        let c = builder(dir).preload(false).open().unwrap();
        c.insert(&key(N), value_for(N, 1, 100)).unwrap();
        c.flush().unwrap();
    }
    for p in &stale {
        assert!(!p.exists(), "{} stayed: {:?}", p.display(), listing(dir));
    }
    for p in &kept {
        assert!(p.exists(), "{} was removed", p.display());
    }
    assert_eq!(served(dir, 0..N + 1), N + 1);
}

#[test]
fn a_temporary_file_of_a_killed_process_is_removed() {
    // A real process, killed while it holds a temporary file open in the directory.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    populate(dir, 0..10);
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let path = dir.join(format!("blob-cache-stats.tmp.{}", child.id()));
    fs::write(&path, b"GPUC half written").unwrap();
    {
        let c = builder(dir).preload(false).open().unwrap();
        c.insert(&key(10), value_for(10, 1, 100)).unwrap();
        c.flush().unwrap();
        assert!(path.exists(), "its writer is alive");
    }
    child.kill().unwrap();
    child.wait().unwrap();
    {
        let c = builder(dir).preload(false).open().unwrap();
        c.insert(&key(11), value_for(11, 1, 100)).unwrap();
        c.flush().unwrap();
    }
    assert!(!path.exists(), "{:?}", listing(dir));
}

// ---------------------------------------------------------------------------------------
// Item 4.4: damage costs at most the damaged records.

#[test]
fn one_byte_cut_off_the_newest_data_file_costs_one_record() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ids = 0..276;
    {
        let c = Cache::builder()
            .directory(dir)
            .identity(IDENTITY)
            .open()
            .unwrap();
        for id in ids.clone() {
            c.insert(&key(id), value_for(id, 1, 300)).unwrap();
        }
    }
    let segs = segment_ids(dir);
    assert_eq!(segs.len(), 1);
    let dat = seg_path(dir, segs[0], "dat");
    let bytes = fs::read(&dat).unwrap();
    fs::write(&dat, &bytes[..bytes.len() - 1]).unwrap();

    // The preload of a new process serves every intact record.
    let c = Cache::builder()
        .directory(dir)
        .identity(IDENTITY)
        .open()
        .unwrap();
    c.wait_for_preload();
    assert_eq!(c.stats().preloaded, 275);
    assert_eq!(count_served(&c, ids.clone()), 275);
    assert_eq!(c.stats().disk.unwrap().entries, 275);
    drop(c);
    // And so do direct disk reads.
    let c = Cache::builder()
        .directory(dir)
        .identity(IDENTITY)
        .preload(false)
        .open()
        .unwrap();
    assert_eq!(count_served(&c, ids), 275);
    drop(c);
    let report = inspect::verify(dir, &mut |_, _| {}).unwrap();
    assert!(report.is_clean(), "repaired: {report:?}");
    assert_eq!(inspect::stats(dir).unwrap().live_entries, 275);
}

/// An index entry as `docs/disk-format.md` lays it out, sealed with its CRC32C.
fn forged_entry(key_hash: u64, offset: u32, key_len: u32, value_len: u32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&key_hash.to_le_bytes());
    b.extend_from_slice(&offset.to_le_bytes());
    b.extend_from_slice(&value_len.to_le_bytes());
    b.extend_from_slice(&(key_len as u16).to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes()); // Flags.
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

#[test]
fn a_forged_index_entry_with_a_huge_offset_evicts_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let limit: u64 = 1 << 20; // Eight segments of 128 KiB.
    let limited = |dir: &Path| {
        builder(dir)
            .max_segment_bytes(128 << 10)
            .max_disk_bytes(limit)
    };
    {
        let c = limited(dir).open().unwrap();
        for id in 0..N {
            c.insert(&key(id), value_for(id, 1, value_len(id))).unwrap();
        }
    }
    let segs = segment_ids(dir);
    assert!(segs.len() >= 2);
    let before = segment_file_bytes(dir);
    assert!(before < limit / 2);
    // A valid entry describing 64 KiB at 1.5 GiB into the oldest segment's data file.
    let idx = seg_path(dir, segs[0], "idx");
    let mut bytes = fs::read(&idx).unwrap();
    bytes.extend_from_slice(&forged_entry(
        0x1234_5678_9abc_def0,
        0x6000_0000,
        8,
        64 << 10,
    ));
    fs::write(&idx, bytes).unwrap();

    let c = limited(dir).open().unwrap();
    c.wait_for_preload();
    let disk = c.stats().disk.unwrap();
    assert!(disk.file_bytes <= before + 64, "{disk:?}");
    c.insert(&key(N), value_for(N, 1, 100)).unwrap();
    c.flush().unwrap();
    let disk = c.stats().disk.unwrap();
    assert_eq!(disk.evicted_segments, 0, "{disk:?}");
    drop(c);
    assert_eq!(served(dir, 0..N + 1), N + 1);
    assert_tools_agree(dir, u64::from(N) + 1);
}

// ---------------------------------------------------------------------------------------
// Random damage.

/// Real segment files damaged at random (bit flips, cuts, garbage appended, in either file):
/// no wrong value is ever served, and once a writer has been through the directory, its
/// index files are sound and describe every sound record of the data files.
#[test]
fn random_damage_never_serves_wrong_bytes_and_is_repaired() {
    let mut rng = common::Rng::new(common::seed("random_damage"));
    for round in 0..150 {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let n = rng.range(1, 40) as u32;
        {
            let c = Cache::builder()
                .directory(dir)
                .identity(IDENTITY)
                .open()
                .unwrap();
            for id in 0..n {
                let len = rng.range(0, 300) as usize;
                c.insert(&key(id), value_for(id, 1, len)).unwrap();
            }
        }
        let (idx, dat) = (seg_path(dir, 1, "idx"), seg_path(dir, 1, "dat"));
        let (mut i, mut d) = (fs::read(&idx).unwrap(), fs::read(&dat).unwrap());
        for _ in 0..rng.range(1, 4) {
            let file = if rng.percent(50) { &mut d } else { &mut i };
            match rng.range(0, 3) {
                0 if !file.is_empty() => {
                    let at = rng.range(0, file.len() as u64) as usize;
                    file[at] ^= 1 << rng.range(0, 8);
                }
                1 => file.truncate(rng.range(0, file.len() as u64 + 1) as usize),
                _ => file.extend((0..rng.range(1, 100)).map(|_| rng.next_u64() as u8)),
            }
        }
        fs::write(&idx, &i).unwrap();
        fs::write(&dat, &d).unwrap();
        {
            let c = Cache::builder()
                .directory(dir)
                .identity(IDENTITY)
                .open()
                .unwrap();
            c.wait_for_preload();
            count_served(&c, 0..n);
            c.insert(&key(n), value_for(n, 1, 64)).unwrap();
            c.flush().unwrap();
            assert_eq!(count_served(&c, n..n + 1), 1, "round {round}");
        }
        let report = inspect::verify(dir, &mut |_, _| {}).unwrap();
        let index_damage = report.index_entries_corrupt
            + report.bad_segment_headers
            + report.torn_tail_bytes
            + report.records_orphaned;
        assert_eq!(index_damage, 0, "round {round}: {report:?}");
        assert_eq!(inspect::stats(dir).unwrap().bad_segments, 0);
        let c = builder(dir).preload(false).open().unwrap();
        count_served(&c, 0..n + 1);
    }
}

/// A compressed record whose LZ4 block was damaged and whose CRC was then forged to match
/// (what a hostile writer can do): a miss and a count, never a panic, an unbounded
/// allocation or wrong bytes, whether read by a lookup, the preload or the tools.
#[test]
fn a_forged_compressed_record_is_a_miss() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let text = b"vec4 color = texture(tex, uv) * tint; ".repeat(60);
    {
        let c = builder(dir).open().unwrap();
        c.insert(b"shader", text.clone()).unwrap();
        c.insert(b"other", value_for(1, 1, 1000)).unwrap();
        c.flush().unwrap();
        assert_eq!(c.stats().disk.unwrap().compressed_records, 1);
    }
    let segs = segment_ids(dir);
    let dat = seg_path(dir, segs[0], "dat");
    let mut bytes = fs::read(&dat).unwrap();
    // The first record, as docs/disk-format.md lays it out: crc, key length, flags, stored
    // length, key, then `raw_len:u32` and the LZ4 block.
    let at = 32;
    let key_len = u16::from_le_bytes(bytes[at + 4..at + 6].try_into().unwrap()) as usize;
    assert_eq!(
        u16::from_le_bytes(bytes[at + 6..at + 8].try_into().unwrap()),
        2
    );
    let stored = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
    let value_at = at + 12 + key_len;
    // A raw length far beyond the block, and a block byte changed.
    bytes[value_at..value_at + 4].copy_from_slice(&(64u32 << 20).to_le_bytes());
    bytes[value_at + 4] ^= 0xFF;
    let end = value_at + stored;
    let crc = crc32c::crc32c(&bytes[at + 4..end]);
    bytes[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    fs::write(&dat, &bytes).unwrap();

    for preload in [false, true] {
        let c = builder(dir).preload(preload).open().unwrap();
        c.wait_for_preload();
        assert_eq!(c.get(b"shader"), None, "preload {preload}");
        assert_eq!(c.get(b"other").as_deref(), Some(&value_for(1, 1, 1000)[..]));
        assert!(c.stats().disk.unwrap().corrupt_dropped >= 1);
    }
    let report = inspect::verify(dir, &mut |_, _| {}).unwrap();
    assert_eq!(report.records_corrupt, 1, "{report:?}");
    assert!(matches!(
        inspect::get(dir, b"shader").unwrap(),
        inspect::RecordLookup::Corrupt(_)
    ));
}
