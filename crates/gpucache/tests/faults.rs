//! Faults of the file system under a cache: a full disk (RLIMIT_FSIZE, a small tmpfs), a
//! read-only directory, a directory that cannot be created, a directory removed while being
//! written, and an index entry that disagrees with its record. In each, the cache keeps
//! serving, never panics, and never returns a value that was not stored for its key.
//!
//! Root ignores permission bits, so the permission faults run in a child process (this test
//! executable again, see `child_fault_worker`) as the unprivileged user nobody.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{
    child_args, child_command_for, child_role, env, env_u64, key, listing, value_for, verify, Rng,
    Running, CHILD_ENV,
};
use gpucache::{Cache, CacheBuilder};

const NOBODY: u32 = 65534;

fn builder(dir: &Path) -> CacheBuilder {
    Cache::builder()
        .directory(dir)
        .identity(&b"faults-test driver 1"[..])
        .max_memory_bytes(64 << 20)
}

/// Reads key `id` and checks it; panics on a bad value.
fn read_checked(cache: &Cache, id: u32) -> Option<u64> {
    cache
        .get(&key(id))
        .map(|v| verify(id, &v).unwrap_or_else(|e| panic!("{e}")))
}

/// The child's job, by `GPUCACHE_FAULT`.
#[test]
#[ignore = "child process of the fault tests; does nothing unless GPUCACHE_CHILD is set"]
fn child_fault_worker() {
    let Some(()) = child_role("fault-worker") else {
        return;
    };
    let dir = PathBuf::from(env("GPUCACHE_DIR"));
    match env("GPUCACHE_FAULT").as_str() {
        "full" => full_disk_child(&dir),
        "readonly" => read_only_child(&dir, env_u64("GPUCACHE_ENTRIES") as u32),
        "uncreatable" => uncreatable_child(&dir),
        other => panic!("unknown fault {other}"),
    }
}

// ---------------------------------------------------------------------------------------
// Full disk.

const FULL_KEYS: u32 = 1500;
const FLUSHED_ONE_BY_ONE: u32 = 40;

/// Stores far more than the file-size limit allows; the cache must keep serving every store
/// from memory and count the failed writes.
fn full_disk_child(dir: &Path) {
    let cache = builder(dir)
        .max_disk_bytes(16 << 20)
        .max_segment_bytes(1 << 20)
        .open()
        .unwrap();
    assert!(cache.disk_error().is_none(), "{:?}", cache.disk_error());
    let mut rng = Rng::new(7);
    let mut flush_errors = 0u64;
    for id in 0..FULL_KEYS {
        let len = rng.range(1000, 3000) as usize;
        cache.insert(&key(id), value_for(id, 1, len)).unwrap();
        // The first few reach the disk before it fills.
        if id < FLUSHED_ONE_BY_ONE || id.is_multiple_of(100) {
            flush_errors += u64::from(cache.flush().is_err());
        }
    }
    flush_errors += u64::from(cache.flush().is_err());
    cache.compact().ok();
    for id in 0..FULL_KEYS {
        assert_eq!(
            read_checked(&cache, id),
            Some(1),
            "key {id}: a store must be served from memory when the disk is full"
        );
    }
    let d = cache.stats().disk.unwrap();
    assert!(d.write_errors > 0, "no write error counted: {d:?}");
    assert!(d.last_error.is_some(), "no last error: {d:?}");
    println!(
        "RESULT write_errors={} flush_errors={flush_errors} entries={}",
        d.write_errors, d.entries
    );
    println!("LAST_ERROR {}", d.last_error.unwrap());
}

/// Checks a directory a full-disk child wrote to: the first stores are there and every value
/// present verifies.
fn check_after_full_disk(dir: &Path) -> u64 {
    let cache = builder(dir).preload(false).open().unwrap();
    assert!(cache.disk_error().is_none(), "{:?}", cache.disk_error());
    let mut present = 0;
    for id in 0..FULL_KEYS {
        if read_checked(&cache, id).is_some() {
            present += 1;
        } else {
            assert!(
                id >= FLUSHED_ONE_BY_ONE,
                "key {id} was flushed before the disk filled but is gone; files {:?}",
                listing(dir)
            );
        }
    }
    assert_eq!(cache.stats().disk.unwrap().corrupt_dropped, 0);
    present
}

