//! `gpucache::inspect` on real directories: meta, stats, listing, lookups, verification of
//! damaged files, bundles (round trip, damage, hostile bytes), import, clear and compact.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use gpucache::inspect::{self, DirKind, RecordLookup as Lookup};
use gpucache::{Cache, CacheBuilder};

const IDENTITY: &[u8] = b"test-driver 1.0";

fn builder(dir: &Path) -> CacheBuilder {
    Cache::builder()
        .directory(dir)
        .identity(IDENTITY)
        .version(3)
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{i:04}").into_bytes()
}

/// Incompressible bytes (sizes on disk follow value sizes; compression has its own test).
fn value(i: u32, version: u32) -> Vec<u8> {
    let len = 10 + (i as usize * 37) % 300;
    let mut x = (u64::from(i) << 32 | u64::from(version)) ^ 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Stores keys 0..n, overwrites the even ones and removes every fifth; returns what is live.
fn populate(dir: &Path, n: u32) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut live = BTreeMap::new();
    let c = builder(dir).open().unwrap();
    for i in 0..n {
        c.insert(&key(i), value(i, 1)).unwrap();
        live.insert(key(i), value(i, 1));
    }
    c.flush().unwrap();
    for i in (0..n).step_by(2) {
        c.insert(&key(i), value(i, 2)).unwrap();
        live.insert(key(i), value(i, 2));
    }
    for i in (0..n).step_by(5) {
        c.remove(&key(i));
        live.remove(&key(i));
    }
    live // Dropping the cache flushes.
}

fn assert_contents(dir: &Path, live: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let listing = inspect::entries(dir).unwrap();
    assert_eq!(listing.unreadable, 0);
    let keys: Vec<Vec<u8>> = listing.entries.iter().map(|e| e.key.clone()).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(sorted, live.keys().cloned().collect::<Vec<_>>());
    let snapshot = inspect::Snapshot::open(dir).unwrap();
    for (k, v) in live {
        assert_eq!(snapshot.get(k), Lookup::Found(v.clone()));
    }
}

/// Every file under `dir` with its length and modification time.
fn file_state(dir: &Path) -> Vec<(PathBuf, u64, SystemTime)> {
    let mut out: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            (e.path(), m.len(), m.modified().unwrap())
        })
        .collect();
    out.sort();
    out
}

fn flip_bit(path: &Path, bit: usize) {
    let mut bytes = fs::read(path).unwrap();
    bytes[bit / 8] ^= 1 << (bit % 8);
    fs::write(path, bytes).unwrap();
}

