//! Reads from a slow tier, bounded by its read budget.
//!
//! A tier that declares a read budget is read on a thread of its own; the caller hands the
//! key over and waits at most the budget. A read still running when the caller gives up
//! goes on, and a value it finds is handed to `on_late` (which puts it in memory), so the
//! next lookup of the key hits. The request queue is small: when the tier cannot keep up,
//! a lookup misses at once instead of queueing behind others.

use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::metrics::Counter;
use crate::tier::Tier;
use crate::Lookup;

/// Requests waiting for the reader thread at most.
const QUEUE: usize = 32;
/// How long closing waits for a read in progress before leaving the thread to finish alone.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Called with a value that arrived after its caller stopped waiting, and the sequence
/// number the caller's read began at (see `super::pending`).
pub(crate) type LateFn = Box<dyn Fn(&[u8], Bytes, u64) + Send>;

struct Request {
    key: Bytes,
    since: u64,
    reply: SyncSender<Lookup>,
}

/// Counts of one bounded tier.
#[derive(Debug, Default)]
pub(crate) struct BoundedCounts {
    pub timed_out: Counter,
    pub busy: Counter,
    pub late_hits: Counter,
}

/// The reader thread of one slow tier.
#[derive(Debug)]
pub(crate) struct BoundedReader {
    tx: Option<SyncSender<Request>>,
    budget: Duration,
    counts: Arc<BoundedCounts>,
    thread: Option<JoinHandle<()>>,
}

impl BoundedReader {
    pub(crate) fn spawn(
        tier: Arc<dyn Tier>,
        budget: Duration,
        on_late: LateFn,
    ) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let counts = Arc::new(BoundedCounts::default());
        let thread = {
            let counts = Arc::clone(&counts);
            std::thread::Builder::new()
                .name(format!("gpucache-read-{}", tier.name()))
                .spawn(move || serve(&*tier, &rx, &on_late, &counts))?
        };
        Ok(Self {
            tx: Some(tx),
            budget,
            counts,
            thread: Some(thread),
        })
    }

    /// Looks `key` up, waiting at most the budget; a miss when the tier is slower. `since`
    /// goes to `on_late` with a late value.
    pub(crate) fn read(&self, key: &[u8], since: u64) -> Lookup {
        let Some(tx) = &self.tx else {
            return Lookup::Miss;
        };
        let (reply, answer) = mpsc::sync_channel(1);
        let request = Request {
            key: Bytes::copy_from_slice(key),
            since,
            reply,
        };
        match tx.try_send(request) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.counts.busy.incr();
                return Lookup::Miss;
            }
        }
        match answer.recv_timeout(self.budget) {
            Ok(found) => found,
            Err(_) => {
                self.counts.timed_out.incr();
                Lookup::Miss
            }
        }
    }

    pub(crate) fn counts(&self) -> &BoundedCounts {
        &self.counts
    }
}

impl Drop for BoundedReader {
    fn drop(&mut self) {
        self.tx.take(); // The thread ends after the read in progress.
        let Some(thread) = self.thread.take() else {
            return;
        };
        let deadline = Instant::now() + CLOSE_WAIT;
        while !thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if thread.is_finished() {
            let _ = thread.join();
        } else {
            // A read stuck in the network must not hold the application's exit; the thread
            // owns nothing but its tier and ends when the read returns.
            tracing::warn!(target: "gpucache", "a tier read is still running at close; not waiting for it");
        }
    }
}

fn serve(tier: &dyn Tier, rx: &Receiver<Request>, on_late: &LateFn, counts: &BoundedCounts) {
    for Request { key, since, reply } in rx {
        match reply.send(tier.read(&key)) {
            Ok(()) => {}
            Err(mpsc::SendError(Lookup::Hit(value))) => {
                counts.late_hits.incr();
                on_late(&key, value, since);
            }
            Err(_) => {}
        }
    }
}