#[test]
fn a_full_disk_keeps_the_cache_serving_from_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    // RLIMIT_FSIZE of 256 KiB: writes past it fail with EFBIG. SIGXFSZ, which would kill the
    // process, is ignored, and an ignored disposition survives exec.
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(r#"trap "" XFSZ; ulimit -f 256; exec "$0" "$@""#)
        .arg(&exe)
        .args(child_args("child_fault_worker"))
        .env(CHILD_ENV, "fault-worker")
        .env("GPUCACHE_FAULT", "full")
        .env("GPUCACHE_DIR", &dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let done = Running::spawn(cmd).unwrap().wait(Duration::from_secs(240));
    done.assert_success("full-disk child");
    for line in done
        .lines_with("RESULT")
        .chain(done.lines_with("LAST_ERROR"))
    {
        println!("{line}");
    }
    assert!(done.field("RESULT", "write_errors").unwrap() > 0);
    let present = check_after_full_disk(&dir);
    println!("after the full disk: {present} of {FULL_KEYS} values on disk, all verified");
}

/// Unmounts on drop.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_tmpfs_keeps_the_cache_serving_from_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&mnt)
        .stderr(std::process::Stdio::null())
        .status();
    if !mounted.as_ref().is_ok_and(|s| s.success()) {
        println!("note: cannot mount a tmpfs here ({mounted:?}); skipping the tmpfs part");
        return;
    }
    let _unmount = Mount(mnt.clone());
    let dir = mnt.join("cache");
    {
        let cache = builder(&dir)
            .max_disk_bytes(16 << 20)
            .max_segment_bytes(512 << 10)
            .open()
            .unwrap();
        let mut rng = Rng::new(11);
        for id in 0..FULL_KEYS {
            let len = rng.range(1000, 3000) as usize;
            cache.insert(&key(id), value_for(id, 1, len)).unwrap();
            if id < FLUSHED_ONE_BY_ONE || id.is_multiple_of(100) {
                let _ = cache.flush();
            }
        }
        let _ = cache.flush();
        for id in 0..FULL_KEYS {
            assert_eq!(read_checked(&cache, id), Some(1), "key {id}");
        }
        let d = cache.stats().disk.unwrap();
        println!(
            "tmpfs: write_errors={} last_error={:?}",
            d.write_errors, d.last_error
        );
        assert!(d.write_errors > 0, "{d:?}");
        assert!(d.last_error.is_some());
    }
    let present = check_after_full_disk(&dir);
    println!("after the full tmpfs: {present} of {FULL_KEYS} values on disk, all verified");
}

// ---------------------------------------------------------------------------------------
// Permissions: a read-only directory, and one that cannot be created.

/// Makes `path` and its contents readable and traversable by all, writable by none.
fn make_read_only(path: &Path) {
    let meta = fs::metadata(path).unwrap();
    let mode = if meta.is_dir() { 0o555 } else { 0o444 };
    if meta.is_dir() {
        for entry in fs::read_dir(path).unwrap() {
            make_read_only(&entry.unwrap().path());
        }
    }
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// Whether user nobody can run `exe`: every ancestor traversable by others, the file
/// readable and executable by others (no ACLs assumed).
fn others_can_run(exe: &Path) -> bool {
    let mode = |p: &Path| fs::metadata(p).map(|m| m.permissions().mode()).unwrap_or(0);
    mode(exe) & 0o005 == 0o005 && exe.ancestors().skip(1).all(|p| mode(p) & 0o001 != 0)
}

/// This test executable, or a copy of it that nobody can run.
fn exe_for_nobody(scratch: &Path) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    if others_can_run(&exe) {
        return exe;
    }
    let copy = scratch.join("faults-test-exe");
    fs::copy(&exe, &copy).unwrap();
    fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).unwrap();
    assert!(
        others_can_run(&copy),
        "{} is not reachable by nobody",
        copy.display()
    );
    copy
}

