//! The write-behind thread: stores return at once and are written to every lower tier here,
//! in batches, in order.
//!
//! The queue is bounded by bytes (each operation counted as its key and value plus
//! `OP_OVERHEAD`), not by a count, and allocates as it fills. When it is full a store is not
//! persisted (it stays in the memory tier) and counted: a cache must never make its caller,
//! often a driver thread, wait for a disk or a network. `flush` waits until everything
//! queued before it is written to every tier and made durable. Closing drains the queue,
//! makes it durable and joins the thread.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::Bytes;

use super::pending::Pending;
use crate::metrics::Counter;
use crate::tier::{Queued, Tier, WriteContext, WriteOp};

/// Operations per batch at most, and bytes per batch at most (a batch may hold a lock).
const BATCH_OPS: usize = 4096;
const BATCH_BYTES: u64 = 8 << 20;
/// What one queued operation costs beyond its key and value (the channel slot, the `Bytes`
/// handles), so that a flood of tiny stores is bounded too.
const OP_OVERHEAD: u64 = 96;

type Reply = SyncSender<io::Result<()>>;
/// A task run on the writer thread between batches (disk compaction).
pub(crate) type Task = Box<dyn FnOnce() -> io::Result<()> + Send>;
/// Whether the memory tier still holds a key.
pub(crate) type HotFn = Box<dyn Fn(&[u8]) -> bool + Send>;
/// Offers memory a store whose write failed (key, value, its sequence number): no lower
/// tier holds it, so memory keeps it whatever its policy's admission said, unless a newer
/// write of the key came since.
pub(crate) type RescueFn = Box<dyn Fn(&[u8], &Bytes, u64) + Send>;

enum Op {
    /// Store into the tiers `0..upto` (all of them, or those above the tier a value was
    /// found in). `seq`: the store's number in [`Pending`] (none for a value found below).
    Put {
        key: Bytes,
        value: Bytes,
        upto: usize,
        seq: Option<u64>,
    },
    Remove {
        key: Bytes,
        seq: u64,
    },
    Flush(Reply),
    Clear(Reply),
    Run(Task, Reply),
    Close,
}

/// Queues operations for the writer thread; cheap to clone (promotions of late reads and
/// preloaded entries queue from other threads).
#[derive(Clone, Debug)]
pub(crate) struct Queue {
    tx: Sender<Op>,
    /// The writer thread, spawned by the first operation queued if not started before.
    thread: Arc<Thread>,
    queued_bytes: Arc<AtomicU64>,
    queued_puts: Arc<PutCount>,
    max_queued_bytes: u64,
    dropped: Arc<Counter>,
    tiers: usize,
}

impl Queue {
    /// Queues store `seq` into every tier; `false` (and counted) if the queue is full.
    pub(crate) fn put(&self, key: Bytes, value: Bytes, seq: u64) -> bool {
        self.enqueue(
            Op::Put {
                key,
                value,
                upto: self.tiers,
                seq: Some(seq),
            },
            self.max_queued_bytes,
        )
    }

    /// Queues a store into the tiers above tier `tier` (a value found there).
    pub(crate) fn put_above(&self, key: Bytes, value: Bytes, tier: usize) -> bool {
        if tier == 0 {
            return true;
        }
        let op = Op::Put {
            key,
            value,
            upto: tier,
            seq: None,
        };
        self.enqueue(op, self.max_queued_bytes)
    }

    /// Queues removal `seq` from every tier; `false` (and counted) if the queue is full.
    /// Removals may take the queue to twice its limit (see [`Queue::tombstone`]).
    pub(crate) fn remove(&self, key: Bytes, seq: u64) -> bool {
        let sent = self.send_remove(key, seq);
        if !sent {
            self.dropped.incr();
        }
        sent
    }

    /// Queues a removal in place of store `seq`, which did not fit, so that the key's older
    /// value below is removed rather than served; the store's drop was counted already.
    pub(crate) fn tombstone(&self, key: Bytes, seq: u64) -> bool {
        self.send_remove(key, seq)
    }

    fn send_remove(&self, key: Bytes, seq: u64) -> bool {
        let limit = self.max_queued_bytes.saturating_mul(2);
        self.enqueue(Op::Remove { key, seq }, limit)
    }

