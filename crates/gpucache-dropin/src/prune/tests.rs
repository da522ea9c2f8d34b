use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::*;

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// A cache directory with `files` files of 8 KiB each, every file, the directory and its
/// `.inuse` file (if any) last modified `age` ago.
fn make_cache(dir: &Path, files: usize, age: Duration) {
    fs::create_dir_all(dir.join("mesa-context")).unwrap();
    for i in 0..files {
        fs::write(dir.join(format!("seg-{i:08x}.dat")), vec![7u8; 8192]).unwrap();
    }
    fs::write(dir.join("mesa-context/index"), vec![1u8; 4096]).unwrap();
    age_tree(dir, age);
}

fn age_tree(dir: &Path, age: Duration) {
    let when = SystemTime::now() - age;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                pending.push(p.clone());
            }
            File::open(&p).unwrap().set_modified(when).unwrap();
        }
        File::open(&d).unwrap().set_modified(when).unwrap();
    }
    let inuse = in_use_path(dir);
    if inuse.exists() {
        File::open(&inuse).unwrap().set_modified(when).unwrap();
    }
}

fn bytes_of(root: &Path, dir: &Path) -> u64 {
    caches(root)
        .unwrap()
        .into_iter()
        .find(|c| c.dir == dir)
        .unwrap()
        .bytes
}

#[test]
fn the_least_recently_used_caches_go_first_until_the_rest_fit() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let oldest = root.join("app-1111111111111111/id-0000000000000001");
    let older = root.join("app-2222222222222222/id-0000000000000002");
    let newer = root.join("app-2222222222222222/id-0000000000000003");
    let shared = root.join("id-0000000000000004");
    make_cache(&oldest, 4, 30 * DAY);
    make_cache(&older, 2, 20 * DAY);
    make_cache(&newer, 2, DAY);
    make_cache(&shared, 1, 2 * DAY);
    // Not caches: a link named like one, another folder, a file.
    std::os::unix::fs::symlink(&newer, root.join("id-00000000000000ff")).unwrap();
    fs::create_dir(root.join("app-3333333333333333")).unwrap();
    fs::write(root.join("notes"), b"x").unwrap();

    let found = caches(root).unwrap();
    assert_eq!(found.len(), 4, "{found:?}");
    let limit = bytes_of(root, &newer) + bytes_of(root, &shared);
    let pruned = prune(root, limit, None).unwrap();
    let removed: Vec<_> = pruned.removed.iter().map(|c| c.dir.clone()).collect();
    assert_eq!(removed, vec![oldest.clone(), older.clone()]);
    assert_eq!(pruned.bytes_left, limit);
    assert!(!oldest.exists() && !older.exists());
    assert!(newer.is_dir() && shared.is_dir());
    // The emptied namespace is gone; the one still holding a cache stays; nothing is left
    // renamed away, and no lock file of a removed cache.
    assert!(!root.join("app-1111111111111111").exists());
    assert!(root.join("app-2222222222222222").is_dir());
    assert!(!in_use_path(&older).exists());
    let names: Vec<_> = fs::read_dir(root.join("app-2222222222222222"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["id-0000000000000003"]);
    // Within the limit, nothing more goes.
    assert!(prune(root, limit, None).unwrap().removed.is_empty());
}

#[test]
fn a_held_cache_and_the_callers_own_are_kept() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let held = root.join("a/id-0000000000000001");
    let own = root.join("b/id-0000000000000002");
    let free = root.join("c/id-0000000000000003");
    make_cache(&held, 1, 30 * DAY);
    make_cache(&own, 1, 30 * DAY);
    make_cache(&free, 1, DAY);
    let hold = hold(&held).expect("held");
    // Holding records a use: the held cache is now the most recently used.
    let c = caches(root).unwrap();
    let used = |d: &Path| c.iter().find(|x| x.dir == d).unwrap().last_used;
    assert!(used(&held) > used(&free));
    age_tree(&held, 30 * DAY);

    let pruned = prune(root, 0, Some(&own)).unwrap();
    assert_eq!(pruned.in_use, vec![held.clone()]);
    assert_eq!(
        pruned.removed.iter().map(|c| &c.dir).collect::<Vec<_>>(),
        vec![&free]
    );
    assert!(held.is_dir() && own.is_dir() && !free.exists());
    // Released (the process ended), it goes.
    drop(hold);
    let pruned = prune(root, 0, Some(&own)).unwrap();
    assert_eq!(pruned.removed.len(), 1);
    assert!(!held.exists() && own.is_dir());
}

#[test]
fn a_cache_being_removed_cannot_be_held_and_an_interrupted_prune_is_finished() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let dir = root.join("a/id-0000000000000001");
    make_cache(&dir, 1, DAY);
    // A prune holds the lock exclusively while it removes the cache.
    let lock = open_in_use_file(&dir).unwrap();
    assert!(flock(&lock, libc::LOCK_EX | libc::LOCK_NB));
    assert!(hold(&dir).is_none());
    drop(lock);
    assert!(hold(&dir).is_some());

    // A prune killed after its rename left this behind.
    let away = root.join("a/.pruning-id-0000000000000009-4242");
    make_cache(&away, 2, DAY);
    let top = root.join(".pruning-id-000000000000000a-4243");
    make_cache(&top, 1, DAY);
    let pruned = prune(root, u64::MAX, None).unwrap();
    assert!(pruned.removed.is_empty());
    assert!(!away.exists() && !top.exists());
    assert!(dir.is_dir());
}

#[test]
fn an_automatic_prune_is_due_once_a_day() {
    let t = tempfile::tempdir().unwrap();
    let now = SystemTime::now();
    assert!(due(t.path(), now));
    assert!(!due(t.path(), now + Duration::from_secs(60)));
    assert!(!due(t.path(), now + DAY - Duration::from_secs(1)));
    assert!(due(t.path(), now + DAY));
    let mode = fs::metadata(t.path().join(LAST_PRUNE)).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o600);
}
