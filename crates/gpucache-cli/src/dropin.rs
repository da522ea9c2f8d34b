//! `gpucache dropin json|enable|disable|stats`: installing the drop-in
//! (`libEGL_gpucache.so`, a GLVND EGL vendor) for a user or the whole system, and the
//! statistics of its per-application namespaces. `docs/dropin.md` is the guide.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use EGL_gpucache::config::Settings;
use EGL_gpucache::prune;
use EGL_gpucache::vendor::vendor_json;

use crate::Outcome;

/// The file name in a vendor directory: GLVND reads each directory's `*.json` files in
/// `strcmp` order, and Debian's Mesa is `50_mesa.json`, so `10_` comes first.
pub const JSON_NAME: &str = "10_gpucache.json";
/// Where `--system` installs it: GLVND reads `/etc/glvnd/egl_vendor.d` before
/// `/usr/share/glvnd/egl_vendor.d`.
pub const SYSTEM_DIR: &str = "/etc/glvnd/egl_vendor.d";

/// The drop-in library: `--lib`, else next to this executable (`target/<profile>/`, or an
/// installed `bin/` with `../lib/`).
pub fn library(lib: Option<&Path>) -> Result<PathBuf> {
    let found = match lib {
        Some(l) => l.to_path_buf(),
        None => {
            let exe = std::env::current_exe().context("finding this executable")?;
            let dir = exe.parent().context("this executable has no folder")?;
            let candidates = [
                dir.join("libEGL_gpucache.so"),
                dir.join("../lib/libEGL_gpucache.so"),
                dir.join("deps/libEGL_gpucache.so"),
            ];
            match candidates.iter().find(|c| c.exists()) {
                Some(c) => c.clone(),
                None => bail!(
                    "libEGL_gpucache.so is not next to {} (build it: cargo build -p \
                     gpucache-dropin), name it with --lib",
                    exe.display()
                ),
            }
        }
    };
    std::fs::canonicalize(&found).with_context(|| format!("{}", found.display()))
}

/// The user-level JSON file: `$XDG_DATA_HOME/gpucache/egl_vendor.d/10_gpucache.json`, else
/// under `~/.local/share`.
fn user_json() -> Result<PathBuf> {
    let base = match std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty()) {
        Some(x) => PathBuf::from(x),
        None => {
            PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?).join(".local/share")
        }
    };
    Ok(base.join("gpucache/egl_vendor.d").join(JSON_NAME))
}

