//! The blob cache's diagnostics, persisted in its directory: the `blob-cache-stats` file.
//!
//! Each [`BlobCache`](super::BlobCache) with a directory adds, on `flush()` and when it is
//! dropped, what it counted since its last update to the file's lifetime totals, and records
//! its own totals as the last process's. The update runs under the directory's exclusive
//! lock (the one writers take for each batch, so `clear` and identity wipes, which remove the
//! file, never interleave with it) and replaces the file by rename, so a reader sees a whole
//! old or a whole new file; a CRC32C makes any other damage detectable. `gpucache stats`
//! shows the file. `docs/blob-cache-stats.md` describes the bytes.
//!
//! A missing, corrupt or foreign file never breaks the cache: reading it fails with a
//! [`BlobStatsError`], and the next update starts the totals afresh.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use crate::disk::dir;
use crate::disk::format::Meta;

/// Name of the diagnostics file inside a blob cache's directory.
pub const STATS_FILE: &str = dir::BLOB_STATS_FILE;
/// Format version of the diagnostics file; a file of another version is replaced.
pub const STATS_FORMAT_VERSION: u32 = 1;
/// Size of the diagnostics file, in bytes.
pub const STATS_FILE_LEN: usize = 176;

const MAGIC: [u8; 8] = *b"GPUCEGLS";
const FLAG_MISS_ON_OVERSIZE: u32 = 1;
/// Longest wait for the directory lock before an update gives up (and is retried later).
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

/// Why a `blob-cache-stats` file could not be read.
#[derive(Debug)]
#[non_exhaustive]
pub enum BlobStatsError {
    /// The file could not be read.
    Io(io::Error),
    /// The file has the wrong size (truncated, or not this format).
    Length(u64),
    /// The file does not start with the magic bytes.
    BadMagic,
    /// The file was written by another format version.
    Version(u32),
    /// The checksum does not match the bytes.
    Checksum,
}

impl fmt::Display for BlobStatsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "cannot read it: {e}"),
            Self::Length(n) => write!(f, "it is {n} bytes long, expected {STATS_FILE_LEN}"),
            Self::BadMagic => f.write_str("it is not a blob-cache stats file (bad magic)"),
            Self::Version(v) => write!(
                f,
                "it has format version {v}, this build reads {STATS_FORMAT_VERSION}"
            ),
            Self::Checksum => f.write_str("its checksum does not match (corrupt)"),
        }
    }
}

impl std::error::Error for BlobStatsError {}

