//! Who may read a cache directory: the modes gpucache creates directories and files with, and
//! the owner check.
//!
//! A cache directory says which programs a user runs, and a driver loads executable code from
//! it, so it is private by default: directories 0700, files 0600, set with `chmod` after
//! creating so that the process umask cannot widen or narrow them. A deliberately shared cache
//! ([`DirAccess::Group`]) is 0770 with 0660 files, keeping a parent's setgid bit so that its
//! group carries down. Files follow their directory: a file is 0660 in a directory whose group
//! may read, write and enter it, else 0600; no call site has to be told the setting.

use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Who may use a cache directory that gpucache creates
/// ([`CacheBuilder::dir_access`](crate::CacheBuilder::dir_access)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DirAccess {
    /// The owner only: directories 0700, files 0600. The default.
    #[default]
    Private,
    /// The owner and the directory's group: directories 0770 (with the parent's setgid bit,
    /// if it has one), files 0660. For a cache shared on purpose.
    Group,
}

impl DirAccess {
    fn dir_mode(self) -> u32 {
        match self {
            DirAccess::Private => 0o700,
            DirAccess::Group => 0o770,
        }
    }
}

const SETGID: u32 = 0o2000;

/// The mode a new file in `dir` gets: 0660 where the directory's group has full access (a
/// group-shared cache), else 0600.
pub(crate) fn file_mode(dir: &Path) -> u32 {
    match fs::metadata(dir) {
        Ok(m) if m.mode() & 0o070 == 0o070 => 0o660,
        _ => 0o600,
    }
}

/// Gives a file this process just created the mode its directory calls for (`fchmod`, which
/// the umask does not touch).
pub(crate) fn set_file_mode(file: &File, dir: &Path) -> io::Result<()> {
    file.set_permissions(fs::Permissions::from_mode(file_mode(dir)))
}

/// Creates (truncating) a file in `dir` with the directory's file mode.
pub(crate) fn create_file(path: &Path) -> io::Result<File> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mode = file_mode(dir);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    file.set_permissions(fs::Permissions::from_mode(mode))?;
    Ok(file)
}

/// Creates `dir` and any missing parents with `access`'s mode. Directories that exist are
/// left alone, except that the cache's own directory, if this process owns it and `access` is
/// private, loses group and other access (caches created before modes were set were 0755).
/// Returns whether `dir` itself was created.
pub(crate) fn create_dir_all(dir: &Path, access: DirAccess) -> io::Result<bool> {
    create_dir_all_known(dir, access, None)
}

/// [`create_dir_all`] given what a `stat` of `dir` found a moment ago, if one was made.
pub(crate) fn create_dir_all_known(
    dir: &Path,
    access: DirAccess,
    known: Option<fs::Metadata>,
) -> io::Result<bool> {
    if let Some(m) = known.or_else(|| fs::metadata(dir).ok()) {
        // The common case, with one `stat`: it exists.
        if !m.is_dir() {
            return Err(not_a_directory(dir));
        }
        narrow_private(dir, &m, access)?;
        return Ok(false);
    }
    let missing: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|p| !p.as_os_str().is_empty() && fs::symlink_metadata(p).is_err())
        .map(Path::to_path_buf)
        .collect();
    for path in missing.iter().rev() {
        let parent_setgid = path
            .parent()
            .and_then(|p| fs::metadata(p).ok())
            .map_or(0, |m| m.mode() & SETGID);
        let mode = access.dir_mode()
            | if access == DirAccess::Group {
                parent_setgid
            } else {
                0
            };
        match fs::DirBuilder::new().mode(access.dir_mode()).create(path) {
            Ok(()) => fs::set_permissions(path, fs::Permissions::from_mode(mode))?,
            // Another process made it first: theirs has the same mode.
            Err(e) if e.kind() == ErrorKind::AlreadyExists && path.is_dir() => {}
            Err(e) => return Err(e),
        }
    }
    if missing.is_empty() {
        if let Ok(m) = fs::metadata(dir) {
            if m.is_dir() {
                narrow_private(dir, &m, access)?;
            }
        }
    }
    if !dir.is_dir() {
        return Err(not_a_directory(dir));
    }
    Ok(!missing.is_empty())
}

/// A private cache's own directory, if this process owns it, loses group and other access.
fn narrow_private(dir: &Path, m: &fs::Metadata, access: DirAccess) -> io::Result<()> {
    if access == DirAccess::Private && m.mode() & 0o077 != 0 && m.uid() == euid() {
        fs::set_permissions(dir, fs::Permissions::from_mode(m.mode() & 0o7700))?;
    }
    Ok(())
}

fn not_a_directory(dir: &Path) -> io::Error {
    io::Error::new(
        ErrorKind::NotADirectory,
        format!("{} is not a directory", dir.display()),
    )
}

