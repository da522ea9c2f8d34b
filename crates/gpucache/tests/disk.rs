//! The disk tier on real directories: round trips, identity, limits, eviction, compaction,
//! sharing, damage and faults.

use std::fs;
use std::path::Path;

use gpucache::{Cache, CacheBuilder};

/// A value that names its key and version, so a wrong or torn value is recognisable.
/// Bytes derived from the key and version, incompressible (so that sizes on disk follow
/// value sizes).
fn value_for(key: u32, version: u32, len: usize) -> Vec<u8> {
    let mut x = (u64::from(key) << 32 | u64::from(version)) ^ 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn key(i: u32) -> [u8; 20] {
    let mut k = [0u8; 20];
    k[..4].copy_from_slice(&i.to_le_bytes());
    k[4..8].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_le_bytes());
    k
}

fn builder(dir: &Path) -> CacheBuilder {
    Cache::builder()
        .directory(dir)
        .identity(&b"test-driver 1.0"[..])
        .max_memory_bytes(64 << 20)
}

fn open(dir: &Path) -> Cache {
    builder(dir).open().unwrap()
}

/// Found by the `cache_ops` fuzz target: a preload still running when the cache is cleared
/// put entries it had read before the clear back into memory.
#[test]
fn a_clear_during_the_preload_stays_cleared() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = open(dir.path());
        for i in 0..20_000 {
            c.insert(&key(i), value_for(i, 1, 200)).unwrap();
        }
    }
    for _ in 0..5 {
        let c = open(dir.path());
        c.clear().unwrap();
        c.wait_for_preload();
        assert!(
            c.memory().is_empty(),
            "{} entries came back",
            c.memory().len()
        );
        assert!((0..20_000).step_by(97).all(|i| c.get(&key(i)).is_none()));
        drop(c);
        let c = open(dir.path());
        for i in 0..20_000 {
            c.insert(&key(i), value_for(i, 1, 200)).unwrap();
        }
    }
}

#[test]
fn entries_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = open(dir.path());
        assert!(c.disk_error().is_none());
        for i in 0..500 {
            c.insert(&key(i), value_for(i, 1, 100 + i as usize))
                .unwrap();
        }
    } // Dropping flushes.
    let c = open(dir.path());
    c.wait_for_preload();
    let stats = c.stats();
    assert_eq!(stats.disk.as_ref().unwrap().entries, 500);
    assert_eq!(stats.preloaded, 500);
    for i in 0..500 {
        assert_eq!(c.get(&key(i)).unwrap(), value_for(i, 1, 100 + i as usize));
    }
}

#[test]
fn a_lookup_before_preload_reads_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = open(dir.path());
        c.insert(b"k", b"value".to_vec()).unwrap();
    }
    let c = builder(dir.path()).preload(false).open().unwrap();
    assert!(c.memory().is_empty());
    assert_eq!(c.get(b"k").unwrap(), &b"value"[..]);
    assert!(c.memory().contains(b"k"), "promoted into memory");
    assert_eq!(c.stats().disk.unwrap().read_hits, 1);
    assert_eq!(c.get(b"missing"), None);
}

#[test]
fn the_newest_value_and_removals_persist() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = open(dir.path());
        c.insert(b"a", b"1".to_vec()).unwrap();
        c.insert(b"a", b"2".to_vec()).unwrap();
        c.insert(b"b", b"x".to_vec()).unwrap();
        c.flush().unwrap();
        c.remove(b"b");
        c.insert(b"c", b"y".to_vec()).unwrap();
    }
    let c = builder(dir.path()).preload(false).open().unwrap();
    assert_eq!(c.get(b"a").unwrap(), &b"2"[..]);
    assert_eq!(c.get(b"b"), None);
    assert_eq!(c.get(b"c").unwrap(), &b"y"[..]);
}

