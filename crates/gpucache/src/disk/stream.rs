//! Metadata streams: small files that front ends keep in a cache directory beside the
//! entries (the EGL blob cache's call counters, the program cache's histograms).
//!
//! A stream belongs to the directory: it is written only under the directory's exclusive
//! lock and only while the directory's meta file names the writer's identity, and it is
//! removed with the entries by a clear or an identity wipe. Its bytes are an envelope
//! around the front end's body:
//!
//! ```text
//! magic[8] = "GPUC" tag[4]   version:u32   reserved:u32 (0)   body[n]   crc32c:u32
//! ```
//!
//! (the CRC covers everything before it). A stream is replaced whole, by rename, so a
//! reader sees an old or a new file and needs no lock. It is not fsynced: a stream is
//! advisory, and a file torn by a power cut fails its CRC and starts again.

use std::fs::{self, File, TryLockError};
use std::io::{self, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::access;
use super::dir;
use crate::codec::{strip_crc32c, FormatError, LeReader, LeWriter};
use crate::{Error, Identity, Result};

/// Largest stream accepted, in bytes.
pub const MAX_STREAM_LEN: u64 = 16 << 20;
const ENVELOPE_HEADER_LEN: usize = 16;

/// Names a metadata stream and its format: the file name in the cache directory, a 4-byte
/// tag that completes its magic (`GPUC` + tag) and the front end's format version. A file
/// with another tag or version is reported as such and replaced by the next update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetadataStream {
    name: &'static str,
    tag: [u8; 4],
    version: u32,
}

impl MetadataStream {
    /// A stream named `name`: 1 to 64 lowercase letters, digits and dashes, starting with a
    /// letter, not `meta`, `lock`, `seg-*` or `id-*` (checked when it is read or updated).
    pub const fn new(name: &'static str, tag: [u8; 4], version: u32) -> Self {
        Self { name, tag, version }
    }

    /// The file name.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The format version written.
    pub const fn version(&self) -> u32 {
        self.version
    }

    /// The stream's file in the cache directory `dir`.
    pub fn path(&self, dir: &Path) -> PathBuf {
        dir.join(self.name)
    }

    fn magic(&self) -> [u8; 8] {
        let mut m = *b"GPUC\0\0\0\0";
        m[4..].copy_from_slice(&self.tag);
        m
    }

