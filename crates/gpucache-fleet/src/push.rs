//! The write-behind to the fleet: the tier's own queue, bounded in bytes, and one thread
//! that sends it in pipelined batches, off the cache's write-behind thread.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpucache::Bytes;
use parking_lot::{Condvar, Mutex};

use crate::conn::{Link, Unavailable};
use crate::entry;
use crate::ops::{self, Encoded};
use crate::tier::Shared;

/// Most entries sent in one batch.
const BATCH_ENTRIES: usize = 256;
/// Most value bytes sent in one batch.
const BATCH_BYTES: u64 = 8 << 20;

/// A store waiting to be sent.
pub(crate) struct Item {
    pub hash: [u8; 16],
    pub key: Bytes,
    pub value: Bytes,
    pub digest: u64,
}

#[derive(Default)]
struct State {
    items: VecDeque<Item>,
    bytes: u64,
    closing: bool,
    sending: bool,
    /// The server is unreachable and the thread waits out a backoff: a drain does not wait.
    stalled: bool,
}

/// The queue between [`Tier::write`](gpucache::Tier::write) and the push thread.
pub(crate) struct PushQueue {
    state: Mutex<State>,
    /// Signalled when items arrive or the queue closes (the push thread waits on it).
    work: Condvar,
    /// Signalled when a batch is done (drain waits on it).
    done: Condvar,
    max_bytes: u64,
}

impl PushQueue {
    pub(crate) fn new(max_bytes: u64) -> Self {
        Self {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            done: Condvar::new(),
            max_bytes,
        }
    }

    /// Queues `item`; `false` when the queue has no room (the store is dropped).
    pub(crate) fn push(&self, item: Item) -> bool {
        let size = (item.key.len() + item.value.len()) as u64;
        let mut s = self.state.lock();
        if s.closing || s.bytes + size > self.max_bytes {
            return false;
        }
        s.bytes += size;
        s.items.push_back(item);
        drop(s);
        self.work.notify_one();
        true
    }

    /// Forgets every queued store (a clear).
    pub(crate) fn discard(&self) -> usize {
        let mut s = self.state.lock();
        s.bytes = 0;
        std::mem::take(&mut s.items).len()
    }

    pub(crate) fn queued_bytes(&self) -> u64 {
        self.state.lock().bytes
    }

    /// Waits until everything queued has been sent (or dropped), at most `timeout`.
    /// Returns whether the queue is empty.
    pub(crate) fn drain(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut s = self.state.lock();
        while (!s.items.is_empty() || s.sending) && !s.stalled {
            if self.done.wait_until(&mut s, deadline).timed_out() {
                break;
            }
        }
        s.items.is_empty() && !s.sending
    }

    /// Stops taking stores; the thread sends what is queued and exits.
    pub(crate) fn close(&self) {
        self.state.lock().closing = true;
        self.work.notify_all();
    }
}

/// The push thread: until the queue closes and is empty.
pub(crate) fn run(shared: Arc<Shared>, queue: Arc<PushQueue>, mut link: Link) {
    loop {
        let batch = {
            let mut s = queue.state.lock();
            loop {
                if s.items.is_empty() {
                    if s.closing {
                        return;
                    }
                    queue.work.wait(&mut s);
                    continue;
                }
                // Waiting out a backoff: sleep unless closing (then try once more, and drop
                // what cannot be sent).
                if let Some(at) = link.backing_off() {
                    if s.closing {
                        let n = s.items.len() as u64;
                        s.items.clear();
                        s.bytes = 0;
                        shared.counters.push_dropped.add(n);
                        queue.done.notify_all();
                        return;
                    }
                    s.stalled = true;
                    queue.done.notify_all();
                    queue.work.wait_until(&mut s, at);
                    continue;
                }
                break;
            }
            let mut batch = Vec::new();
            let mut bytes = 0;
            while let Some(item) = s.items.front() {
                let size = (item.key.len() + item.value.len()) as u64;
                if !batch.is_empty() && (batch.len() >= BATCH_ENTRIES || bytes + size > BATCH_BYTES)
                {
                    break;
                }
                bytes += size;
                batch.push(s.items.pop_front().expect("front exists"));
            }
            s.bytes -= bytes;
            s.sending = true;
            batch
        };
        let requeue = send(&shared, &mut link, batch);
        let mut s = queue.state.lock();
        s.stalled = requeue.is_some();
        if let Some(back) = requeue {
            // The server could not be reached: keep the batch (at the front, in order) for
            // the next attempt, unless closing or the queue has filled meanwhile.
            let size: u64 = back
                .iter()
                .map(|i| (i.key.len() + i.value.len()) as u64)
                .sum();
            if s.closing || s.bytes + size > queue.max_bytes {
                shared.counters.push_dropped.add(back.len() as u64);
            } else {
                s.bytes += size;
                for item in back.into_iter().rev() {
                    s.items.push_front(item);
                }
            }
        }
        s.sending = false;
        drop(s);
        queue.done.notify_all();
    }
}

/// Sends one batch. Returns it back when it should be retried (the server was unreachable).
fn send(shared: &Shared, link: &mut Link, batch: Vec<Item>) -> Option<Vec<Item>> {
    let c = &shared.counters;
    // Another store of the same value may have been sent since this one was queued.
    let batch: Vec<Item> = {
        let known = shared.known.lock();
        batch
            .into_iter()
            .filter(|i| {
                let dup = known.get(&i.hash).is_some_and(|k| k.digest == i.digest);
                if dup {
                    c.push_deduplicated.incr();
                }
                !dup
            })
            .collect()
    };
    if batch.is_empty() {
        return None;
    }
    let conn = match link.conn() {
        Ok(conn) => conn,
        Err(Unavailable::BackingOff) => return Some(batch),
        Err(Unavailable::Connect(e)) => {
            c.connect_errors.incr();
            c.error(format!("fleet push: cannot connect: {e}"));
            return Some(batch);
        }
    };
    let encoded: Vec<Encoded> = batch
        .iter()
        .map(|i| Encoded {
            hash: i.hash,
            bytes: entry::encode(&shared.keys.current, &shared.identity, &i.key, &i.value),
        })
        .collect();
    match ops::push_batch(conn, &shared.names, &shared.identity_text, &encoded) {
        Ok(()) => {
            link.succeeded();
            let mut known = shared.known.lock();
            for (item, e) in batch.iter().zip(&encoded) {
                c.pushed.incr();
                c.pushed_value_bytes.add(item.value.len() as u64);
                c.pushed_wire_bytes.add(e.bytes.len() as u64);
                shared.remember(&mut known, item.hash, item.digest, e.bytes.len());
            }
            None
        }
        Err(e) => {
            c.push_errors.incr();
            c.error(format!("fleet push: {e}"));
            let answered = crate::conn::server_answered(&e);
            link.failed(&e);
            if answered {
                // The server refused (OOM when full, or another answer that a retry would
                // get again): the local tiers keep the entries; the fleet does without.
                c.push_dropped.add(batch.len() as u64);
                None
            } else {
                Some(batch)
            }
        }
    }
}
