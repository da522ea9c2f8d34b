//! A process killed at any instant leaves a directory that opens, and never yields a corrupt
//! value.
//!
//! Children (this test executable run again, see `child_crash_writer`) store, overwrite and
//! remove self-verifying values on a small directory (rotation, eviction and compaction all
//! happen) and are SIGKILLed after a random delay. After each kill the parent opens the
//! directory, reads every key of the key space and checks each value present, then writes
//! enough to rotate a segment (the directory must accept writes after a crash). The next child
//! appends after the crash, so tail repair runs on every iteration.
//!
//! The last tests build, by hand, the states a crash leaves at the worst instants (between the
//! two files of a new segment, before an index header) and check recovery from them.

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{
    child_command, child_role, env, env_u64, key, listing, seed, seg_path, segment_header,
    value_for, verify, Rng, Running,
};
use gpucache::{Cache, CacheBuilder};

/// Keys 0..KEYS; the first HOT of them take half the stores, so overwrites make dead space.
const KEYS: u32 = 1200;
const HOT: u32 = 100;
/// Versions written by the parent carry this epoch (children use the iteration number).
const PARENT_EPOCH: u64 = 0xFFFF;

fn builder(dir: &Path) -> CacheBuilder {
    Cache::builder()
        .directory(dir)
        .identity(&b"crash-test driver 1"[..])
        .max_segment_bytes(64 << 10)
        .max_disk_bytes(1 << 20)
        .max_memory_bytes(256 << 10)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// Stores, removals, reads and flushes.
    Mixed,
    /// Mostly overwrites of hot keys, and `compact()` every few operations.
    Compact,
}

/// The child's job: store, remove, read (verifying) and flush or compact until killed.
#[test]
#[ignore = "child process of the crash tests; does nothing unless GPUCACHE_CHILD is set"]
fn child_crash_writer() {
    let Some(()) = child_role("crash-writer") else {
        return;
    };
    let dir = env("GPUCACHE_DIR");
    let epoch = env_u64("GPUCACHE_EPOCH");
    let mode = if env("GPUCACHE_MODE") == "compact" {
        Mode::Compact
    } else {
        Mode::Mixed
    };
    let mut rng = Rng::new(env_u64("GPUCACHE_SEED"));
    let cache = builder(Path::new(&dir))
        .preload(rng.percent(50))
        .preload_at_first_use(rng.percent(50))
        .open()
        .unwrap();
    if let Some(e) = cache.disk_error() {
        println!("DISKERROR {e}");
        std::process::exit(4);
    }
    let report_compaction = |cache: &Cache, ok: bool| {
        let d = cache.stats().disk.unwrap();
        println!(
            "COMPACT ok={} compacted_segments={} write_errors={}",
            u8::from(ok),
            d.compacted_segments,
            d.write_errors
        );
    };
    if mode == Mode::Compact {
        // Sealed segments full of overwritten records, and one compaction, before the kill
        // window opens: every child of this mode has compaction work from its first moment.
        for i in 0..300u64 {
            let id = rng.range(0, u64::from(HOT)) as u32;
            let len = rng.range(32, 3000) as usize;
            let _ = cache.insert(&key(id), value_for(id, epoch << 32 | 1 << 31 | i, len));
        }
        let _ = cache.flush();
        report_compaction(&cache, cache.compact().is_ok());
    }
    println!("READY");
    let start = Instant::now();
    let mut counter = 0u64;
    // Bounded, so that an orphaned child ends by itself.
    while start.elapsed() < Duration::from_secs(30) {
        counter += 1;
        let hot = mode == Mode::Compact || rng.percent(50);
        let id = if hot {
            rng.range(0, u64::from(HOT)) as u32
        } else {
            rng.range(0, u64::from(KEYS)) as u32
        };
        let len = if rng.percent(5) {
            rng.range(4000, 12_000)
        } else {
            rng.range(32, 3000)
        } as usize;
        match rng.range(0, 100) {
            0..=69 => {
                let _ = cache.insert(&key(id), value_for(id, epoch << 32 | counter, len));
            }
            70..=79 => {
                cache.remove(&key(id));
            }
            80..=97 => {
                if let Some(v) = cache.get(&key(id)) {
                    if let Err(e) = verify(id, &v) {
                        println!("CORRUPT {e}");
                        std::process::exit(3);
                    }
                }
            }
            _ => {
                if mode == Mode::Mixed {
                    let _ = cache.flush();
                }
            }
        }
        if mode == Mode::Compact && counter.is_multiple_of(10) {
            report_compaction(&cache, cache.compact().is_ok());
        }
    }
    println!("DONE");
}

