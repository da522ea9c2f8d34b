//! One byte limit for the whole root: each application's cache is bounded on its own
//! (`max_bytes`), but a new driver build gets a new identity directory and a rebuilt
//! application a new namespace, and the old ones are never opened again. Without pruning the
//! root would grow by a cache per driver update and per application update.
//!
//! A prune removes whole drop-in caches (identity directories whose meta file names a
//! drop-in identity: `<root>/<namespace>/id-<hash>`, or `<root>/id-<hash>` with the shared
//! namespace), least recently used first, until the root's caches take no more than the
//! limit. Caches of other users of the same root (an application linking gpucache itself,
//! D3D12 sessions) are neither counted nor touched.
//!
//! - **In use.** Every process that opens a cache holds a shared `flock` on `<cache>.inuse`
//!   for its life ([`hold`]). A prune locks that file exclusively (non-blocking) before it
//!   touches the cache, so it never removes one that a process holds, nor the caller's own.
//! - **Whole or nothing.** Under that lock the cache is renamed into the root's trash
//!   (`.gpucache-pruning~`, a name no namespace can have: namespaces never contain `~`) and
//!   the `.inuse` file unlinked; only then are the files deleted. A process starting meanwhile
//!   finds the whole cache, or none (and starts a new one); one that opened the old `.inuse`
//!   file sees that it is no longer the file at that path and opens the new one. A prune cut
//!   short leaves its directories in the trash, which the next prune empties.
//! - **One at a time.** A prune holds an exclusive lock on the root's `.last-prune~` file for
//!   its whole run ([`lock_root`]); whether the daily prune is due is decided under it.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

/// The suffix of the file beside each cache that its users hold a shared lock on.
const IN_USE_SUFFIX: &str = ".inuse";
/// Where removed caches wait for their files to be deleted.
const TRASH: &str = ".gpucache-pruning~";
/// The root's prune lock; its modification time says when the next prune is due (a day after
/// a complete prune, an hour after an unfinished one's start). Names with `~` cannot be a
/// namespace's (namespace names never contain it).
const LAST_PRUNE: &str = ".last-prune~";
/// Left in a namespace whose last cache a prune removed (or that held only lock files without
/// a cache); the namespace goes a day later if nothing else is in it by then.
const EMPTIED: &str = ".emptied~";
/// How often processes prune the root on their own.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);
/// When a prune that did not complete is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(60 * 60);
/// What the identity of every drop-in cache starts with (`crate::identity`).
const DROPIN_IDENTITY: &[u8] = b"gpucache-dropin ";
/// The waits between [`hold`]'s attempts to lock a cache's `.inuse` file: a prune holds it
/// only while it renames the cache away, then replaces it.
const HOLD_BACKOFF_MS: [u64; 4] = [1, 4, 16, 64];

/// One drop-in cache under the root.
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
    /// Caches that could not be removed, or whose files are left in the trash.
    pub failed: Vec<PathBuf>,
    /// Bytes allocated by the caches left and the trash.
    pub bytes_left: u64,
}

/// A cache held in use by this process: no prune removes it while the lock is held.
#[derive(Debug)]
pub struct InUse(File);

impl InUse {
    /// The locked descriptor (a forked child closes its copy, `crate::display`).
    pub fn into_file(self) -> File {
        self.0
    }
}

/// Marks the cache `dir` in use for as long as the returned value lives: a shared lock on
/// `<dir>.inuse`, whose modification time also records the use. Makes the namespace (0700)
/// when the root is there, so that a first run's cache is marked before it opens. `None`
/// when the namespace is not a directory of this user's, or the file cannot be made or
/// locked.
pub fn hold(dir: &Path) -> Option<InUse> {
    let path = in_use_path(dir);
    let namespace = dir.parent()?;
    if fs::symlink_metadata(namespace).is_err()
        && namespace.parent().is_some_and(is_own_dir)
        && fs::DirBuilder::new().mode(0o700).create(namespace).is_ok()
    {
        // The mode whatever the umask (the engine's directories are 0700 too).
        let _ = fs::set_permissions(
            namespace,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        );
    }
    if !is_own_dir(namespace) {
        return None;
    }
    for wait in std::iter::once(0).chain(HOLD_BACKOFF_MS) {
        if wait > 0 {
            std::thread::sleep(Duration::from_millis(wait));
        }
        let file = open_in_use_file(&path, true).ok()?;
        match try_flock(&file, libc::LOCK_SH | libc::LOCK_NB) {
            // Granted on a file a prune has unlinked since: that lock protects nothing.
            Ok(()) if is_file_at(&file, &path) => {
                let _ = file.set_modified(SystemTime::now());
                return Some(InUse(file));
            }
            Ok(()) => {}
            // A prune is removing the cache and replaces the file at once.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            // Locks do not work here (a file system without them): no mark, no waiting.
            Err(_) => return None,
        }
    }
    None
}

