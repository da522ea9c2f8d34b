//! The write-behind thread: stores return at once and are persisted here, in batches.
//!
//! The queue is bounded by bytes (each operation counted as its key and value plus
//! `OP_OVERHEAD`), not by a count, and allocates as it fills. When it is full a store is not
//! persisted (it stays in the
//! memory tier) and `queue_dropped` counts it: a cache must never make its caller, often a
//! driver thread, wait for the disk. `flush` waits until everything queued before it is
//! written and fsynced. Dropping the handle drains the queue, fsyncs and joins the thread.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::Bytes;

use super::write::{Active, IsHot, WriteBuffers};
use super::Disk;

/// Records per batch at most, and bytes per batch at most (a batch holds the lock).
const BATCH_OPS: usize = 4096;
const BATCH_BYTES: u64 = 8 << 20;
/// What one queued operation costs beyond its key and value (the channel slot, the `Bytes`
/// handles), so that a flood of tiny stores is bounded too.
const OP_OVERHEAD: u64 = 96;

type Reply = SyncSender<io::Result<()>>;

/// Whether the memory tier still holds a key (eviction keeps such records).
pub(crate) type HotFn = Box<dyn Fn(&[u8]) -> bool + Send>;

enum Op {
    Put(Bytes, Bytes),
    Remove(Bytes),
    Flush(Reply),
    Clear(Reply),
    Compact(Reply),
}

/// Handle to the write-behind thread of one disk cache.
#[derive(Debug)]
pub(crate) struct WriteBehind {
    tx: Option<Sender<Op>>,
    queued_bytes: Arc<AtomicU64>,
    max_queued_bytes: u64,
    disk: Arc<Disk>,
    thread: Option<JoinHandle<()>>,
}

impl WriteBehind {
    pub(crate) fn spawn(disk: Arc<Disk>, is_hot: HotFn, max_queued_bytes: u64) -> io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let queued_bytes = Arc::new(AtomicU64::new(0));
        let worker = Worker {
            disk: Arc::clone(&disk),
            queued_bytes: Arc::clone(&queued_bytes),
            is_hot,
            active: None,
            buffers: WriteBuffers::default(),
            unsynced: false,
        };
        let thread = std::thread::Builder::new()
            .name("gpucache-writer".into())
            .spawn(move || worker.run(rx))?;
        Ok(Self {
            tx: Some(tx),
            queued_bytes,
            max_queued_bytes,
            disk,
            thread: Some(thread),
        })
    }

    /// Queues a store; `false` (and counted) if the queue is full.
    pub(crate) fn put(&self, key: Bytes, value: Bytes) -> bool {
        self.enqueue(Op::Put(key, value))
    }

    /// Queues a removal; `false` if the queue is full.
    pub(crate) fn remove(&self, key: Bytes) -> bool {
        self.enqueue(Op::Remove(key))
    }

    fn enqueue(&self, op: Op) -> bool {
        let size = op_size(&op);
        let queued = self.queued_bytes.fetch_add(size, Ordering::AcqRel);
        let sent = queued + size <= self.max_queued_bytes
            && self.tx.as_ref().is_some_and(|tx| tx.send(op).is_ok());
        if !sent {
            self.queued_bytes.fetch_sub(size, Ordering::AcqRel);
            self.disk.counters.add_queue_dropped();
        }
        sent
    }

    /// Writes and fsyncs everything queued so far.
    pub(crate) fn flush(&self) -> io::Result<()> {
        self.call(Op::Flush)
    }

    /// Removes every segment (after writing nothing more that was queued before).
    pub(crate) fn clear(&self) -> io::Result<()> {
        self.call(Op::Clear)
    }

    /// Rewrites every sealed segment that holds dead records.
    pub(crate) fn compact(&self) -> io::Result<()> {
        self.call(Op::Compact)
    }

    fn call(&self, make: fn(Reply) -> Op) -> io::Result<()> {
        let (reply_tx, reply_rx) = mpsc::sync_channel(1);
        let tx = self.tx.as_ref().expect("sender lives until drop");
        tx.send(make(reply_tx))
            .map_err(|_| io::Error::other("write-behind thread has stopped"))?;
        reply_rx
            .recv()
            .map_err(|_| io::Error::other("write-behind thread has stopped"))?
    }
}

