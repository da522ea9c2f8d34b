//! Private by default (issue 11, item 3): the modes of what a cache creates whatever the
//! umask, a group-shared cache, and directories owned by another user.
//!
//! The umask is set in a child process (this executable again, under `bash -c 'umask ..'`), so
//! that tests in this process do not change each other's. Root ignores permission bits, so
//! the check that another user cannot read a private cache runs as user nobody, and owner
//! refusals are tested by chown'ing a directory to nobody.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{child_args, child_role, env, key, value_for, Running, CHILD_ENV};
use gpucache::{Cache, CacheBuilder, DirAccess, Error, MetadataStream};

const NOBODY: u32 = 65534;
const STREAM: MetadataStream = MetadataStream::new("access-notes", *b"ACCN", 1);

fn builder(dir: &Path) -> CacheBuilder {
    Cache::builder()
        .directory(dir)
        .identity(&b"access-test driver 1"[..])
        .max_segment_bytes(64 << 10)
}

/// Mode bits (permissions, setgid) of `path`.
fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().mode() & 0o7777
}

/// Every directory and file under `root` (itself included) with its mode.
fn modes_under(root: &Path) -> Vec<(PathBuf, bool, u32)> {
    let mut out = vec![(root.to_path_buf(), true, mode(root))];
    if root.is_dir() {
        for entry in fs::read_dir(root).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.extend(modes_under(&path));
            } else {
                out.push((path.clone(), false, mode(&path)));
            }
        }
    }
    out
}

/// Opens a cache, stores, flushes, writes a metadata stream, and removes and recreates
/// the directory: every kind of file and directory the engine creates.
fn populate(dir: &Path, access: DirAccess) {
    let cache = builder(dir).dir_access(access).open().unwrap();
    assert!(cache.disk_error().is_none(), "{:?}", cache.disk_error());
    for id in 0..200 {
        cache.insert(&key(id), value_for(id, 1, 900)).unwrap();
    }
    cache.flush().unwrap();
    let identity = gpucache::Identity::new(&b"access-test driver 1"[..]);
    STREAM
        .update(dir, &identity, Duration::from_secs(5), |_| {
            b"notes".to_vec()
        })
        .unwrap();
    drop(cache);
}

#[test]
#[ignore = "child process of the access tests; does nothing unless GPUCACHE_CHILD is set"]
fn child_access_worker() {
    let Some(()) = child_role("access-worker") else {
        return;
    };
    let dir = PathBuf::from(env("GPUCACHE_DIR"));
    match env("GPUCACHE_JOB").as_str() {
        "private" => populate(&dir, DirAccess::Private),
        "group" => populate(&dir, DirAccess::Group),
        "read-other" => {
            let denied = fs::read_dir(&dir).map(|_| ()).unwrap_err();
            assert_eq!(denied.kind(), std::io::ErrorKind::PermissionDenied);
            let cache = builder(&dir).open().unwrap();
            assert!(
                cache.disk_error().is_some(),
                "another user's private cache was opened"
            );
            println!("RESULT denied=1");
        }
        other => panic!("unknown job {other}"),
    }
    println!("RESULT ok=1");
}