/// A temporary directory nobody can traverse (tempdirs are created 0700).
fn open_tempdir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    tmp
}

/// Runs the fault child as user nobody; `None` (with a note) if this process cannot switch
/// users.
fn run_as_nobody(exe: &Path, fault: &str, dir: &Path, extra: &[(&str, String)]) -> Option<()> {
    let reachable = dir
        .ancestors()
        .filter_map(|p| fs::metadata(p).ok())
        .all(|m| m.permissions().mode() & 0o001 != 0);
    if !reachable {
        println!(
            "note: {} is not reachable by nobody; skipping",
            dir.display()
        );
        return None;
    }
    let mut cmd = child_command_for(exe, "child_fault_worker", "fault-worker");
    cmd.env("GPUCACHE_FAULT", fault)
        .env("GPUCACHE_DIR", dir)
        .uid(NOBODY)
        .gid(NOBODY);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let running = match Running::spawn(cmd) {
        Ok(r) => r,
        Err(e) => {
            println!("note: cannot run a child as nobody ({e}); skipping");
            return None;
        }
    };
    let done = running.wait(Duration::from_secs(120));
    done.assert_success(&format!("{fault} child (as nobody)"));
    for line in done.lines_with("RESULT") {
        println!("{line}");
    }
    Some(())
}

fn read_only_child(dir: &Path, entries: u32) {
    let cache = builder(dir).preload(false).open().unwrap();
    assert!(
        cache.disk_error().is_none(),
        "a read-only directory is still served: {:?}",
        cache.disk_error()
    );
    let d = cache.stats().disk.expect("a read-only disk tier");
    assert!(!d.writable, "stats say writable: {d:?}");
    assert!(d.last_error.is_some(), "the read-only state is reported");
    let mut served = 0;
    for id in 0..entries {
        assert_eq!(read_checked(&cache, id), Some(1), "key {id} from disk");
        served += 1;
    }
    // New stores live in memory.
    for id in entries..entries + 50 {
        cache.insert(&key(id), value_for(id, 2, 700)).unwrap();
    }
    cache.remove(&key(0));
    // These say the directory is read-only (the flush: the stores did not reach the disk),
    // and never panic.
    let flushed = cache.flush();
    let compacted = cache.compact();
    for id in entries..entries + 50 {
        assert_eq!(read_checked(&cache, id), Some(2), "key {id} from memory");
    }
    let d = cache.stats().disk.unwrap();
    assert!(!d.writable && !d.available, "{d:?}");
    assert!(flushed.is_err(), "the stores did not reach the disk");
    assert!(
        d.write_errors > 0,
        "the stores that missed the disk are counted: {d:?}"
    );
    println!(
        "RESULT served={served} writable={} read_hits={}",
        u8::from(d.writable),
        d.read_hits
    );
    println!("FLUSH {flushed:?} COMPACT {compacted:?}");
}

#[test]
fn a_read_only_directory_serves_what_is_there_and_writes_nothing() {
    read_only_directory(false);
}

/// The same through the hash table: such an open asks whether it may write only when first
/// needed (here: the statistics), not at the open.
#[test]
fn a_read_only_directory_with_a_table_serves_what_is_there_and_writes_nothing() {
    read_only_directory(true);
}

