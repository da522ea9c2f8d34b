//! One byte limit for the whole root: each application's cache is bounded on its own
//! (`max_bytes`), but a new driver build gets a new identity directory and a rebuilt
//! application a new namespace, and the old ones are never opened again. Without pruning the
//! root would grow by a cache per driver update and per application update.
//!
//! A prune removes whole identity directories (`<root>/<namespace>/id-<hash>`, or
//! `<root>/id-<hash>` with the shared namespace), least recently used first, until the
//! root's caches take no more than the limit. It never removes a cache that a process holds
//! ([`hold`]: a shared `flock` on `<cache>.inuse`, taken by every process that opens the
//! cache, for its life), nor the caller's own. A cache is renamed away
//! (`.pruning-<name>-<pid>`) before its files are deleted, so that a process starting
//! meanwhile finds no directory, or a whole one; a prune killed half-way leaves only such
//! renamed directories, which the next prune deletes.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The suffix of the file beside each cache that its users hold a shared lock on.
const IN_USE_SUFFIX: &str = ".inuse";
/// Where a renamed cache waits for its deletion.
const PRUNING_PREFIX: &str = ".pruning-";
/// The file in the root whose modification time is the last automatic prune.
const LAST_PRUNE: &str = ".last-prune";
/// How often processes prune the root on their own.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);

/// One identity's cache under the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheDir {
    /// The identity directory.
    pub dir: PathBuf,
    /// When a process last opened it or wrote to it: the newest modification time of the
    /// directory, its files and its `.inuse` file.
    pub last_used: SystemTime,
    /// Bytes allocated on disk by its files, subdirectories included.
    pub bytes: u64,
}

/// What a prune did.
#[derive(Debug, Default)]
pub struct Pruned {
    /// The caches removed, least recently used first.
    pub removed: Vec<CacheDir>,
    /// The caches passed over because a process holds them.
    pub in_use: Vec<PathBuf>,
    /// Bytes allocated by the caches left.
    pub bytes_left: u64,
}

/// A cache held in use by this process: no prune removes it while this lives.
#[derive(Debug)]
pub struct InUse {
    _lock: File,
}

/// Marks the cache `dir` in use for as long as the returned value lives (a shared lock on
/// `<dir>.inuse`, whose modification time also records the use). `None` if the file cannot
/// be made or a prune is removing the cache right now (the caller goes on without the
/// mark).
pub fn hold(dir: &Path) -> Option<InUse> {
    let file = open_in_use_file(dir).ok()?;
    if !flock(&file, libc::LOCK_SH | libc::LOCK_NB) {
        return None;
    }
    // A prune unlinks the file once it removed the cache: a lock on an unlinked file
    // protects nothing.
    if file.metadata().ok()?.nlink() == 0 {
        return None;
    }
    let _ = file.set_modified(SystemTime::now());
    Some(InUse { _lock: file })
}

/// Whether an automatic prune of `root` is due (none in the last [`PRUNE_INTERVAL`]); if
/// so, records that one starts now, so that other processes starting meanwhile do not
/// prune too.
pub fn due(root: &Path, now: SystemTime) -> bool {
    let marker = root.join(LAST_PRUNE);
    let last = fs::symlink_metadata(&marker).and_then(|m| m.modified());
    if let Ok(last) = last {
        if now
            .duration_since(last)
            .is_ok_and(|age| age < PRUNE_INTERVAL)
        {
            return false;
        }
    }
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&marker);
    file.and_then(|f| f.set_modified(now)).is_ok()
}

/// The identity caches under `root`: `root/id-*` and `root/*/id-*`, with their use times
/// and sizes. Links and directories that vanish while they are read are left out.
pub fn caches(root: &Path) -> io::Result<Vec<CacheDir>> {
    let identity_dirs = |dir: &Path| {
        gpucache::inspect::identity_dirs(dir)
            .unwrap_or_default()
            .into_iter()
            .filter(|d| fs::symlink_metadata(d).is_ok_and(|m| m.is_dir()))
    };
    let mut found: Vec<CacheDir> = identity_dirs(root).filter_map(|d| cache_dir(&d)).collect();
    for entry in fs::read_dir(root)? {
        let path = entry?.path();
        let hidden = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        let namespace = fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir())
            && !hidden
            && !found.iter().any(|c| c.dir == path);
        if namespace {
            found.extend(identity_dirs(&path).filter_map(|d| cache_dir(&d)));
        }
    }
    Ok(found)
}

