//! A cache directory: its meta file, lock file and segment files.
//!
//! ```text
//! DIR/meta               format version and identity (written by rename, so always whole)
//! DIR/lock               flock(2)ed exclusively by a writer for each batch it appends
//! DIR/seg-0000002a.dat   data segment 42: header, then records
//! DIR/seg-0000002a.idx   index of segment 42: header, then fixed-size entries
//! DIR/<name>             a front end's metadata stream (`super::stream`), e.g.
//!                        `blob-cache-stats`: a lowercase name, a `GPUC` magic
//! ```

use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Write};
use std::os::fd::BorrowedFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::access;
use super::format;
use crate::identity::MAX_IDENTITY_LEN;
use crate::Identity;

pub(crate) const META_FILE: &str = "meta";
pub(crate) const LOCK_FILE: &str = "lock";
/// What every file gpucache writes starts with.
const GPUCACHE_MAGIC: &[u8; 4] = b"GPUC";

/// The subdirectory of a driver-versioned root where the caches of `identity` live:
/// `id-<XXH3-64 of the identity bytes, 16 hex digits>`.
pub(crate) fn identity_subdir(root: &Path, identity: &Identity) -> PathBuf {
    root.join(format!("id-{:016x}", format::disk_hash(identity.bytes())))
}

/// Whether `name` is that of an identity's subdirectory of a driver-versioned root.
pub(crate) fn is_identity_subdir_name(name: &str) -> bool {
    name.strip_prefix("id-")
        .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The cache directory as an open names its files in it: through the descriptor the owner
/// check opened (a shorter path walk per call, and the same directory throughout), else by
/// path.
#[derive(Clone, Copy, Debug)]
pub(crate) struct At<'a> {
    fd: Option<BorrowedFd<'a>>,
    dir: &'a Path,
}