    fn check_name(&self) -> Result<()> {
        if dir::is_stream_name(self.name) {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{:?} cannot name a metadata stream",
                self.name
            )))
        }
    }

    /// The stream's body in the cache directory `dir`: `Ok(None)` when there is none. Takes
    /// no lock and writes nothing. Errors: [`Error::Io`] when the file cannot be read (or is
    /// not a regular file, which is never opened), [`Error::Corrupt`] when its bytes fail
    /// the envelope's checks.
    pub fn read(&self, dir: &Path) -> Result<Option<Vec<u8>>> {
        self.check_name()?;
        let path = self.path(dir);
        match fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() => {}
            // Opening a FIFO or a device could block or have effects.
            Ok(_) => {
                return Err(Error::Io(io::Error::new(
                    ErrorKind::InvalidData,
                    format!("{}: not a regular file", path.display()),
                )))
            }
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut bytes = Vec::new();
        file.take(MAX_STREAM_LEN + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > MAX_STREAM_LEN {
            return Err(FormatError::Invalid("metadata stream length").into());
        }
        Ok(Some(self.decode(&bytes)?.to_vec()))
    }

    /// The body of a stream file's bytes, after checking its magic, version and CRC.
    pub fn decode<'b>(&self, bytes: &'b [u8]) -> std::result::Result<&'b [u8], FormatError> {
        let mut r = LeReader::new(bytes);
        if r.array::<8>()? != self.magic() {
            return Err(FormatError::BadMagic);
        }
        let version = r.u32()?;
        if version != self.version {
            return Err(FormatError::Version(version));
        }
        let checked = strip_crc32c(bytes)?;
        checked
            .get(ENVELOPE_HEADER_LEN..)
            .ok_or(FormatError::Truncated)
    }

    /// The bytes of a stream file holding `body`.
    pub fn encode(&self, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(ENVELOPE_HEADER_LEN + body.len() + 4);
        LeWriter::new(&mut out)
            .bytes(&self.magic())
            .u32(self.version)
            .u32(0)
            .bytes(body)
            .crc32c_from(0);
        out
    }

    /// Replaces the stream's body with `f(current body)` in the cache directory `dir`, under
    /// the directory's exclusive lock (waiting at most `wait` for it: a reader such as
    /// `gpucache export` may hold it shared for long), and only while the directory belongs
    /// to `identity`. A current file that fails its checks is logged and passed as `None`.
    pub fn update(
        &self,
        dir: &Path,
        identity: &Identity,
        wait: Duration,
        f: impl FnOnce(Option<Vec<u8>>) -> Vec<u8>,
    ) -> Result<()> {
        self.check_name()?;
        let (lock, writable) = dir::open_lock(dir)?;
        if !writable {
            return Err(Error::Io(io::Error::new(
                ErrorKind::PermissionDenied,
                "the cache directory is read-only",
            )));
        }
        lock_within(&lock, wait)?;
        // Under the lock: the directory is ours (not wiped for another identity, not
        // removed) and nobody else is updating the stream.
        match dir::read_meta(dir)? {
            Some(meta) if meta == *identity => {}
            Some(_) => {
                return Err(Error::Io(io::Error::other(
                    "the directory now belongs to another identity",
                )))
            }
            None => {
                return Err(Error::Io(io::Error::other(
                    "the directory has no meta file",
                )))
            }
        }
        let current = match self.read(dir) {
            Ok(body) => body,
            Err(Error::Io(e)) => return Err(Error::Io(e)),
            Err(e) => {
                tracing::warn!(
                    target: "gpucache",
                    "{} in {}: {e}; replacing it",
                    self.name,
                    dir.display()
                );
                None
            }
        };
        let body = f(current);
        write_replacing(&self.path(dir), &self.encode(&body))?;
        Ok(())
        // The lock is released when `lock` is closed.
    }
}