/// The root locked for one prune at a time.
#[derive(Debug)]
pub struct RootLock {
    root: PathBuf,
    marker: File,
}

impl RootLock {
    /// Whether the daily prune is due: no complete prune in the last [`PRUNE_INTERVAL`], and
    /// no unfinished one started in the last hour (`RETRY_AFTER`).
    pub fn due(&self, now: SystemTime) -> bool {
        let last = self.marker.metadata().and_then(|m| m.modified());
        !last.is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age < PRUNE_INTERVAL))
    }

    /// Records a complete prune.
    fn mark_done(&self, now: SystemTime) {
        let _ = self.marker.set_modified(now);
    }

    /// Records that a prune starts: due again in [`RETRY_AFTER`] unless it completes (a
    /// prune that short-lived applications keep cutting short is not retried at every start).
    pub(crate) fn mark_started(&self, now: SystemTime) {
        let last = self.marker.metadata().and_then(|m| m.modified());
        if let Some(t) = (now + RETRY_AFTER).checked_sub(PRUNE_INTERVAL) {
            // Never earlier than it was (a prune by hand soon after a complete one).
            if !last.is_ok_and(|last| last >= t) {
                let _ = self.marker.set_modified(t);
            }
        }
    }

    /// The root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The locked marker's descriptor (a forked child closes its copy).
    pub fn raw_fd(&self) -> i32 {
        self.marker.as_raw_fd()
    }
}

/// Locks `root` for a prune: `Ok(None)` while another prune runs. Refuses a root that is
/// not a directory of this user's that only this user can write to (a prune renames and
/// deletes in it).
pub fn lock_root(root: &Path) -> io::Result<Option<RootLock>> {
    check_root(root)?;
    let path = root.join(LAST_PRUNE);
    let mut options = OpenOptions::new();
    options
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    let (marker, created) = match options.clone().create_new(true).open(&path) {
        Ok(f) => (f, true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => (options.open(&path)?, false),
        Err(e) => return Err(e),
    };
    if !flock(&marker, libc::LOCK_EX | libc::LOCK_NB) {
        return Ok(None);
    }
    if created {
        // Never pruned: dated to the epoch, so that a prune is due until one completes.
        marker.set_modified(SystemTime::UNIX_EPOCH)?;
    }
    Ok(Some(RootLock {
        root: root.to_path_buf(),
        marker,
    }))
}

/// Checks that `root` (a link to it followed: the settings name it) is a directory of this
/// user's that no one else can write to: a prune renames and deletes in it.
pub fn check_root(root: &Path) -> io::Result<()> {
    let m = fs::metadata(root)?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if m.is_dir() && m.uid() == me && m.mode() & 0o022 == 0 {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{} is not a directory of this user's that only this user can write to",
            root.display()
        ),
    ))
}

/// The bytes that removed caches still take in the root's trash (a prune cut short).
pub fn trash_bytes(root: &Path) -> u64 {
    tree_bytes(&root.join(TRASH)).0
}

/// The drop-in caches under `root`: `root/id-*` and `root/*/id-*` whose meta file names a
/// drop-in identity, with their use times and sizes. Links are not followed; directories
/// that vanish while they are read are left out.
pub fn caches(root: &Path) -> io::Result<Vec<CacheDir>> {
    let dropin_caches = |dir: &Path| -> Vec<CacheDir> {
        gpucache::inspect::identity_dirs(dir)
            .unwrap_or_default()
            .iter()
            .filter(|d| is_dropin_cache(d))
            .filter_map(|d| cache_dir(d))
            .collect()
    };
    let mut found = dropin_caches(root);
    for entry in fs::read_dir(root)? {
        let path = entry?.path();
        let namespace = path.file_name().is_some_and(|n| n != TRASH)
            && fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir())
            && !path.join("meta").exists();
        if namespace {
            found.extend(dropin_caches(&path));
        }
    }
    Ok(found)
}

/// Whether a process holds the cache `dir` (`gpucache dropin prune --dry-run`).
pub fn in_use(dir: &Path) -> bool {
    open_in_use_file(&in_use_path(dir), false)
        .is_ok_and(|f| !flock(&f, libc::LOCK_EX | libc::LOCK_NB))
}

