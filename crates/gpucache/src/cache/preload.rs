//! The start-up preload: a background thread that fills the memory tier from the lower
//! tiers, in their order, while the application starts.
//!
//! Entries of the first lower tier go into memory until the memory budget refuses more.
//! Entries of a tier below it also go to the tiers above it (a remote tier warming the
//! local disk), so that thread keeps going after memory is full.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

use super::pending::Pending;
use super::write_behind::Queue;
use crate::metrics::Counter;
use crate::tier::Tier;
use crate::{Error, InsertMode, Store};

/// Refusals for a full memory tier in a row after which preloading into memory stops.
const GIVE_UP_AFTER_FULL: u32 = 64;

/// The preload thread of one cache.
#[derive(Debug)]
pub(crate) struct Preload {
    stop: Arc<AtomicBool>,
    done: Arc<(Mutex<bool>, Condvar)>,
    /// Filled by [`Start::start`]; held while it spawns, so that [`Preload::stop`] either
    /// finds the thread or keeps it from starting.
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
}

/// What starts a prepared preload's thread ([`Preload::prepare`]). The cache's write-behind
/// thread runs it as it begins, so that opening a cache spawns one thread, not two.
pub(crate) struct Start {
    memory: Arc<Store>,
    tiers: Vec<Arc<dyn Tier>>,
    preloaded: Arc<Counter>,
    pending: Arc<Pending>,
    stop: Arc<AtomicBool>,
    done: Arc<(Mutex<bool>, Condvar)>,
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl Preload {
    /// A preload not started yet, and what starts it; `pending` must already remember the
    /// keys written ([`Pending::preload_started`]), and is told when the preload ends (or
    /// when it is stopped before it started).
    pub(crate) fn prepare(
        memory: Arc<Store>,
        tiers: Vec<Arc<dyn Tier>>,
        preloaded: Arc<Counter>,
        pending: Arc<Pending>,
    ) -> (Self, Start) {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        let thread = Arc::new(Mutex::new(None));
        let preload = Self {
            stop: Arc::clone(&stop),
            done: Arc::clone(&done),
            thread: Arc::clone(&thread),
        };
        let start = Start {
            memory,
            tiers,
            preloaded,
            pending,
            stop,
            done,
            thread,
        };
        (preload, start)
    }

    /// Blocks until the preload has finished.
    pub(crate) fn wait(&self) {
        let mut done = self.done.0.lock();
        while !*done {
            self.done.1.wait(&mut done);
        }
    }

    /// Stops the preload and joins its thread: once this returns, nothing more is put in
    /// memory by it (a clear must not be undone by entries read before it).
    pub(crate) fn stop(&self) {
        // The flag before the lock: a `Start` that takes the lock after this sees it and
        // spawns nothing; one holding it is waited for, and its thread joined.
        self.stop.store(true, Ordering::Release);
        let thread = self.thread.lock().take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl Start {
    /// Spawns the preload thread (unless the preload was stopped first); `queue` takes what
    /// tiers below the first promote to the tiers above.
    pub(crate) fn start(self, queue: Option<Queue>) {
        let Start {
            memory,
            tiers,
            preloaded,
            pending,
            stop,
            done,
            thread: slot,
        } = self;
        let finish = {
            let (pending, done) = (Arc::clone(&pending), Arc::clone(&done));
            move || {
                pending.preload_finished();
                *done.0.lock() = true;
                done.1.notify_all();
            }
        };
        let mut slot = slot.lock();
        if stop.load(Ordering::Acquire) {
            finish();
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("gpucache-preload".into())
            .spawn({
                let finish = finish.clone();
                move || {
                    for (i, tier) in tiers.iter().enumerate() {
                        if stop.load(Ordering::Acquire) {
                            break;
                        }
                        let promote = queue.as_ref().filter(|_| i > 0);
                        let to = Sinks {
                            memory: &memory,
                            pending: &pending,
                            promote,
                        };
                        preload_tier(&to, &**tier, i, &stop, &preloaded);
                    }
                    finish();
                }
            });
        match spawned {
            Ok(handle) => *slot = Some(handle),
            Err(e) => {
                tracing::warn!(target: "gpucache", "no preload thread: {e}");
                finish();
            }
        }
    }
}

/// Where preloaded entries go.
struct Sinks<'a> {
    memory: &'a Store,
    pending: &'a Pending,
    /// The tiers above the one preloaded, if it is not the first.
    promote: Option<&'a Queue>,
}

/// Streams tier `index`'s entries into memory, and into the tiers above it, except keys
/// written since the preload began (what the tier streams may be older than those).
fn preload_tier(
    to: &Sinks<'_>,
    tier: &dyn Tier,
    index: usize,
    stop: &AtomicBool,
    preloaded: &Counter,
) {
    let Sinks {
        memory,
        pending,
        promote,
    } = *to;
    let mut full_in_a_row = 0u32;
    let mut memory_full = false;
    tier.preload(&mut |key, value| {
        let value = Bytes::copy_from_slice(value);
        if !memory_full {
            let into_memory = InsertMode::NEW_ONLY;
            let untouched = || pending.if_untouched(key, || ());
            match memory.insert_if(key, value.clone(), into_memory, untouched) {
                Ok(true) => {
                    preloaded.incr();
                    full_in_a_row = 0;
                }
                Ok(false) => {}
                Err(Error::CacheFull { .. }) => {
                    full_in_a_row += 1;
                    memory_full = full_in_a_row >= GIVE_UP_AFTER_FULL;
                }
                Err(_) => {}
            }
        }
        if let Some(queue) = promote {
            pending.if_untouched(key, || {
                queue.put_above(Bytes::copy_from_slice(key), value, index);
            });
        }
        !stop.load(Ordering::Acquire) && (promote.is_some() || !memory_full)
    });
}