fn read_only_directory(with_table: bool) {
    const ENTRIES: u32 = 200;
    let tmp = open_tempdir();
    let dir = tmp.path().join("cache");
    {
        let min_entries = if with_table { 0 } else { 4096 };
        let cache = builder(&dir)
            .max_segment_bytes(64 << 10)
            .open_table_min_entries(min_entries)
            .open()
            .unwrap();
        for id in 0..ENTRIES {
            cache.insert(&key(id), value_for(id, 1, 900)).unwrap();
        }
    }
    assert_eq!(dir.join("seg-table.hix").exists(), with_table);
    make_read_only(&dir);
    let before = listing(&dir);
    let exe = exe_for_nobody(tmp.path());
    let ran = run_as_nobody(
        &exe,
        "readonly",
        &dir,
        &[("GPUCACHE_ENTRIES", ENTRIES.to_string())],
    );
    assert_eq!(listing(&dir), before, "the read-only directory was changed");
    // Let the tempdir clean up.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    if ran.is_none() {
        return;
    }
    let cache = builder(&dir).preload(false).open().unwrap();
    for id in 0..ENTRIES {
        assert_eq!(read_checked(&cache, id), Some(1));
    }
}

fn uncreatable_child(dir: &Path) {
    let cache = builder(dir).open().unwrap();
    let error = cache.disk_error().map(str::to_owned);
    assert!(error.is_some(), "a disk error is reported");
    assert!(cache.stats().disk.is_none());
    assert_eq!(cache.stats().disk_error, error);
    for id in 0..100 {
        cache.insert(&key(id), value_for(id, 1, 500)).unwrap();
    }
    assert!(
        cache.flush().is_err(),
        "nothing is durable without the directory"
    );
    cache.compact().unwrap();
    for id in 0..100 {
        assert_eq!(read_checked(&cache, id), Some(1));
    }
    println!("RESULT memory_only=1");
    println!("DISK_ERROR {}", error.unwrap());
}

#[test]
fn a_directory_that_cannot_be_created_leaves_a_memory_only_cache() {
    let tmp = open_tempdir();
    let parent = tmp.path().join("not-writable");
    fs::create_dir(&parent).unwrap();
    fs::set_permissions(&parent, fs::Permissions::from_mode(0o555)).unwrap();
    let exe = exe_for_nobody(tmp.path());
    let dir = parent.join("cache").join("sub");
    run_as_nobody(&exe, "uncreatable", &dir, &[]);
    assert!(!parent.join("cache").exists());
    fs::set_permissions(&parent, fs::Permissions::from_mode(0o755)).unwrap();
}

// ---------------------------------------------------------------------------------------
// A directory removed while threads write.

#[test]
fn a_directory_removed_under_concurrent_writers() {
    const THREADS: u32 = 3;
    const PER_THREAD: u32 = 400;
    /// Removals to see while the writers run (they go on until then, boundedly: all they
    /// write stays within the memory budget).
    const REMOVALS: u32 = 5;
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("cache");
    let cache = Arc::new(
        builder(&dir)
            .max_segment_bytes(64 << 10)
            .max_disk_bytes(1 << 20)
            .open()
            .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let removed = Arc::new(AtomicU32::new(0));
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let cache = Arc::clone(&cache);
            let removed = Arc::clone(&removed);
            std::thread::spawn(move || {
                let mut rng = Rng::new(u64::from(t));
                let mut i = 0;
                while i < PER_THREAD
                    || (removed.load(Ordering::Acquire) < REMOVALS && i < 10 * PER_THREAD)
                {
                    let id = t * 100_000 + i;
                    let len = rng.range(100, 2500) as usize;
                    cache.insert(&key(id), value_for(id, 1, len)).unwrap();
                    let back = t * 100_000 + rng.range(0, u64::from(i) + 1) as u32;
                    assert_eq!(read_checked(&cache, back), Some(1), "key {back}");
                    if i % 50 == 49 {
                        let _ = cache.flush();
                    }
                    if i.is_multiple_of(4) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    i += 1;
                }
                i
            })
        })
        .collect();
    // Remove the directory again and again while they write (failures are races with the
    // writer recreating it, and fine).
    let remover = {
        let (dir, stop, removed) = (dir.clone(), Arc::clone(&stop), Arc::clone(&removed));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(10));
                if fs::remove_dir_all(&dir).is_ok() {
                    removed.fetch_add(1, Ordering::AcqRel);
                }
            }
        })
    };
    let written: Vec<u32> = writers
        .into_iter()
        .map(|w| w.join().expect("a writer thread panicked"))
        .collect();
    stop.store(true, Ordering::Release);
    remover.join().unwrap();
    let removed = removed.load(Ordering::Acquire);
    // This flush reports the stores that missed the disk while it was being removed (it
    // may fail); after it, writes made after the last removal persist.
    let _ = cache.flush();
    for id in 90_000..90_020 {
        cache.insert(&key(id), value_for(id, 1, 300)).unwrap();
    }
    cache
        .flush()
        .expect("the directory is recreated for the final flush");
    for (t, &n) in (0..THREADS).zip(&written) {
        for i in 0..n {
            let id = t * 100_000 + i;
            assert_eq!(read_checked(&cache, id), Some(1), "key {id} from memory");
        }
    }
    let d = cache.stats().disk.unwrap();
    println!("removed the directory {removed} times; wrote {written:?}; {d:?}");
    assert!(removed > 0);
    assert!(d.recreated >= 1, "{d:?}");
    drop(cache);
    let cache = builder(&dir).preload(false).open().unwrap();
    let mut present = 0;
    for id in (0..THREADS)
        .zip(written)
        .flat_map(|(t, n)| (0..n).map(move |i| t * 100_000 + i))
        .chain(90_000..90_020)
    {
        present += u32::from(read_checked(&cache, id).is_some());
    }
    for id in 90_000..90_020 {
        assert_eq!(read_checked(&cache, id), Some(1), "key {id} after reopen");
    }
    println!("after reopen: {present} values present, all verified");
}

