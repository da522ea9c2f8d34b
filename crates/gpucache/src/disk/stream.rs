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
//! (the CRC covers everything before it). It is not fsynced: a stream is advisory, and a
//! file torn by a power cut fails its CRC and starts again. A reader needs no lock:
//! - A stream whose new bytes fit in one page and are no shorter than the file (the EGL
//!   counters at every process exit, the program cache's histograms as they fill) is
//!   overwritten, and extended, in place by one `pwrite`, which a killed writer cannot tear
//!   (the kernel copies a page whole; a shorter one would need a truncation after it). A reader that raced the write and fails
//!   the CRC reads again. Replacing the file instead costs about 1.5 ms on ext4: a rename
//!   over it writes the new file back, and freeing the old one's blocks waits as well.
//! - Any other is written to `<name>.tmp.<pid>` and put in place of the old file
//!   ([`dir::write_unsynced`]), so a reader sees the old file or the new one.

use std::fs::{self, File, TryLockError};
use std::io::{self, ErrorKind, Read};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::access;
use super::dir;
use crate::codec::{strip_crc32c, FormatError, LeReader, LeWriter};
use crate::{Error, Identity, Result};

/// Largest stream accepted, in bytes.
pub const MAX_STREAM_LEN: u64 = 16 << 20;
const ENVELOPE_HEADER_LEN: usize = 16;
/// Largest stream overwritten in place: one page on every system (a page may be larger).
const IN_PLACE_MAX_LEN: usize = 4096;
/// Reads of a stream that fails its checks before it is reported: another process may have
/// been overwriting it in place.
const READ_ATTEMPTS: u32 = 3;

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
        let mut attempt = 1;
        loop {
            match self.read_once(dir) {
                Err(Error::Corrupt(_)) if attempt < READ_ATTEMPTS => {
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(1));
                }
                result => return result,
            }
        }
    }

    fn read_once(&self, dir: &Path) -> Result<Option<Vec<u8>>> {
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
        // Room for the whole file, so that one read takes it: a stream overwritten in place
        // while it was read in pieces could mix two versions (and fail its CRC).
        let len = file.metadata()?.len().min(MAX_STREAM_LEN);
        let mut bytes = Vec::with_capacity(len as usize + 1);
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
        let path = self.path(dir);
        let bytes = self.encode(&body);
        if !overwrite_in_place(dir, &path, &bytes) {
            dir::write_unsynced(&path, &bytes)?;
        }
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

/// Overwrites the file `path` in the cache directory `dir` with `bytes` by one write, if
/// they fit in a page and the file is one that a replacement would be like: a regular file
/// no longer than they are (the write covers it whole), with no other link (a hard link
/// elsewhere, such as a snapshot or another directory, keeps its bytes) and the mode a new
/// file in `dir` gets. Returns whether it did. Anything else (no such file, a longer one, a
/// write that failed) is left to [`dir::write_unsynced`]: a failed one-page write changed
/// nothing, or wrote the whole page.
fn overwrite_in_place(dir: &Path, path: &Path, bytes: &[u8]) -> bool {
    use std::os::unix::fs::MetadataExt;
    if bytes.len() > IN_PLACE_MAX_LEN {
        return false;
    }
    // No symlink followed; O_NONBLOCK so that a FIFO put there cannot block the open.
    let file = fs::OpenOptions::new()
        .write(true)
        .custom_flags(IN_PLACE_OPEN_FLAGS)
        .open(path);
    let Ok(file) = file else {
        return false;
    };
    match file.metadata() {
        Ok(m)
            if m.is_file()
                && m.len() <= bytes.len() as u64
                && m.nlink() == 1
                && m.mode() & 0o777 == access::file_mode(dir) => {}
        _ => return false,
    }
    file.write_all_at(bytes, 0).is_ok()
}

const IN_PLACE_OPEN_FLAGS: i32 = rustix::fs::OFlags::NOFOLLOW
    .union(rustix::fs::OFlags::NONBLOCK)
    .union(rustix::fs::OFlags::NOCTTY)
    .bits() as i32;

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

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_shorter_stream_is_swapped_whole_and_one_as_long_or_longer_is_overwritten() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let id = Identity::new(b"gpu".to_vec());
        let dir = cache_dir(&id);
        let path = STREAM.path(dir.path());
        let wait = Duration::from_secs(1);
        STREAM
            .update(dir.path(), &id, wait, |_| b"older".to_vec())
            .unwrap();
        // Shorter: a new file (an overwrite would leave the old tail). A reader that opened
        // the old one reads it whole.
        let mut before = File::open(&path).unwrap();
        let ino = fs::metadata(&path).unwrap().ino();
        STREAM
            .update(dir.path(), &id, wait, |_| b"new".to_vec())
            .unwrap();
        let mut old = Vec::new();
        before.read_to_end(&mut old).unwrap();
        assert_eq!(STREAM.decode(&old).unwrap(), b"older");
        assert_eq!(STREAM.read(dir.path()).unwrap().unwrap(), b"new");
        assert_ne!(fs::metadata(&path).unwrap().ino(), ino);
        // The same length, or longer: the same file, new bytes.
        let ino = fs::metadata(&path).unwrap().ino();
        STREAM
            .update(dir.path(), &id, wait, |_| b"now".to_vec())
            .unwrap();
        assert_eq!(STREAM.read(dir.path()).unwrap().unwrap(), b"now");
        assert_eq!(fs::metadata(&path).unwrap().ino(), ino);
        STREAM
            .update(dir.path(), &id, wait, |_| b"longer".to_vec())
            .unwrap();
        assert_eq!(STREAM.read(dir.path()).unwrap().unwrap(), b"longer");
        assert_eq!(fs::metadata(&path).unwrap().ino(), ino);
        // A file of exactly a page is overwritten; one byte more is swapped whole even at the
        // same length.
        let page_body = IN_PLACE_MAX_LEN - ENVELOPE_HEADER_LEN - 4;
        for (body_len, in_place) in [(page_body, true), (page_body + 1, false)] {
            STREAM
                .update(dir.path(), &id, wait, |_| vec![7u8; body_len])
                .unwrap();
            let ino = fs::metadata(&path).unwrap().ino();
            STREAM
                .update(dir.path(), &id, wait, |_| vec![8u8; body_len])
                .unwrap();
            assert_eq!(
                fs::metadata(&path).unwrap().ino() == ino,
                in_place,
                "{body_len}"
            );
            assert_eq!(
                STREAM.read(dir.path()).unwrap().unwrap(),
                vec![8u8; body_len]
            );
        }
        // Another link to the file, or a mode the directory does not give: swapped whole, the
        // link keeps its bytes.
        STREAM
            .update(dir.path(), &id, wait, |_| vec![7u8; page_body])
            .unwrap();
        let link = dir.path().join("snapshot");
        fs::hard_link(&path, &link).unwrap();
        let linked = fs::read(&link).unwrap();
        STREAM
            .update(dir.path(), &id, wait, |_| vec![9u8; page_body])
            .unwrap();
        assert_eq!(fs::read(&link).unwrap(), linked);
        fs::remove_file(&link).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let ino = fs::metadata(&path).unwrap().ino();
        STREAM
            .update(dir.path(), &id, wait, |_| vec![1u8; page_body])
            .unwrap();
        assert_ne!(fs::metadata(&path).unwrap().ino(), ino);

        assert_eq!(names_in(dir.path()), ["lock", "meta", "test-stream"]);
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_symlink_in_the_stream_s_place_is_never_written_through() {
        let id = Identity::new(b"gpu".to_vec());
        let dir = cache_dir(&id);
        let outside = tempfile::NamedTempFile::new().unwrap();
        let body = STREAM.encode(b"same");
        fs::write(outside.path(), &body).unwrap();
        std::os::unix::fs::symlink(outside.path(), STREAM.path(dir.path())).unwrap();
        let update = STREAM.update(dir.path(), &id, Duration::from_secs(1), |_| {
            b"mine".to_vec()
        });
        assert!(matches!(update, Err(Error::Io(_))), "{update:?}");
        assert_eq!(fs::read(outside.path()).unwrap(), body);
        // Nor by the write itself, had the link appeared after the read.
        assert!(!overwrite_in_place(
            dir.path(),
            &STREAM.path(dir.path()),
            &STREAM.encode(b"mine")
        ));
        assert_eq!(fs::read(outside.path()).unwrap(), body);
    }

    #[test]
    fn readers_racing_updates_in_place_see_whole_bodies() {
        let id = Identity::new(b"gpu".to_vec());
        let dir = cache_dir(&id);
        let wait = Duration::from_secs(5);
        // Growing now and then, as the histograms do: still in place.
        let body = |i: u32| format!("{i:08}").repeat(32 + i as usize / 100).into_bytes();
        STREAM.update(dir.path(), &id, wait, |_| body(0)).unwrap();
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 1..2000 {
                    STREAM.update(dir.path(), &id, wait, |_| body(i)).unwrap();
                }
                done.store(true, std::sync::atomic::Ordering::Relaxed);
            });
            loop {
                let finished = done.load(std::sync::atomic::Ordering::Relaxed);
                let got = STREAM.read(dir.path()).unwrap().unwrap();
                let first: u32 = std::str::from_utf8(&got[..8]).unwrap().parse().unwrap();
                assert_eq!(got, body(first));
                if finished {
                    break;
                }
            }
        });
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
