use super::*;

fn cache() -> BlobCache {
    BlobCache::new(BlobCacheConfig::default().cache(|c| c.max_value_size(1000))).unwrap()
}

#[test]
fn the_latest_set_wins() {
    let c = cache();
    c.set(b"key", b"old");
    c.set(b"key", b"newer");
    let mut buf = [0u8; 16];
    assert_eq!(c.get(b"key", &mut buf), 5);
    assert_eq!(&buf[..5], b"newer");
}

#[test]
fn a_miss_returns_zero_and_writes_nothing() {
    let c = cache();
    let mut buf = [0xAAu8; 4];
    assert_eq!(c.get(b"missing", &mut buf), 0);
    assert_eq!(buf, [0xAA; 4]);
}

#[test]
fn a_too_small_buffer_gets_the_size_and_is_never_written() {
    let c = cache();
    c.set(b"key", &[1, 2, 3, 4, 5]);
    let mut small = [0xAAu8; 4];
    assert_eq!(c.get(b"key", &mut small), 5);
    assert_eq!(small, [0xAA; 4]);
    // The size query with an empty buffer, as ANGLE does.
    assert_eq!(c.get(b"key", &mut []), 5);
    assert_eq!(c.stats().gets_buffer_too_small, 2);
    // A larger buffer is written only up to the value's size.
    let mut big = [0xAAu8; 8];
    assert_eq!(c.get(b"key", &mut big), 5);
    assert_eq!(big, [1, 2, 3, 4, 5, 0xAA, 0xAA, 0xAA]);
}

#[test]
fn miss_on_oversize_answers_zero_for_mesa() {
    let c = BlobCache::new(BlobCacheConfig::default().miss_on_oversize(true)).unwrap();
    c.set(b"key", &[7u8; 100]);
    let mut buf = [0u8; 64];
    assert_eq!(c.get(b"key", &mut buf), 0);
    assert_eq!(buf, [0u8; 64]);
    assert_eq!(c.stats().gets_buffer_too_small, 1);
    let mut enough = [0u8; 100];
    assert_eq!(c.get(b"key", &mut enough), 100);
    // Switched off at run time: the extension's answer, the size, without a copy.
    c.set_miss_on_oversize(false);
    assert!(!c.miss_on_oversize());
    assert_eq!(c.get(b"key", &mut buf), 100);
    assert_eq!(buf, [0u8; 64]);
}

#[test]
fn a_too_large_value_is_dropped_and_the_old_one_kept() {
    let c = cache();
    c.set(b"key", b"small");
    c.set(b"key", &[0u8; 1001]);
    let mut buf = [0u8; 2000];
    assert_eq!(c.get(b"key", &mut buf), 5);
    assert_eq!(&buf[..5], b"small");
    assert_eq!(c.stats().sets_dropped, 1);
}

#[test]
fn empty_values_and_oversized_keys_are_dropped() {
    let c = BlobCache::new(BlobCacheConfig::default().max_key_size(8)).unwrap();
    c.set(b"key", b"");
    c.set(&[1u8; 9], b"v");
    let mut buf = [0u8; 4];
    assert_eq!(c.get(b"key", &mut buf), 0);
    assert_eq!(c.get(&[1u8; 9], &mut buf), 0);
    assert_eq!(c.stats().sets_dropped, 2);
    assert_eq!(c.stats().cache.memory.entries, 0);
}

#[test]
fn the_budget_holds_and_eviction_keeps_serving() {
    let c =
        BlobCache::new(BlobCacheConfig::default().cache(|c| c.max_memory_bytes(64 << 10))).unwrap();
    for i in 0..1000u32 {
        c.set(&i.to_le_bytes(), &[i as u8; 1000]);
    }
    let st = c.stats();
    assert!(st.cache.memory.bytes <= 64 << 10);
    assert!(st.cache.memory.evictions > 900);
    // Whichever entries the policy kept (W-TinyLFU refuses one-off newcomers at the door),
    // the budget's worth is served, each with its own bytes.
    let mut buf = [0u8; 1000];
    let mut served = 0;
    for i in 0..1000u32 {
        if c.get(&i.to_le_bytes(), &mut buf) == 1000 {
            assert!(buf.iter().all(|&b| b == i as u8));
            served += 1;
        }
    }
    assert_eq!(served, st.cache.memory.entries);
    assert!(served >= 40, "{served} served");
    // A blob set again and again is served.
    for _ in 0..4 {
        c.set(b"again", &[7u8; 1000]);
    }
    assert_eq!(c.get(b"again", &mut buf), 1000);
    assert!(buf.iter().all(|&b| b == 7));
}

/// Mesa's pattern: `set` from worker threads while `get` runs elsewhere. Every value is
/// self-describing (key and version repeated), so a torn or misdirected value is caught.
#[test]
fn concurrent_set_and_get_never_return_wrong_bytes() {
    let c =
        BlobCache::new(BlobCacheConfig::default().cache(|c| c.max_memory_bytes(1 << 20))).unwrap();
    let value_of = |key: u16, version: u16| -> Vec<u8> {
        let mut v = Vec::new();
        for _ in 0..(64 + (key as usize % 512)) {
            v.extend_from_slice(&key.to_le_bytes());
            v.extend_from_slice(&version.to_le_bytes());
        }
        v
    };
    std::thread::scope(|scope| {
        for writer in 0..2u16 {
            let c = &c;
            scope.spawn(move || {
                for round in 0..20u16 {
                    for key in 0..300u16 {
                        c.set(&key.to_le_bytes(), &value_of(key, writer * 100 + round));
                    }
                }
            });
        }
        let c = &c;
        scope.spawn(move || {
            let mut buf = vec![0u8; 4096];
            for _ in 0..20 {
                for key in 0..300u16 {
                    let n = c.get(&key.to_le_bytes(), &mut buf);
                    if n == 0 {
                        continue;
                    }
                    assert!(n <= buf.len());
                    let version = u16::from_le_bytes([buf[2], buf[3]]);
                    assert_eq!(&buf[..n], &value_of(key, version)[..]);
                }
            }
        });
    });
}