/// Runs `job` in a child under `umask`, as `uid` if given (skipping with a note where this
/// process cannot switch users). Returns whether it ran.
fn run_child(job: &str, dir: &Path, umask: &str, uid: Option<u32>) -> bool {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(format!(r#"umask {umask}; exec "$0" "$@""#))
        .arg(&exe)
        .args(child_args("child_access_worker"))
        .env(CHILD_ENV, "access-worker")
        .env_remove("RUST_TEST_THREADS")
        .env("GPUCACHE_JOB", job)
        .env("GPUCACHE_DIR", dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    let running = match Running::spawn(cmd) {
        Ok(r) => r,
        Err(e) => {
            println!("note: cannot start the child ({e}); skipping");
            return false;
        }
    };
    let done = running.wait(Duration::from_secs(120));
    done.assert_success(&format!("{job} child"));
    true
}

/// A scratch directory any user may enter and write (for children running as nobody), under
/// a temporary directory, or `None` with a note where nobody cannot reach it (or run the
/// test executable).
fn scratch_for_nobody(tmp: &Path) -> Option<PathBuf> {
    let exe = std::env::current_exe().unwrap();
    let reachable = |p: &Path| {
        p.ancestors()
            .skip(1)
            .all(|a| fs::metadata(a).is_ok_and(|m| m.mode() & 0o001 != 0))
    };
    if !reachable(&exe) || fs::metadata(&exe).unwrap().mode() & 0o005 != 0o005 {
        println!("note: nobody cannot run {}; skipping", exe.display());
        return None;
    }
    fs::set_permissions(tmp, fs::Permissions::from_mode(0o755)).unwrap();
    let scratch = tmp.join("scratch");
    fs::create_dir(&scratch).unwrap();
    fs::set_permissions(&scratch, fs::Permissions::from_mode(0o1777)).unwrap();
    if !reachable(&scratch.join("x")) {
        println!("note: nobody cannot reach {}; skipping", scratch.display());
        return None;
    }
    Some(scratch)
}

fn assert_modes(root: &Path, dir_mode: u32, file_mode: u32) {
    let modes = modes_under(root);
    assert!(
        modes.iter().filter(|(_, is_dir, _)| !is_dir).count() >= 4,
        "expected segments, meta, lock and a stream: {modes:?}"
    );
    for (path, is_dir, m) in &modes {
        let want = if *is_dir { dir_mode } else { file_mode };
        assert_eq!(*m, want, "{} is {m:o}, not {want:o}", path.display());
    }
}

#[test]
fn private_by_default_whatever_the_umask() {
    let tmp = tempfile::tempdir().unwrap();
    // Missing parents are created too, privately; umask 000 would make them 0777 and the
    // files 0666.
    let top = tmp.path().join("a");
    let dir = top.join("b").join("cache");
    assert!(run_child("private", &dir, "000", None));
    assert_modes(&top, 0o700, 0o600);
}

#[test]
fn private_as_an_unprivileged_user_and_unreadable_by_others() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(scratch) = scratch_for_nobody(tmp.path()) else {
        return;
    };
    let dir = scratch.join("nobody-cache");
    if !run_child("private", &dir, "000", Some(NOBODY)) {
        return;
    }
    assert_eq!(fs::metadata(&dir).unwrap().uid(), NOBODY);
    assert_modes(&dir, 0o700, 0o600);
    // Root's private cache, read by nobody: denied, and the cache is memory-only.
    let mine = scratch.join("root-cache");
    populate(&mine, DirAccess::Private);
    assert_eq!(mode(&mine), 0o700);
    run_child("read-other", &mine, "022", Some(NOBODY));
}

#[test]
fn a_group_cache_is_0770_with_0660_files_and_keeps_setgid_whatever_the_umask() {
    let tmp = tempfile::tempdir().unwrap();
    let shared = tmp.path().join("shared");
    fs::create_dir(&shared).unwrap();
    std::os::unix::fs::chown(&shared, None, Some(100)).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o2775)).unwrap();
    let dir = shared.join("cache");
    // umask 077 would make them 0700 and 0600.
    assert!(run_child("group", &dir, "077", None));
    assert_modes(&dir, 0o2770, 0o660);
    assert_eq!(
        fs::metadata(&dir).unwrap().gid(),
        100,
        "the group carries down"
    );
}

#[test]
fn an_existing_private_cache_directory_of_ours_is_tightened() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    let cache = builder(&dir).open().unwrap();
    assert_eq!(mode(&dir), 0o700);
    drop(cache);
    // A group cache's directory is left as it is.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o775)).unwrap();
    let _cache = builder(&dir).dir_access(DirAccess::Group).open().unwrap();
    assert_eq!(mode(&dir), 0o775);
}

#[test]
fn a_directory_of_another_user_is_refused_unless_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
    match builder(&dir).open() {
        Err(Error::ForeignOwner { path, owner, .. }) => {
            assert_eq!(path, dir);
            assert_eq!(owner, NOBODY);
        }
        other => panic!("expected ForeignOwner, got {other:?}"),
    }
    assert_eq!(
        fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing was written"
    );
    // A driver-versioned cache under another user's root: refused too.
    let versioned = builder(&dir).driver_versioned(true).open();
    assert!(matches!(versioned, Err(Error::ForeignOwner { .. })));
    // Allowed on purpose: used.
    let cache = builder(&dir).allow_foreign_owner(true).open().unwrap();
    assert!(cache.disk_error().is_none());
    cache.insert(&key(1), value_for(1, 1, 100)).unwrap();
    cache.flush().unwrap();
    assert_eq!(cache.stats().disk.unwrap().entries, 1);
}

#[test]
fn a_directory_given_to_another_user_while_in_use_is_no_longer_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let cache = builder(&dir).open().unwrap();
    cache.insert(&key(1), value_for(1, 1, 100)).unwrap();
    cache.flush().unwrap();
    std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
    cache.insert(&key(2), value_for(2, 1, 100)).unwrap();
    let flushed = cache.flush();
    assert!(flushed.is_err(), "a flush into another user's directory");
    let d = cache.stats().disk.unwrap();
    assert!(!d.writable && !d.available, "{d:?}");
    assert!(d.write_errors > 0, "{d:?}");
    assert_eq!(d.entries, 1);
    assert!(cache.get(&key(2)).is_some(), "memory keeps serving");
}
