//! The blob cache's diagnostics, persisted in its directory: the `blob-cache-stats`
//! metadata stream.
//!
//! Each [`BlobCache`](super::BlobCache) with a directory adds, on `flush()` and when it is
//! dropped, what it counted since its last update to the stream's lifetime totals, and
//! records its own totals as the last process's. The engine runs the update under the
//! directory's exclusive lock (so `clear` and identity wipes, which remove the stream, never
//! interleave with it) and replaces the file by rename, so a reader sees a whole old or a
//! whole new file; a CRC32C makes any other damage detectable ([`MetadataStream`]).
//! `gpucache stats` shows it. `docs/blob-cache-stats.md` describes the bytes.
//!
//! A missing, corrupt or foreign file never breaks the cache: reading it fails with an
//! [`Error`](crate::Error), and the next update starts the totals afresh.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use crate::codec::{FormatError, LeReader, LeWriter};
use crate::{Identity, MetadataStream, Result};

/// The stream: file `blob-cache-stats`, magic `GPUCEGLS`, version 1. A file of another
/// version is replaced by the next update.
pub const STATS_STREAM: MetadataStream = MetadataStream::new("blob-cache-stats", *b"EGLS", 1);
/// Format version of the diagnostics file; a file of another version is replaced.
pub const STATS_FORMAT_VERSION: u32 = STATS_STREAM.version();
/// Name of the diagnostics file inside a blob cache's directory.
pub const STATS_FILE: &str = STATS_STREAM.name();
/// Size of the diagnostics file, in bytes.
pub const STATS_FILE_LEN: usize = 176;
/// Size of the body inside the stream's envelope.
const BODY_LEN: usize = STATS_FILE_LEN - 20;

const FLAG_MISS_ON_OVERSIZE: u32 = 1;
/// Longest wait for the directory lock before an update gives up (and is retried later):
/// a reader may hold it for long (`gpucache export`), and the caller may be a driver
/// shutting down.
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// Counts of blob-cache calls. `gets = hits + misses + gets_buffer_too_small`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlobCounters {
    /// `get` calls (not counting calls while disabled).
    pub gets: u64,
    /// `get` calls that copied a value into the caller's buffer.
    pub hits: u64,
    /// `get` calls that found no value (absent key, or a key longer than the limit).
    pub misses: u64,
    /// `get` calls that found a value larger than the caller's buffer.
    pub gets_buffer_too_small: u64,
    /// `set` calls (not counting calls while disabled), dropped ones included.
    pub sets: u64,
    /// `set` calls dropped: key or value too large, or an empty value.
    pub sets_dropped: u64,
    /// `set` and `get` calls ignored because the driver-managed cache was disabled.
    pub calls_while_disabled: u64,
}

impl BlobCounters {
    const COUNT: usize = 7;

    /// `hits / gets` in percent; `None` before the first `get`.
    pub fn hit_rate_percent(&self) -> Option<f64> {
        (self.gets > 0).then(|| self.hits as f64 * 100.0 / self.gets as f64)
    }

    fn to_array(self) -> [u64; Self::COUNT] {
        [
            self.gets,
            self.hits,
            self.misses,
            self.gets_buffer_too_small,
            self.sets,
            self.sets_dropped,
            self.calls_while_disabled,
        ]
    }

    fn from_array(a: [u64; Self::COUNT]) -> Self {
        let [gets, hits, misses, gets_buffer_too_small, sets, sets_dropped, calls_while_disabled] =
            a;
        Self {
            gets,
            hits,
            misses,
            gets_buffer_too_small,
            sets,
            sets_dropped,
            calls_while_disabled,
        }
    }

    fn zip(self, other: Self, f: impl Fn(u64, u64) -> u64) -> Self {
        let (a, b) = (self.to_array(), other.to_array());
        Self::from_array(std::array::from_fn(|i| f(a[i], b[i])))
    }