fn only_segment(dir: &Path, ext: &str) -> PathBuf {
    let files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

#[test]
fn meta_stats_entries_and_get_match_what_was_stored() {
    let dir = tempfile::tempdir().unwrap();
    let live = populate(dir.path(), 200);
    let meta = inspect::read_meta(dir.path()).unwrap();
    assert_eq!(meta.bytes(), IDENTITY);
    assert_eq!(meta.version(), 3);
    assert!(!meta.driver_versioned());

    let stats = inspect::stats(dir.path()).unwrap();
    assert_eq!(stats.live_entries, live.len() as u64);
    let kv: u64 = live.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
    assert_eq!(stats.key_value_bytes, kv);
    assert_eq!(stats.live_bytes, kv + 12 * live.len() as u64);
    assert!(
        stats.dead_bytes > 0,
        "overwrites and removals leave dead records"
    );
    let on_disk: u64 = file_state(dir.path())
        .iter()
        .filter(|(p, ..)| {
            let name = p.file_name().unwrap().to_str().unwrap();
            // Segment files; the hash table (`seg-table.hix`) is no segment.
            name.starts_with("seg-") && name != "seg-table.hix"
        })
        .map(|(_, len, _)| len)
        .sum();
    assert_eq!(stats.file_bytes, on_disk);
    assert!(stats.space_amplification().unwrap() > 1.0);

    assert_contents(dir.path(), &live);
    assert_eq!(inspect::get(dir.path(), &key(0)).unwrap(), Lookup::Absent);
    assert_eq!(inspect::get(dir.path(), b"never").unwrap(), Lookup::Absent);
    let first = &inspect::entries(dir.path()).unwrap().entries[0];
    assert!(first.offset >= 32 && first.value_len > 0);
}

#[test]
fn a_driver_versioned_root_and_non_caches_are_named_clearly() {
    let root = tempfile::tempdir().unwrap();
    for id in [&b"driver A"[..], b"driver B"] {
        let c = Cache::builder()
            .directory(root.path())
            .identity(id)
            .driver_versioned(true)
            .open()
            .unwrap();
        c.insert(b"k", id.to_vec()).unwrap();
    }
    let DirKind::VersionedRoot(ids) = inspect::classify(root.path()).unwrap() else {
        panic!("not recognised as a root");
    };
    assert_eq!(ids.len(), 2);
    let err = inspect::read_meta(root.path()).unwrap_err().to_string();
    assert!(err.contains("driver-versioned root"), "{err}");
    assert!(err.contains("id-"), "{err}");
    let meta = inspect::read_meta(&ids[0]).unwrap();
    assert!(meta.driver_versioned());
    assert_eq!(
        inspect::get(&ids[0], b"k").unwrap(),
        Lookup::Found(meta.bytes().to_vec())
    );
    // Opening through the inspection builder keeps the entries.
    let c = inspect::cache_builder(&ids[1]).unwrap().open().unwrap();
    assert!(c.get(b"k").is_some());

    let empty = tempfile::tempdir().unwrap();
    let err = inspect::read_meta(empty.path()).unwrap_err().to_string();
    assert!(err.contains("no meta file"), "{err}");
    let err = inspect::read_meta(&empty.path().join("missing")).unwrap_err();
    assert!(err.to_string().contains("no such directory"), "{err}");
    fs::write(empty.path().join("meta"), b"GPUCMETA garbage").unwrap();
    let err = inspect::read_meta(empty.path()).unwrap_err().to_string();
    assert!(err.contains("corrupt"), "{err}");
}

#[test]
fn reading_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let live = populate(dir.path(), 50);
    let before = file_state(dir.path());
    inspect::stats(dir.path()).unwrap();
    assert_contents(dir.path(), &live);
    assert!(inspect::verify(dir.path(), &mut |_, _| {})
        .unwrap()
        .is_clean());
    inspect::export_bundle(dir.path(), &mut Vec::new()).unwrap();
    assert_eq!(file_state(dir.path()), before);
}

#[test]
fn verify_passes_a_clean_directory_and_reports_progress() {
    let dir = tempfile::tempdir().unwrap();
    let c = builder(dir.path()).max_segment_bytes(4096).open().unwrap();
    for i in 0..300 {
        c.insert(&key(i), value(i, 1)).unwrap();
    }
    drop(c);
    let mut calls = Vec::new();
    let report = inspect::verify(dir.path(), &mut |done, total| calls.push((done, total))).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert!(report.segments > 1);
    assert_eq!(report.records_ok, 300);
    assert_eq!(report.records_orphaned + report.torn_tail_bytes, 0);
    let (done, total) = *calls.last().unwrap();
    assert_eq!(done, total);
    assert_eq!(report.bytes_checked, total);
    assert!(
        calls.windows(2).all(|w| w[0].0 <= w[1].0),
        "progress never goes back"
    );
}

/// A small directory of one segment: three keys.
fn small(dir: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let c = builder(dir).open().unwrap();
    let mut live = BTreeMap::new();
    for i in 0..3 {
        c.insert(&key(i), value(i, 1)[..8].to_vec()).unwrap();
        live.insert(key(i), value(i, 1)[..8].to_vec());
    }
    live
}

#[test]
fn a_bit_flip_in_any_byte_is_reported_and_never_returns_wrong_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let live = small(dir.path());
    for ext in ["dat", "idx"] {
        let path = only_segment(dir.path(), ext);
        // One bit per byte, its position rotating: every byte and every bit position.
        let len = fs::metadata(&path).unwrap().len() as usize;
        for bit in (0..len).map(|byte| byte * 8 + byte % 8) {
            flip_bit(&path, bit);
            let report = inspect::verify(dir.path(), &mut |_, _| {}).unwrap();
            assert!(!report.is_clean(), "{ext} bit {bit}: {report:?}");
            assert!(!report.problems.is_empty());
            let snapshot = inspect::Snapshot::open(dir.path()).unwrap();
            for (k, v) in &live {
                match snapshot.get(k) {
                    Lookup::Found(got) => assert_eq!(&got, v, "{ext} bit {bit}"),
                    Lookup::Absent | Lookup::Corrupt(_) => {}
                }
            }
            let mut out = Vec::new();
            inspect::export_bundle(dir.path(), &mut out).unwrap();
            for e in inspect::parse_bundle(&out).unwrap().entries {
                assert_eq!(live.get(&e.key), Some(&e.value), "{ext} bit {bit}");
            }
            drop(snapshot);
            flip_bit(&path, bit);
        }
    }
    assert!(inspect::verify(dir.path(), &mut |_, _| {})
        .unwrap()
        .is_clean());
}