/// Takes the exclusive lock, waiting at most `wait`.
fn lock_within(lock: &File, wait: Duration) -> io::Result<()> {
    let deadline = Instant::now() + wait;
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(()),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(TryLockError::WouldBlock) => {
                return Err(io::Error::new(
                    ErrorKind::WouldBlock,
                    "the directory lock stayed busy",
                ))
            }
            Err(TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// Writes `bytes` to a temporary file and renames it over `path`.
fn write_replacing(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp.{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let result = (|| {
        let mut f = access::create_file(&tmp)?;
        f.write_all(bytes)?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = dir::remove_if_present(&tmp);
    }
    result
}

/// A temporary file older than this is stale whoever wrote it: no write of a stream, a meta
/// file or an index takes that long.
pub(crate) const STALE_TEMP_AGE: Duration = Duration::from_secs(10 * 60);

/// Removes the temporary files (`<name>.tmp.<pid>`) that killed processes left in the cache
/// directory `dir`: those of a stream, the meta file or an index file (never anyone else's
/// file) whose writer is no longer running or that are older than `max_age`. Called under
/// the directory's exclusive lock, which every writer of such a file holds while it exists,
/// so none of them is in use; the pid and age tests only spare files written by some other
/// program. Returns the number of files removed.
pub(crate) fn remove_stale_temp_files(dir: &Path, max_age: Duration) -> io::Result<u64> {
    let mut removed = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(temp_file_pid) else {
            continue;
        };
        let Ok(meta) = entry.metadata() else {
            continue; // Gone meanwhile.
        };
        let old = meta
            .modified()
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > max_age);
        if meta.is_file() && (old || process_is_gone(pid)) {
            match dir::remove_if_present(&entry.path()) {
                Ok(()) => removed += 1,
                // Someone else's file in a shared directory, say: left, and the rest swept.
                Err(e) => tracing::warn!(
                    target: "gpucache",
                    "cannot remove stale {}: {e}",
                    entry.path().display()
                ),
            }
        }
    }
    if removed > 0 {
        tracing::info!(
            target: "gpucache",
            "removed {removed} temporary files left by killed processes in {}",
            dir.display()
        );
    }
    Ok(removed)
}

/// The pid in the name of a temporary file that gpucache writes in a cache directory:
/// `meta`, a stream name or a segment's index file, then `.tmp.<pid>`.
fn temp_file_pid(name: &str) -> Option<u32> {
    let (base, pid) = name.rsplit_once(".tmp.")?;
    let ours = base == dir::META_FILE
        || base == super::table::TABLE_FILE
        || dir::is_stream_name(base)
        || base
            .strip_prefix("seg-")
            .and_then(|b| b.strip_suffix(".idx"))
            .is_some_and(|hex| hex.len() == 8 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
    let digits = !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit());
    (ours && digits).then(|| pid.parse().ok()).flatten()
}

/// Whether process `pid` has certainly exited: `/proc` is mounted and has no entry for it.
/// Where that cannot be told, only the age bound applies.
fn process_is_gone(pid: u32) -> bool {
    let proc = Path::new("/proc");
    proc.join("self").exists() && !proc.join(pid.to_string()).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: MetadataStream = MetadataStream::new("test-stream", *b"TEST", 3);

    fn cache_dir(identity: &Identity) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        dir::write_meta(dir.path(), identity).unwrap();
        dir
    }

    #[test]
    fn updates_round_trip_and_are_checked() {
        let id = Identity::new(b"gpu".to_vec());
        let dir = cache_dir(&id);
        assert_eq!(STREAM.read(dir.path()).unwrap(), None);
        let wait = Duration::from_secs(1);
        STREAM
            .update(dir.path(), &id, wait, |old| {
                assert_eq!(old, None);
                b"one".to_vec()
            })
            .unwrap();
        STREAM
            .update(dir.path(), &id, wait, |old| {
                let mut b = old.unwrap();
                b.extend_from_slice(b"+two");
                b
            })
            .unwrap();
        assert_eq!(STREAM.read(dir.path()).unwrap().unwrap(), b"one+two");

        // Another identity owns the directory now: no update.
        let other = Identity::new(b"other".to_vec());
        assert!(STREAM
            .update(dir.path(), &other, wait, |_| Vec::new())
            .is_err());

        // Every damage is reported, never returned as a body.
        let path = STREAM.path(dir.path());
        let good = fs::read(&path).unwrap();
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            fs::write(&path, &bad).unwrap();
            assert!(STREAM.read(dir.path()).is_err(), "byte {at}");
        }
        fs::write(&path, &good[..good.len() - 1]).unwrap();
        assert!(matches!(STREAM.read(dir.path()), Err(Error::Corrupt(_))));
        // A damaged file is replaced by the next update.
        STREAM
            .update(dir.path(), &id, wait, |old| {
                assert_eq!(old, None);
                b"fresh".to_vec()
            })
            .unwrap();
        assert_eq!(STREAM.read(dir.path()).unwrap().unwrap(), b"fresh");

        // A wipe removes streams and leaves other people's files alone.
        fs::write(dir.path().join("notes"), b"mine").unwrap();
        dir::remove_contents(dir.path()).unwrap();
        assert_eq!(STREAM.read(dir.path()).unwrap(), None);
        assert!(dir.path().join("notes").exists());
        assert!(dir.path().join("meta").exists());
    }

    #[test]
    fn bad_names_and_special_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "meta",
            "lock",
            "seg-00000001.dat",
            "id-0",
            "Upper",
            "a.b",
            "",
        ] {
            let s = MetadataStream::new(name, *b"TEST", 1);
            assert!(s.read(dir.path()).is_err(), "{name:?}");
        }
        fs::create_dir(STREAM.path(dir.path())).unwrap();
        assert!(matches!(STREAM.read(dir.path()), Err(Error::Io(_))));
    }
}
