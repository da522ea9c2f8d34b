use std::path::Path;

use super::*;
use crate::egl::{BlobCache, BlobCacheConfig};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn counters(a: [u64; 7]) -> BlobCounters {
    BlobCounters::from_array(a)
}

fn config(dir: &Path) -> BlobCacheConfig {
    BlobCacheConfig::default().cache(|c| {
        c.directory(dir)
            .identity(&b"llvmpipe 25.0.7"[..])
            .max_value_size(100_000)
    })
}

fn read(dir: &Path) -> PersistedBlobStats {
    read_persisted_stats(dir).unwrap().expect("a stats file")
}

/// One of each outcome: a set, a dropped set, a hit, a miss and a too-small buffer.
fn exercise(c: &BlobCache) {
    c.set(b"program", &[1u8; 100]);
    c.set(b"huge", &vec![2u8; 200_000]);
    let mut buf = vec![0u8; 1000];
    assert_eq!(c.get(b"program", &mut buf), 100);
    assert_eq!(c.get(b"absent", &mut buf), 0);
    let too_small = if c.miss_on_oversize() { 0 } else { 100 };
    assert_eq!(c.get(b"program", &mut buf[..10]), too_small);
}

const ONE_ROUND: [u64; 7] = [3, 1, 1, 1, 2, 1, 0];

// Golden bytes, computed independently (Python's struct module and a bitwise CRC32C; see
// docs/blob-cache-stats.md). A deliberate format change bumps STATS_FORMAT_VERSION, the
// document and this string together.
#[test]
fn golden_bytes() {
    let stats = PersistedBlobStats {
        since_unix_s: 1_700_000_000,
        updates: 3,
        lifetime: counters([10, 6, 3, 1, 5, 2, 0]),
        last: LastProcess {
            pid: 4242,
            miss_on_oversize: true,
            started_unix_s: 1_700_000_100,
            updated_unix_s: 1_700_000_200,
            counters: counters([4, 2, 1, 1, 2, 1, 7]),
        },
    };
    let b = stats.encode();
    assert_eq!(
        hex(&b),
        "4750554345474c53010000000000000000f15365000000000300000000000000\
         0a00000000000000060000000000000003000000000000000100000000000000\
         0500000000000000020000000000000000000000000000009210000001000000\
         64f1536500000000c8f153650000000004000000000000000200000000000000\
         0100000000000000010000000000000002000000000000000100000000000000\
         0700000000000000000000007b505608"
    );
    assert_eq!(PersistedBlobStats::decode(&b).unwrap(), stats);
}

#[test]
fn every_damage_is_detected() {
    let good = PersistedBlobStats {
        updates: 1,
        lifetime: counters([1, 2, 3, 4, 5, 6, 7]),
        ..Default::default()
    }
    .encode();
    for bit in 0..good.len() * 8 {
        let mut b = good;
        b[bit / 8] ^= 1 << (bit % 8);
        assert!(PersistedBlobStats::decode(&b).is_err(), "bit {bit} flipped");
    }
    for len in 0..good.len() {
        assert!(matches!(
            PersistedBlobStats::decode(&good[..len]),
            Err(crate::Error::Corrupt(_))
        ));
    }
    let mut other_version = good;
    other_version[8] = 2;
    assert!(matches!(
        PersistedBlobStats::decode(&other_version[..100]),
        Err(crate::Error::Corrupt(FormatError::Version(2)))
    ));
    let mut longer = good.to_vec();
    longer.push(0);
    assert!(PersistedBlobStats::decode(&longer).is_err());
}