#[test]
fn truncations_are_corruption_or_torn_tails() {
    let dir = tempfile::tempdir().unwrap();
    let live = small(dir.path());
    let dat = only_segment(dir.path(), "dat");
    let idx = only_segment(dir.path(), "idx");
    let (dat_bytes, idx_bytes) = (fs::read(&dat).unwrap(), fs::read(&idx).unwrap());

    // Data cut inside the last record: its index entry points past the end. Verify reports
    // it; like the library, the views do not count an entry whose record is not all there.
    fs::write(&dat, &dat_bytes[..dat_bytes.len() - 5]).unwrap();
    let report = inspect::verify(dir.path(), &mut |_, _| {}).unwrap();
    assert_eq!(report.records_corrupt, 1, "{report:?}");
    assert_eq!(report.records_ok, 2);
    let last = live.keys().last().unwrap();
    assert_eq!(inspect::get(dir.path(), last).unwrap(), Lookup::Absent);
    assert_eq!(inspect::stats(dir.path()).unwrap().live_entries, 2);
    fs::write(&dat, &dat_bytes).unwrap();

    // Index cut inside its last entry (a killed writer): the tail is torn, the record it
    // described is orphaned, and nothing is corrupt.
    fs::write(&idx, &idx_bytes[..idx_bytes.len() - 10]).unwrap();
    let report = inspect::verify(dir.path(), &mut |_, _| {}).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.torn_tail_bytes, 14);
    assert_eq!((report.records_ok, report.records_orphaned), (2, 1));
    assert_eq!(inspect::stats(dir.path()).unwrap().live_entries, 2);

    // Index without its data file.
    fs::write(&idx, &idx_bytes).unwrap();
    fs::remove_file(&dat).unwrap();
    let report = inspect::verify(dir.path(), &mut |_, _| {}).unwrap();
    assert_eq!((report.records_corrupt, report.orphan_files), (3, 1));
    for k in live.keys() {
        assert_eq!(inspect::get(dir.path(), k).unwrap(), Lookup::Absent);
    }
    assert_eq!(inspect::stats(dir.path()).unwrap().live_entries, 0);
}

fn sample_bundle() -> Vec<u8> {
    let header = gpucache::Identity::new(b"id".to_vec()).with_version(9);
    let mut w = inspect::BundleWriter::new(Vec::new(), &header).unwrap();
    w.push(b"alpha", b"one").unwrap();
    w.push(b"", b"empty key").unwrap();
    w.push(b"gamma", b"").unwrap();
    w.finish().unwrap()
}

#[test]
fn bundles_round_trip_and_import_into_a_fresh_directory() {
    let src = tempfile::tempdir().unwrap();
    let live = populate(src.path(), 120);
    let mut bytes = Vec::new();
    let report = inspect::export_bundle(src.path(), &mut bytes).unwrap();
    assert_eq!(report.entries, live.len() as u64);
    assert_eq!(report.corrupt_skipped, 0);
    let bundle = inspect::parse_bundle(&bytes).unwrap();
    assert_eq!(bundle.header.bytes(), IDENTITY);
    assert_eq!(bundle.header.version(), 3);
    let parsed: BTreeMap<_, _> = bundle
        .entries
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect();
    assert_eq!(parsed, live);

    let file = src.path().join("bundle.gpucb");
    fs::write(&file, &bytes).unwrap();
    let dst = tempfile::tempdir().unwrap();
    let target = dst.path().join("new");
    let report = inspect::import_bundle(&target, &file, false).unwrap();
    assert_eq!(report.entries, live.len() as u64);
    assert_eq!(report.dir, target);
    assert_eq!(report.replaced, None);
    assert_eq!(
        inspect::read_meta(&target).unwrap(),
        inspect::read_meta(src.path()).unwrap()
    );
    assert_contents(&target, &live);
    // The application, opening with its identity, sees the entries.
    let c = builder(&target).preload(false).open().unwrap();
    for (k, v) in &live {
        assert_eq!(c.get(k).unwrap(), v[..]);
    }
    drop(c);
    // Importing again into the same identity is allowed and changes nothing visible.
    inspect::import_bundle(&target, &file, false).unwrap();
    assert_contents(&target, &live);
}

