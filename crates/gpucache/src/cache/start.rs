//! Starting and stopping a cache's threads: the write-behind thread (which spawns the
//! preload's as it begins) and the readers of slow tiers.
//!
//! A cache whose disk opened through the persisted table builds its writer and preload only
//! at the first operation after its first lookup, or at its first store: its first hit
//! builds nothing and spawns no thread (the two cost about 1.2 µs of a 30 µs open to first
//! hit, the thread spawn 15-50 µs). One opened with `preload_at_first_use` builds and starts
//! them at its first operation. Any other cache, and one with a slow tier (whose reader
//! hands late values to the writer), builds and starts them as it opens.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::bounded::BoundedReader;
use super::pending::install;
use super::preload::Preload;
use super::write_behind::{self, Queue, WriteBehind};
use super::{Cache, Lower};
use crate::store::Store;
use crate::tier::Tier;
use crate::InsertMode;

/// The write-behind queue and the preload of a cache with lower tiers, built together.
#[derive(Debug, Default)]
pub(super) struct Background {
    pub(super) writer: Option<WriteBehind>,
    pub(super) preload: Option<Preload>,
}

impl Cache {
    /// Sets up the lower tiers: their readers (slow tiers), and the writer and the preload,
    /// built and started here unless the disk opened through the persisted table or `later`
    /// (the preload at first use) says so.
    pub(super) fn start(&mut self, tiers: Vec<Arc<dyn Tier>>, later: bool) {
        self.lower = tiers
            .into_iter()
            .map(|tier| Lower { tier, reader: None })
            .collect();
        let through_table = self.disk.as_ref().is_some_and(|d| d.opened_through_table());
        let slow = self.lower.iter().any(|l| l.tier.read_budget().is_some());
        // A reader hands late values to the writer's queue, under the pending lock: the
        // writer is built and started before the readers (a spawn that fails runs the
        // preload's end inline, which takes that lock).
        if !(through_table || later) || slow {
            self.started_writer();
        }
        for i in 0..self.lower.len() {
            let Some(budget) = self.lower[i].tier.read_budget() else {
                continue;
            };
            let memory = Arc::clone(&self.memory);
            let pending = Arc::clone(&self.pending);
            let queue = self.built_writer().map(|w| w.queue().clone());
            let on_late = Box::new(move |key: &[u8], value: Bytes, since: u64| {
                install(&memory, &pending, queue.as_ref(), key, value, since, i);
            });
            let tier = Arc::clone(&self.lower[i].tier);
            self.lower[i].reader = BoundedReader::spawn(tier, budget, on_late)
                .map_err(|e| tracing::warn!(target: "gpucache", "no reader thread: {e}"))
                .ok();
        }
    }

    /// The writer and the preload, built (not started) if they were not.
    pub(super) fn background(&self) -> &Background {
        self.background.get_or_init(|| self.build_background())
    }

    /// The writer, if it was built.
    pub(super) fn built_writer(&self) -> Option<&WriteBehind> {
        self.background.get()?.writer.as_ref()
    }

    /// The preload, if it was built.
    pub(super) fn built_preload(&self) -> Option<&Preload> {
        self.background.get()?.preload.as_ref()
    }

    /// The writer, built if it was not (not started).
    pub(super) fn writer(&self) -> Option<&WriteBehind> {
        self.background().writer.as_ref()
    }

    /// Builds the writer of the lower tiers and the preload, which the writer's thread
    /// spawns as it begins (one thread spawn on the opening path, not two: each costs this
    /// VM 15-50 µs). A read-only disk gets a writer too: its stores fail there, counted and
    /// reported by `flush`, instead of vanishing unseen.
    fn build_background(&self) -> Background {
        if self.lower.is_empty() {
            return Background::default();
        }
        let tiers: Vec<Arc<dyn Tier>> = self.lower.iter().map(|l| Arc::clone(&l.tier)).collect();
        let mut preload = None;
        let mut on_start = None;
        if self.preload_enabled {
            // Before any store is recorded (every store builds the writer first): the
            // preload must know every key written from now on.
            self.pending.preload_started();
            let (handle, start) = Preload::prepare(
                Arc::clone(&self.memory),
                tiers.clone(),
                Arc::clone(&self.preloaded),
                Arc::clone(&self.pending),
            );
            preload = Some(handle);
            on_start = Some(
                Box::new(move |queue: Option<&Queue>| start.start(queue.cloned()))
                    as write_behind::OnStart,
            );
        }
        let memory = Arc::clone(&self.memory);
        let hot = Box::new(move |key: &[u8]| memory.contains(key));
        let (memory, pending) = (Arc::clone(&self.memory), Arc::clone(&self.pending));
        let rescue = Box::new(move |key: &[u8], value: &Bytes, seq: u64| {
            // Checked first (outside the shard's lock): a value memory holds needs nothing.
            if !memory.contains(key) {
                let keep = InsertMode::REPLACE.keep_newcomer(true);
                let _ = memory.insert_if(key, value.clone(), keep, || pending.is_latest(key, seq));
            }
        });
        let pending = Arc::clone(&self.pending);
        let writer = WriteBehind::new(
            tiers,
            hot,
            rescue,
            pending,
            self.write_queue_bytes,
            on_start,
        );
        Background {
            writer: Some(writer),
            preload,
        }
    }

    /// The writer, built and started if it was not.
    pub(super) fn started_writer(&self) -> Option<&WriteBehind> {
        let writer = self.writer()?;
        writer.start();
        Some(writer)
    }

    /// Builds and starts the writer (and with it the preload) where [`Cache::start`] left
    /// them unbuilt: at the first lookup after the first one for a disk opened through the
    /// persisted table (the first lookup runs without), else at the first.
    pub(super) fn start_after_first_lookup(&self) {
        if self.looked_up.load(Ordering::Relaxed) {
            self.started_writer();
        } else {
            self.looked_up.store(true, Ordering::Relaxed);
            if !self.disk.as_ref().is_some_and(|d| d.opened_through_table()) {
                self.started_writer();
            }
        }
    }

    /// Leaves the memory tier's values allocated when this cache is dropped, for a process
    /// that is exiting. An exit handler drops the cache to persist it; freeing the values
    /// one by one, and the allocator handing their pages back, would only delay the exit
    /// (1.9 ms for 9 MB in 3,300 values in the drop-in's handler here, about 0.2 ms per
    /// MB). Everything else a drop does still happens: the preload stops, what is queued is
    /// written and made durable. The memory is the process's until it ends (with the
    /// store's eviction listener, if any, which is never dropped either), so a process that
    /// goes on must never call this. Calling it again changes nothing.
    pub fn leave_memory_to_exit(&self) {
        let mut left = LEFT_TO_EXIT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !left.iter().any(|s| Arc::ptr_eq(s, &self.memory)) {
            left.push(Arc::clone(&self.memory));
        }
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        if let Some(preload) = self.built_preload() {
            preload.stop();
        }
        // Readers first: a late value they hand over still finds the writer.
        for lower in &mut self.lower {
            lower.reader.take();
        }
        // Dropping the writer drains its queue, makes it durable and joins it.
        self.background.take();
    }
}

/// The memory tiers left to the process's exit ([`Cache::leave_memory_to_exit`]): an owner
/// that is never dropped, so the store outlives its cache, and stays reachable (a leak
/// checker at exit does not report it).
static LEFT_TO_EXIT: std::sync::Mutex<Vec<Arc<Store>>> = std::sync::Mutex::new(Vec::new());