#[test]
fn flushes_add_deltas_and_record_the_last_process() {
    let dir = tempfile::tempdir().unwrap();
    let c = BlobCache::new(config(dir.path()).miss_on_oversize(true)).unwrap();
    exercise(&c);
    c.flush().unwrap();
    let first = read(dir.path());
    assert_eq!(first.lifetime, counters(ONE_ROUND));
    assert_eq!(first.updates, 1);
    assert_eq!(first.last.pid, std::process::id());
    assert!(first.last.miss_on_oversize);
    assert_eq!(first.last.counters, counters(ONE_ROUND));
    assert!(first.since_unix_s > 1_600_000_000);
    assert!(first.last.updated_unix_s >= first.since_unix_s);

    // Nothing new: no update.
    c.flush().unwrap();
    assert_eq!(read(dir.path()).updates, 1);

    exercise(&c);
    exercise(&c);
    c.flush().unwrap();
    let third = read(dir.path());
    let three = counters(ONE_ROUND.map(|n| 3 * n));
    assert_eq!(third.lifetime, three, "only the delta was added");
    assert_eq!(third.updates, 2);
    assert_eq!(third.last.counters, three);
    assert_eq!(third.since_unix_s, first.since_unix_s);

    // A changed setting alone is recorded.
    c.set_miss_on_oversize(false);
    c.flush().unwrap();
    let flag = read(dir.path());
    assert!(!flag.last.miss_on_oversize);
    assert_eq!(flag.lifetime, three);
    assert_eq!(c.stats().diagnostics_error, None);

    // Dropping persists; the next cache (process) adds to the lifetime totals and reports
    // its own counts as the last process's.
    exercise(&c);
    drop(c);
    assert_eq!(
        read(dir.path()).lifetime,
        counters(ONE_ROUND.map(|n| 4 * n))
    );
    let next = BlobCache::new(config(dir.path())).unwrap();
    let mut buf = [0u8; 200];
    assert_eq!(next.get(b"program", &mut buf), 100, "entries persisted too");
    drop(next);
    let after = read(dir.path());
    assert_eq!(after.lifetime.gets, 13);
    assert_eq!(after.lifetime.hits, 5);
    assert_eq!(after.last.counters, counters([1, 1, 0, 0, 0, 0, 0]));
    assert_eq!(after.updates, 5);
}

#[test]
fn a_cache_that_saw_no_call_writes_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let c = BlobCache::new(config(dir.path())).unwrap();
    c.flush().unwrap();
    drop(c);
    assert!(read_persisted_stats(dir.path()).unwrap().is_none());
    assert!(dir.path().join("meta").exists());
}

#[test]
fn parallel_flushes_of_two_caches_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let a = BlobCache::new(config(dir.path())).unwrap();
    let b = BlobCache::new(config(dir.path())).unwrap();
    const ROUNDS: u64 = 40;
    std::thread::scope(|scope| {
        for c in [&a, &b] {
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    exercise(c);
                    if round % 3 == 0 {
                        c.flush().unwrap();
                    } else {
                        c.persist_stats().unwrap();
                    }
                }
            });
        }
    });
    drop(a);
    drop(b);
    let stats = read(dir.path());
    assert_eq!(
        stats.lifetime,
        counters(ONE_ROUND.map(|n| 2 * ROUNDS * n)),
        "every delta of both caches is in the totals"
    );
    assert_eq!(stats.last.counters, counters(ONE_ROUND.map(|n| ROUNDS * n)));
    assert!(stats.updates >= 2 && stats.updates <= 2 * ROUNDS);
    let tmp: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().contains(".tmp."))
        .collect();
    assert!(tmp.is_empty(), "left {tmp:?}");
}

#[test]
fn a_corrupt_or_truncated_file_is_ignored_and_rewritten() {
    let good = PersistedBlobStats {
        updates: 9,
        lifetime: counters([100; 7]),
        ..Default::default()
    }
    .encode();
    let mut flipped = good;
    flipped[40] ^= 0x10;
    let mut newer = good;
    newer[8] = 7;
    let damaged: [(&str, Vec<u8>); 5] = [
        ("truncated", good[..100].to_vec()),
        ("empty", Vec::new()),
        ("flipped", flipped.to_vec()),
        ("newer version", newer.to_vec()),
        ("garbage", vec![0xAB; 10_000]),
    ];
    for (what, bytes) in damaged {
        let dir = tempfile::tempdir().unwrap();
        let c = BlobCache::new(config(dir.path())).unwrap();
        std::fs::write(dir.path().join(STATS_FILE), &bytes).unwrap();
        assert!(read_persisted_stats(dir.path()).is_err(), "{what}");
        exercise(&c);
        c.flush().unwrap();
        assert_eq!(c.stats().diagnostics_error, None, "{what}");
        let stats = read(dir.path());
        assert_eq!(
            stats.lifetime,
            counters(ONE_ROUND),
            "{what}: started afresh"
        );
        assert_eq!(stats.updates, 1, "{what}");
        // The cache itself works throughout.
        let mut buf = [0u8; 100];
        assert_eq!(c.get(b"program", &mut buf), 100, "{what}");
    }
}

