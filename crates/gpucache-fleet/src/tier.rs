//! The fleet tier: [`FleetTier`], built by [`FleetBuilder`].

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gpucache::tier::{PreloadSink, Tier, TierStats, WriteContext, WriteOp};
use gpucache::{Identity, Lookup};
use parking_lot::Mutex;

use crate::conn::{Link, Target, Unavailable};
use crate::entry;
use crate::error::{Error, Result};
use crate::key::{FleetKey, KeyRing};
use crate::names::{key_hash, Names};
use crate::ops::{self, Pulled};
use crate::push::{self, Item, PushQueue};
use crate::stats::{Counters, FleetStats};
use crate::url::FleetUrl;

/// Entries fetched per round trip by the bulk pull.
const PULL_CHUNK: usize = 128;

/// Settings of a fleet tier; each setter states its default.
#[derive(Clone, Debug)]
pub struct FleetBuilder {
    url: String,
    identity: Identity,
    key_file: Option<PathBuf>,
    previous_key_file: Option<PathBuf>,
    key: Option<FleetKey>,
    previous_key: Option<FleetKey>,
    read_budget: Duration,
    io_timeout: Duration,
    queue_bytes: u64,
    flush_timeout: Duration,
    max_value_size: usize,
    pull_at_open: bool,
    stats_dir: Option<PathBuf>,
}

impl FleetBuilder {
    /// A tier on the fleet at `url` (`redis://host:port`, `rediss://...`, or
    /// `redis+cluster://h1:p1,h2:p2,...`: [`FleetUrl`]) for caches of `identity`: give it
    /// the identity the cache is opened with (the disk directory's), since entries are
    /// filed and checked under it.
    pub fn new(url: impl Into<String>, identity: Identity) -> Self {
        Self {
            url: url.into(),
            identity,
            key_file: None,
            previous_key_file: None,
            key: None,
            previous_key: None,
            read_budget: Duration::from_millis(2),
            io_timeout: Duration::from_millis(500),
            queue_bytes: 64 << 20,
            flush_timeout: Duration::from_secs(2),
            max_value_size: 16 << 20,
            pull_at_open: true,
            stats_dir: None,
        }
    }

