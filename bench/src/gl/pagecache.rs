//! Evicting a cache's files from the page cache, as after a reboot, and checking it worked.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _, Result};

/// Every regular file under `path` (or `path` itself when it is a file).
pub fn files_under(path: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_context(|| format!("stat {}", path.display())),
    };
    if meta.is_file() {
        out.push(path.to_path_buf());
    } else if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            out.extend(files_under(&entry?.path())?);
        }
    }
    out.sort();
    Ok(out)
}

/// Writes back and drops every page of every file under `path` with
/// `posix_fadvise(POSIX_FADV_DONTNEED)`, then checks with `fincore` that none is resident.
/// Returns the number of files.
pub fn evict(path: &Path) -> Result<usize> {
    let files = files_under(path)?;
    for file in &files {
        let f = std::fs::File::open(file).with_context(|| format!("open {}", file.display()))?;
        // Dirty pages cannot be dropped: write them back first.
        f.sync_data()?;
        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed)
            .with_context(|| format!("posix_fadvise {}", file.display()))?;
    }
    let resident = resident_bytes(&files)?;
    if resident != 0 {
        bail!(
            "{} still has {resident} bytes in the page cache after POSIX_FADV_DONTNEED",
            path.display()
        );
    }
    Ok(files.len())
}

/// Bytes of `files` in the page cache, as `fincore` reports them.
pub fn resident_bytes(files: &[PathBuf]) -> Result<u64> {
    if files.is_empty() {
        return Ok(0);
    }
    let out = Command::new("fincore")
        .args(["--bytes", "--noheadings", "--raw", "--output", "RES"])
        .args(files)
        .output()
        .context("running fincore (util-linux)")?;
    if !out.status.success() {
        bail!("fincore failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let mut total = 0u64;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        total += line.trim().parse::<u64>().context("fincore output")?;
    }
    Ok(total)
}

/// Bytes on disk under `path`.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiskUsage {
    /// Regular files.
    pub files: u64,
    /// Sum of file sizes.
    pub apparent: u64,
    /// Sum of allocated blocks (`st_blocks` × 512).
    pub allocated: u64,
}

/// [`DiskUsage`] of everything under `path`.
pub fn disk_usage(path: &Path) -> Result<DiskUsage> {
    use std::os::unix::fs::MetadataExt;
    let mut usage = DiskUsage::default();
    for file in files_under(path)? {
        let meta = std::fs::metadata(&file)?;
        usage.files += 1;
        usage.apparent += meta.len();
        usage.allocated += meta.blocks() * 512;
    }
    Ok(usage)
}
