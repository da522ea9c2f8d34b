//! File-system helpers: directory sizes, page-cache eviction and its verification with
//! `fincore`, `syncfs`, and the disk's sequential write speed.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use rustix::fs::{fadvise, syncfs, Advice};

/// Sizes of the files under a directory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Regular files.
    pub files: u64,
    /// Sum of file lengths.
    pub apparent: u64,
    /// Sum of allocated blocks (`st_blocks * 512`).
    pub allocated: u64,
}

/// Every regular file under `dir`, recursively.
pub fn files_under(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                out.push(entry.path());
            }
        }
    }
    Ok(out)
}

/// Apparent and allocated bytes of the files under `dir`.
pub fn usage(dir: &Path) -> io::Result<Usage> {
    let mut u = Usage::default();
    for path in files_under(dir)? {
        let meta = fs::metadata(&path)?;
        u.files += 1;
        u.apparent += meta.len();
        u.allocated += meta.blocks() * 512;
    }
    Ok(u)
}

/// Drops the files under `dir` from the page cache: fsync (so no page is dirty), then
/// `posix_fadvise(POSIX_FADV_DONTNEED)` over the whole file.
pub fn evict(dir: &Path) -> io::Result<()> {
    for path in files_under(dir)? {
        let file = File::open(&path)?;
        file.sync_all()?;
        fadvise(&file, 0, None, Advice::DontNeed)?;
    }
    Ok(())
}

/// Bytes of the files under `dir` resident in the page cache, per `fincore`; `None` when
/// `fincore` is not installed or fails.
pub fn resident(dir: &Path) -> Option<u64> {
    let files = files_under(dir).ok()?;
    let mut total = 0;
    for chunk in files.chunks(1000) {
        let out = Command::new("fincore")
            .args(["--bytes", "--noheadings", "--raw", "--output", "RES"])
            .args(chunk)
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            total += line.trim().parse::<u64>().ok()?;
        }
    }
    Some(total)
}

/// Whether `fincore` can be run.
pub fn have_fincore() -> bool {
    Command::new("fincore")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Flushes every dirty page of the file system holding `dir` (for engines that never fsync).
pub fn sync_fs(dir: &Path) -> io::Result<()> {
    let d = File::open(dir)?;
    syncfs(&d)?;
    Ok(())
}

/// Writes `bytes` to a new file in `dir` in `chunk`-sized writes, fdatasyncs it every
/// `sync_every` bytes if given and fsyncs it at the end, removes it; returns MB/s (10^6
/// bytes per second) including the syncs.
pub fn sequential_write_mbps(
    dir: &Path,
    bytes: u64,
    chunk: &[u8],
    sync_every: Option<u64>,
) -> io::Result<f64> {
    let path = dir.join("sequential.tmp");
    let every = sync_every.unwrap_or(u64::MAX);
    let start = Instant::now();
    {
        let mut file = File::create(&path)?;
        let mut written = 0;
        while written < bytes {
            let n = (bytes - written).min(chunk.len() as u64);
            file.write_all(&chunk[..n as usize])?;
            written += n;
            if written % every < n && written < bytes {
                file.sync_data()?;
            }
        }
        file.sync_all()?;
    }
    let secs = start.elapsed().as_secs_f64();
    fs::remove_file(&path)?;
    Ok(bytes as f64 / secs / 1e6)
}