impl<'a> At<'a> {
    pub(crate) fn new(fd: Option<BorrowedFd<'a>>, dir: &'a Path) -> At<'a> {
        At { fd, dir }
    }

    pub(crate) fn path(dir: &'a Path) -> At<'a> {
        At { fd: None, dir }
    }

    /// The descriptor and path a `*at` call takes for the file `name`.
    fn at(&self, name: &str) -> (BorrowedFd<'a>, PathBuf) {
        match self.fd {
            Some(fd) => (fd, PathBuf::from(name)),
            None => (rustix::fs::CWD, self.dir.join(name)),
        }
    }

    /// Opens the file `name` for reading.
    pub(crate) fn open(&self, name: &str) -> io::Result<File> {
        use rustix::fs::{Mode, OFlags};
        let (fd, path) = self.at(name);
        let file = rustix::fs::openat(fd, &path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
        Ok(File::from(file))
    }

    /// The file `name`'s inode, length and birth time (one `statx`, following no symbolic
    /// link), or `None` if it does not exist.
    pub(crate) fn stat(&self, name: &str) -> io::Result<Option<FileStat>> {
        use rustix::fs::{AtFlags, StatxFlags};
        let (fd, path) = self.at(name);
        let wanted = StatxFlags::INO | StatxFlags::SIZE | StatxFlags::BTIME;
        match rustix::fs::statx(fd, &path, AtFlags::SYMLINK_NOFOLLOW, wanted) {
            Ok(st) => {
                let btime = &st.stx_btime;
                let known = st.stx_mask & StatxFlags::BTIME.bits() != 0 && btime.tv_sec >= 0;
                Ok(Some(FileStat {
                    ino: st.stx_ino,
                    len: st.stx_size,
                    btime_ns: if known {
                        btime.tv_sec as u64 * 1_000_000_000 + u64::from(btime.tv_nsec)
                    } else {
                        0
                    },
                }))
            }
            Err(rustix::io::Errno::NOENT) => Ok(None),
            // No `statx` (a kernel before 4.11, a sandbox): std's `stat` by path.
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
                match fs::symlink_metadata(self.dir.join(name)) {
                    Ok(m) => Ok(Some(FileStat::of(&m))),
                    Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Segment ids that have an index file: the directory opened for reading through the
    /// descriptor (an `O_PATH` one cannot be read), else by path.
    pub(crate) fn list_segments(&self) -> io::Result<Vec<u32>> {
        use rustix::fs::{Mode, OFlags};
        let Some(fd) = self.fd else {
            return list_segments(self.dir);
        };
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let dir = rustix::fs::openat(fd, ".", flags, Mode::empty())?;
        list_segments_fd(std::os::fd::AsFd::as_fd(&dir))
    }

    /// Whether the file `name` exists (one `stat`, following no symbolic link). An error
    /// other than its absence is returned.
    pub(crate) fn exists(&self, name: &str) -> io::Result<bool> {
        let (fd, path) = self.at(name);
        match rustix::fs::statat(fd, &path, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => Ok(true),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// What an open checks of a file without opening it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileStat {
    pub(crate) ino: u64,
    pub(crate) len: u64,
    /// Nanoseconds since the epoch; 0 where the file system does not tell.
    pub(crate) btime_ns: u64,
}

impl FileStat {
    pub(crate) fn of(m: &fs::Metadata) -> FileStat {
        FileStat {
            ino: m.ino(),
            len: m.len(),
            btime_ns: birth_ns(m),
        }
    }
}

/// A file's birth time in nanoseconds since the epoch; 0 where the file system does not
/// tell.
pub(crate) fn birth_ns(m: &fs::Metadata) -> u64 {
    m.created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Segment ids that have an index file, read from `fd`, a descriptor of the directory whose
/// entries were never read (`getdents` goes on from where the last call stopped): its
/// entries until the call that returns none (a short read does not mean the end on every
/// file system).
pub(crate) fn list_segments_fd(fd: BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 16 << 10];
    let mut iter = rustix::fs::RawDir::new(fd, &mut buf);
    let mut ids = Vec::new();
    while let Some(entry) = iter.next() {
        let entry = entry?;
        if let Some(id) = entry.file_name().to_str().ok().and_then(index_file_id) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// The segment id of an index file's name (`seg-XXXXXXXX.idx`).
fn index_file_id(name: &str) -> Option<u32> {
    let hex = name.strip_prefix("seg-")?.strip_suffix(".idx")?;
    if hex.len() != 8 {
        return None;
    }
    u32::from_str_radix(hex, 16).ok()
}

pub(crate) fn data_path(dir: &Path, seg: u32) -> PathBuf {
    dir.join(data_name(seg))
}

pub(crate) fn data_name(seg: u32) -> String {
    format!("seg-{seg:08x}.dat")
}

pub(crate) fn index_path(dir: &Path, seg: u32) -> PathBuf {
    dir.join(index_name(seg))
}

pub(crate) fn index_name(seg: u32) -> String {
    format!("seg-{seg:08x}.idx")
}

/// Segment ids that have an index file (a segment is visible once its index exists).
pub(crate) fn list_segments(dir: &Path) -> io::Result<Vec<u32>> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    list_segments_fd(std::os::fd::AsFd::as_fd(&fd))
}

/// Data files without an index file. Under the directory lock nobody is creating a segment,
/// so these are leftovers of a writer that died between creating or deleting a segment's two
/// files.
pub(crate) fn orphan_data_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut orphans = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let is_data = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("seg-") && n.ends_with(".dat"));
        if is_data && !path.with_extension("idx").exists() {
            orphans.push(path);
        }
    }
    Ok(orphans)
}

/// Segment ids named by `seg-XXXXXXXX.dat` or `.idx` files, sorted and deduplicated.
pub(crate) fn segment_file_ids(dir: &Path) -> io::Result<Vec<u32>> {
    let mut ids = Vec::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("seg-")) else {
            continue;
        };
        let hex = rest
            .strip_suffix(".dat")
            .or_else(|| rest.strip_suffix(".idx"));
        if let Some(id) = hex
            .filter(|h| h.len() == 8)
            .and_then(|h| u32::from_str_radix(h, 16).ok())
        {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// Whether `name` may name a metadata stream: 1 to 64 lowercase letters, digits and dashes,
/// starting with a letter, and not a name of the directory's own files.
pub(crate) fn is_stream_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && name != META_FILE
        && name != LOCK_FILE
        && !name.starts_with("seg-")
        && !name.starts_with("id-")
}

/// Whether the file `name` in `dir` is a metadata stream: a stream name, and a regular file
/// that starts with gpucache's magic (a file of someone else is never taken for one).
fn is_stream_file(dir: &Path, name: &str) -> bool {
    if !is_stream_name(name) {
        return false;
    }
    let path = dir.join(name);
    if !fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut magic = [0u8; 4];
    File::open(&path)
        .and_then(|mut f| io::Read::read_exact(&mut f, &mut magic))
        .is_ok_and(|()| &magic == GPUCACHE_MAGIC)
}

/// Reads the meta file: `Ok(None)` if it is missing or unreadable as a meta file.
pub(crate) fn read_meta(dir: &Path) -> io::Result<Option<Identity>> {
    match fs::read(dir.join(META_FILE)) {
        Ok(bytes) => Ok(format::decode_meta(&bytes).ok()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reads the meta file with one open, `fstat` and read: its bytes and its inode; `Ok(None)`
/// if it is missing. The file is replaced by rename, never written in place, so the inode
/// names these bytes.
pub(crate) fn read_meta_ino(dir: &Path) -> io::Result<Option<(Vec<u8>, u64)>> {
    let mut file = match File::open(dir.join(META_FILE)) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let m = file.metadata()?;
    // A meta file is at most its header, the identity and the CRC.
    let want = usize::try_from(m.len())
        .map_or(usize::MAX, |n| n)
        .min(MAX_IDENTITY_LEN + 64);
    let mut bytes = vec![0u8; want];
    let mut len = 0;
    while len < want {
        match io::Read::read(&mut file, &mut bytes[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    bytes.truncate(len);
    Ok(Some((bytes, m.ino())))
}

/// Writes the meta file atomically: temporary file, fsync, rename, fsync of the directory.
pub(crate) fn write_meta(dir: &Path, meta: &Identity) -> io::Result<()> {
    let tmp = dir.join(format!("{META_FILE}.tmp.{}", std::process::id()));
    {
        let mut f = access::create_file(&tmp)?;
        f.write_all(&format::encode_meta(meta))?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(META_FILE))?;
    sync_dir(dir)
}

pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Removes every segment file, the metadata streams (they describe what is removed) and
/// stray temporary files; keeps meta and lock.
pub(crate) fn remove_contents(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("seg-") || name.contains(".tmp.") || is_stream_file(dir, &name) {
            remove_if_present(&entry.path())?;
        }
    }
    Ok(())
}

/// Writes `bytes` to `<target>.tmp.<pid>` (with the directory's file mode, not fsynced) and
/// puts that file in place of `target`, atomically for readers: they open the old file or
/// the new one. For files written without fsync (the table, metadata streams); the caller
/// holds the directory lock. A failed write leaves no temporary file.
pub(crate) fn write_unsynced(target: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp = target.as_os_str().to_owned();
    tmp.push(format!(".tmp.{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let result = access::create_file(&tmp)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| replace_unsynced(&tmp, target));
    if result.is_err() {
        let _ = remove_if_present(&tmp);
    }
    result
}

/// Puts the unsynced file `tmp` in place of `target`.
///
/// A plain rename over an existing file makes ext4 (`auto_da_alloc`, the default) allocate
/// the new file's blocks and start writing it back before the rename returns: 1.3 ms on
/// this project's machines. Swapping the two names (`RENAME_EXCHANGE`) and removing the old
/// file is not subject to it (removing a file whose blocks were written back still costs
/// about as much). A file system without the swap, or no `target` yet, gets the plain
/// rename. If the old file cannot be removed after the swap it stays under `tmp`'s name, a
/// temporary file: this process's next write of it truncates it, and the sweep of stale
/// temporary files removes it once this process is gone.
fn replace_unsynced(tmp: &Path, target: &Path) -> io::Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    match renameat_with(CWD, tmp, CWD, target, RenameFlags::EXCHANGE) {
        Ok(()) => {
            let _ = remove_if_present(tmp);
            Ok(())
        }
        Err(_) => fs::rename(tmp, target),
    }
}

pub(crate) fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Whether the lock file exists and this process may read and write it (its effective ids,
/// on a file system mounted for writing): one `faccessat2`. `false` also when that cannot be
/// told (an older kernel emulated for a setuid process, a sandbox refusing the call): then
/// [`open_lock`] decides.
pub(crate) fn lock_writable(at: At<'_>) -> bool {
    use rustix::fs::{Access, AtFlags};
    let (fd, path) = at.at(LOCK_FILE);
    rustix::fs::accessat(
        fd,
        path,
        Access::READ_OK | Access::WRITE_OK,
        AtFlags::EACCESS,
    )
    .is_ok()
}

/// Opens the lock file, creating it if the directory is writable. Returns the file and
/// whether it could be opened for writing.
pub(crate) fn open_lock(dir: &Path) -> io::Result<(File, bool)> {
    let path = dir.join(LOCK_FILE);
    let mode = access::file_mode(dir);
    match OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(mode)
        .open(&path)
    {
        Ok(f) => {
            // Created by us just now (empty, ours, not yet at its mode because of the
            // umask): set the mode. A lock file of another group member is left alone.
            let m = f.metadata()?;
            if m.uid() == access::euid() && m.len() == 0 && m.mode() & 0o777 != mode {
                f.set_permissions(std::fs::Permissions::from_mode(mode))?;
            }
            Ok((f, true))
        }
        Err(e) if is_read_only_error(&e) => Ok((File::open(&path)?, false)),
        Err(e) => Err(e),
    }
}

/// Errors that mean "this directory cannot be written", as opposed to a passing failure.
pub(crate) fn is_read_only_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem
    )
}