/// What the parent saw over all iterations.
#[derive(Default, Debug)]
struct Tally {
    kills: u64,
    verified: u64,
    from_children: u64,
    corrupt_dropped: u64,
    compacted_segments: u64,
}

/// Kills `iterations` children at random instants, checking the directory after each.
fn kill_children_at_random(test: &str, iterations: u64, mode_of: impl Fn(u64) -> Mode) -> Tally {
    let seed = seed(test);
    let mut rng = Rng::new(seed);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let mut tally = Tally::default();
    for it in 0..iterations {
        let mode = mode_of(it);
        let mut cmd = child_command("child_crash_writer", "crash-writer");
        cmd.env("GPUCACHE_DIR", &dir)
            .env("GPUCACHE_EPOCH", (it + 1).to_string())
            .env("GPUCACHE_SEED", rng.next_u64().to_string())
            .env(
                "GPUCACHE_MODE",
                if mode == Mode::Compact {
                    "compact"
                } else {
                    "mixed"
                },
            );
        let mut child = Running::spawn(cmd).unwrap();
        // One kill in four lands while the child may still be opening (tail repair, preload).
        if it % 4 == 3 {
            std::thread::sleep(Duration::from_millis(rng.range(0, 40)));
        } else {
            assert!(
                child.wait_for_line("READY", Duration::from_secs(60)),
                "iteration {it}: the child did not open the cache (seed {seed})"
            );
            std::thread::sleep(Duration::from_millis(rng.range(5, 150)));
        }
        let done = child.kill();
        assert!(
            done.was_killed() || done.status.success(),
            "iteration {it}: the child failed on its own (seed {seed}): {:?}\nstdout:\n{}\nstderr:\n{}",
            done.status,
            done.stdout.join("\n"),
            done.stderr
        );
        tally.kills += u64::from(done.was_killed());
        tally.compacted_segments = tally.compacted_segments.max(
            done.lines_with("COMPACT ")
                .filter_map(|l| {
                    l.split_whitespace()
                        .find_map(|kv| kv.strip_prefix("compacted_segments="))
                })
                .filter_map(|n| n.parse::<u64>().ok())
                .max()
                .unwrap_or(0),
        );
        check_after_crash(&dir, it, seed, &mut tally);
    }
    println!("{test}: {tally:?}");
    tally
}

/// Opens the directory a child was killed in: every value present must verify, the stats
/// must be readable, and the directory must take writes again (a segment's worth, so that
/// a new segment is created).
fn check_after_crash(dir: &Path, it: u64, seed: u64, tally: &mut Tally) {
    let preload = it.is_multiple_of(2);
    // Every fourth iteration defers the preload to the first use (the EGL blob cache's way);
    // `wait_for_preload` below starts it.
    let cache = builder(dir)
        .preload(preload)
        .preload_at_first_use(it % 4 == 2)
        .open()
        .unwrap();
    assert!(
        cache.disk_error().is_none(),
        "iteration {it}: the directory does not open after a crash (seed {seed}): {:?}",
        cache.disk_error()
    );
    if preload {
        cache.wait_for_preload();
    }
    for id in 0..KEYS {
        if let Some(v) = cache.get(&key(id)) {
            match verify(id, &v) {
                Ok(version) => {
                    tally.verified += 1;
                    tally.from_children += u64::from(version >> 32 != PARENT_EPOCH);
                }
                Err(e) => panic!(
                    "iteration {it}: corrupt value after a crash (seed {seed}, preload {preload}): \
                     {e}\nfiles: {:?}",
                    listing(dir)
                ),
            }
        }
    }
    let d = cache.stats().disk.expect("a disk tier");
    tally.corrupt_dropped += d.corrupt_dropped;
    // After a crash the directory still accepts writes, a new segment included.
    for j in 0..48u32 {
        let id = KEYS - 1 - j;
        let version = PARENT_EPOCH << 32 | it << 8 | u64::from(j);
        cache
            .insert(&key(id), value_for(id, version, 2000))
            .unwrap();
    }
    let flushed = cache.flush();
    let d = cache.stats().disk.unwrap();
    assert!(
        flushed.is_ok() && d.write_errors == 0,
        "iteration {it}: the directory refuses writes after a crash (seed {seed}): {flushed:?}, \
         last error {:?}\nfiles: {:?}",
        d.last_error,
        listing(dir)
    );
}