/// Removes caches under `root`, least recently used first, until the rest allocate no more
/// than `max_bytes`; never `keep`, nor a cache a process holds. Also deletes what an
/// interrupted prune left.
pub fn prune(root: &Path, max_bytes: u64, keep: Option<&Path>) -> io::Result<Pruned> {
    delete_leftovers(root);
    let mut all = caches(root)?;
    all.sort_by_key(|c| c.last_used);
    let mut pruned = Pruned {
        bytes_left: all.iter().map(|c| c.bytes).sum(),
        ..Pruned::default()
    };
    for cache in all {
        if pruned.bytes_left <= max_bytes {
            break;
        }
        if keep.is_some_and(|k| k == cache.dir) {
            continue;
        }
        match remove(&cache.dir, root) {
            Removal::Removed => {
                pruned.bytes_left -= cache.bytes;
                pruned.removed.push(cache);
            }
            Removal::InUse => pruned.in_use.push(cache.dir),
            Removal::Failed => {}
        }
    }
    Ok(pruned)
}

enum Removal {
    Removed,
    InUse,
    Failed,
}

/// Removes the cache `dir` unless a process holds it: locks its `.inuse` file exclusively,
/// renames the directory away, deletes it, and unlinks the `.inuse` file last, still
/// locked; then removes its namespace (not `root`) if nothing is left in it.
fn remove(dir: &Path, root: &Path) -> Removal {
    let Ok(lock) = open_in_use_file(dir) else {
        return Removal::Failed;
    };
    if !flock(&lock, libc::LOCK_EX | libc::LOCK_NB) {
        return Removal::InUse;
    }
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Removal::Failed;
    };
    let away = parent.join(format!(
        "{PRUNING_PREFIX}{}-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    if fs::rename(dir, &away).is_err() {
        return Removal::Failed;
    }
    let _ = fs::remove_dir_all(&away);
    let _ = fs::remove_file(in_use_path(dir));
    drop(lock);
    // Fails, and leaves it, unless the namespace is empty.
    if parent != root {
        let _ = fs::remove_dir(parent);
    }
    Removal::Removed
}

/// Deletes the directories that interrupted prunes renamed away, under the root and its
/// namespaces.
fn delete_leftovers(root: &Path) {
    let leftovers = |dir: &Path| -> Vec<PathBuf> {
        fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(PRUNING_PREFIX))
                    && fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
            })
            .collect()
    };
    let mut dirs = vec![root.to_path_buf()];
    dirs.extend(
        fs::read_dir(root)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())),
    );
    for dir in dirs {
        for leftover in leftovers(&dir) {
            let _ = fs::remove_dir_all(leftover);
        }
    }
}

fn cache_dir(dir: &Path) -> Option<CacheDir> {
    let meta = fs::symlink_metadata(dir).ok()?;
    let mut last_used = meta.modified().ok()?;
    if let Ok(m) = fs::symlink_metadata(in_use_path(dir)) {
        last_used = last_used.max(m.modified().unwrap_or(last_used));
    }
    let mut bytes = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = entry.metadata() else { continue };
            bytes += m.blocks() * 512;
            if let Ok(t) = m.modified() {
                last_used = last_used.max(t);
            }
            if m.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    Some(CacheDir {
        dir: dir.to_path_buf(),
        last_used,
        bytes,
    })
}

fn in_use_path(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(IN_USE_SUFFIX);
    dir.with_file_name(name)
}

fn open_in_use_file(dir: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(in_use_path(dir))
}

/// `flock(file, op)`; whether it was granted.
fn flock(file: &File, op: libc::c_int) -> bool {
    loop {
        // SAFETY: the descriptor is open for the call (`file` is borrowed); flock takes
        // no pointers.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return true;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return false;
        }
    }
}

#[cfg(test)]
mod tests;
