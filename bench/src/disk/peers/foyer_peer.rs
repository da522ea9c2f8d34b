//! foyer's hybrid cache (block engine on a directory device) as an [`Engine`], driven by a
//! small tokio runtime of its own.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use foyer::{
    BlockEngineConfig, DeviceBuilder, FsDeviceBuilder, HybridCache, HybridCacheBuilder,
    HybridCachePolicy, RecoverMode,
};
use tokio::runtime::Runtime;

use super::engine::{Engine, Kind, Value};
use crate::disk::cold_get::GET_MEMORY;
use crate::disk::fsutil::sync_fs;

/// foyer as compared.
pub const KIND: Kind = Kind {
    name: "foyer",
    setup: "HybridCache, write on insertion, 16 MiB memory, block engine on a 2 GiB FsDevice (16 MiB blocks, page cache, files preallocated sparse), 64 MiB write buffer, 1 GiB submit queue, and a wait for the flushers every 4,096 stores (it drops stores that find its write buffer full: 85% of them without the waits); never fsyncs, so closing adds `syncfs`",
    open,
    load_every_round: true,
};

/// Device capacity, as gpucache's disk limit.
const CAPACITY: usize = 2 << 30;
/// Bytes of writes foyer may queue before dropping them, as gpucache's write queue.
const SUBMIT_QUEUE: usize = 1 << 30;
/// The flushers' write buffer (16 MiB by default).
const WRITE_BUFFER: usize = 64 << 20;
/// Stores between waits for the flushers: 32 MiB, half the write buffer.
const WAIT_EVERY: usize = 4096;

type Hybrid = HybridCache<Vec<u8>, Bytes>;

struct Foyer {
    runtime: Runtime,
    cache: Hybrid,
    dir: PathBuf,
    stores: usize,
}

async fn build(dir: &Path) -> anyhow::Result<Hybrid> {
    let device = FsDeviceBuilder::new(dir).with_capacity(CAPACITY).build()?;
    let cache = HybridCacheBuilder::new()
        .with_policy(HybridCachePolicy::WriteOnInsertion)
        .memory(GET_MEMORY as usize)
        .with_weighter(|key: &Vec<u8>, value: &Bytes| key.len() + value.len())
        .storage()
        .with_engine_config(
            BlockEngineConfig::new(device)
                .with_submit_queue_size_threshold(SUBMIT_QUEUE)
                .with_buffer_pool_size(WRITE_BUFFER),
        )
        .with_recover_mode(RecoverMode::Quiet)
        .build()
        .await?;
    Ok(cache)
}

fn open(dir: &Path, _preload: bool) -> anyhow::Result<Box<dyn Engine>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let cache = runtime.block_on(build(dir))?;
    Ok(Box::new(Foyer {
        runtime,
        cache,
        dir: dir.to_path_buf(),
        stores: 0,
    }))
}

impl Engine for Foyer {
    fn insert(&mut self, key: &[u8], value: &Bytes) -> anyhow::Result<()> {
        self.cache.insert(key.to_vec(), value.clone());
        self.stores += 1;
        if self.stores.is_multiple_of(WAIT_EVERY) {
            self.runtime.block_on(self.cache.storage().wait());
        }
        Ok(())
    }

    fn get(&mut self, key: &[u8]) -> anyhow::Result<Option<Value>> {
        let entry = self.runtime.block_on(self.cache.get(key))?;
        Ok(entry.map(|e| Value::Shared(e.value().clone())))
    }

    fn close(self: Box<Self>) -> anyhow::Result<()> {
        self.runtime.block_on(self.cache.close())?;
        drop(self.cache);
        sync_fs(&self.dir)?;
        Ok(())
    }
}