    /// A builder from the environment, or `None` when `GPUCACHE_FLEET_URL` is unset or
    /// empty: `GPUCACHE_FLEET_URL` (the URL), `GPUCACHE_FLEET_KEY_FILE` (required with a URL),
    /// `GPUCACHE_FLEET_PREVIOUS_KEY_FILE` (optional, during a key rotation) and
    /// `GPUCACHE_FLEET_READ_BUDGET_MS` (optional, milliseconds, fractions allowed).
    pub fn from_env(identity: Identity) -> Result<Option<Self>> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let Some(url) = var("GPUCACHE_FLEET_URL") else {
            return Ok(None);
        };
        let url = url.to_string_lossy().into_owned();
        let key = var("GPUCACHE_FLEET_KEY_FILE").ok_or(Error::NoKey)?;
        let mut b = Self::new(url, identity).key_file(PathBuf::from(key));
        if let Some(prev) = var("GPUCACHE_FLEET_PREVIOUS_KEY_FILE") {
            b = b.previous_key_file(PathBuf::from(prev));
        }
        if let Some(ms) = var("GPUCACHE_FLEET_READ_BUDGET_MS") {
            let ms: f64 = ms
                .to_string_lossy()
                .trim()
                .parse()
                .map_err(|_| Error::BadUrl {
                    url: "GPUCACHE_FLEET_READ_BUDGET_MS".into(),
                    why: "not a number of milliseconds".into(),
                })?;
            b = b.read_budget(Duration::from_secs_f64(ms.clamp(0.0, 10_000.0) / 1000.0));
        }
        Ok(Some(b))
    }

    /// The file holding the fleet key that signs what this tier writes and checks what it
    /// reads: owner-only (`0600`), at least 32 bytes (`docs/fleet.md`). Required unless
    /// [`key`](Self::key) is given.
    pub fn key_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.key_file = Some(path.into());
        self
    }

    /// The previous fleet key's file, during a rotation: entries it signed are still
    /// accepted; nothing is signed with it. Default none.
    pub fn previous_key_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.previous_key_file = Some(path.into());
        self
    }

    /// The fleet key itself, instead of a file.
    pub fn key(mut self, key: FleetKey) -> Self {
        self.key = Some(key);
        self
    }

    /// The previous fleet key itself, instead of a file.
    pub fn previous_key(mut self, key: FleetKey) -> Self {
        self.previous_key = Some(key);
        self
    }

    /// Longest a lookup waits for the fleet before the cache answers a miss (the read goes
    /// on, and a late value is still put in memory). Default 2 ms.
    pub fn read_budget(mut self, budget: Duration) -> Self {
        self.read_budget = budget;
        self
    }

    /// Timeout of every connect, send and receive: a paused or unreachable server holds a
    /// background thread at most this long per attempt. Default 500 ms.
    pub fn io_timeout(mut self, timeout: Duration) -> Self {
        self.io_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Bytes of stores waiting to be pushed; stores beyond are dropped (and counted).
    /// Default 64 MiB.
    pub fn push_queue_bytes(mut self, bytes: u64) -> Self {
        self.queue_bytes = bytes;
        self
    }

    /// Longest a cache flush (and closing the cache) waits for the push queue to empty.
    /// Default 2 s.
    pub fn flush_timeout(mut self, timeout: Duration) -> Self {
        self.flush_timeout = timeout;
        self
    }

    /// Largest value accepted from the fleet; larger ones are rejected before anything is
    /// allocated for them. Default 16 MiB.
    pub fn max_value_size(mut self, bytes: usize) -> Self {
        self.max_value_size = bytes;
        self
    }

    /// Pull this identity's entries in bulk when the cache opens (on its preload thread).
    /// Default on.
    pub fn pull_at_open(mut self, on: bool) -> Self {
        self.pull_at_open = on;
        self
    }

    /// The cache's directory ([`Cache::directory`](gpucache::Cache::directory)), where the
    /// tier keeps its counters (the `fleet-stats` stream) on each flush and when it closes,
    /// for `gpucache stats DIR`. Default none: counters in memory only.
    pub fn stats_directory(mut self, dir: impl Into<PathBuf>) -> Self {
        self.stats_dir = Some(dir.into());
        self
    }

    /// Loads the keys, checks the URL and starts the push thread. Connects nothing yet: a
    /// server that is down is found by the first read, push or pull, and retried with
    /// backoff.
    pub fn build(self) -> Result<Arc<FleetTier>> {
        let url = FleetUrl::parse(&self.url)?;
        let current = match (self.key, &self.key_file) {
            (Some(k), _) => k,
            (None, Some(path)) => FleetKey::from_file(path)?,
            (None, None) => return Err(Error::NoKey),
        };
        let previous = match (self.previous_key, &self.previous_key_file) {
            (Some(k), _) => Some(k),
            (None, Some(path)) => Some(FleetKey::from_file(path)?),
            (None, None) => None,
        };
        let target = Target::new(&url, self.io_timeout)?;
        let shared = Arc::new(Shared {
            names: Names::new(self.identity.namespace()),
            identity: entry::identity_bytes(&self.identity),
            identity_text: describe(&self.identity),
            keys: KeyRing { current, previous },
            max_value: self.max_value_size,
            counters: Counters::default(),
            known: Mutex::new(HashMap::new()),
            known_bytes: AtomicU64::new(0),
            target,
            io_timeout: self.io_timeout,
        });
        let queue = Arc::new(PushQueue::new(self.queue_bytes));
        let pusher = {
            let (shared, queue) = (shared.clone(), queue.clone());
            let link = shared.link();
            std::thread::Builder::new()
                .name("gpucache-fleet-push".into())
                .spawn(move || push::run(shared, queue, link))?
        };
        Ok(Arc::new(FleetTier {
            reader: Mutex::new(shared.link()),
            shared,
            queue,
            pusher: Mutex::new(Some(pusher)),
            read_budget: self.read_budget,
            flush_timeout: self.flush_timeout,
            pull_at_open: self.pull_at_open,
            url: format!("{url:?}"),
            stats_dir: self.stats_dir,
            identity: self.identity,
            persisted: Mutex::new([0; 16]),
        }))
    }
}