    /// Stores not queued because the queue was full.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.get()
    }

    /// Bytes waiting now.
    pub(crate) fn queued_bytes(&self) -> u64 {
        self.queued_bytes.load(Ordering::Acquire)
    }

    /// Stores waiting now (for capacity checks).
    pub(crate) fn queued_puts(&self) -> Queued {
        self.queued_puts.get()
    }

    fn enqueue(&self, op: Op, limit: u64) -> bool {
        self.thread.start(self);
        let size = op_size(&op);
        let put = put_len(&op);
        let queued = self.queued_bytes.fetch_add(size, Ordering::AcqRel);
        // Counted before sending: the writer takes it off as soon as it has written it.
        self.queued_puts.add(put);
        let sent = queued + size <= limit && self.tx.send(op).is_ok();
        if !sent {
            self.queued_bytes.fetch_sub(size, Ordering::AcqRel);
            self.queued_puts.sub(put);
            if put.is_some() {
                self.dropped.incr();
            }
        }
        sent
    }

    fn call(&self, op: impl FnOnce(Reply) -> Op) -> io::Result<()> {
        wait(self.send(op)?)
    }

    /// Sends a barrier; its answer comes on the receiver.
    fn send(&self, op: impl FnOnce(Reply) -> Op) -> io::Result<Receiver<io::Result<()>>> {
        self.thread.start(self);
        let (reply_tx, reply_rx) = mpsc::sync_channel(1);
        self.tx
            .send(op(reply_tx))
            .map_err(|_| io::Error::other("write-behind thread has stopped"))?;
        Ok(reply_rx)
    }
}

/// The answer to a barrier.
pub(crate) fn wait(reply: Receiver<io::Result<()>>) -> io::Result<()> {
    reply
        .recv()
        .map_err(|_| io::Error::other("write-behind thread has stopped"))?
}

/// What the write-behind thread runs first ([`WriteBehind::new`]): given its queue, or
/// `None` on the calling thread when the thread could not be spawned.
pub(crate) type OnStart = Box<dyn FnOnce(Option<&Queue>) + Send>;

/// The writer thread of one cache and its queue.
#[derive(Debug)]
pub(crate) struct WriteBehind {
    queue: Queue,
}

/// The writer thread: not spawned until [`WriteBehind::start`] or the first operation
/// queued, so that a cache opened to serve lookups spawns nothing before its first one.
struct Thread {
    started: AtomicBool,
    state: parking_lot::Mutex<ThreadState>,
}

enum ThreadState {
    Idle {
        worker: Worker,
        rx: Receiver<Op>,
        on_start: Option<OnStart>,
    },
    Running(JoinHandle<()>),
    /// Could not be spawned (its receiver is gone: sends fail), or joined.
    Gone,
}

impl std::fmt::Debug for Thread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Thread")
            .field("started", &self.started.load(Ordering::Relaxed))
            .finish()
    }
}

impl Thread {
    /// Spawns the thread unless it was spawned before. It first runs `on_start` (with a
    /// handle on the queue), then warms the tiers up, then serves the queue.
    fn start(&self, queue: &Queue) {
        if self.started.load(Ordering::Acquire) {
            return;
        }
        let mut state = self.state.lock();
        if !matches!(*state, ThreadState::Idle { .. }) {
            return;
        }
        let ThreadState::Idle {
            worker,
            rx,
            on_start,
        } = std::mem::replace(&mut *state, ThreadState::Gone)
        else {
            return;
        };
        // Handed over through a slot, so that a failed spawn can still run it here.
        let slot = Arc::new(parking_lot::Mutex::new(on_start));
        let spawned = {
            let (slot, queue) = (Arc::clone(&slot), queue.clone());
            std::thread::Builder::new()
                .name("gpucache-writer".into())
                .spawn(move || {
                    let on_start = slot.lock().take();
                    if let Some(on_start) = on_start {
                        on_start(Some(&queue));
                    }
                    drop(queue);
                    worker.run(rx);
                })
        };
        match spawned {
            Ok(handle) => *state = ThreadState::Running(handle),
            Err(e) => {
                tracing::warn!(target: "gpucache", "no write-behind thread: {e}");
                let on_start = slot.lock().take();
                if let Some(on_start) = on_start {
                    on_start(None);
                }
            }
        }
        self.started.store(true, Ordering::Release);
    }
}