    pub(crate) fn plus(self, other: Self) -> Self {
        self.zip(other, u64::saturating_add)
    }

    pub(crate) fn minus(self, other: Self) -> Self {
        self.zip(other, u64::saturating_sub)
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.to_array().iter().all(|&n| n == 0)
    }
}

/// The last process (strictly, the last [`BlobCache`](super::BlobCache)) that updated the
/// file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LastProcess {
    /// Its process id.
    pub pid: u32,
    /// Whether miss-on-oversize was on at its update.
    pub miss_on_oversize: bool,
    /// When its blob cache was opened (seconds since the Unix epoch).
    pub started_unix_s: u64,
    /// When it updated the file (seconds since the Unix epoch).
    pub updated_unix_s: u64,
    /// Its own totals, from opening to that update.
    pub counters: BlobCounters,
}

/// The contents of a `blob-cache-stats` file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PersistedBlobStats {
    /// When the totals started: the file's creation, or its reset by `clear` or a wipe
    /// (seconds since the Unix epoch).
    pub since_unix_s: u64,
    /// Updates merged into the totals.
    pub updates: u64,
    /// Every process's counts since `since_unix_s`.
    pub lifetime: BlobCounters,
    /// The last process to update the file.
    pub last: LastProcess,
}

impl PersistedBlobStats {
    /// The file's bytes: see `docs/blob-cache-stats.md`.
    pub fn encode(&self) -> [u8; STATS_FILE_LEN] {
        STATS_STREAM
            .encode(&self.body())
            .try_into()
            .expect("the layout is 176 bytes")
    }

    /// The stream's body: the file without its envelope.
    fn body(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(BODY_LEN);
        let flags = if self.last.miss_on_oversize {
            FLAG_MISS_ON_OVERSIZE
        } else {
            0
        };
        let mut w = LeWriter::new(&mut body);
        w.u64(self.since_unix_s).u64(self.updates);
        put_counters(&mut w, &self.lifetime);
        w.u32(self.last.pid)
            .u32(flags)
            .u64(self.last.started_unix_s)
            .u64(self.last.updated_unix_s);
        put_counters(&mut w, &self.last.counters);
        w.u32(0); // Reserved.
        body
    }

    /// Decodes and checks a whole file's bytes. Unknown flag bits are ignored.
    pub fn decode(b: &[u8]) -> Result<Self> {
        Self::decode_body(STATS_STREAM.decode(b)?)
    }

    fn decode_body(body: &[u8]) -> Result<Self> {
        if body.len() != BODY_LEN {
            return Err(FormatError::Invalid("blob-cache-stats length").into());
        }
        let mut r = LeReader::new(body);
        let since_unix_s = r.u64()?;
        let updates = r.u64()?;
        let lifetime = get_counters(&mut r)?;
        let (pid, flags) = (r.u32()?, r.u32()?);
        let (started_unix_s, updated_unix_s) = (r.u64()?, r.u64()?);
        let counters = get_counters(&mut r)?;
        Ok(Self {
            since_unix_s,
            updates,
            lifetime,
            last: LastProcess {
                pid,
                miss_on_oversize: flags & FLAG_MISS_ON_OVERSIZE != 0,
                started_unix_s,
                updated_unix_s,
                counters,
            },
        })
    }
}

fn put_counters(w: &mut LeWriter<'_>, c: &BlobCounters) {
    for v in c.to_array() {
        w.u64(v);
    }
}

fn get_counters(r: &mut LeReader<'_>) -> std::result::Result<BlobCounters, FormatError> {
    let mut a = [0u64; BlobCounters::COUNT];
    for v in &mut a {
        *v = r.u64()?;
    }
    Ok(BlobCounters::from_array(a))
}