impl PersistedBlobStats {
    /// The file's bytes: see `docs/blob-cache-stats.md`.
    pub fn encode(&self) -> [u8; STATS_FILE_LEN] {
        let mut b = [0u8; STATS_FILE_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        put32(&mut b, 8, STATS_FORMAT_VERSION);
        // 12..16 reserved.
        put64(&mut b, 16, self.since_unix_s);
        put64(&mut b, 24, self.updates);
        put_counters(&mut b, 32, &self.lifetime);
        put32(&mut b, 88, self.last.pid);
        let flags = if self.last.miss_on_oversize {
            FLAG_MISS_ON_OVERSIZE
        } else {
            0
        };
        put32(&mut b, 92, flags);
        put64(&mut b, 96, self.last.started_unix_s);
        put64(&mut b, 104, self.last.updated_unix_s);
        put_counters(&mut b, 112, &self.last.counters);
        // 168..172 reserved.
        let crc = crc32c::crc32c(&b[..172]);
        put32(&mut b, 172, crc);
        b
    }

    /// Decodes and checks a file's bytes. Unknown flag bits are ignored.
    pub fn decode(b: &[u8]) -> Result<Self, BlobStatsError> {
        if b.len() >= 12 && b[0..8] == MAGIC && get32(b, 8) != STATS_FORMAT_VERSION {
            return Err(BlobStatsError::Version(get32(b, 8)));
        }
        if b.len() != STATS_FILE_LEN {
            return Err(BlobStatsError::Length(b.len() as u64));
        }
        if b[0..8] != MAGIC {
            return Err(BlobStatsError::BadMagic);
        }
        if crc32c::crc32c(&b[..172]) != get32(b, 172) {
            return Err(BlobStatsError::Checksum);
        }
        Ok(Self {
            since_unix_s: get64(b, 16),
            updates: get64(b, 24),
            lifetime: get_counters(b, 32),
            last: LastProcess {
                pid: get32(b, 88),
                miss_on_oversize: get32(b, 92) & FLAG_MISS_ON_OVERSIZE != 0,
                started_unix_s: get64(b, 96),
                updated_unix_s: get64(b, 104),
                counters: get_counters(b, 112),
            },
        })
    }
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn get64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn put_counters(b: &mut [u8], at: usize, c: &BlobCounters) {
    for (i, v) in c.to_array().into_iter().enumerate() {
        put64(b, at + 8 * i, v);
    }
}

fn get_counters(b: &[u8], at: usize) -> BlobCounters {
    BlobCounters::from_array(std::array::from_fn(|i| get64(b, at + 8 * i)))
}

/// Reads the diagnostics file of the blob cache directory `dir`: `Ok(None)` if there is none.
/// Takes no lock (the file is only ever replaced whole) and writes nothing.
pub fn read_persisted_stats(dir: &Path) -> Result<Option<PersistedBlobStats>, BlobStatsError> {
    let path = dir.join(STATS_FILE);
    match fs::metadata(&path) {
        Ok(m) if m.is_file() => {}
        // Opening a FIFO or device could block or have effects: never opened.
        Ok(_) => {
            return Err(BlobStatsError::Io(io::Error::new(
                ErrorKind::InvalidData,
                "not a regular file",
            )))
        }
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(BlobStatsError::Io(e)),
    }
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(BlobStatsError::Io(e)),
    };
    let len = file.metadata().map_err(BlobStatsError::Io)?.len();
    if len > 4096 {
        // Far larger than any version of ours: not read at all.
        return Err(BlobStatsError::Length(len));
    }
    let mut bytes = Vec::with_capacity(STATS_FILE_LEN);
    file.take(4096)
        .read_to_end(&mut bytes)
        .map_err(BlobStatsError::Io)?;
    PersistedBlobStats::decode(&bytes).map(Some)
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

/// Adds a blob cache's counts to its directory's diagnostics file.
#[derive(Debug)]
pub(crate) struct Persister {
    dir: PathBuf,
    meta: Meta,
    started_unix_s: u64,
    written: Mutex<Written>,
}

impl Persister {
    /// For the cache directory `dir`, which belongs to `meta`.
    pub(crate) fn new(dir: PathBuf, meta: Meta) -> Self {
        Self {
            dir,
            meta,
            started_unix_s: unix_now(),
            written: Mutex::new(Written::default()),
        }
    }

    /// Adds `now - (what was added before)` to the file and records `now` as this process's
    /// totals. Nothing is written when nothing changed. On failure nothing is lost: the
    /// delta is added by the next successful update.
    pub(crate) fn persist(&self, now: BlobCounters, miss_on_oversize: bool) -> io::Result<()> {
        let mut written = self.written.lock();
        let delta = now.minus(written.counters);
        let unchanged = match written.miss_on_oversize {
            Some(flag) => flag == miss_on_oversize,
            None => now.is_zero(),
        };
        if delta.is_zero() && unchanged {
            return Ok(());
        }
        match self.update_file(delta, now, miss_on_oversize) {
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

    /// After the directory was cleared (which removes the file): what was counted before
    /// the clear is not added to the fresh totals.
    pub(crate) fn reset_baseline(&self, now: BlobCounters) {
        self.written.lock().counters = now;
    }

    /// Why the last update failed, if it did.
    pub(crate) fn error(&self) -> Option<String> {
        self.written.lock().error.clone()
    }

    fn update_file(&self, delta: BlobCounters, now: BlobCounters, flag: bool) -> io::Result<()> {
        let (lock, writable) = dir::open_lock(&self.dir)?;
        if !writable {
            return Err(io::Error::new(
                ErrorKind::PermissionDenied,
                "the cache directory is read-only",
            ));
        }
        lock_within(&lock, LOCK_WAIT)?;
        // Under the lock: the directory is ours (not wiped for another identity, not
        // removed) and nobody else is updating the file.
        match dir::read_meta(&self.dir)? {
            Some(meta) if meta == self.meta => {}
            Some(_) => {
                return Err(io::Error::other(
                    "the directory now belongs to another identity",
                ))
            }
            None => return Err(io::Error::other("the directory has no meta file")),
        }
        let time = unix_now();
        let mut stats = match read_persisted_stats(&self.dir) {
            Ok(Some(stats)) => stats,
            Ok(None) => PersistedBlobStats::default(),
            Err(BlobStatsError::Io(e)) => return Err(e),
            Err(e) => {
                tracing::warn!(
                    target: "gpucache",
                    "{} in {}: {e}; starting its totals afresh",
                    STATS_FILE,
                    self.dir.display()
                );
                PersistedBlobStats::default()
            }
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
        write_replacing(&self.dir, &stats.encode())
        // The lock is released when `lock` is closed.
    }
}

/// Takes the exclusive lock, waiting at most `wait`: a reader may hold the shared lock for a
/// long time (`gpucache export`), and the caller may be a driver shutting down.
fn lock_within(lock: &File, wait: Duration) -> io::Result<()> {
    let deadline = Instant::now() + wait;
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(()),
            Err(fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(fs::TryLockError::WouldBlock) => {
                return Err(io::Error::new(
                    ErrorKind::WouldBlock,
                    "the directory lock stayed busy; will retry at the next flush",
                ))
            }
            Err(fs::TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// Writes `bytes` to a temporary file and renames it over the stats file. Not fsynced: the
/// file is advisory, an fsync would cost every process exit a disk flush, and a file torn by
/// a power loss fails its CRC and is started again from zero.
fn write_replacing(dir: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{STATS_FILE}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        fs::rename(&tmp, dir.join(STATS_FILE))
    })();
    if result.is_err() {
        let _ = dir::remove_if_present(&tmp);
    }
    result
}

#[cfg(test)]
mod tests;
