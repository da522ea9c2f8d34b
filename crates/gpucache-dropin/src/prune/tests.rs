use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::*;

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// A real drop-in cache in the namespace `ns` (an identity starting as the drop-in's), with
/// `filler` more 8 KiB blocks of data, everything in it last modified `age` ago.
fn make_cache(ns: &Path, tag: &str, filler: usize, age: Duration) -> PathBuf {
    make_cache_of(ns, &format!("gpucache-dropin 1\ntest={tag}"), filler, age)
}

fn make_cache_of(ns: &Path, identity: &str, filler: usize, age: Duration) -> PathBuf {
    let builder = gpucache::Cache::builder()
        .directory(ns)
        .identity(identity.as_bytes().to_vec())
        .driver_versioned(true);
    let dir = builder.clone().resolved_directory().unwrap();
    let cache = builder.open().unwrap();
    cache.insert(b"key", b"value".to_vec()).unwrap();
    cache.flush().unwrap();
    drop(cache);
    assert!(dir.join("meta").is_file());
    fs::create_dir_all(dir.join("mesa-context")).unwrap();
    fs::write(dir.join("mesa-context/filler"), vec![7u8; filler * 8192]).unwrap();
    age_tree(&dir, age);
    dir
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

fn locked(root: &Path) -> RootLock {
    lock_root(root).unwrap().expect("no other prune")
}

fn no_stop() -> AtomicBool {
    AtomicBool::new(false)
}

#[test]
fn the_least_recently_used_caches_go_first_until_the_rest_fit() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let oldest = make_cache(&root.join("app-1111111111111111"), "1", 4, 30 * DAY);
    let older = make_cache(&root.join("app-2222222222222222"), "2", 2, 20 * DAY);
    let newer = make_cache(&root.join("app-2222222222222222"), "3", 2, DAY);
    let shared = make_cache(root, "4", 1, 2 * DAY);
    // Not caches of the drop-in's: a link named like one, another application's own cache
    // in the same root (its identity is not the drop-in's), a namespace named like a cache
    // (an executable called `id`), a file.
    let link = root.join("id-00000000000000ff");
    std::os::unix::fs::symlink(&newer, &link).unwrap();
    let foreign = make_cache_of(&root.join("engine"), "an engine's own", 8, 90 * DAY);
    let id_named = root.join("id-0123456789abcdef");
    let inside = make_cache(&id_named, "5", 1, DAY / 2);
    fs::write(root.join("notes"), b"x").unwrap();

    let mut found: Vec<_> = caches(root).unwrap().into_iter().map(|c| c.dir).collect();
    found.sort();
    let mut expected = vec![
        oldest.clone(),
        older.clone(),
        newer.clone(),
        shared.clone(),
        inside.clone(),
    ];
    expected.sort();
    assert_eq!(found, expected);

    let limit = bytes_of(root, &newer) + bytes_of(root, &shared) + bytes_of(root, &inside);
    let pruned = prune(&locked(root), limit, None, &no_stop()).unwrap();
    let removed: Vec<_> = pruned.removed.iter().map(|c| c.dir.clone()).collect();
    assert_eq!(removed, vec![oldest.clone(), older.clone()]);
    assert_eq!(pruned.bytes_left, limit);
    assert!(pruned.in_use.is_empty() && pruned.failed.is_empty());
    assert!(!oldest.exists() && !older.exists());
    assert!(newer.is_dir() && shared.is_dir() && inside.is_dir() && foreign.is_dir());
    assert!(
        fs::symlink_metadata(&link).is_ok(),
        "a link is left as it is"
    );
    // No lock file of a removed cache is left, and the trash is empty.
    assert!(!in_use_path(&older).exists() && !in_use_path(&oldest).exists());
    assert_eq!(fs::read_dir(root.join(TRASH)).unwrap().count(), 0);
    // The emptied namespace stays, marked, until it has been empty for a day; a directory
    // that is not a namespace a prune emptied is never removed, however old and empty.
    let emptied = root.join("app-1111111111111111");
    let marker = emptied.join(EMPTIED);
    assert!(marker.is_file());
    let unrelated = root.join("Music");
    fs::create_dir(&unrelated).unwrap();
    File::open(&unrelated)
        .unwrap()
        .set_modified(SystemTime::now() - 90 * DAY)
        .unwrap();
    assert!(prune(&locked(root), limit, None, &no_stop())
        .unwrap()
        .removed
        .is_empty());
    assert!(marker.is_file());
    File::open(&marker)
        .unwrap()
        .set_modified(SystemTime::now() - 2 * DAY)
        .unwrap();
    prune(&locked(root), limit, None, &no_stop()).unwrap();
    assert!(!emptied.exists());
    assert!(unrelated.is_dir());
}

