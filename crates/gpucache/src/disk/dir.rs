//! A cache directory: its meta file, lock file and segment files.
//!
//! ```text
//! DIR/meta               format version and identity (written by rename, so always whole)
//! DIR/lock               flock(2)ed exclusively by a writer for each batch it appends
//! DIR/seg-0000002a.dat   data segment 42: header, then records
//! DIR/seg-0000002a.idx   index of segment 42: header, then fixed-size entries
//! DIR/blob-cache-stats   counters of the EGL blob caches using DIR (`crate::egl`)
//! ```

use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Write};
use std::path::{Path, PathBuf};

use super::format::{self, Meta};

pub(crate) const META_FILE: &str = "meta";
pub(crate) const LOCK_FILE: &str = "lock";
/// Diagnostics of the EGL blob caches using the directory; removed with the segments.
pub(crate) const BLOB_STATS_FILE: &str = "blob-cache-stats";

pub(crate) fn data_path(dir: &Path, seg: u32) -> PathBuf {
    dir.join(format!("seg-{seg:08x}.dat"))
}

pub(crate) fn index_path(dir: &Path, seg: u32) -> PathBuf {
    dir.join(format!("seg-{seg:08x}.idx"))
}

/// Segment ids that have an index file (a segment is visible once its index exists).
pub(crate) fn list_segments(dir: &Path) -> io::Result<Vec<u32>> {
    let mut ids = Vec::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(hex) = name
            .strip_prefix("seg-")
            .and_then(|n| n.strip_suffix(".idx"))
        else {
            continue;
        };
        if hex.len() == 8 {
            if let Ok(id) = u32::from_str_radix(hex, 16) {
                ids.push(id);
            }
        }
    }
    ids.sort_unstable();
    Ok(ids)
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

/// Reads the meta file: `Ok(None)` if it is missing or unreadable as a meta file.
pub(crate) fn read_meta(dir: &Path) -> io::Result<Option<Meta>> {
    match fs::read(dir.join(META_FILE)) {
        Ok(bytes) => Ok(format::decode_meta(&bytes).ok()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes the meta file atomically: temporary file, fsync, rename, fsync of the directory.
pub(crate) fn write_meta(dir: &Path, meta: &Meta) -> io::Result<()> {
    let tmp = dir.join(format!("{META_FILE}.tmp.{}", std::process::id()));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(&format::encode_meta(meta))?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(META_FILE))?;
    sync_dir(dir)
}

pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Removes every segment file, the blob-cache diagnostics (they describe what is removed)
/// and stray temporary files; keeps meta and lock.
pub(crate) fn remove_segments(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("seg-") || name.contains(".tmp.") || name == BLOB_STATS_FILE {
            remove_if_present(&entry.path())?;
        }
    }
    Ok(())
}

pub(crate) fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Opens the lock file, creating it if the directory is writable. Returns the file and
/// whether it could be opened for writing.
pub(crate) fn open_lock(dir: &Path) -> io::Result<(File, bool)> {
    let path = dir.join(LOCK_FILE);
    match OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
    {
        Ok(f) => Ok((f, true)),
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