#[test]
fn an_unwritable_stats_file_degrades_to_no_diagnostics() {
    let dir = tempfile::tempdir().unwrap();
    let c = BlobCache::new(config(dir.path())).unwrap();
    // A directory where the file should be: it can be neither read nor replaced.
    std::fs::create_dir(dir.path().join(STATS_FILE)).unwrap();
    exercise(&c);
    c.flush().expect("flush does not fail for diagnostics");
    assert!(c.persist_stats().is_err());
    let error = c
        .stats()
        .diagnostics_error
        .expect("the failure is reported");
    assert!(error.contains("not persisted"), "{error}");
    let mut buf = [0u8; 100];
    assert_eq!(c.get(b"program", &mut buf), 100);
    let unreadable = read_persisted_stats(dir.path()).unwrap_err();
    assert!(
        unreadable.to_string().contains("not a regular file"),
        "{unreadable}"
    );

    // Once the obstacle is gone, nothing counted meanwhile is lost.
    std::fs::remove_dir(dir.path().join(STATS_FILE)).unwrap();
    c.flush().unwrap();
    assert_eq!(c.stats().diagnostics_error, None);
    let stats = read(dir.path());
    assert_eq!(stats.lifetime.gets, 4);
    assert_eq!(stats.lifetime.sets, 2);
}

#[test]
fn clear_resets_the_totals() {
    let dir = tempfile::tempdir().unwrap();
    let c = BlobCache::new(config(dir.path())).unwrap();
    exercise(&c);
    c.flush().unwrap();
    assert!(dir.path().join(STATS_FILE).exists());
    exercise(&c); // Counted before the clear, not yet persisted.
    c.clear().unwrap();
    assert!(
        read_persisted_stats(dir.path()).unwrap().is_none(),
        "clear removes the file"
    );
    let mut buf = [0u8; 100];
    assert_eq!(c.get(b"program", &mut buf), 0);
    c.flush().unwrap();
    let stats = read(dir.path());
    assert_eq!(stats.lifetime, counters([1, 0, 1, 0, 0, 0, 0]));
    assert_eq!(stats.updates, 1);
    assert_eq!(
        stats.last.counters.gets, 7,
        "the process's own totals are kept"
    );
}

#[test]
fn another_identity_wipes_the_file_and_the_old_cache_stops_writing_it() {
    let dir = tempfile::tempdir().unwrap();
    let old = BlobCache::new(config(dir.path())).unwrap();
    exercise(&old);
    old.flush().unwrap();
    assert!(dir.path().join(STATS_FILE).exists());
    let new =
        BlobCache::new(config(dir.path()).cache(|c| c.identity(&b"llvmpipe 25.1.0"[..]))).unwrap();
    assert!(
        read_persisted_stats(dir.path()).unwrap().is_none(),
        "a wipe removes the previous driver's diagnostics"
    );
    exercise(&old);
    assert!(old.flush().is_err(), "the old cache's writer stopped too");
    assert!(old.persist_stats().is_err());
    let error = old.stats().diagnostics_error.unwrap();
    assert!(error.contains("another identity"), "{error}");
    assert!(read_persisted_stats(dir.path()).unwrap().is_none());
    let mut buf = [0u8; 10];
    assert_eq!(new.get(b"x", &mut buf), 0);
    drop(new);
    assert_eq!(read(dir.path()).lifetime.gets, 1);
}

#[test]
fn a_memory_only_cache_has_no_file_and_no_error() {
    let c = BlobCache::new(BlobCacheConfig::default()).unwrap();
    exercise(&c);
    c.flush().unwrap();
    c.persist_stats().unwrap();
    assert_eq!(c.stats().diagnostics_error, None);
}