/// Writes `text` to `path` whole (a temporary file renamed over it), with `mode`.
fn write_atomic(path: &Path, text: &str, mode: u32) -> Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = path.parent().context("no folder")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(".{JSON_NAME}.{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// A shell word: single-quoted.
fn sh(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `dropin json`: the vendor JSON file naming the library.
pub fn json(out: &mut dyn Write, lib: Option<&Path>) -> Result<Outcome> {
    let lib = library(lib)?;
    out.write_all(vendor_json(&lib.to_string_lossy()).as_bytes())?;
    Ok(Outcome::Success)
}

/// `dropin enable`: for the user, writes the JSON file and prints the shell lines that
/// make GLVND load the drop-in alone (it wraps the vendors the environment named before,
/// or GLVND's default ones); with `system_dir`, installs it there for every process.
pub fn enable(
    out: &mut dyn Write,
    lib: Option<&Path>,
    system_dir: Option<&Path>,
) -> Result<Outcome> {
    let lib = library(lib)?;
    let text = vendor_json(&lib.to_string_lossy());
    if let Some(dir) = system_dir {
        let path = dir.join(JSON_NAME);
        write_atomic(&path, &text, 0o644)?;
        writeln!(
            out,
            "# installed {}: GLVND loads it before the vendors of {} (file names in strcmp \
             order, /etc before /usr/share)",
            path.display(),
            EGL_gpucache::vendor::DEFAULT_DIRS
        )?;
        return Ok(Outcome::Success);
    }
    let path = user_json()?;
    write_atomic(&path, &text, 0o644)?;
    let path_s = path.to_string_lossy().into_owned();
    writeln!(
        out,
        "# gpucache drop-in: eval \"$(gpucache dropin enable)\""
    )?;
    match std::env::var("__EGL_VENDOR_LIBRARY_FILENAMES") {
        Ok(prev) if !prev.is_empty() && !prev.split(':').any(|p| p == path_s) => {
            writeln!(out, "export GPUCACHE_DROPIN_VENDOR={}", sh(&prev))?;
        }
        _ => {}
    }
    writeln!(out, "export __EGL_VENDOR_LIBRARY_FILENAMES={}", sh(&path_s))?;
    Ok(Outcome::Success)
}

/// `dropin disable`: the reverse of `enable`.
pub fn disable(out: &mut dyn Write, system_dir: Option<&Path>) -> Result<Outcome> {
    if let Some(dir) = system_dir {
        let path = dir.join(JSON_NAME);
        match std::fs::remove_file(&path) {
            Ok(()) => writeln!(out, "# removed {}", path.display())?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                writeln!(out, "# {} was not installed", path.display())?
            }
            Err(e) => return Err(e).with_context(|| format!("removing {}", path.display())),
        }
        return Ok(Outcome::Success);
    }
    let path = user_json()?;
    let _ = std::fs::remove_file(&path);
    writeln!(
        out,
        "# gpucache drop-in off: eval \"$(gpucache dropin disable)\""
    )?;
    match std::env::var("GPUCACHE_DROPIN_VENDOR") {
        Ok(prev) if !prev.is_empty() => {
            writeln!(out, "export __EGL_VENDOR_LIBRARY_FILENAMES={}", sh(&prev))?;
            writeln!(out, "unset GPUCACHE_DROPIN_VENDOR")?;
        }
        _ => writeln!(out, "unset __EGL_VENDOR_LIBRARY_FILENAMES")?,
    }
    Ok(Outcome::Success)
}

/// The drop-in's root directory under the same settings an application would read.
pub fn root() -> Result<PathBuf> {
    settings()
        .root
        .context("no cache directory: set GPUCACHE_DROPIN_DIR, XDG_CACHE_HOME or HOME")
}

fn settings() -> Settings {
    let env = |k: &str| std::env::var(k).ok();
    Settings::load(&env, "").0
}

/// `gpucache dropin prune`: the root's caches, least recently used first, down to
/// `max_bytes` (else the settings' `total_max_bytes`); never one a process holds.
pub fn prune(out: &mut dyn Write, max_bytes: Option<&str>, dry_run: bool) -> Result<Outcome> {
    let root = root()?;
    let max = match max_bytes {
        Some(text) => EGL_gpucache::config::parse_size(text)
            .with_context(|| format!("--max-bytes {text}: not a size"))?,
        None => match settings().total_max_bytes {
            0 => bail!("total_max_bytes is 0 (no limit): give the limit with --max-bytes"),
            max => max,
        },
    };
    if !root.exists() {
        writeln!(out, "nothing to prune: {} does not exist", root.display())?;
        return Ok(Outcome::Success);
    }
    if dry_run {
        prune::check_root(&root).with_context(|| format!("no pruning in {}", root.display()))?;
        let mut caches =
            prune::caches(&root).with_context(|| format!("reading {}", root.display()))?;
        caches.sort_by_key(|c| c.last_used);
        let mut total: u64 = caches.iter().map(|c| c.bytes).sum();
        writeln!(out, "{} caches, {total} bytes, limit {max}", caches.len())?;
        let trash = prune::trash_bytes(&root);
        if trash > 0 {
            writeln!(out, "{trash} bytes in the trash (deleted first)")?;
        }
        for c in caches {
            let days = std::time::SystemTime::now()
                .duration_since(c.last_used)
                .map_or(0, |d| d.as_secs() / 86_400);
            let verdict = if total <= max {
                "keep"
            } else if prune::in_use(&c.dir) {
                "in use"
            } else {
                total -= c.bytes;
                "would remove"
            };
            writeln!(
                out,
                "{verdict}\t{} bytes\tused {days} days ago\t{}",
                c.bytes,
                c.dir.display()
            )?;
        }
        return Ok(Outcome::Success);
    }
    let Some(lock) =
        prune::lock_root(&root).with_context(|| format!("locking {}", root.display()))?
    else {
        bail!("another prune of {} is running", root.display());
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let pruned = prune::prune(&lock, max, None, &stop)
        .with_context(|| format!("pruning {}", root.display()))?;
    for c in &pruned.removed {
        writeln!(out, "removed\t{} bytes\t{}", c.bytes, c.dir.display())?;
    }
    for dir in &pruned.in_use {
        writeln!(out, "in use\t{}", dir.display())?;
    }
    for dir in &pruned.failed {
        writeln!(out, "failed\t{}", dir.display())?;
    }
    writeln!(
        out,
        "{} removed, {} bytes left, limit {max}",
        pruned.removed.len(),
        pruned.bytes_left
    )?;
    Ok(Outcome::Success)
}