/// The identity in words, as the fleet's info hash keeps it.
pub(crate) fn describe(identity: &Identity) -> String {
    format!(
        "{} (version {}{})",
        identity.display_bytes(),
        identity.version(),
        if identity.driver_versioned() {
            ", driver-versioned"
        } else {
            ""
        }
    )
}

/// What the tier knows the fleet holds for a key hash.
pub(crate) struct Known {
    pub digest: u64,
    pub bytes: u64,
}

/// State shared by the tier, its push thread and its pulls.
pub(crate) struct Shared {
    pub names: Names,
    pub identity: Vec<u8>,
    pub identity_text: String,
    pub keys: KeyRing,
    pub max_value: usize,
    pub counters: Counters,
    pub known: Mutex<HashMap<[u8; 16], Known>>,
    known_bytes: AtomicU64,
    target: Target,
    io_timeout: Duration,
}

impl Shared {
    pub(crate) fn link(&self) -> Link {
        Link::new(self.target.clone(), self.io_timeout)
    }

    /// Records that the fleet holds `hash` with a value of this digest.
    pub(crate) fn remember(
        &self,
        known: &mut HashMap<[u8; 16], Known>,
        hash: [u8; 16],
        digest: u64,
        bytes: usize,
    ) {
        let bytes = bytes as u64;
        if let Some(old) = known.insert(hash, Known { digest, bytes }) {
            self.known_bytes.fetch_sub(old.bytes, Ordering::Relaxed);
        }
        self.known_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

fn digest(value: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(value)
}

/// A tier below the disk tier, shared by a fleet of machines through Redis. Build it with
/// [`FleetBuilder`] and add it with [`CacheBuilder::tier`](gpucache::CacheBuilder::tier).
///
/// - Reads: one `GET`, on the cache's reader thread for this tier; the caller waits at most
///   the read budget. A server being waited out after a failure is not asked at all.
/// - Writes: stores are queued for the tier's push thread, which sends them in pipelined
///   batches; a key the fleet already holds with the same value is not sent again.
///   Removals and clears are local: the fleet keeps its entries (`docs/fleet.md`).
/// - Preload: at open, the identity's index and then its entries, in pipelined chunks,
///   verified, into the cache's memory and disk tiers.
/// - Every entry read is verified (MAC, identity, full key, lengths) before it is returned.
///
/// Dropping the tier sends what is queued (up to the flush timeout when the server answers)
/// and joins the push thread.
pub struct FleetTier {
    shared: Arc<Shared>,
    reader: Mutex<Link>,
    queue: Arc<PushQueue>,
    pusher: Mutex<Option<JoinHandle<()>>>,
    read_budget: Duration,
    flush_timeout: Duration,
    pull_at_open: bool,
    url: String,
    stats_dir: Option<PathBuf>,
    identity: Identity,
    /// The counts already added to the directory's `fleet-stats` totals.
    persisted: Mutex<[u64; 16]>,
}

impl std::fmt::Debug for FleetTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetTier")
            .field("url", &self.url)
            .field("namespace", &self.shared.names.ns())
            .finish_non_exhaustive()
    }
}

impl FleetTier {
    /// The tier's counters.
    pub fn fleet_stats(&self) -> FleetStats {
        let mut s = self.shared.counters.snapshot();
        s.known_entries = self.shared.known.lock().len() as u64;
        s.known_bytes = self.shared.known_bytes.load(Ordering::Relaxed);
        s.queued_bytes = self.queue.queued_bytes();
        s
    }

