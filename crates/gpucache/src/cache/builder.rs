//! [`CacheBuilder`]: the cache's settings, each setter stating its default, and
//! [`CacheBuilder::open`], which checks the directory, opens the disk tier (or degrades to
//! memory only) and starts the background work.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::pending::Pending;
use super::Cache;
use crate::disk::{
    check_owner, check_owner_open, identity_subdir, DirAccess, DirHandle, DiskConfig, DiskTier,
};
use crate::hash::KeyHasher;
use crate::identity::MAX_IDENTITY_LEN;
use crate::metrics::Counter;
use crate::tier::Tier;
use crate::{Error, EvictionListener, Identity, PolicyKind, Result, StoreBuilder};

/// [`CacheBuilder::open_table_min_entries`]'s default.
const DEFAULT_OPEN_TABLE_MIN_ENTRIES: u64 = 4096;

/// Configures and opens a [`Cache`]; each setter states its default.
#[derive(Clone, Debug)]
pub struct CacheBuilder {
    dir: Option<PathBuf>,
    identity: Identity,
    memory: StoreBuilder,
    max_value_size: Option<u64>,
    max_disk_bytes: u64,
    max_disk_entries: u64,
    max_segment_bytes: u64,
    open_table_min_entries: u64,
    write_queue_bytes: u64,
    preload: bool,
    preload_at_first_use: bool,
    tiers: Vec<Arc<dyn Tier>>,
    dir_access: DirAccess,
    allow_foreign_owner: bool,
}

impl Default for CacheBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl CacheBuilder {
    /// A memory-only cache until [`directory`](Self::directory) is set.
    pub fn new() -> Self {
        Self {
            dir: None,
            identity: Identity::default(),
            memory: StoreBuilder::new(),
            max_value_size: None,
            max_disk_bytes: 1 << 30,
            max_disk_entries: u64::MAX,
            max_segment_bytes: 128 << 20,
            open_table_min_entries: DEFAULT_OPEN_TABLE_MIN_ENTRIES,
            write_queue_bytes: 64 << 20,
            preload: true,
            preload_at_first_use: false,
            tiers: Vec::new(),
            dir_access: DirAccess::Private,
            allow_foreign_owner: false,
        }
    }