#[test]
fn killed_writers_leave_a_directory_that_opens_and_never_yields_a_corrupt_value() {
    let tally = kill_children_at_random(
        "killed_writers_leave_a_directory_that_opens_and_never_yields_a_corrupt_value",
        40,
        |it| {
            if it % 5 == 4 {
                Mode::Compact
            } else {
                Mode::Mixed
            }
        },
    );
    assert!(tally.kills > 0, "no child was killed: {tally:?}");
    assert!(
        tally.from_children > 0,
        "no value stored by a killed child survived: {tally:?}"
    );
}

#[test]
fn writers_killed_during_compaction_never_yield_a_corrupt_value() {
    let tally = kill_children_at_random(
        "writers_killed_during_compaction_never_yield_a_corrupt_value",
        16,
        |_| Mode::Compact,
    );
    assert!(tally.kills > 0, "no child was killed: {tally:?}");
    assert!(
        tally.from_children > 0,
        "no value stored by a killed child survived: {tally:?}"
    );
    assert!(
        tally.compacted_segments > 0,
        "the children never compacted a segment: {tally:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Crash states built by hand: the instants too short for a random kill to hit reliably.

/// A directory holding one segment of `n` entries (keys 0..n, version 1, 2000 B).
fn one_segment(dir: &Path, n: u32) {
    let c = builder(dir).open().unwrap();
    for id in 0..n {
        c.insert(&key(id), value_for(id, 1, 2000)).unwrap();
    }
    c.flush().unwrap();
    assert_eq!(c.stats().disk.unwrap().segments, 1);
}

/// Writes past a segment's size after the crash state was made, then checks that every
/// entry, old and new, reads back after a reopen.
fn writes_go_on_after(dir: &Path, state: &str) {
    let c = builder(dir).preload(false).open().unwrap();
    assert!(c.disk_error().is_none(), "{state}: {:?}", c.disk_error());
    for id in 0..20 {
        let v = c
            .get(&key(id))
            .unwrap_or_else(|| panic!("{state}: key {id} lost"));
        verify(id, &v).unwrap();
    }
    for id in 20..80 {
        c.insert(&key(id), value_for(id, 1, 2000)).unwrap();
    }
    let flushed = c.flush();
    let d = c.stats().disk.unwrap();
    assert!(
        flushed.is_ok() && d.write_errors == 0,
        "{state}: writes fail for good once the segment fills: {flushed:?}, last error {:?}, \
         files {:?}",
        d.last_error,
        listing(dir)
    );
    drop(c);
    let c = builder(dir).preload(false).open().unwrap();
    for id in 0..80 {
        let v = c
            .get(&key(id))
            .unwrap_or_else(|| panic!("{state}: key {id} missing after reopen"));
        assert_eq!(verify(id, &v).unwrap(), 1);
    }
}

#[test]
fn a_crash_between_creating_a_segments_data_and_index_files_does_not_block_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    one_segment(dir, 20);
    // Killed in create_segment after the new data file got its header, before the index
    // file was created: the segment is invisible (no index file) but its data file exists.
    fs::write(seg_path(dir, 2, "dat"), segment_header(b"GPUCDATA", 2)).unwrap();
    writes_go_on_after(dir, "orphan seg-00000002.dat");
}

#[test]
fn a_crash_before_a_new_index_header_is_written_does_not_block_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    one_segment(dir, 20);
    // Killed in create_segment after the index file was created, before its header was
    // written: an empty index file, which readers skip as "being created".
    fs::write(seg_path(dir, 2, "dat"), segment_header(b"GPUCDATA", 2)).unwrap();
    fs::write(seg_path(dir, 2, "idx"), b"").unwrap();
    writes_go_on_after(dir, "empty seg-00000002.idx");
}

