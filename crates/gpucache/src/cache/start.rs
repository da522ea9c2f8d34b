//! Starting a cache's threads: the write-behind thread (which spawns the preload's as it
//! begins) and the readers of slow tiers. A cache whose disk opened through the persisted
//! table starts its writer only at the first operation after its first lookup, or at its
//! first store: its first hit spawns no thread.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::bounded::BoundedReader;
use super::pending::install;
use super::preload::Preload;
use super::write_behind::{self, Queue, WriteBehind};
use super::{Cache, Lower};
use crate::tier::Tier;

impl Cache {
    /// Starts the write-behind thread, the readers of slow tiers and the preload. The
    /// preload's thread is spawned by the write-behind thread as it begins (one thread spawn
    /// here, not two: each costs this VM 15-50 µs before the first lookup can run).
    pub(super) fn start(
        &mut self,
        tiers: Vec<Arc<dyn Tier>>,
        write_queue_bytes: u64,
        preload: bool,
    ) {
        let mut start_preload = None;
        if preload && !tiers.is_empty() {
            // Before any store: the preload must know every key written from now on.
            self.pending.preload_started();
            let (handle, start) = Preload::prepare(
                Arc::clone(&self.memory),
                tiers.clone(),
                Arc::clone(&self.preloaded),
                Arc::clone(&self.pending),
            );
            self.preload = Some(handle);
            start_preload = Some(start);
        }
        // A read-only disk gets a writer too: its stores fail there, counted and reported
        // by `flush`, instead of vanishing unseen.
        if !tiers.is_empty() {
            let memory = Arc::clone(&self.memory);
            let hot = Box::new(move |key: &[u8]| memory.contains(key));
            let pending = Arc::clone(&self.pending);
            let on_start = start_preload.take().map(|start| -> write_behind::OnStart {
                Box::new(move |queue: Option<&Queue>| start.start(queue.cloned()))
            });
            let writer = WriteBehind::new(tiers.clone(), hot, pending, write_queue_bytes, on_start);
            // Opened through the persisted table, the disk serves lookups without the
            // threads: they start at the first operation after the first lookup (or at the
            // first store), so that spawning them is not on the first hit's path.
            if !self.disk.as_ref().is_some_and(|d| d.opened_through_table()) {
                writer.start();
            }
            self.writer = Some(writer);
        }
        for (i, tier) in tiers.iter().enumerate() {
            let reader = tier.read_budget().and_then(|budget| {
                let memory = Arc::clone(&self.memory);
                let pending = Arc::clone(&self.pending);
                let queue = self.writer.as_ref().map(|w| w.queue().clone());
                let on_late = Box::new(move |key: &[u8], value: Bytes, since: u64| {
                    install(&memory, &pending, queue.as_ref(), key, value, since, i);
                });
                BoundedReader::spawn(Arc::clone(tier), budget, on_late)
                    .map_err(|e| tracing::warn!(target: "gpucache", "no reader thread: {e}"))
                    .ok()
            });
            self.lower.push(Lower {
                tier: Arc::clone(tier),
                reader,
            });
        }
    }

    /// The writer, started if it was not.
    pub(super) fn started_writer(&self) -> Option<&WriteBehind> {
        let writer = self.writer.as_ref()?;
        writer.start();
        Some(writer)
    }

    /// Starts the writer (and with it the preload) at the first lookup after the first one,
    /// where [`Cache::start`] left it idle: the first lookup runs without them.
    pub(super) fn start_after_first_lookup(&self) {
        if self.looked_up.load(Ordering::Relaxed) {
            if let Some(writer) = &self.writer {
                writer.start();
            }
        } else {
            self.looked_up.store(true, Ordering::Relaxed);
        }
    }
}