/// Removes caches under the locked root, least recently used first, until the rest and the
/// trash allocate no more than `max_bytes`; never `keep`, nor a cache a process holds.
/// Empties the trash first, unlinks lock files left without a cache, and removes namespaces
/// that a prune emptied a day before. Stops early when `stop` is set (the caller is
/// exiting); such a prune is tried again an hour later, a complete one a day later.
pub fn prune(
    lock: &RootLock,
    max_bytes: u64,
    keep: Option<&Path>,
    stop: &AtomicBool,
) -> io::Result<Pruned> {
    let root = lock.root();
    lock.mark_started(SystemTime::now());
    let trash = root.join(TRASH);
    let mut all = caches(root)?;
    all.sort_by_key(|c| c.last_used);
    let _ = fs::remove_dir_all(&trash);
    let mut pruned = Pruned {
        bytes_left: all.iter().map(|c| c.bytes).sum::<u64>() + tree_bytes(&trash).0,
        ..Pruned::default()
    };
    for (n, cache) in all.into_iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            return Ok(pruned);
        }
        if pruned.bytes_left <= max_bytes {
            break;
        }
        if keep.is_some_and(|k| k == cache.dir) {
            continue;
        }
        match remove(&cache.dir, &trash, n) {
            Removal::Removed => {
                pruned.bytes_left -= cache.bytes;
                pruned.removed.push(cache);
            }
            Removal::Vanished => pruned.bytes_left -= cache.bytes,
            Removal::InUse => pruned.in_use.push(cache.dir),
            Removal::Failed => pruned.failed.push(cache.dir),
        }
    }
    tidy_namespaces(root, SystemTime::now());
    lock.mark_done(SystemTime::now());
    Ok(pruned)
}

enum Removal {
    Removed,
    /// Gone before the prune reached it.
    Vanished,
    InUse,
    /// Not removed, or its files left in the trash.
    Failed,
}

/// Removes the cache `dir` unless a process holds it: locks its `.inuse` file exclusively,
/// renames the directory into `trash` and unlinks the `.inuse` file while still locked, then
/// deletes the files.
fn remove(dir: &Path, trash: &Path, n: usize) -> Removal {
    if fs::symlink_metadata(dir).is_err() {
        return Removal::Vanished;
    }
    let path = in_use_path(dir);
    let Ok(lock) = open_in_use_file(&path, true) else {
        return Removal::Failed;
    };
    if !flock(&lock, libc::LOCK_EX | libc::LOCK_NB) {
        return Removal::InUse;
    }
    if !is_file_at(&lock, &path) {
        return Removal::Failed;
    }
    let mut builder = fs::DirBuilder::new();
    builder.mode(0o700);
    if let Err(e) = builder.create(trash) {
        if e.kind() != io::ErrorKind::AlreadyExists {
            return Removal::Failed;
        }
    }
    let away = trash.join(format!("{}-{n}", std::process::id()));
    if fs::rename(dir, &away).is_err() {
        return Removal::Failed;
    }
    let _ = fs::remove_file(&path);
    drop(lock);
    mark_if_emptied(dir);
    match fs::remove_dir_all(&away) {
        Ok(()) => Removal::Removed,
        Err(_) => Removal::Failed,
    }
}

/// Leaves [`EMPTIED`] in `dir`'s namespace if nothing else is left in it (not in the root:
/// the shared namespace is the root itself).
fn mark_if_emptied(dir: &Path) {
    if let Some(namespace) = dir.parent() {
        if is_empty_but_marker(namespace) {
            mark(namespace);
        }
    }
}

/// Leaves (or dates anew) the [`EMPTIED`] marker in `namespace`.
fn mark(namespace: &Path) {
    let marker = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(namespace.join(EMPTIED));
    if let Ok(f) = marker {
        if f.metadata().is_ok_and(|m| m.is_file()) {
            let _ = f.set_modified(SystemTime::now());
        }
    }
}

/// Whether `dir` holds nothing but, perhaps, the [`EMPTIED`] marker.
fn is_empty_but_marker(dir: &Path) -> bool {
    fs::read_dir(dir).is_ok_and(|d| d.flatten().all(|e| e.file_name() == EMPTIED))
}