impl Drop for WriteBehind {
    fn drop(&mut self) {
        // Closing the channel makes the worker drain what is queued, fsync and return.
        self.tx.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct Worker {
    disk: Arc<Disk>,
    queued_bytes: Arc<AtomicU64>,
    is_hot: HotFn,
    active: Option<Active>,
    /// Kept across batches so that their capacity is allocated once.
    buffers: WriteBuffers,
    /// Records were written since the last fsync. A process that only read (a warm start)
    /// closes without taking the lock or fsyncing anything.
    unsynced: bool,
}

impl Worker {
    fn run(mut self, rx: Receiver<Op>) {
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
            self.process(batch);
        }
        // Channel closed: the cache is being dropped. Make what was written durable.
        if self.disk.is_writable() && self.unsynced {
            let _ = self.with_batch(|b, _| b.sync());
        }
    }

    /// Writes runs of stores between barriers; answers each barrier after what precedes it.
    fn process(&mut self, ops: Vec<Op>) {
        let mut pending: Vec<Op> = Vec::new();
        for op in ops {
            match op {
                Op::Put(..) | Op::Remove(..) => pending.push(op),
                Op::Flush(reply) => {
                    let result = self.write(std::mem::take(&mut pending), true);
                    let _ = reply.send(result);
                }
                Op::Clear(reply) => {
                    self.discard(std::mem::take(&mut pending));
                    let result = self.with_batch(|b, _| b.clear());
                    let _ = reply.send(result);
                }
                Op::Compact(reply) => {
                    let _ = self.write(std::mem::take(&mut pending), false);
                    let result = self.with_batch(|b, _| b.compact(true).and_then(|()| b.sync()));
                    self.unsynced = result.is_err();
                    let _ = reply.send(result);
                }
            }
        }
        if !pending.is_empty() {
            let _ = self.write(pending, false);
        }
    }

    fn write(&mut self, ops: Vec<Op>, sync: bool) -> io::Result<()> {
        let size: u64 = ops.iter().map(op_size).sum();
        let sync = sync && (self.unsynced || !ops.is_empty());
        let result = if ops.is_empty() && !sync {
            Ok(())
        } else {
            self.with_batch(|batch, is_hot| {
                for op in &ops {
                    match op {
                        Op::Put(key, value) => batch.push(key, Some(value))?,
                        Op::Remove(key) => batch.push(key, None)?,
                        _ => unreachable!("barriers are not in runs"),
                    }
                }
                batch.write_out()?;
                batch.enforce_limits(is_hot)?;
                batch.compact(false)?;
                if sync {
                    batch.sync()?;
                }
                Ok(())
            })
        };
        // After an error, what reached the files is unknown: fsync at the next chance.
        self.unsynced = if sync {
            result.is_err()
        } else {
            self.unsynced || !ops.is_empty()
        };
        self.queued_bytes.fetch_sub(size, Ordering::AcqRel);
        result
    }

    fn discard(&self, ops: Vec<Op>) {
        let size: u64 = ops.iter().map(op_size).sum();
        self.queued_bytes.fetch_sub(size, Ordering::AcqRel);
    }

    /// Runs `f` in a locked batch; errors are counted and logged, never propagated as panics.
    fn with_batch(
        &mut self,
        f: impl FnOnce(&mut super::write::Batch<'_>, IsHot<'_>) -> io::Result<()>,
    ) -> io::Result<()> {
        let is_hot: IsHot<'_> = &*self.is_hot;
        let result = self
            .disk
            .begin_batch(&mut self.active, &mut self.buffers)
            .and_then(|mut batch| f(&mut batch, is_hot));
        if let Err(e) = &result {
            if self.disk.is_writable() {
                self.disk.counters.add_write_error(e);
            }
            // Reopen the segment next time: its lengths may be unknown after a failure.
            self.active = None;
        }
        result
    }
}

fn op_size(op: &Op) -> u64 {
    match op {
        Op::Put(k, v) => (k.len() + v.len()) as u64 + OP_OVERHEAD,
        Op::Remove(k) => k.len() as u64 + OP_OVERHEAD,
        _ => 0,
    }
}