    /// The namespace this tier files entries under (32 hex digits).
    pub fn namespace(&self) -> &str {
        self.shared.names.ns()
    }

    /// Waits until every store queued so far has been sent (or dropped), at most `timeout`;
    /// returns whether the queue is empty.
    pub fn wait_for_push(&self, timeout: Duration) -> bool {
        self.queue.drain(timeout)
    }

    /// Adds the counts since the last call to the stats directory's `fleet-stats` totals.
    fn persist(&self) {
        let Some(dir) = &self.stats_dir else {
            return;
        };
        let mut done = self.persisted.lock();
        let now = crate::persist::values(&self.fleet_stats());
        if now == *done {
            return;
        }
        let mut delta = [0; 16];
        for (d, (n, p)) in delta.iter_mut().zip(now.iter().zip(done.iter())) {
            *d = n.saturating_sub(*p);
        }
        let error = self.shared.counters.last_error.lock().clone();
        match crate::persist::update(dir, &self.identity, &delta, &now, error) {
            Ok(()) => *done = now,
            Err(e) => tracing::debug!(target: "gpucache_fleet", "fleet-stats not written: {e}"),
        }
    }

    /// Pulls every entry of this identity, verified, into `sink` (until it returns
    /// `false`); returns the number handed over. What the tier's preload does.
    pub fn pull(&self, sink: &mut PreloadSink<'_>) -> u64 {
        let start = Instant::now();
        let n = pull(&self.shared, sink);
        let c = &self.shared.counters;
        c.pull_ms.add(start.elapsed().as_millis() as u64);
        c.pull_done.incr();
        n
    }
}

/// The bulk pull: index, then entries in pipelined chunks.
fn pull(shared: &Shared, sink: &mut PreloadSink<'_>) -> u64 {
    let c = &shared.counters;
    let mut link = shared.link();
    let conn = match link.conn() {
        Ok(conn) => conn,
        Err(e) => {
            c.connect_errors.incr();
            c.error(format!("fleet pull: cannot connect: {e:?}"));
            return 0;
        }
    };
    let hashes = match ops::index_members(conn, &shared.names) {
        Ok(h) => h,
        Err(e) => {
            c.read_errors.incr();
            c.error(format!("fleet pull: index: {e}"));
            return 0;
        }
    };
    let mut handed = 0;
    let mut stale = Vec::new();
    for chunk in hashes.chunks(PULL_CHUNK) {
        let conn = match link.conn() {
            Ok(conn) => conn,
            Err(_) => break,
        };
        let (keys, identity, max) = (&shared.keys, &shared.identity[..], shared.max_value);
        let results: Vec<Result<Pulled, redis::RedisError>> =
            match ops::fetch(conn, &shared.names, keys, identity, max, chunk) {
                Ok(all) => all.into_iter().map(Ok).collect(),
                Err(e) => {
                    c.read_errors.incr();
                    c.error(format!("fleet pull: {e}"));
                    if !conn.is_cluster() {
                        break;
                    }
                    // A cluster with a node down: what the other nodes hold still arrives.
                    link.reset();
                    match link.conn() {
                        Ok(conn) => {
                            ops::fetch_each(conn, &shared.names, keys, identity, max, chunk)
                        }
                        Err(_) => break,
                    }
                }
            };
        for (hash, result) in chunk.iter().zip(results) {
            match result {
                Ok(Pulled::Entry(key, value, size)) => {
                    shared.remember(&mut shared.known.lock(), *hash, digest(&value), size);
                    c.pulled.incr();
                    handed += 1;
                    if !sink(&key, &value) {
                        return handed;
                    }
                }
                Ok(Pulled::Gone) => stale.push(*hash),
                Ok(Pulled::Rejected(why)) => c.reject(why),
                Err(_) => c.read_errors.incr(),
            }
        }
    }
    if let Ok(conn) = link.conn() {
        // Entries evicted by the server's maxmemory policy leave their index members.
        let _ = ops::remove_members(conn, &shared.names, &stale);
    }
    handed
}

