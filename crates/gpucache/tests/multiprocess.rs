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

// ---------------------------------------------------------------------------------------
// Opening through the hash table while another process rotates and compacts.

const TABLE_KEYS: u32 = 100;
/// Keys rewritten twice in even generations.
const TABLE_HOT_KEYS: u32 = 10;
const TABLE_GENERATIONS: u64 = 90;

fn table_builder(dir: &Path) -> CacheBuilder {
    Cache::builder()
        .directory(dir)
        .identity(&b"multiprocess-test driver 1"[..])
        // Room for every generation: only compaction deletes segments.
        .max_disk_bytes(64 << 20)
        // A few values per segment: each generation starts segments past the table's.
        .max_segment_bytes(32 << 10)
        .open_table_min_entries(0)
        .preload(false)
}

/// Waits (bounded) until `path` holds `want`.
fn wait_for(path: &Path, want: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let got = std::fs::read_to_string(path).ok();
        if got.and_then(|s| s.trim().parse::<u64>().ok()) == Some(want) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

/// Writes `n` to `path` atomically.
fn publish(path: &Path, n: u64) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, n.to_string()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The newest segment id the directory's hash table names, if it has one that decodes this
/// far (`docs/disk-format.md`: the segment count at 40, then 40 bytes per segment from 48).
fn table_top(dir: &Path) -> Option<u32> {
    let bytes = std::fs::read(dir.join("seg-table.hix")).ok()?;
    let u32_at = |i: usize| Some(u32::from_le_bytes(bytes.get(i..i + 4)?.try_into().ok()?));
    let segs = u32_at(40)? as usize;
    u32_at(48 + 40 * segs.checked_sub(1)?)
}

/// The highest segment id with an index file (`seg-<8 hex digits>.idx`).
fn newest_segment(dir: &Path) -> Option<u32> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let hex = name.strip_prefix("seg-")?.strip_suffix(".idx")?;
            u32::from_str_radix(hex, 16).ok()
        })
        .max()
}

/// The writer, in rounds of three generations: the first rewrites every key (enough entries
/// that its flush rewrites the table); the next two rewrite the first few keys with larger
/// values (too few entries for a new table), each starting segments past the table's
/// newest, and the third leaves the second's segments dead, so the compaction its flush runs
/// deletes them while its own stay. After each generation the writer publishes it and waits
/// for the reader.
#[test]
#[ignore = "child process of the multi-process tests; does nothing unless GPUCACHE_CHILD is set"]
fn child_mp_table_writer() {
    let Some(()) = child_role("mp-table-writer") else {
        return;
    };
    let dir = env("GPUCACHE_DIR");
    let sync = Path::new(&env("GPUCACHE_SYNC")).to_path_buf();
    let mut rng = Rng::new(env_u64("GPUCACHE_SEED"));
    let cache = table_builder(Path::new(&dir)).open().unwrap();
    for generation in 1..=TABLE_GENERATIONS {
        let (keys, lens) = match generation % 3 {
            1 => (TABLE_KEYS, (300, 1200)),
            _ => (TABLE_HOT_KEYS, (2000, 5000)),
        };
        for id in 0..keys {
            let len = rng.range(lens.0, lens.1) as usize;
            cache
                .insert(&key(id), value_for(id, generation, len))
                .unwrap();
        }
        cache.flush().unwrap();
        publish(&sync.join("published"), generation);
        assert!(wait_for(&sync.join("checked"), generation), "no reader");
    }
    let d = cache.stats().disk.unwrap();
    println!("RESULT compacted_segments={}", d.compacted_segments);
}

/// The generation of key `id`'s latest value after `generation` (see the writer).
fn table_expected(id: u32, generation: u64) -> u64 {
    if id < TABLE_HOT_KEYS {
        generation
    } else {
        generation - (generation + 2) % 3
    }
}

/// A process that opens the directory after another has flushed finds every value it
/// flushed, whether the open trusts the table (no listing: one `stat` of the next segment
/// id) or lists the directory because segments were started since; the writer's
/// compactions delete segments started after the table while later ones stay. The
/// processes take turns, so every miss or older value is the open's fault, not a race with
/// the writer.
#[test]
fn opens_through_the_table_find_what_another_process_flushed() {
    let seed = seed("opens_through_the_table_find_what_another_process_flushed");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let sync = tmp.path().join("sync");
    std::fs::create_dir(&sync).unwrap();
    let mut cmd = child_command("child_mp_table_writer", "mp-table-writer");
    cmd.env("GPUCACHE_DIR", &dir)
        .env("GPUCACHE_SYNC", &sync)
        .env("GPUCACHE_SEED", seed.to_string());
    let writer = Running::spawn(cmd).unwrap();
    let mut rng = Rng::new(seed ^ 1);
    let (mut past_table, mut with_table) = (0, 0);
    for generation in 1..=TABLE_GENERATIONS {
        assert!(
            wait_for(&sync.join("published"), generation),
            "writer stopped before generation {generation} (seed {seed})"
        );
        if let Some(top) = table_top(&dir) {
            with_table += 1;
            let newest = newest_segment(&dir).unwrap_or(0);
            past_table += usize::from(newest > top);
        }
        let cache = table_builder(&dir).open().unwrap();
        let mut ids: Vec<u32> = (0..TABLE_KEYS).collect();
        for i in (1..ids.len()).rev() {
            ids.swap(i, rng.range(0, i as u64 + 1) as usize);
        }
        for id in ids {
            let got = cache.get(&key(id)).map(|v| verify(id, &v));
            assert_eq!(
                got,
                Some(Ok(table_expected(id, generation))),
                "key {id} after generation {generation} (seed {seed}); files {:?}",
                listing(&dir)
            );
        }
        drop(cache);
        publish(&sync.join("checked"), generation);
    }
    let done = writer.wait(Duration::from_secs(120));
    done.assert_success(&format!("writer (seed {seed})"));
    println!(
        "{}; opens with a table {with_table}, of them with segments past it {past_table}",
        done.lines_with("RESULT").next().unwrap_or("no report")
    );
    assert!(
        past_table > 0,
        "no open found segments started after the table"
    );
}