/// Reads the diagnostics stream of the blob cache directory `dir`: `Ok(None)` if there is
/// none. Takes no lock (the file is only ever replaced whole) and writes nothing. Errors:
/// [`Error::Io`](crate::Error::Io) when it cannot be read, [`Error::Corrupt`](crate::Error::Corrupt)
/// when its bytes fail the checks.
pub fn read_persisted_stats(dir: &Path) -> Result<Option<PersistedBlobStats>> {
    STATS_STREAM
        .read(dir)?
        .map(|body| PersistedBlobStats::decode_body(&body))
        .transpose()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What a [`Persister`] has written so far.
#[derive(Debug, Default)]
struct Written {
    /// The totals added to the file so far (the baseline of the next delta).
    counters: BlobCounters,
    /// The miss-on-oversize setting of the last update; `None` before the first.
    miss_on_oversize: Option<bool>,
    /// Why the last update failed, if it did.
    error: Option<String>,
}

/// Adds a blob cache's counts to its directory's diagnostics stream.
#[derive(Debug)]
pub(crate) struct Persister {
    dir: PathBuf,
    identity: Identity,
    started_unix_s: u64,
    written: Mutex<Written>,
}

impl Persister {
    /// For the cache directory `dir`, which belongs to `identity`.
    pub(crate) fn new(dir: PathBuf, identity: Identity) -> Self {
        Self {
            dir,
            identity,
            started_unix_s: unix_now(),
            written: Mutex::new(Written::default()),
        }
    }

    /// Adds `now - (what was added before)` to the stream and records `now` as this
    /// process's totals. Nothing is written when nothing changed. On failure nothing is
    /// lost: the delta is added by the next successful update.
    pub(crate) fn persist(&self, now: BlobCounters, miss_on_oversize: bool) -> Result<()> {
        let mut written = self.written.lock();
        let delta = now.minus(written.counters);
        let unchanged = match written.miss_on_oversize {
            Some(flag) => flag == miss_on_oversize,
            None => now.is_zero(),
        };
        if delta.is_zero() && unchanged {
            return Ok(());
        }
        match self.update(delta, now, miss_on_oversize) {
            Ok(()) => {
                written.counters = now;
                written.miss_on_oversize = Some(miss_on_oversize);
                written.error = None;
                Ok(())
            }
            Err(e) => {
                let message = format!(
                    "blob cache diagnostics not persisted in {}: {e}",
                    self.dir.display()
                );
                if written.error.as_deref() != Some(&message) {
                    tracing::warn!(target: "gpucache", "{message}");
                }
                written.error = Some(message);
                Err(e)
            }
        }
    }

    /// After the directory was cleared (which removes the stream): what was counted before
    /// the clear is not added to the fresh totals.
    pub(crate) fn reset_baseline(&self, now: BlobCounters) {
        self.written.lock().counters = now;
    }

    /// Why the last update failed, if it did.
    pub(crate) fn error(&self) -> Option<String> {
        self.written.lock().error.clone()
    }

    fn update(&self, delta: BlobCounters, now: BlobCounters, flag: bool) -> Result<()> {
        STATS_STREAM.update(&self.dir, &self.identity, LOCK_WAIT, |old| {
            let time = unix_now();
            // A stream that fails its checks restarts its totals (logged).
            let mut stats = match old.map(|body| PersistedBlobStats::decode_body(&body)) {
                Some(Ok(stats)) => stats,
                Some(Err(e)) => {
                    tracing::warn!(target: "gpucache", "{STATS_FILE}: {e}; starting afresh");
                    PersistedBlobStats::default()
                }
                None => PersistedBlobStats::default(),
            };
            if stats.updates == 0 {
                stats.since_unix_s = time;
            }
            stats.updates = stats.updates.saturating_add(1);
            stats.lifetime = stats.lifetime.plus(delta);
            stats.last = LastProcess {
                pid: std::process::id(),
                miss_on_oversize: flag,
                started_unix_s: self.started_unix_s,
                updated_unix_s: time,
                counters: now,
            };
            stats.body()
        })
    }
}

#[cfg(test)]
mod tests;