#[test]
fn import_refuses_another_identity_unless_forced() {
    let src = tempfile::tempdir().unwrap();
    fs::write(src.path().join("b"), sample_bundle()).unwrap();
    let dst = tempfile::tempdir().unwrap();
    let live = populate(dst.path(), 10);
    let err = inspect::import_bundle(dst.path(), &src.path().join("b"), false).unwrap_err();
    assert!(err.to_string().contains("--force"), "{err}");
    assert_contents(dst.path(), &live);

    let report = inspect::import_bundle(dst.path(), &src.path().join("b"), true).unwrap();
    assert_eq!(report.replaced.unwrap().bytes(), IDENTITY);
    assert_eq!(inspect::read_meta(dst.path()).unwrap().bytes(), b"id");
    let keys: Vec<_> = inspect::entries(dst.path())
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(
        keys,
        vec![b"alpha".to_vec(), b"".to_vec(), b"gamma".to_vec()]
    );

    // Not a cache and not empty: refused even with force.
    let other = tempfile::tempdir().unwrap();
    fs::write(other.path().join("notes.txt"), b"mine").unwrap();
    assert!(inspect::import_bundle(other.path(), &src.path().join("b"), true).is_err());
}

#[test]
fn a_driver_versioned_bundle_goes_into_its_identity_directory() {
    let src = tempfile::tempdir().unwrap();
    let c = Cache::builder()
        .directory(src.path())
        .identity(&b"driver A"[..])
        .driver_versioned(true)
        .open()
        .unwrap();
    c.insert(b"k", b"v".to_vec()).unwrap();
    let sub = c.directory().unwrap().to_path_buf();
    drop(c);
    let file = src.path().join("b");
    fs::write(&file, {
        let mut out = Vec::new();
        inspect::export_bundle(&sub, &mut out).unwrap();
        out
    })
    .unwrap();
    let root = tempfile::tempdir().unwrap();
    let report = inspect::import_bundle(root.path(), &file, false).unwrap();
    assert_eq!(report.dir.file_name(), sub.file_name());
    let c = Cache::builder()
        .directory(root.path())
        .identity(&b"driver A"[..])
        .driver_versioned(true)
        .open()
        .unwrap();
    assert_eq!(c.get(b"k").unwrap(), &b"v"[..]);
}

