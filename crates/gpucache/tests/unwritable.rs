//! A disk tier that cannot write (issue 11, items 4.1, 4.5 and 4.6): a read-only directory,
//! fresh or turned read-only while in use (a read-only bind mount: root ignores permission
//! bits), a full file system (a small tmpfs), a directory removed while in use, and an
//! identity too long for the meta file. None of them may look like success: the stats say
//! `available: false` and count the errors, and a flush fails when stores did not reach the
//! disk. The memory tier keeps serving. Mount tests skip with a note where mount is refused.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{key, value_for, verify};
use gpucache::{Cache, CacheBuilder, Error, MAX_IDENTITY_LEN};

fn builder(dir: &Path) -> CacheBuilder {
    Cache::builder()
        .directory(dir)
        .identity(&b"unwritable-test driver 1"[..])
        .max_segment_bytes(64 << 10)
}

fn get_checked(cache: &Cache, id: u32) -> Option<u64> {
    cache
        .get(&key(id))
        .map(|v| verify(id, &v).unwrap_or_else(|e| panic!("{e}")))
}

/// Unmounts on drop.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn run(args: &[&str], path: &Path) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .arg(path)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Bind-mounts `dir` read-only over itself; `None` with a note where mount is refused.
fn read_only_bind(dir: &Path) -> Option<Mount> {
    let p = dir.to_str().unwrap();
    if !run(&["mount", "--bind", p], dir) {
        println!("note: cannot bind-mount here; skipping");
        return None;
    }
    let mount = Mount(dir.to_path_buf());
    if !run(&["mount", "-o", "remount,ro,bind"], dir) {
        println!("note: cannot remount read-only here; skipping");
        return None;
    }
    Some(mount)
}

fn populate(dir: &Path, ids: std::ops::Range<u32>) {
    let cache = builder(dir).open().unwrap();
    for id in ids {
        cache.insert(&key(id), value_for(id, 1, 900)).unwrap();
    }
    cache.flush().unwrap();
}

/// Stores `ids` and checks that the flush fails and the stats say so; memory serves them.
/// `available` follows the last write: a read-only directory stays unavailable, while a full
/// file system can take a smaller batch after the failed ones (`stays_unavailable` false).
fn stores_are_reported_lost(cache: &Cache, ids: std::ops::Range<u32>, stays_unavailable: bool) {
    for id in ids.clone() {
        cache.insert(&key(id), value_for(id, 2, 900)).unwrap();
    }
    let flushed = cache.flush();
    let d = cache.stats().disk.unwrap();
    println!("flush: {flushed:?}; stats: {d:?}");
    assert!(flushed.is_err(), "a flush of stores that missed the disk");
    assert!(!stays_unavailable || !d.available, "{d:?}");
    assert!(d.write_errors > 0, "{d:?}");
    assert!(d.last_error.is_some(), "{d:?}");
    for id in ids {
        assert_eq!(get_checked(cache, id), Some(2), "key {id} from memory");
    }
    // Reported once: a flush with nothing new succeeds.
    cache.flush().unwrap();
}

#[test]
fn a_read_only_directory_says_so_and_flush_fails_for_stores() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    populate(&dir, 0..100);
    let Some(_mount) = read_only_bind(&dir) else {
        return;
    };
    let cache = builder(&dir).preload(false).open().unwrap();
    assert!(cache.disk_error().is_none(), "{:?}", cache.disk_error());
    let d = cache.stats().disk.unwrap();
    assert!(!d.writable && !d.available, "fresh read-only: {d:?}");
    // Nothing stored yet: a flush has nothing to report.
    cache.flush().unwrap();
    for id in 0..100 {
        assert_eq!(get_checked(&cache, id), Some(1), "key {id} from disk");
    }
    stores_are_reported_lost(&cache, 100..150, true);
}

#[test]
fn a_directory_turned_read_only_while_in_use_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let cache = builder(&dir).open().unwrap();
    for id in 0..50 {
        cache.insert(&key(id), value_for(id, 1, 900)).unwrap();
    }
    cache.flush().unwrap();
    assert!(cache.stats().disk.unwrap().available);
    let Some(_mount) = read_only_bind(&dir) else {
        return;
    };
    stores_are_reported_lost(&cache, 50..100, true);
    for id in 0..50 {
        assert_eq!(get_checked(&cache, id), Some(1));
    }
}

#[test]
fn a_full_file_system_says_so_and_recovers_when_space_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    if !run(&["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs"], &mnt) {
        println!("note: cannot mount a tmpfs here; skipping");
        return;
    }
    let _mount = Mount(mnt.clone());
    let dir = mnt.join("cache");
    let cache = builder(&dir).max_memory_bytes(64 << 20).open().unwrap();
    assert!(cache.disk_error().is_none());
    // 1 MiB of values into 256 KiB.
    stores_are_reported_lost(&cache, 0..1000, false);
    // Space returns (the cache is cleared): writes work again and the stats say so.
    cache.clear().unwrap();
    cache.insert(&key(5000), value_for(5000, 1, 900)).unwrap();
    cache.flush().unwrap();
    let d = cache.stats().disk.unwrap();
    assert!(d.available && d.writable, "{d:?}");
}

#[test]
fn a_removed_directory_is_recreated_private_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let cache = builder(&dir).open().unwrap();
    cache.insert(&key(1), value_for(1, 1, 500)).unwrap();
    cache.flush().unwrap();
    fs::remove_dir_all(&dir).unwrap();
    cache.insert(&key(2), value_for(2, 1, 500)).unwrap();
    cache.flush().unwrap();
    let d = cache.stats().disk.unwrap();
    assert_eq!(d.recreated, 1, "{d:?}");
    assert!(d.available, "{d:?}");
    assert!(
        d.last_error
            .as_deref()
            .is_some_and(|e| e.contains("recreated")),
        "{d:?}"
    );
    assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o7777, 0o700);
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(
            fs::metadata(&path).unwrap().mode() & 0o777,
            0o600,
            "{}",
            path.display()
        );
    }
    assert_eq!(get_checked(&cache, 1), Some(1), "memory still serves key 1");
    drop(cache);
    let cache = builder(&dir).preload(false).open().unwrap();
    assert_eq!(
        get_checked(&cache, 2),
        Some(1),
        "key 2 persisted after the recreate"
    );
}

#[test]
fn an_identity_over_64_kib_is_refused_at_open_and_64_kib_works() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let long = vec![b'x'; MAX_IDENTITY_LEN + 1];
    let refused = Cache::builder().directory(&dir).identity(long).open();
    assert!(
        matches!(refused, Err(Error::InvalidArgument(_))),
        "{refused:?}"
    );
    assert!(!dir.exists(), "nothing created for a refused identity");
    // The longest accepted identity round-trips through the meta file: nothing is wiped.
    let identity = vec![b'y'; MAX_IDENTITY_LEN];
    let open = || {
        Cache::builder()
            .directory(&dir)
            .identity(identity.clone())
            .preload(false)
            .open()
            .unwrap()
    };
    let cache = open();
    for id in 0..20 {
        cache.insert(&key(id), value_for(id, 1, 300)).unwrap();
    }
    cache.flush().unwrap();
    cache.insert(&key(20), value_for(20, 1, 300)).unwrap();
    cache.flush().unwrap();
    assert_eq!(cache.stats().disk.unwrap().entries, 21);
    drop(cache);
    let cache = open();
    for id in 0..21 {
        assert_eq!(get_checked(&cache, id), Some(1), "key {id} after reopen");
    }
}