impl Tier for FleetTier {
    fn name(&self) -> &str {
        "fleet"
    }

    fn read(&self, key: &[u8]) -> Lookup {
        let s = &self.shared;
        let c = &s.counters;
        let hash = key_hash(key);
        let mut link = self.reader.lock();
        let conn = match link.conn() {
            Ok(conn) => conn,
            Err(Unavailable::BackingOff) => {
                c.reads_skipped.incr();
                return Lookup::Miss;
            }
            Err(Unavailable::Connect(e)) => {
                c.connect_errors.incr();
                c.error(format!("fleet read: cannot connect: {e}"));
                return Lookup::Miss;
            }
        };
        let got: redis::RedisResult<Option<Vec<u8>>> =
            conn.query(redis::cmd("GET").arg(s.names.entry(&hash)));
        match got {
            Ok(None) => {
                link.succeeded();
                c.misses.incr();
                Lookup::Miss
            }
            Ok(Some(bytes)) => {
                link.succeeded();
                match entry::decode(&s.keys, &s.identity, key, s.max_value, &bytes) {
                    Ok(value) => {
                        s.remember(&mut s.known.lock(), hash, digest(&value), bytes.len());
                        c.hits.incr();
                        Lookup::Hit(value.into())
                    }
                    Err(why) => {
                        c.reject(why);
                        Lookup::Miss
                    }
                }
            }
            Err(e) => {
                c.read_errors.incr();
                c.error(format!("fleet read: {e}"));
                link.failed(&e);
                Lookup::Miss
            }
        }
    }

    fn read_budget(&self) -> Option<Duration> {
        Some(self.read_budget)
    }

    fn write(&self, ops: &[WriteOp<'_>], ctx: &WriteContext<'_>) -> io::Result<()> {
        let s = &self.shared;
        for op in ops {
            match op {
                WriteOp::Put { key, value } => {
                    let hash = key_hash(key);
                    let digest = digest(value);
                    if s.known
                        .lock()
                        .get(&hash)
                        .is_some_and(|k| k.digest == digest)
                    {
                        s.counters.push_deduplicated.incr();
                        continue;
                    }
                    let item = Item {
                        hash,
                        key: (*key).clone(),
                        value: (*value).clone(),
                        digest,
                    };
                    if !self.queue.push(item) {
                        s.counters.push_dropped.incr();
                    }
                }
                // The fleet keeps its copy (other machines may use it); the next store of
                // the key is sent again.
                WriteOp::Remove { key } => {
                    if let Some(old) = s.known.lock().remove(&key_hash(key)) {
                        s.known_bytes.fetch_sub(old.bytes, Ordering::Relaxed);
                    }
                }
            }
        }
        if ctx.durable() {
            self.queue.drain(self.flush_timeout);
            self.persist();
        }
        Ok(())
    }

    fn clear(&self) -> io::Result<()> {
        // Local only: stores not yet sent are forgotten; the fleet keeps what it holds.
        self.queue.discard();
        Ok(())
    }

    fn preload(&self, sink: &mut PreloadSink<'_>) {
        if self.pull_at_open {
            self.pull(sink);
        }
    }

    fn stats(&self) -> TierStats {
        let f = self.fleet_stats();
        let mut t = TierStats::new("fleet");
        t.entries = f.known_entries;
        t.bytes = f.known_bytes;
        t.hits = f.hits;
        t.errors = f.errors();
        t.last_error = self.shared.counters.last_error.lock().clone();
        t
    }
}

impl Drop for FleetTier {
    fn drop(&mut self) {
        self.queue.drain(self.flush_timeout);
        self.queue.close();
        if let Some(handle) = self.pusher.lock().take() {
            let _ = handle.join();
        }
        self.persist();
    }
}