#[test]
fn parse_bundle_refuses_every_truncation_and_bit_flip() {
    let bytes = sample_bundle();
    let good = inspect::parse_bundle(&bytes).unwrap();
    assert_eq!(good.entries.len(), 3);
    for len in 0..bytes.len() {
        assert!(inspect::parse_bundle(&bytes[..len]).is_err(), "len {len}");
    }
    for bit in 0..bytes.len() * 8 {
        let mut bad = bytes.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        assert!(inspect::parse_bundle(&bad).is_err(), "bit {bit}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(inspect::parse_bundle(&longer).is_err());
}

#[test]
fn parse_bundle_survives_hostile_bytes() {
    // Lengths claiming 4 GiB are refused before anything is allocated.
    let mut bytes = sample_bundle();
    bytes[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
    let err = inspect::parse_bundle(&bytes).unwrap_err().to_string();
    assert!(err.contains("identity"), "{err}");
    let mut bytes = sample_bundle();
    let first = 32 + 2 + 4; // Header, identity, header CRC.
    bytes[first + 8..first + 12].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(inspect::parse_bundle(&bytes)
        .unwrap_err()
        .to_string()
        .contains("truncated"));
    // Pseudo-random inputs, some starting like a bundle.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for round in 0..3000 {
        let mut input = if round % 2 == 0 {
            sample_bundle()[..32].to_vec()
        } else {
            Vec::new()
        };
        for _ in 0..(round % 97) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            input.push(state as u8);
        }
        let _ = inspect::parse_bundle(&input);
    }
}

#[test]
fn clear_removes_every_entry_and_keeps_the_identity() {
    let dir = tempfile::tempdir().unwrap();
    let live = populate(dir.path(), 40);
    assert_eq!(inspect::clear(dir.path()).unwrap(), live.len() as u64);
    assert_eq!(inspect::stats(dir.path()).unwrap().live_entries, 0);
    assert_eq!(inspect::read_meta(dir.path()).unwrap().bytes(), IDENTITY);
    let c = builder(dir.path()).open().unwrap();
    assert!(c.get(&key(1)).is_none());
}

#[test]
fn compact_reclaims_all_dead_space_and_keeps_every_entry() {
    let dir = tempfile::tempdir().unwrap();
    // One segment with dead records: the newest segment is compacted too.
    let live = populate(dir.path(), 100);
    let before = inspect::stats(dir.path()).unwrap();
    assert_eq!(before.segments, 1);
    let report = inspect::compact(dir.path()).unwrap();
    assert_eq!(report.records_copied, live.len() as u64);
    assert_eq!(report.file_bytes_before, before.file_bytes);
    assert!(
        report.file_bytes_after < report.file_bytes_before,
        "{report:?}"
    );
    let after = inspect::stats(dir.path()).unwrap();
    assert_eq!(after.dead_bytes, 0);
    assert_eq!(after.file_bytes, report.file_bytes_after);
    assert_contents(dir.path(), &live);
    assert!(inspect::verify(dir.path(), &mut |_, _| {})
        .unwrap()
        .is_clean());
    // Nothing left to do.
    let again = inspect::compact(dir.path()).unwrap();
    assert_eq!((again.segments_rewritten, again.records_copied), (0, 0));
}

#[test]
fn compact_while_a_cache_is_open_keeps_both_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let c = builder(dir.path())
        .max_segment_bytes(4096)
        .preload(false)
        .open()
        .unwrap();
    for round in 0..3 {
        for i in 0..60 {
            c.insert(&key(i), value(i, round)).unwrap();
        }
    }
    c.flush().unwrap();
    inspect::compact(dir.path()).unwrap();
    // The open cache keeps writing after the compaction under its feet.
    for i in 60..90 {
        c.insert(&key(i), value(i, 0)).unwrap();
    }
    c.flush().unwrap();
    let other = builder(dir.path()).preload(false).open().unwrap();
    for i in 0..60 {
        assert_eq!(other.get(&key(i)).unwrap(), value(i, 2)[..], "key {i}");
    }
    for i in 60..90 {
        assert_eq!(other.get(&key(i)).unwrap(), value(i, 0)[..], "key {i}");
    }
    drop((c, other));
    assert!(inspect::verify(dir.path(), &mut |_, _| {})
        .unwrap()
        .is_clean());
}

#[test]
fn compressed_records_read_back_whole_through_every_view() {
    let dir = tempfile::tempdir().unwrap();
    // Compressible values (repeated text, like shader binaries' tables), and one too short
    // to be tried.
    let mut live = BTreeMap::new();
    for i in 0..50u32 {
        let v = format!("program {i}: mov r0, r1; add r2, r0, #4; ").repeat(20 + i as usize);
        live.insert(key(i), v.into_bytes());
    }
    live.insert(key(99), b"short".to_vec());
    {
        let c = builder(dir.path()).open().unwrap();
        for (k, v) in &live {
            c.insert(k, v.clone()).unwrap();
        }
        c.flush().unwrap();
        let d = c.stats().disk.unwrap();
        assert_eq!(d.compressed_records, 50, "{d:?}");
        let raw: u64 = live.values().map(|v| v.len() as u64).sum();
        assert!(d.file_bytes * 4 < raw, "{} vs {raw}", d.file_bytes);
    }
    assert_contents(dir.path(), &live);
    let listing = inspect::entries(dir.path()).unwrap();
    for e in &listing.entries {
        assert_eq!(
            e.value_len as usize,
            live[&e.key].len(),
            "raw lengths listed"
        );
    }
    let mut bytes = Vec::new();
    inspect::export_bundle(dir.path(), &mut bytes).unwrap();
    let parsed: BTreeMap<_, _> = inspect::parse_bundle(&bytes)
        .unwrap()
        .entries
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect();
    assert_eq!(parsed, live);
    let report = inspect::verify(dir.path(), &mut |_, _| {}).unwrap();
    assert!(report.is_clean(), "{report:?}");
    // A fresh process reads them back through its disk lookups and its preload.
    for preload in [false, true] {
        let c = builder(dir.path()).preload(preload).open().unwrap();
        for (k, v) in &live {
            assert_eq!(c.get(k).as_deref(), Some(&v[..]));
        }
    }
}