#[test]
fn a_directory_makes_entries_outlive_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let config = BlobCacheConfig::default()
        .cache(|c| c.directory(dir.path()).identity(&b"llvmpipe 25.0.7"[..]));
    {
        let c = BlobCache::new(config.clone()).unwrap();
        c.set(b"program", &[42u8; 5000]);
    } // Dropping flushes.
    let c = BlobCache::new(config).unwrap();
    let mut buf = vec![0u8; 65536];
    assert_eq!(c.get(b"program", &mut buf), 5000);
    assert!(buf[..5000].iter().all(|&b| b == 42));
    let other = BlobCache::new(
        BlobCacheConfig::default()
            .cache(|c| c.directory(dir.path()).identity(&b"another driver"[..])),
    )
    .unwrap();
    assert_eq!(
        other.get(b"program", &mut buf),
        0,
        "another identity starts empty"
    );
}

#[test]
fn every_get_is_a_hit_a_miss_or_too_small() {
    let c = BlobCache::new(BlobCacheConfig::default().max_key_size(8)).unwrap();
    c.set(b"key", &[3u8; 50]);
    c.set(b"key", b"");
    let mut buf = [0u8; 64];
    assert_eq!(c.get(b"key", &mut buf), 50);
    assert_eq!(c.get(b"key", &mut buf[..10]), 50);
    assert_eq!(c.get(b"absent", &mut buf), 0);
    assert_eq!(c.get(&[1u8; 9], &mut buf), 0, "a too-long key is a miss");
    let st = c.stats();
    assert_eq!((st.gets, st.hits, st.misses), (4, 1, 2));
    assert_eq!(st.gets_buffer_too_small, 1);
    assert_eq!((st.sets, st.sets_dropped), (2, 1));
    assert_eq!(st.counters(), c.counters());
    assert_eq!(c.counters().hit_rate_percent(), Some(25.0));
}

#[test]
fn a_directory_does_not_raise_the_value_limit() {
    let dir = tempfile::tempdir().unwrap();
    let c = BlobCache::new(
        BlobCacheConfig::default().cache(|c| c.directory(dir.path()).max_value_size(1000)),
    )
    .unwrap();
    c.set(b"key", b"small");
    c.set(b"key", &[0u8; 1001]);
    let mut buf = [0u8; 2000];
    assert_eq!(c.get(b"key", &mut buf), 5, "the old value is kept");
    assert_eq!(c.stats().sets_dropped, 1);
}

#[test]
fn sets_over_the_value_limit_are_dropped_from_their_size() {
    let dir = tempfile::tempdir().unwrap();
    // 64 KiB on disk: segments of 8 KiB lower the 4 MiB default.
    let c = BlobCache::new(
        BlobCacheConfig::default().cache(|c| c.directory(dir.path()).max_disk_bytes(64 << 10)),
    )
    .unwrap();
    let limit = c.max_value_size();
    assert!(limit < 8 << 10, "{limit}");
    c.set(b"k", &vec![1u8; limit as usize + 1]);
    c.set_refused();
    let s = c.stats();
    assert_eq!((s.sets, s.sets_dropped), (2, 2));
    assert_eq!(c.get(b"k", &mut []), 0);
    assert_eq!(
        BlobCache::new(BlobCacheConfig::default())
            .unwrap()
            .max_value_size(),
        4 << 20
    );
}

#[test]
fn the_preload_waits_for_the_first_get_or_set() {
    let dir = tempfile::tempdir().unwrap();
    let config = BlobCacheConfig::default().cache(|c| c.directory(dir.path()));
    {
        let c = BlobCache::new(config.clone()).unwrap();
        for i in 0..20u32 {
            c.set(&i.to_le_bytes(), &[i as u8; 300]);
        }
    }
    for first_use in ["get", "set"] {
        let c = BlobCache::new(config.clone()).unwrap();
        // Time enough for a preload started by the open to read 6 KB.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(
            c.cache().stats().preloaded,
            0,
            "started before the {first_use}"
        );
        let mut buf = [0u8; 300];
        match first_use {
            "get" => assert_eq!(c.get(&3u32.to_le_bytes(), &mut buf), 300),
            _ => c.set(b"new", b"value"),
        }
        // Not `wait_for_preload`, which would start it: the get or set must have. The key
        // got is not preloaded, unless the preload (started first) read it before the get.
        let least = if first_use == "get" { 19 } else { 20 };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while c.cache().stats().preloaded < least && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(
            c.cache().stats().preloaded >= least,
            "the {first_use} did not start the preload"
        );
        c.cache().wait_for_preload();
        let preloaded = c.cache().stats().preloaded;
        assert!(
            (least..=20).contains(&preloaded),
            "{preloaded} after the {first_use}"
        );
    }
}