#[test]
fn another_version_or_identity_wipes() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = builder(dir.path()).version(1).open().unwrap();
        c.insert(b"k", b"v".to_vec()).unwrap();
    }
    {
        let c = builder(dir.path())
            .version(1)
            .preload(false)
            .open()
            .unwrap();
        assert!(c.get(b"k").is_some(), "same identity and version keep");
    }
    {
        let c = builder(dir.path())
            .version(2)
            .preload(false)
            .open()
            .unwrap();
        assert!(c.get(b"k").is_none(), "another version wipes");
        c.insert(b"k2", b"v2".to_vec()).unwrap();
    }
    let c = builder(dir.path())
        .version(2)
        .identity(&b"other driver"[..])
        .preload(false)
        .open()
        .unwrap();
    assert!(c.get(b"k2").is_none(), "another identity wipes");
}

#[test]
fn driver_versioned_caches_live_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let for_driver = |id: &[u8]| {
        Cache::builder()
            .directory(dir.path())
            .identity(id)
            .driver_versioned(true)
            .preload(false)
    };
    {
        for_driver(b"mesa 25")
            .open()
            .unwrap()
            .insert(b"k", b"from 25".to_vec())
            .unwrap();
        for_driver(b"mesa 22")
            .open()
            .unwrap()
            .insert(b"k", b"from 22".to_vec())
            .unwrap();
    }
    assert_eq!(
        for_driver(b"mesa 25").open().unwrap().get(b"k").unwrap(),
        &b"from 25"[..]
    );
    assert_eq!(
        for_driver(b"mesa 22").open().unwrap().get(b"k").unwrap(),
        &b"from 22"[..]
    );
    let subdirs = fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(subdirs, 2);
}

#[test]
fn limits_hold_on_disk_and_hot_entries_survive_eviction() {
    let dir = tempfile::tempdir().unwrap();
    let limit = 512 << 10;
    let c = builder(dir.path())
        .max_disk_bytes(limit)
        .max_memory_bytes(64 << 10)
        .open()
        .unwrap();
    // One hot key, read all along, among a stream of cold ones.
    c.insert(b"hot", value_for(7, 7, 1000)).unwrap();
    for i in 0..3000 {
        c.insert(&key(i), value_for(i, 1, 1000)).unwrap();
        assert!(c.get(b"hot").is_some());
        if i % 500 == 0 {
            c.flush().unwrap();
        }
    }
    c.flush().unwrap();
    let d = c.stats().disk.unwrap();
    assert!(d.file_bytes <= limit, "{} > {limit}", d.file_bytes);
    assert!(d.evicted_segments > 0);
    assert!(d.reinserted > 0);
    drop(c);
    let c = builder(dir.path()).preload(false).open().unwrap();
    assert_eq!(
        c.get(b"hot").unwrap(),
        value_for(7, 7, 1000),
        "hot key kept on disk"
    );
    let mut present = 0;
    for i in 0..3000 {
        if let Some(v) = c.get(&key(i)) {
            assert_eq!(v, value_for(i, 1, 1000));
            present += 1;
        }
    }
    assert!(present > 100 && present < 3000, "{present}");
}

#[test]
fn the_entry_limit_holds_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let c = builder(dir.path())
        .max_disk_entries(200)
        .max_disk_bytes(1 << 20)
        .open()
        .unwrap();
    for i in 0..2000 {
        c.insert(&key(i), value_for(i, 1, 64)).unwrap();
    }
    c.flush().unwrap();
    assert!(c.stats().disk.unwrap().entries <= 200);
}

#[test]
fn compaction_reclaims_overwritten_space() {
    let dir = tempfile::tempdir().unwrap();
    let c = builder(dir.path())
        .max_segment_bytes(64 << 10)
        .open()
        .unwrap();
    for round in 0..20 {
        for i in 0..100 {
            c.insert(&key(i), value_for(i, round, 2000)).unwrap();
        }
        c.flush().unwrap();
    }
    let d = c.stats().disk.unwrap();
    let payload = 100 * (20 + 2000);
    let amplification = d.file_bytes as f64 / payload as f64;
    assert!(amplification <= 1.15 * 1.5, "steady state {amplification}");
    c.compact().unwrap();
    let d = c.stats().disk.unwrap();
    assert!(d.compacted_segments > 0);
    let amplification = d.file_bytes as f64 / payload as f64;
    assert!(amplification <= 1.15, "after compaction {amplification}");
    drop(c);
    let c = builder(dir.path()).preload(false).open().unwrap();
    for i in 0..100 {
        assert_eq!(c.get(&key(i)).unwrap(), value_for(i, 19, 2000));
    }
}

