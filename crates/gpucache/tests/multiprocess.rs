//! Several processes on one cache directory at once.
//!
//! Each child (this test executable run again, see `child_mp_worker`) stores its own keys and
//! some keys shared by all, with self-verifying values, and reads the others' keys while they
//! write: another process's store becomes visible through the index refresh a miss triggers
//! (at most every 20 ms). Afterwards a fresh open must read only values that verify, and the
//! directory must be within its limits.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{
    child_command, child_role, env, env_u64, key, listing, seed, segment_file_bytes, value_for,
    verify, Rng, Running,
};
use gpucache::{Cache, CacheBuilder};

const WORKERS: u64 = 4;
const ROUNDS: u32 = 500;
const SHARED: u32 = 64;
const SHARED_BASE: u32 = 900_000;
const MAX_DISK_BYTES: u64 = 2 << 20;
const MAX_DISK_ENTRIES: u64 = 1000;

fn builder(dir: &Path) -> CacheBuilder {
    Cache::builder()
        .directory(dir)
        .identity(&b"multiprocess-test driver 1"[..])
        .max_disk_bytes(MAX_DISK_BYTES)
        .max_disk_entries(MAX_DISK_ENTRIES)
        .max_segment_bytes(128 << 10)
        // Small, so that most reads of other processes' keys go to disk.
        .max_memory_bytes(256 << 10)
}

fn own_id(worker: u64, round: u32) -> u32 {
    worker as u32 * 100_000 + round
}

/// Reads key `id`: `Some(true)` if present and valid; exits the child on a bad value.
fn read_checked(cache: &Cache, id: u32) -> Option<()> {
    let v = cache.get(&key(id))?;
    if let Err(e) = verify(id, &v) {
        println!("CORRUPT {e}");
        std::process::exit(3);
    }
    Some(())
}