/// Under the root lock: unlinks the drop-in's `.inuse` files whose cache is gone and that no
/// process holds (a prune killed between its rename and its unlink, a cache deleted by hand),
/// marks a namespace that this left empty, takes the mark from a namespace used again, and
/// removes namespaces marked a [`PRUNE_INTERVAL`] ago that hold nothing else (so that none
/// goes between an application's making it and its cache).
fn tidy_namespaces(root: &Path, now: SystemTime) {
    unlink_orphan_locks(root);
    for entry in fs::read_dir(root).into_iter().flatten().flatten() {
        let namespace = entry.path();
        if !fs::symlink_metadata(&namespace).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        let marker = namespace.join(EMPTIED);
        let emptied = fs::symlink_metadata(&marker).and_then(|m| m.modified());
        // Lock files of the drop-in's were there: a namespace of the drop-in's, emptied now.
        if unlink_orphan_locks(&namespace) > 0
            && emptied.is_err()
            && is_empty_but_marker(&namespace)
        {
            mark(&namespace);
            continue;
        }
        let only_marker = is_empty_but_marker(&namespace);
        if emptied.is_ok() && !only_marker {
            // Used again since a prune emptied it.
            let _ = fs::remove_file(&marker);
            continue;
        }
        let stale = emptied.is_ok_and(|t| now.duration_since(t).is_ok_and(|a| a >= PRUNE_INTERVAL));
        if stale && only_marker {
            let _ = fs::remove_file(namespace.join(EMPTIED));
            // Fails, and leaves it, if an application put something in it meanwhile.
            let _ = fs::remove_dir(&namespace);
        }
    }
}

/// Unlinks the `.inuse` files (regular files) in `dir` whose cache is gone and that no
/// process holds; how many.
fn unlink_orphan_locks(dir: &Path) -> usize {
    use std::os::unix::ffi::OsStrExt;
    let mut unlinked = 0;
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name();
        // Only the drop-in's own: `id-<16 hex digits>.inuse`.
        let Some(cache) = name
            .as_bytes()
            .strip_suffix(IN_USE_SUFFIX.as_bytes())
            .filter(|c| std::str::from_utf8(c).is_ok_and(gpucache::inspect::is_identity_dir_name))
        else {
            continue;
        };
        let cache = dir.join(std::ffi::OsStr::from_bytes(cache));
        let regular = entry.file_type().is_ok_and(|t| t.is_file());
        if regular && fs::symlink_metadata(&cache).is_err() && unlink_if_unheld(&entry.path()) {
            unlinked += 1;
        }
    }
    unlinked
}

/// Unlinks the lock file `path` unless a process holds it (a starting application holds it
/// before its cache exists); whether it did.
fn unlink_if_unheld(path: &Path) -> bool {
    open_in_use_file(path, false).is_ok_and(|file| {
        flock(&file, libc::LOCK_EX | libc::LOCK_NB)
            && is_file_at(&file, path)
            && fs::remove_file(path).is_ok()
    })
}

/// Whether `dir` is a directory (not a link) whose meta file names a drop-in identity.
fn is_dropin_cache(dir: &Path) -> bool {
    fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
        && gpucache::inspect::read_meta(dir).is_ok_and(|id| id.bytes().starts_with(DROPIN_IDENTITY))
}

fn cache_dir(dir: &Path) -> Option<CacheDir> {
    let mut last_used = fs::symlink_metadata(dir).ok()?.modified().ok()?;
    if let Ok(m) = fs::symlink_metadata(in_use_path(dir)) {
        last_used = last_used.max(m.modified().unwrap_or(last_used));
    }
    let (bytes, newest) = tree_bytes(dir);
    Some(CacheDir {
        dir: dir.to_path_buf(),
        last_used: last_used.max(newest),
        bytes,
    })
}

/// The bytes allocated under `dir` (links not followed) and the newest modification time
/// of its entries.
fn tree_bytes(dir: &Path) -> (u64, SystemTime) {
    let (mut bytes, mut newest) = (0, SystemTime::UNIX_EPOCH);
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = entry.metadata() else { continue };
            bytes += m.blocks() * 512;
            if let Ok(t) = m.modified() {
                newest = newest.max(t);
            }
            if m.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    (bytes, newest)
}

/// Whether `dir` is a directory (not a link) of this user's.
fn is_own_dir(dir: &Path) -> bool {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == me)
}

fn in_use_path(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(IN_USE_SUFFIX);
    dir.with_file_name(name)
}

fn open_in_use_file(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Whether `file` is (still) the file at `path`: not unlinked or replaced since it was
/// opened.
fn is_file_at(file: &File, path: &Path) -> bool {
    match (file.metadata(), fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// `flock(file, op)`; whether it was granted.
fn flock(file: &File, op: libc::c_int) -> bool {
    try_flock(file, op).is_ok()
}

/// `flock(file, op)`: `Err(WouldBlock)` when another holds a conflicting lock.
fn try_flock(file: &File, op: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: the descriptor is open for the call (`file` is borrowed); flock takes
        // no pointers.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests;