#[test]
fn an_emptied_namespace_used_again_loses_its_marker_and_orphan_locks_mark_it() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let ns = root.join("app");
    let old = make_cache(&ns, "old", 1, 30 * DAY);
    prune(&locked(root), 0, None, &no_stop()).unwrap();
    assert!(!old.exists() && ns.join(EMPTIED).is_file());
    // Used again (a new driver build's cache): the marker goes, so the namespace is not
    // removed with the next emptying's marker already a day old.
    let new = make_cache(&ns, "new", 1, DAY);
    prune(&locked(root), u64::MAX, None, &no_stop()).unwrap();
    assert!(!ns.join(EMPTIED).exists() && new.is_dir());

    // A namespace holding only a lock file left without its cache (a run whose open failed,
    // a prune killed after its rename) is a drop-in namespace emptied now: marked.
    let other = root.join("other");
    fs::create_dir(&other).unwrap();
    fs::write(other.join("id-0000000000000001.inuse"), b"").unwrap();
    // Someone else's files named so are none of the drop-in's: left alone, and so is their
    // folder.
    let foreign = root.join("tool");
    fs::create_dir(&foreign).unwrap();
    fs::write(foreign.join("x.inuse"), b"").unwrap();
    prune(&locked(root), u64::MAX, None, &no_stop()).unwrap();
    assert!(foreign.join("x.inuse").is_file() && !foreign.join(EMPTIED).exists());
    let names: Vec<_> = fs::read_dir(&other)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from(EMPTIED)]);
}

#[test]
fn lock_files_without_a_cache_go_unless_held_and_a_first_run_is_marked() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let kept = make_cache(&root.join("a"), "a", 1, DAY);
    // Left by a prune killed between its rename and its unlink.
    let orphan = root.join("a/id-0000000000000009.inuse");
    fs::write(&orphan, b"").unwrap();
    // A first run's mark, taken before its cache exists: the namespace is made for it.
    let first_run = root.join("new/id-000000000000000a");
    let held = hold(&first_run).expect("the namespace is made");
    assert_eq!(
        fs::metadata(root.join("new")).unwrap().mode() & 0o777,
        0o700
    );
    prune(&locked(root), u64::MAX, None, &no_stop()).unwrap();
    assert!(!orphan.exists());
    assert!(in_use_path(&first_run).exists(), "held: kept");
    assert!(kept.is_dir() && !in_use_path(&kept).exists());
    drop(held);
}

#[test]
fn a_held_cache_and_the_callers_own_are_kept() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let held = make_cache(&root.join("a"), "a", 1, 30 * DAY);
    let own = make_cache(&root.join("b"), "b", 1, 30 * DAY);
    let free = make_cache(&root.join("c"), "c", 1, DAY);
    let hold = hold(&held).expect("held");
    assert!(in_use(&held) && !in_use(&free));
    // Holding records a use: the held cache is now the most recently used.
    let c = caches(root).unwrap();
    let used = |d: &Path| c.iter().find(|x| x.dir == d).unwrap().last_used;
    assert!(used(&held) > used(&free));
    age_tree(&held, 30 * DAY);

    let pruned = prune(&locked(root), 0, Some(&own), &no_stop()).unwrap();
    assert_eq!(pruned.in_use, vec![held.clone()]);
    assert_eq!(
        pruned.removed.iter().map(|c| &c.dir).collect::<Vec<_>>(),
        vec![&free]
    );
    assert!(held.is_dir() && own.is_dir() && !free.exists());
    // Released (the process ended), it goes.
    drop(hold);
    let pruned = prune(&locked(root), 0, Some(&own), &no_stop()).unwrap();
    assert_eq!(pruned.removed.len(), 1);
    assert!(!held.exists() && own.is_dir());
}