/// One of the concurrent processes.
#[test]
#[ignore = "child process of the multi-process tests; does nothing unless GPUCACHE_CHILD is set"]
fn child_mp_worker() {
    let Some(()) = child_role("mp-worker") else {
        return;
    };
    let dir = env("GPUCACHE_DIR");
    let sync = env("GPUCACHE_SYNC");
    let me = env_u64("GPUCACHE_WORKER");
    let mut rng = Rng::new(env_u64("GPUCACHE_SEED"));
    let cache = builder(Path::new(&dir)).open().unwrap();
    assert!(cache.disk_error().is_none(), "{:?}", cache.disk_error());
    let (mut live_reads, mut shared_reads) = (0u64, 0u64);
    for round in 0..ROUNDS {
        let version = me << 32 | u64::from(round);
        let id = own_id(me, round);
        let len = rng.range(100, 3000) as usize;
        cache.insert(&key(id), value_for(id, version, len)).unwrap();
        if round.is_multiple_of(2) {
            let shared = SHARED_BASE + (round * 7 + me as u32) % SHARED;
            let len = rng.range(100, 2000) as usize;
            cache
                .insert(&key(shared), value_for(shared, version, len))
                .unwrap();
        }
        // Another process's key: it may not be written yet, or evicted already.
        let other = (me + rng.range(1, WORKERS)) % WORKERS;
        let their = own_id(other, rng.range(0, u64::from(round) + 1) as u32);
        live_reads += u64::from(read_checked(&cache, their).is_some());
        let shared = SHARED_BASE + rng.range(0, u64::from(SHARED)) as u32;
        shared_reads += u64::from(read_checked(&cache, shared).is_some());
        if round % 50 == 49 {
            cache.flush().unwrap();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    cache.flush().unwrap();
    // Barrier: wait (bounded) until every worker has flushed, then read all their keys.
    std::fs::write(Path::new(&sync).join(format!("done-{me}")), b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while (0..WORKERS).any(|w| !Path::new(&sync).join(format!("done-{w}")).exists())
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut final_reads = 0u64;
    for other in (0..WORKERS).filter(|&w| w != me) {
        for round in 0..ROUNDS {
            final_reads += u64::from(read_checked(&cache, own_id(other, round)).is_some());
        }
    }
    let stats = cache.stats();
    let d = stats.disk.unwrap();
    println!(
        "RESULT worker={me} live_reads={live_reads} final_reads={final_reads} \
         shared_reads={shared_reads} read_hits={} corrupt_dropped={} write_errors={} \
         evicted_segments={} compacted_segments={} queue_dropped={}",
        d.read_hits,
        d.corrupt_dropped,
        d.write_errors,
        d.evicted_segments,
        d.compacted_segments,
        stats.write_queue_dropped
    );
}

#[test]
fn four_processes_store_and_find_on_one_directory() {
    let seed = seed("four_processes_store_and_find_on_one_directory");
    let mut rng = Rng::new(seed);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let sync = tmp.path().join("sync");
    std::fs::create_dir(&sync).unwrap();
    let children: Vec<Running> = (0..WORKERS)
        .map(|w| {
            let mut cmd = child_command("child_mp_worker", "mp-worker");
            cmd.env("GPUCACHE_DIR", &dir)
                .env("GPUCACHE_SYNC", &sync)
                .env("GPUCACHE_WORKER", w.to_string())
                .env("GPUCACHE_SEED", rng.next_u64().to_string());
            Running::spawn(cmd).unwrap()
        })
        .collect();
    let mut total_live = 0;
    for (w, child) in children.into_iter().enumerate() {
        let done = child.wait(Duration::from_secs(240));
        done.assert_success(&format!("worker {w} (seed {seed})"));
        println!(
            "{}",
            done.lines_with("RESULT").next().unwrap_or("no report")
        );
        let live = done.field("RESULT", "live_reads").expect("a report");
        let fin = done.field("RESULT", "final_reads").expect("a report");
        assert!(
            live + fin > 0,
            "worker {w} never read another process's key (seed {seed})"
        );
        total_live += live;
    }
    println!("cross-process reads while all were writing: {total_live}");

    // A fresh process reads everything: every value present verifies.
    let cache = builder(&dir).preload(false).open().unwrap();
    let mut present = 0u64;
    let ids = (0..WORKERS)
        .flat_map(|w| (0..ROUNDS).map(move |r| own_id(w, r)))
        .chain(SHARED_BASE..SHARED_BASE + SHARED);
    for id in ids {
        if let Some(v) = cache.get(&key(id)) {
            verify(id, &v).unwrap_or_else(|e| panic!("{e} (seed {seed})"));
            present += 1;
        }
    }
    let stats = cache.stats();
    let d = stats.disk.unwrap();
    println!("fresh open: {present} values present, {d:?}");
    assert!(present > 0);
    assert!(
        d.file_bytes <= MAX_DISK_BYTES,
        "byte limit exceeded: {} > {MAX_DISK_BYTES}",
        d.file_bytes
    );
    assert!(
        d.entries <= MAX_DISK_ENTRIES,
        "entry limit exceeded: {} > {MAX_DISK_ENTRIES}",
        d.entries
    );
    let on_disk = segment_file_bytes(&dir);
    assert!(
        on_disk <= MAX_DISK_BYTES,
        "segment files take {on_disk} B > {MAX_DISK_BYTES}: {:?}",
        listing(&dir)
    );
    assert_eq!(d.corrupt_dropped, 0, "damage after clean exits");
}

// ---------------------------------------------------------------------------------------
// Compaction started by another process.

#[test]
#[ignore = "child process of the multi-process tests; does nothing unless GPUCACHE_CHILD is set"]
fn child_mp_compactor() {
    let Some(()) = child_role("mp-compactor") else {
        return;
    };
    let cache = builder(Path::new(&env("GPUCACHE_DIR")))
        .preload(false)
        .open()
        .unwrap();
    let result = cache.compact();
    let stats = cache.stats();
    let d = stats.disk.unwrap();
    println!(
        "RESULT ok={} compacted_segments={} entries={}",
        u8::from(result.is_ok()),
        d.compacted_segments,
        d.entries
    );
}

#[test]
fn compaction_by_another_process_keeps_live_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    // This process appends to segment 1, overwriting as it goes (dead records in it).
    let writer = builder(&dir).open().unwrap();
    for version in 1..=4 {
        for id in 0..20 {
            writer
                .insert(&key(id), value_for(id, version, 500))
                .unwrap();
        }
    }
    writer.flush().unwrap();
    assert_eq!(writer.stats().disk.unwrap().segments, 1);

    // Another process compacts the directory meanwhile.
    let mut cmd = child_command("child_mp_compactor", "mp-compactor");
    cmd.env("GPUCACHE_DIR", &dir);
    let done = Running::spawn(cmd).unwrap().wait(Duration::from_secs(120));
    done.assert_success("compactor");
    println!(
        "{}",
        done.lines_with("RESULT").next().unwrap_or("no report")
    );

    // The first process goes on writing.
    for id in 20..30 {
        writer.insert(&key(id), value_for(id, 4, 500)).unwrap();
    }
    writer.flush().unwrap();
    drop(writer);

    let cache = builder(&dir).preload(false).open().unwrap();
    let lost: Vec<u32> = (0..30)
        .filter(|&id| match cache.get(&key(id)) {
            Some(v) => {
                assert_eq!(verify(id, &v).unwrap(), 4);
                false
            }
            None => true,
        })
        .collect();
    assert!(
        lost.is_empty(),
        "entries lost to another process's compaction: {lost:?}; files {:?}",
        listing(&dir)
    );
}