    /// The directory of the disk tier. Default none (memory only).
    pub fn directory(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// What makes stored entries valid: driver vendor, renderer and version, API, app
    /// build (at most 64 KiB). A directory created for another identity is wiped, or, with
    /// [`driver_versioned`](Self::driver_versioned), kept beside this one. Default empty.
    pub fn identity(mut self, identity: impl Into<Vec<u8>>) -> Self {
        self.identity = Identity::new(identity)
            .with_version(self.identity.version())
            .with_driver_versioned(self.identity.driver_versioned());
        self
    }

    /// The cache version; a directory of another version is wiped. Default 0.
    pub fn version(mut self, version: u64) -> Self {
        self.identity = self.identity.with_version(version);
        self
    }

    /// Keep caches of different identities side by side, each in a subdirectory named by
    /// the identity's hash, instead of wiping. Default `false`.
    pub fn driver_versioned(mut self, on: bool) -> Self {
        self.identity = self.identity.with_driver_versioned(on);
        self
    }

    /// Memory-tier byte budget. Default 64 MiB.
    pub fn max_memory_bytes(mut self, bytes: u64) -> Self {
        self.memory = self.memory.max_bytes(bytes);
        self
    }

    /// Memory-tier entry budget. Default unbounded.
    pub fn max_memory_entries(mut self, entries: u64) -> Self {
        self.memory = self.memory.max_entries(entries);
        self
    }

    /// Largest value stored, in any tier; a larger one is refused with
    /// [`Error::ValueTooLarge`] and the key's previous value is kept. Default: unbounded
    /// for a cache with lower tiers (a value too large for a memory shard is kept below
    /// memory only), what fits in one memory shard for a memory-only cache. A disk tier
    /// lowers it to what one segment holds ([`Cache::max_value_size`]).
    pub fn max_value_size(mut self, bytes: u64) -> Self {
        self.max_value_size = Some(bytes);
        self.memory = self.memory.max_value_size(bytes);
        self
    }

    /// Eviction policy of the memory tier; the disk tier keeps, when it evicts, what this
    /// policy keeps in memory. Default S3-FIFO.
    pub fn policy(mut self, policy: PolicyKind) -> Self {
        self.memory = self.memory.policy(policy);
        self
    }

    /// Memory-tier shards. Default automatic (see [`StoreBuilder::shards`]).
    pub fn shards(mut self, shards: usize) -> Self {
        self.memory = self.memory.shards(shards);
        self
    }

    /// Memory-tier key hasher. Default XXH3 with a random seed.
    pub fn hasher(mut self, hasher: Arc<dyn KeyHasher>) -> Self {
        self.memory = self.memory.hasher(hasher);
        self
    }

    /// Told of every entry the memory tier evicts (see [`EvictionListener`]); lower tiers
    /// keep what it evicts. Default: none.
    pub fn eviction_listener(mut self, listener: Arc<dyn EvictionListener>) -> Self {
        self.memory = self.memory.eviction_listener(listener);
        self
    }

    /// Byte limit of the directory (segment files). Default 1 GiB.
    pub fn max_disk_bytes(mut self, bytes: u64) -> Self {
        self.max_disk_bytes = bytes;
        self
    }

    /// Entry limit of the directory. Default unbounded.
    pub fn max_disk_entries(mut self, entries: u64) -> Self {
        self.max_disk_entries = entries;
        self
    }

    /// Largest segment (value file). Default 128 MiB, and at most an eighth of the byte
    /// limit so that evicting one segment frees at most an eighth of the cache.
    pub fn max_segment_bytes(mut self, bytes: u64) -> Self {
        self.max_segment_bytes = bytes;
        self
    }

    /// Live entries from which writers keep the persisted hash table (`seg-table.hix`,
    /// `docs/disk-format.md`) that lets an open serve its first hit without reading the index
    /// files. Below it, reading the index files costs less than the table's pages on disk
    /// (about 1 ms per 8k entries), so no table is kept. Default 4096.
    pub fn open_table_min_entries(mut self, entries: u64) -> Self {
        self.open_table_min_entries = entries;
        self
    }

    /// Bytes of stores waiting for the write-behind thread; past this, stores are not
    /// persisted (they stay in memory). Default 64 MiB.
    pub fn write_queue_bytes(mut self, bytes: u64) -> Self {
        self.write_queue_bytes = bytes;
        self
    }

    /// Fill the memory tier from the lower tiers in the background after opening. Default
    /// `true`.
    pub fn preload(mut self, on: bool) -> Self {
        self.preload = on;
        self
    }

    /// Start the preload (and the write-behind thread) at the cache's first use instead of
    /// as it opens: its first lookup, store, removal, clear or compaction,
    /// [`Cache::start_preload`], or [`Cache::wait_for_preload`]. For a cache opened ahead
    /// of work whose own reads the preload would slow, and used right after it: a GL driver
    /// creating its context (on slow storage every read of the process queues behind the
    /// preload's, and the driver reads its libraries and its own cache then). A cache with
    /// a tier that has a read budget still starts them as it opens (its reader hands late
    /// values to the writer). Default `false`.
    pub fn preload_at_first_use(mut self, on: bool) -> Self {
        self.preload_at_first_use = on;
        self
    }

    /// Who may use the directories and files gpucache creates: [`DirAccess::Private`]
    /// (directories 0700, files 0600, whatever the umask) or [`DirAccess::Group`] (0770 and
    /// 0660, keeping the parent's setgid bit: a cache shared by a group on purpose). An
    /// existing directory keeps its mode, except that a private cache's own directory owned
    /// by this user loses group and other access. Files are 0660 in a directory whose group
    /// has full access, else 0600. Default [`DirAccess::Private`].
    pub fn dir_access(mut self, access: DirAccess) -> Self {
        self.dir_access = access;
        self
    }

    /// Use a cache directory owned by another user (not this process's effective user, nor
    /// root). That user can read what is stored and plant entries that a driver then loads,
    /// so by default [`open`](Self::open) refuses it with [`Error::ForeignOwner`], and a
    /// directory replaced by another user's while in use is no longer written. Default
    /// `false`.
    pub fn allow_foreign_owner(mut self, allow: bool) -> Self {
        self.allow_foreign_owner = allow;
        self
    }

    /// Adds a tier below the disk tier (below the tiers added before it): a remote tier
    /// shared by a fleet, say. See [`crate::tier`]. Default none.
    pub fn tier(mut self, tier: Arc<dyn Tier>) -> Self {
        self.tiers.push(tier);
        self
    }

    /// The directory this builder's cache lives in (the identity's subdirectory for a
    /// driver-versioned cache).
    pub fn resolved_directory(&self) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        Some(if self.identity.driver_versioned() {
            identity_subdir(dir, &self.identity)
        } else {
            dir.clone()
        })
    }