#[test]
fn a_cache_being_removed_cannot_be_held_and_a_replaced_lock_file_is_reopened() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let dir = make_cache(&root.join("a"), "a", 1, DAY);
    let path = in_use_path(&dir);
    // A prune holds the lock exclusively while it removes the cache.
    let lock = open_in_use_file(&path, true).unwrap();
    assert!(flock(&lock, libc::LOCK_EX | libc::LOCK_NB));
    assert!(hold(&dir).is_none());
    // The prune unlinked the file and let go: a lock on the unlinked file is no mark, so a
    // holder must find the new file at the path.
    fs::remove_file(&path).unwrap();
    assert!(!is_file_at(&lock, &path));
    drop(lock);
    let held = hold(&dir).expect("a new lock file");
    assert!(is_file_at(&held.0, &path));
    // A namespace that is not this user's directory (here: a link) is never written to.
    let elsewhere = root.join("elsewhere");
    std::os::unix::fs::symlink(root.join("a"), &elsewhere).unwrap();
    assert!(hold(&elsewhere.join("id-0000000000000001")).is_none());
}

#[test]
fn one_prune_at_a_time_and_an_interrupted_one_is_finished() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let dir = make_cache(&root.join("a"), "a", 1, DAY);
    let first = locked(root);
    assert!(lock_root(root).unwrap().is_none(), "another prune runs");
    drop(first);
    // A prune killed after its rename left this in the trash.
    let left = root.join(TRASH).join("4242-0");
    fs::create_dir_all(left.join("mesa-context")).unwrap();
    fs::write(left.join("seg-00000001.dat"), vec![1u8; 8192]).unwrap();
    let pruned = prune(&locked(root), u64::MAX, None, &no_stop()).unwrap();
    assert!(pruned.removed.is_empty());
    assert!(!left.exists());
    assert!(dir.is_dir());
    // A stopping caller stops the prune before the next cache.
    let stop = AtomicBool::new(true);
    assert!(prune(&locked(root), 0, None, &stop)
        .unwrap()
        .removed
        .is_empty());
    assert!(dir.is_dir());
}

#[test]
fn an_automatic_prune_is_due_a_day_after_a_complete_one_and_the_root_must_be_private() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    make_cache(&root.join("a"), "a", 1, DAY);
    assert!(locked(root).due(SystemTime::now()), "never pruned");
    // Stopped: not recorded as done, so a process an hour later prunes again.
    let stop = AtomicBool::new(true);
    prune(&locked(root), 0, None, &stop).unwrap();
    let now = SystemTime::now();
    assert!(!locked(root).due(now + Duration::from_secs(60)));
    assert!(locked(root).due(now + Duration::from_secs(61 * 60)));
    prune(&locked(root), u64::MAX, None, &no_stop()).unwrap();
    let now = SystemTime::now();
    assert!(!locked(root).due(now + Duration::from_secs(60)));
    assert!(!locked(root).due(now + DAY - Duration::from_secs(60)));
    assert!(locked(root).due(now + DAY));
    let mode = fs::metadata(root.join(LAST_PRUNE)).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o600);

    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(root, fs::Permissions::from_mode(0o777)).unwrap();
    let e = lock_root(root).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    fs::set_permissions(root, fs::Permissions::from_mode(0o700)).unwrap();
}