impl WriteBehind {
    /// The queue of a thread that writes to `tiers`, in their order; the thread is spawned
    /// by [`Self::start`] or by the first operation queued. It first runs `on_start`.
    pub(crate) fn new(
        tiers: Vec<Arc<dyn Tier>>,
        hot: HotFn,
        rescue: RescueFn,
        pending: Arc<Pending>,
        max_queued_bytes: u64,
        on_start: Option<OnStart>,
    ) -> Self {
        let (tx, rx) = mpsc::channel();
        let tier_count = tiers.len();
        let queued_bytes = Arc::new(AtomicU64::new(0));
        let queued_puts = Arc::new(PutCount::default());
        let worker = Worker {
            tiers,
            hot,
            rescue,
            pending,
            queued_bytes: Arc::clone(&queued_bytes),
            queued_puts: Arc::clone(&queued_puts),
        };
        let thread = Arc::new(Thread {
            started: AtomicBool::new(false),
            state: parking_lot::Mutex::new(ThreadState::Idle {
                worker,
                rx,
                on_start,
            }),
        });
        let queue = Queue {
            tx,
            thread,
            queued_bytes,
            queued_puts,
            max_queued_bytes,
            dropped: Arc::new(Counter::new()),
            tiers: tier_count,
        };
        Self { queue }
    }

    /// Spawns the thread if nothing has yet.
    pub(crate) fn start(&self) {
        self.queue.thread.start(&self.queue);
    }

    pub(crate) fn queue(&self) -> &Queue {
        &self.queue
    }

    /// Whether the thread was spawned (or its spawn tried).
    #[cfg(test)]
    pub(crate) fn is_started(&self) -> bool {
        self.queue.thread.started.load(Ordering::Acquire)
    }

    /// Writes everything queued so far to every tier and makes it durable; the first
    /// tier's error, if any.
    pub(crate) fn flush(&self) -> io::Result<()> {
        self.queue.call(Op::Flush)
    }

    /// Queues a clear (what is queued before it is dropped, then every tier is cleared);
    /// [`wait`] for its answer.
    pub(crate) fn start_clear(&self) -> io::Result<Receiver<io::Result<()>>> {
        self.queue.send(Op::Clear)
    }

    /// Runs `task` on the writer thread after what is queued now has been written.
    pub(crate) fn run(&self, task: Task) -> io::Result<()> {
        self.queue.call(|reply| Op::Run(task, reply))
    }
}

impl Drop for WriteBehind {
    fn drop(&mut self) {
        // Other queue handles (a reader thread's) may outlive this: close explicitly. A
        // thread never spawned was never sent anything (every send spawns it): nothing to
        // write or make durable.
        let _ = self.queue.tx.send(Op::Close);
        let state = std::mem::replace(&mut *self.queue.thread.state.lock(), ThreadState::Gone);
        if let ThreadState::Running(thread) = state {
            let _ = thread.join();
        }
    }
}

struct Worker {
    tiers: Vec<Arc<dyn Tier>>,
    hot: HotFn,
    rescue: RescueFn,
    pending: Arc<Pending>,
    queued_bytes: Arc<AtomicU64>,
    queued_puts: Arc<PutCount>,
}

impl Worker {
    fn run(self, rx: Receiver<Op>) {
        for tier in &self.tiers {
            tier.warm_up();
        }
        while let Ok(first) = rx.recv() {
            let mut batch = vec![first];
            let mut bytes = 0u64;
            while batch.len() < BATCH_OPS && bytes < BATCH_BYTES {
                match rx.try_recv() {
                    Ok(op) => {
                        bytes += op_size(&op);
                        batch.push(op);
                    }
                    Err(_) => break,
                }
            }
            if !self.process(batch) {
                return;
            }
        }
    }