#[test]
fn compaction_right_after_reopen_keeps_every_live_entry() {
    // A process restarted after a crash (or any fresh process) whose first disk operation is
    // `compact()`: it has no active segment yet.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Segments of 1 MiB: the writer compacts an active segment by itself only from 128 KiB
    // of dead records, and this one must keep its 30 KB until `compact()`.
    let builder = |dir: &Path| {
        builder(dir)
            .max_disk_bytes(8 << 20)
            .max_segment_bytes(1 << 20)
    };
    {
        let c = builder(dir).open().unwrap();
        for version in 1..=4 {
            for id in 0..20 {
                c.insert(&key(id), value_for(id, version, 500)).unwrap();
            }
        }
        c.flush().unwrap();
        let d = c.stats().disk.unwrap();
        assert_eq!(
            d.segments, 1,
            "the test wants one segment with dead records"
        );
        assert!(d.live_bytes * 2 < d.file_bytes);
    }
    let c = builder(dir).preload(false).open().unwrap();
    c.compact().unwrap();
    let lost_now: Vec<u32> = (0..20).filter(|&id| c.get(&key(id)).is_none()).collect();
    drop(c);
    let c = builder(dir).preload(false).open().unwrap();
    let mut lost_after_reopen = Vec::new();
    for id in 0..20 {
        match c.get(&key(id)) {
            Some(v) => assert_eq!(verify(id, &v).unwrap(), 4),
            None => lost_after_reopen.push(id),
        }
    }
    assert!(
        lost_now.is_empty() && lost_after_reopen.is_empty(),
        "compact() lost live entries: {} in the compacting process, {} after reopen; files {:?}",
        lost_now.len(),
        lost_after_reopen.len(),
        listing(dir)
    );
}

#[test]
fn a_removed_key_stays_removed_after_compaction_and_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    const VICTIM: u32 = 5000;
    let c = builder(dir).open().unwrap();
    let segments = |c: &Cache| c.stats().disk.unwrap().segments;
    // Segment 1: the victim's value and live fillers.
    c.insert(&key(VICTIM), value_for(VICTIM, 1, 200)).unwrap();
    let mut next = 0u32;
    let mut fill_until = |c: &Cache, segs: u64, ids: &mut Vec<u32>| {
        while segments(c) < segs {
            c.insert(&key(next), value_for(next, 1, 2000)).unwrap();
            c.flush().unwrap();
            ids.push(next);
            next += 1;
        }
    };
    let mut first = Vec::new();
    fill_until(&c, 2, &mut first);
    // Segment 2: the victim's tombstone, then fillers until segment 3 starts.
    c.remove(&key(VICTIM));
    c.flush().unwrap();
    let mut second = vec![*first.last().unwrap()];
    fill_until(&c, 3, &mut second);
    // Overwrite segment 2's fillers: it becomes the sealed segment with the most dead bytes,
    // and is compacted (its live records copied forward, the tombstone not).
    for &id in &second {
        c.insert(&key(id), value_for(id, 2, 2000)).unwrap();
        c.flush().unwrap();
    }
    let d = c.stats().disk.unwrap();
    println!(
        "compacted {} segments; seg 1 index present: {}; seg 2 index present: {}",
        d.compacted_segments,
        seg_path(dir, 1, "idx").exists(),
        seg_path(dir, 2, "idx").exists()
    );
    assert_eq!(c.get(&key(VICTIM)), None, "removed in the writing process");
    drop(c);
    let c = builder(dir).preload(false).open().unwrap();
    let back = c.get(&key(VICTIM));
    assert!(
        back.is_none(),
        "a removed key came back after reopen (version {:?}); files {:?}",
        back.map(|v| verify(VICTIM, &v)),
        listing(dir)
    );
}

#[test]
fn data_files_orphaned_by_a_crash_mid_delete_do_not_escape_the_byte_limit() {
    const LIMIT: u64 = 1 << 20;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fill = |from: u32, to: u32| {
        let c = builder(dir).open().unwrap();
        for id in from..to {
            c.insert(&key(id), value_for(id, 1, 2000)).unwrap();
        }
        c.flush().unwrap();
        c.stats().disk.unwrap()
    };
    let d = fill(0, 600);
    assert!(d.segments >= 8, "{d:?}");
    // Killed while deleting segments (evicted or compacted): the index file went first, the
    // data file stayed. Four such crashes.
    let mut segs: Vec<u32> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let hex = name.strip_prefix("seg-")?.strip_suffix(".idx")?.to_owned();
            u32::from_str_radix(&hex, 16).ok()
        })
        .collect();
    segs.sort_unstable();
    for &seg in &segs[..4] {
        fs::remove_file(seg_path(dir, seg, "idx")).unwrap();
    }
    // Later processes write a directory's worth more.
    let d = fill(1000, 1600);
    let on_disk = common::segment_file_bytes(dir);
    assert!(
        on_disk <= LIMIT,
        "segment files take {on_disk} B, over the {LIMIT} B limit (the index accounts for {}); \
         files {:?}",
        d.file_bytes,
        listing(dir)
    );
}