pub(crate) fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Whether `uid` may own a directory this process writes to: itself, or root (who can change
/// any file this process reads anyway).
fn trusted_owner(uid: u32) -> bool {
    // Root first: no `geteuid` call for a directory root owns.
    uid == 0 || uid == euid()
}

/// Refuses each of `dirs` that exists and is owned by a user this process does not trust
/// ([`Error::ForeignOwner`]). Missing directories pass: this process will create them.
pub(crate) fn check_owner(dirs: &[&Path]) -> Result<()> {
    for dir in dirs {
        if let Ok(m) = fs::metadata(dir) {
            if !trusted_owner(m.uid()) {
                return Err(Error::ForeignOwner {
                    path: dir.to_path_buf(),
                    owner: m.uid(),
                    euid: euid(),
                });
            }
        }
    }
    Ok(())
}

/// [`check_owner`] of one directory, returning what its `stat` found (`None`: missing).
pub(crate) fn check_owner_stat(dir: &Path) -> Result<Option<fs::Metadata>> {
    match fs::metadata(dir) {
        Ok(m) if !trusted_owner(m.uid()) => Err(Error::ForeignOwner {
            path: dir.to_path_buf(),
            owner: m.uid(),
            euid: euid(),
        }),
        Ok(m) => Ok(Some(m)),
        Err(_) => Ok(None),
    }
}

/// The cache directory as the owner check opened it, for the disk tier's open: its descriptor
/// serves the open's `stat`, listing and file opens. A clone carries no descriptor, so that
/// one open alone reads its entries (a descriptor lists from where its last listing stopped).
#[derive(Debug, Default)]
pub(crate) struct DirHandle(Option<File>);

impl DirHandle {
    pub(crate) fn take(&mut self) -> Option<File> {
        self.0.take()
    }
}

impl Clone for DirHandle {
    fn clone(&self) -> DirHandle {
        DirHandle(None)
    }
}

/// [`check_owner_stat`] through an `O_PATH` descriptor of `dir`, which it also returns for
/// the tier's open to name its files through (one open and one `fstat`). Falls back to a
/// `stat` by path where `dir` cannot be opened (not a directory, no search permission).
pub(crate) fn check_owner_open(dir: &Path) -> Result<(Option<fs::Metadata>, DirHandle)> {
    use rustix::fs::{Mode, OFlags};
    // O_DIRECTORY: anything else fails here (a FIFO is never opened, so never waited on).
    // O_PATH: the descriptor serves `*at` calls and `fstat` only, and opening it skips the
    // directory's own open (a listing opens the directory through it).
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let file = match rustix::fs::open(dir, flags, Mode::empty()) {
        Ok(fd) => File::from(fd),
        Err(rustix::io::Errno::NOENT) => return Ok((None, DirHandle(None))),
        Err(_) => return check_owner_stat(dir).map(|m| (m, DirHandle(None))),
    };
    let Ok(m) = file.metadata() else {
        return check_owner_stat(dir).map(|m| (m, DirHandle(None)));
    };
    if !trusted_owner(m.uid()) {
        return Err(Error::ForeignOwner {
            path: dir.to_path_buf(),
            owner: m.uid(),
            euid: euid(),
        });
    }
    Ok((Some(m), DirHandle(Some(file))))
}

/// The owner check for a directory in use: an error when `dir` now belongs to an untrusted
/// user (it was replaced underneath us).
pub(crate) fn check_owner_io(dir: &Path) -> io::Result<()> {
    check_owner(&[dir]).map_err(|e| io::Error::new(ErrorKind::PermissionDenied, e.to_string()))
}

/// Whether a directory could take writes now, as a tool sees it (`gpucache stats`): its mode
/// and owner, whether this process may write there, and the free space.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AccessReport {
    /// Permission bits (with setgid and sticky).
    pub mode: u32,
    /// The owner's user id.
    pub owner: u32,
    /// Why this process could not write there now (a read-only file system, permissions,
    /// no space left), or `None` when it could.
    pub not_writable: Option<String>,
    /// Bytes free for an unprivileged user on its file system, if known.
    pub free_bytes: Option<u64>,
}

/// Looks at `dir` without changing anything in it: opens its lock file for writing (neither
/// created nor truncated) and asks the file system for its free space.
pub fn access_report(dir: &Path) -> io::Result<AccessReport> {
    let m = fs::metadata(dir)?;
    let free_bytes = rustix::fs::statvfs(dir)
        .ok()
        .map(|s| s.f_bavail.saturating_mul(s.f_frsize));
    let lock = OpenOptions::new()
        .write(true)
        .open(dir.join(super::dir::LOCK_FILE));
    let not_writable = match lock {
        Err(e) if e.kind() != ErrorKind::NotFound => Some(e.to_string()),
        Ok(_) | Err(_) if free_bytes == Some(0) => Some("no space left on the file system".into()),
        _ => None,
    };
    Ok(AccessReport {
        mode: m.mode() & 0o7777,
        owner: m.uid(),
        not_writable,
        free_bytes,
    })
}