    /// Writes runs of stores between barriers; answers each barrier after what precedes it.
    /// Returns `false` once the cache is closing.
    fn process(&self, ops: Vec<Op>) -> bool {
        let mut pending: Vec<Op> = Vec::new();
        for op in ops {
            match op {
                Op::Put { .. } | Op::Remove { .. } => pending.push(op),
                Op::Flush(reply) => {
                    let result = self.write(std::mem::take(&mut pending), true);
                    let _ = reply.send(result);
                }
                Op::Clear(reply) => {
                    self.account(&pending);
                    pending.clear();
                    let result = first_error(self.tiers.iter().map(|t| t.clear()));
                    let _ = reply.send(result);
                }
                Op::Run(task, reply) => {
                    let _ = self.write(std::mem::take(&mut pending), false);
                    let _ = reply.send(task());
                }
                Op::Close => {
                    // Make what was written durable; later operations are dropped.
                    let _ = self.write(std::mem::take(&mut pending), true);
                    return false;
                }
            }
        }
        if !pending.is_empty() {
            let _ = self.write(pending, false);
        }
        true
    }

    /// Hands `ops` to every tier they are meant for; the first error, if any.
    fn write(&self, ops: Vec<Op>, durable: bool) -> io::Result<()> {
        let hot = |key: &[u8]| (self.hot)(key);
        let ctx = WriteContext::new(&hot, durable);
        let mut result = Ok(());
        let mut writes = Vec::with_capacity(ops.len());
        for (i, tier) in self.tiers.iter().enumerate() {
            writes.clear();
            writes.extend(ops.iter().filter_map(|op| match op {
                Op::Put {
                    key, value, upto, ..
                } if i < *upto => Some(WriteOp::Put { key, value }),
                Op::Remove { key, .. } => Some(WriteOp::Remove { key }),
                _ => None,
            }));
            if writes.is_empty() && !durable {
                continue;
            }
            if let Err(e) = tier.write(&writes, &ctx) {
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        self.account(&ops);
        if result.is_err() {
            // Not written: what memory refused at the door would be nowhere.
            for op in &ops {
                if let Op::Put {
                    key,
                    value,
                    seq: Some(seq),
                    ..
                } = op
                {
                    (self.rescue)(key, value, *seq);
                }
            }
        }
        // Only now may lookups read these from below.
        let writes = ops.iter().filter_map(|op| match op {
            Op::Put {
                key,
                seq: Some(seq),
                ..
            }
            | Op::Remove { key, seq } => Some((key.clone(), *seq)),
            _ => None,
        });
        self.pending.written(writes, result.is_ok());
        result
    }

    /// Takes `ops` off the queue's byte count.
    fn account(&self, ops: &[Op]) {
        let size: u64 = ops.iter().map(op_size).sum();
        self.queued_bytes.fetch_sub(size, Ordering::AcqRel);
        for op in ops {
            self.queued_puts.sub(put_len(op));
        }
    }
}

fn first_error(results: impl Iterator<Item = io::Result<()>>) -> io::Result<()> {
    let mut first = Ok(());
    for r in results {
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// Stores queued and their key and value bytes.
#[derive(Debug, Default)]
struct PutCount {
    entries: AtomicU64,
    bytes: AtomicU64,
}

impl PutCount {
    fn add(&self, len: Option<u64>) {
        if let Some(len) = len {
            self.entries.fetch_add(1, Ordering::AcqRel);
            self.bytes.fetch_add(len, Ordering::AcqRel);
        }
    }

    fn sub(&self, len: Option<u64>) {
        if let Some(len) = len {
            self.entries.fetch_sub(1, Ordering::AcqRel);
            self.bytes.fetch_sub(len, Ordering::AcqRel);
        }
    }

    fn get(&self) -> Queued {
        Queued::new(
            self.entries.load(Ordering::Acquire),
            self.bytes.load(Ordering::Acquire),
        )
    }
}

/// The key and value bytes of a store.
fn put_len(op: &Op) -> Option<u64> {
    match op {
        Op::Put { key, value, .. } => Some((key.len() + value.len()) as u64),
        _ => None,
    }
}

fn op_size(op: &Op) -> u64 {
    match op {
        Op::Put { key, value, .. } => (key.len() + value.len()) as u64 + OP_OVERHEAD,
        Op::Remove { key, .. } => key.len() as u64 + OP_OVERHEAD,
        _ => 0,
    }
}