    /// Opens the cache. Fails for invalid settings and, unless
    /// [`allow_foreign_owner`](Self::allow_foreign_owner), for a directory owned by another
    /// user ([`Error::ForeignOwner`]); any other directory that cannot be used leaves a cache
    /// without a disk tier whose [`Cache::disk_error`] says why.
    pub fn open(self) -> Result<Cache> {
        if self.identity.bytes().len() > MAX_IDENTITY_LEN {
            return Err(Error::InvalidArgument(format!(
                "an identity of {} bytes is longer than the limit of {MAX_IDENTITY_LEN}",
                self.identity.bytes().len()
            )));
        }
        if self.dir.is_some() && self.max_disk_bytes < 4096 {
            return Err(Error::InvalidArgument(
                "max_disk_bytes must be at least 4096".into(),
            ));
        }
        // The cache directory's `stat` for the owner check also serves the disk tier's open.
        let (mut dir_stat, mut dir_fd) = (None, DirHandle::default());
        if let (Some(root), Some(dir), false) = (
            &self.dir,
            self.resolved_directory(),
            self.allow_foreign_owner,
        ) {
            if *root != dir {
                check_owner(&[root])?;
            }
            (dir_stat, dir_fd) = check_owner_open(&dir)?;
        }
        let memory = Arc::new(self.memory.clone().build()?);
        let has_lower = self.dir.is_some() || !self.tiers.is_empty();
        let mut cache = Cache {
            max_value_size: match self.max_value_size {
                Some(limit) => limit,
                None if has_lower => u64::MAX,
                None => memory.max_value_size(),
            },
            max_entry_len: u64::MAX,
            memory,
            identity: self.identity.clone(),
            evicts_memory: has_lower,
            capacity_gate: Mutex::new(()),
            disk: None,
            lower: Vec::new(),
            background: OnceLock::new(),
            preload_enabled: self.preload,
            write_queue_bytes: self.write_queue_bytes,
            preloaded: Arc::new(Counter::new()),
            pending: Arc::new(Pending::default()),
            pending_hits: Counter::new(),
            looked_up: AtomicBool::new(false),
            disk_error: None,
        };
        let mut tiers: Vec<Arc<dyn Tier>> = Vec::new();
        if let Some(dir) = self.resolved_directory() {
            let cfg = DiskConfig {
                dir_stat,
                dir_fd,
                ..self.disk_config(dir)
            };
            match DiskTier::open(cfg) {
                Ok(disk) => {
                    let disk = Arc::new(disk);
                    cache.max_entry_len = disk.max_entry_len();
                    tiers.push(Arc::clone(&disk) as Arc<dyn Tier>);
                    cache.disk = Some(disk);
                }
                Err(e) => {
                    let message = format!("disk tier unavailable, memory only: {e}");
                    tracing::warn!(target: "gpucache", "{message}");
                    cache.disk_error = Some(message);
                }
            }
        }
        tiers.extend(self.tiers.iter().cloned());
        cache.start(tiers, self.preload_at_first_use);
        Ok(cache)
    }

    fn disk_config(&self, dir: PathBuf) -> DiskConfig {
        DiskConfig {
            dir,
            identity: self.identity.clone(),
            max_bytes: self.max_disk_bytes,
            max_entries: self.max_disk_entries,
            segment_bytes: self
                .max_segment_bytes
                .min(self.max_disk_bytes / 8)
                .clamp(4096, u64::from(u32::MAX)),
            access: self.dir_access,
            allow_foreign_owner: self.allow_foreign_owner,
            table_min_entries: self.open_table_min_entries,
            dir_stat: None,
            dir_fd: DirHandle::default(),
        }
    }
}
