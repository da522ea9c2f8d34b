//! The application's part in keeping the root within its limit (`crate::prune`): it marks
//! its cache in use for its life, prunes the root once a day on a thread of its own, gives
//! that prune a moment to finish at exit, and lets go of both locks in a forked child.

use std::os::fd::IntoRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, SystemTime};

use crate::display::Process;
use crate::log;
use crate::prune;

/// The locked `.inuse` file of this process's cache (-1: none), open for the process's life.
static IN_USE_FD: AtomicI32 = AtomicI32::new(-1);
/// The root's prune lock while this process's prune runs (-1: none).
static PRUNE_LOCK_FD: AtomicI32 = AtomicI32::new(-1);
/// Set at exit: the prune stops before its next cache.
static STOP: AtomicBool = AtomicBool::new(false);
/// Told when this process's prune is over.
static DONE: Mutex<Option<mpsc::Receiver<()>>> = Mutex::new(None);
/// How long the exit handler waits for a running prune. One cut short leaves at most the
/// cache it was deleting in the trash, which the next prune empties.
const EXIT_WAIT: Duration = Duration::from_millis(100);

/// Marks `cache_dir` in use for the life of the process, once; whether it is marked.
/// Called before the cache opens (so that no prune removes it between the open and the
/// mark) and again after, in case the first try failed (a root made only by the open).
pub fn hold(cache_dir: &Path) -> bool {
    if IN_USE_FD.load(Ordering::Acquire) >= 0 {
        return true;
    }
    let Some(held) = prune::hold(cache_dir) else {
        return false;
    };
    let fd = held.into_file().into_raw_fd();
    if IN_USE_FD
        .compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // SAFETY: `fd` was just taken from a `File` and is owned by nothing else.
        unsafe { libc::close(fd) };
    }
    true
}

/// Lets go of the mark (the cache could not be used after all).
pub fn release() {
    let fd = IN_USE_FD.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        // SAFETY: the descriptor is this library's own lock file, swapped out above so that
        // it is closed once.
        unsafe { libc::close(fd) };
    }
}

/// The root lock of this process's prune, published in [`PRUNE_LOCK_FD`] (for a forked
/// child to close) from before the thread starts until just before it is closed.
struct PublishedLock(prune::RootLock);

impl PublishedLock {
    fn new(lock: prune::RootLock) -> Self {
        PRUNE_LOCK_FD.store(lock.raw_fd(), Ordering::Release);
        Self(lock)
    }
}

impl Drop for PublishedLock {
    fn drop(&mut self) {
        // Before the field (the descriptor) is dropped, on every path, unwinding included.
        PRUNE_LOCK_FD.store(-1, Ordering::Release);
    }
}

/// Once a day (the first process to get here after a day), prunes the root down to
/// `total_max_bytes` on a thread of its own, sparing `cache_dir`.
pub fn prune_if_due(p: &Process, cache_dir: &Path) {
    let (Some(root), max) = (p.settings.root.clone(), p.settings.total_max_bytes) else {
        return;
    };
    if max == 0 {
        return;
    }
    let lock = match prune::lock_root(&root) {
        Ok(Some(lock)) => lock,
        Ok(None) => return,
        Err(e) => {
            log(p, &format!("no pruning: {e}"));
            return;
        }
    };
    if !lock.due(SystemTime::now()) {
        return;
    }
    // Here, not on the thread: a process that ends before the thread runs must not leave the
    // prune due at the next start.
    lock.mark_started(SystemTime::now());
    let lock = PublishedLock::new(lock);
    let keep = cache_dir.to_path_buf();
    let (done, done_rx) = mpsc::channel();
    let run = move || {
        let p = crate::display::process();
        match prune::prune(&lock.0, max, Some(&keep), &STOP) {
            Ok(pruned) => {
                for c in &pruned.removed {
                    log(
                        p,
                        &format!("pruned {} ({} bytes)", c.dir.display(), c.bytes),
                    );
                }
                for dir in &pruned.failed {
                    log(p, &format!("could not prune {}", dir.display()));
                }
            }
            Err(e) => log(p, &format!("pruning {}: {e}", root.display())),
        }
        drop(lock);
        let _ = done.send(());
    };
    // The thread runs with every signal blocked (as Mesa's threads do): a handler the
    // application installed never runs on it, so never calls exit() there.
    // SAFETY: `all` and `old` are valid sigset_t values for the calls, which only fill or
    // read them.
    let (spawned, restored) = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        let blocked = libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old) == 0;
        let spawned = std::thread::Builder::new()
            .name("gpucache-prune".into())
            .spawn(run);
        let restored =
            !blocked || libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) == 0;
        (spawned, restored)
    };
    debug_assert!(restored, "the signal mask is put back");
    if spawned.is_ok() {
        *DONE.lock().unwrap_or_else(|e| e.into_inner()) = Some(done_rx);
    }
}

/// At exit: asks a running prune to stop, and waits at most [`EXIT_WAIT`] for it.
pub fn at_exit() {
    STOP.store(true, Ordering::Relaxed);
    let done = DONE.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(done) = done {
        let _ = done.recv_timeout(EXIT_WAIT);
    }
}

/// In a forked child: closes its copies of the locked descriptors, so that a child that
/// outlives its parent (and whose callbacks are inert) neither holds the cache nor blocks
/// the root's prunes. Only closes descriptors: safe right after `fork`.
pub fn in_child() {
    for fd in [
        IN_USE_FD.swap(-1, Ordering::AcqRel),
        PRUNE_LOCK_FD.swap(-1, Ordering::AcqRel),
    ] {
        if fd >= 0 {
            // SAFETY: the descriptor is this library's own (a lock file), and the child's
            // copy is closed once (swapped out above).
            unsafe { libc::close(fd) };
        }
    }
}