#[test]
fn two_caches_on_one_directory_see_each_others_stores() {
    let dir = tempfile::tempdir().unwrap();
    let a = open(dir.path());
    let b = open(dir.path());
    a.insert(b"from-a", b"1".to_vec()).unwrap();
    b.insert(b"from-b", b"2".to_vec()).unwrap();
    a.flush().unwrap();
    b.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    assert_eq!(b.get(b"from-a").unwrap(), &b"1"[..]);
    assert_eq!(a.get(b"from-b").unwrap(), &b"2"[..]);
}

#[test]
fn clear_empties_both_tiers() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = open(dir.path());
        c.insert(b"k", b"v".to_vec()).unwrap();
        c.flush().unwrap();
        c.clear().unwrap();
        assert_eq!(c.get(b"k"), None);
    }
    assert_eq!(
        builder(dir.path()).preload(false).open().unwrap().get(b"k"),
        None
    );
}

#[test]
fn torn_tails_from_a_killed_writer_are_repaired() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = open(dir.path());
        for i in 0..50 {
            c.insert(&key(i), value_for(i, 1, 300)).unwrap();
        }
    }
    // A writer killed mid-batch: half an index entry and unindexed data at the ends.
    let idx = dir.path().join("seg-00000001.idx");
    let dat = dir.path().join("seg-00000001.dat");
    append(&idx, &[0xAB; 17]);
    append(&dat, &[0xCD; 999]);
    let c = open(dir.path());
    for i in 0..50 {
        assert_eq!(c.get(&key(i)).unwrap(), value_for(i, 1, 300));
    }
    // Appending after the repair lines up again.
    for i in 50..100 {
        c.insert(&key(i), value_for(i, 1, 300)).unwrap();
    }
    drop(c);
    let c = builder(dir.path()).preload(false).open().unwrap();
    for i in 0..100 {
        assert_eq!(c.get(&key(i)).unwrap(), value_for(i, 1, 300), "{i}");
    }
}

fn append(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

#[test]
fn a_removed_directory_is_recreated_and_memory_keeps_serving() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("cache");
    let c = open(&dir);
    c.insert(b"before", b"1".to_vec()).unwrap();
    c.flush().unwrap();
    fs::remove_dir_all(&dir).unwrap();
    c.insert(b"after", b"2".to_vec()).unwrap();
    assert_eq!(c.get(b"before").unwrap(), &b"1"[..], "memory still serves");
    c.flush().unwrap();
    assert!(c.stats().disk.unwrap().recreated >= 1);
    drop(c);
    let c = builder(&dir).preload(false).open().unwrap();
    assert_eq!(c.get(b"after").unwrap(), &b"2"[..]);
}

#[test]
fn a_full_queue_drops_persistence_not_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let c = builder(dir.path())
        .write_queue_bytes(10_000)
        .open()
        .unwrap();
    for i in 0..2000 {
        c.insert(&key(i), value_for(i, 1, 4000)).unwrap();
    }
    for i in 0..2000 {
        assert!(c.get(&key(i)).is_some(), "memory holds every store");
    }
    c.flush().unwrap();
    let stats = c.stats();
    let dropped = stats.write_queue_dropped;
    assert!(dropped > 0);
    assert_eq!(dropped + stats.disk.unwrap().entries, 2000);
}

#[test]
fn an_unusable_directory_leaves_a_memory_only_cache() {
    let file = tempfile::NamedTempFile::new().unwrap();
    // A regular file where the directory should be.
    let c = Cache::builder().directory(file.path()).open().unwrap();
    assert!(c.disk_error().is_some());
    c.insert(b"k", b"v".to_vec()).unwrap();
    assert_eq!(c.get(b"k").unwrap(), &b"v"[..]);
    // Nothing can be made durable: the flush says so.
    assert!(c.flush().is_err());
    assert!(c.stats().disk.is_none());
}