// ---------------------------------------------------------------------------------------
// An index entry that disagrees with the record at its offset.

/// CRC32C (Castagnoli), bitwise: enough to re-seal an index entry edited by a test.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn a_record_that_disagrees_with_its_index_entry_is_never_returned() {
    // An index entry whose offset holds a valid record of the same key but of another length
    // (what a reused segment id, or a stale index, leaves). Built here by editing the value
    // length of a sound entry and re-sealing its checksum.
    const LONG: u32 = 3000;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    {
        let c = builder(&dir).open().unwrap();
        // The first record of the segment (its entry is the first of the index file), then
        // another record after it, whose bytes a longer read would take in.
        c.insert(&key(1), value_for(1, 1, 1000)).unwrap();
        c.insert(&key(3), value_for(3, 1, 4000)).unwrap();
    }
    let idx_files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "idx"))
        .collect();
    assert_eq!(idx_files.len(), 1, "{:?}", listing(&dir));
    let mut idx = fs::read(&idx_files[0]).unwrap();
    {
        let entry = &mut idx[32..56];
        assert_eq!(u32::from_le_bytes(entry[8..12].try_into().unwrap()), 32);
        assert_eq!(u32::from_le_bytes(entry[12..16].try_into().unwrap()), 1000);
        entry[12..16].copy_from_slice(&LONG.to_le_bytes());
        let crc = crc32c(&entry[..20]);
        entry[20..24].copy_from_slice(&crc.to_le_bytes());
    }
    fs::write(&idx_files[0], &idx).unwrap();

    // Read through the disk lookup.
    let c = builder(&dir).preload(false).open().unwrap();
    let direct = c.get(&key(1)).map(|v| (v.len(), verify(1, &v)));
    assert!(
        matches!(direct, None | Some((_, Ok(_)))),
        "disk lookup returned wrong bytes: {direct:?}"
    );
    assert_eq!(read_checked(&c, 3), Some(1), "the other record is sound");
    drop(c);
    // Read through the start-up preload.
    let c = builder(&dir).open().unwrap();
    c.wait_for_preload();
    let preloaded = c.get(&key(1)).map(|v| (v.len(), verify(1, &v)));
    assert!(
        matches!(preloaded, None | Some((_, Ok(_)))),
        "preload returned wrong bytes: {preloaded:?}"
    );
    assert_eq!(read_checked(&c, 3), Some(1));
}
