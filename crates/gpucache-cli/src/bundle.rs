//! `gpucache export` and `gpucache import`: a single-file bundle of a cache's live entries
//! (`docs/bundle-format.md`), to pre-warm another machine.

use std::fs;
use std::io::{BufWriter, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use gpucache::inspect;
use serde_json::json;

use crate::output::{self, size};
use crate::Outcome;

/// Writes every live entry of `dir` to `file`, through a temporary file renamed into place
/// once complete and fsynced, so `file` is never a partial bundle.
pub fn export(out: &mut dyn Write, dir: &Path, file: &Path, as_json: bool) -> Result<Outcome> {
    let mut name = file
        .file_name()
        .with_context(|| format!("{} is not a file name", file.display()))?
        .to_owned();
    name.push(format!(".tmp.{}", std::process::id()));
    let tmp = file.with_file_name(name);
    let result = write_bundle(dir, &tmp).and_then(|report| {
        fs::rename(&tmp, file).with_context(|| format!("cannot rename to {}", file.display()))?;
        Ok(report)
    });
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    let r = result?;
    if as_json {
        let value = json!({
            "dir": dir.display().to_string(),
            "file": file.display().to_string(),
            "entries": r.entries,
            "key_value_bytes": r.key_value_bytes,
            "corrupt_skipped": r.corrupt_skipped,
        });
        output::json(out, &value)?;
    } else {
        writeln!(
            out,
            "exported {} entries, {}, from {} to {}",
            r.entries,
            size(r.key_value_bytes),
            dir.display(),
            file.display()
        )?;
    }
    if r.corrupt_skipped > 0 {
        eprintln!(
            "warning: left out {} corrupt entries (run `gpucache verify`)",
            r.corrupt_skipped
        );
    }
    Ok(Outcome::Success)
}

fn write_bundle(dir: &Path, tmp: &PathBuf) -> Result<inspect::ExportReport> {
    // A bundle holds every entry of the cache: private (0600) whatever the umask, like the
    // cache's own files.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(tmp)
        .and_then(|f| {
            f.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map(|()| f)
        })
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    let mut writer = BufWriter::with_capacity(1 << 20, file);
    let report = inspect::export_bundle(dir, &mut writer)?;
    let file = writer.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(report)
}

/// Stores a bundle's entries into `dir` (see `inspect::import_bundle` for where they go).
pub fn import(
    out: &mut dyn Write,
    dir: &Path,
    file: &Path,
    force: bool,
    as_json: bool,
) -> Result<Outcome> {
    let r = inspect::import_bundle(dir, file, force)?;
    if as_json {
        let replaced = r.replaced.as_ref().map(|m| {
            json!({
                "identity_text": output::text_or_null(m.bytes()),
                "identity_hex": output::hex(m.bytes()),
                "cache_version": m.version(),
                "driver_versioned": m.driver_versioned(),
            })
        });
        let value = json!({
            "dir": r.dir.display().to_string(),
            "file": file.display().to_string(),
            "entries": r.entries,
            "key_value_bytes": r.key_value_bytes,
            "replaced": replaced,
        });
        output::json(out, &value)?;
    } else {
        if let Some(m) = &r.replaced {
            writeln!(
                out,
                "wiped {} (identity {}, version {})",
                r.dir.display(),
                output::identity(m.bytes()),
                m.version()
            )?;
        }
        writeln!(
            out,
            "imported {} entries, {}, from {} into {}",
            r.entries,
            size(r.key_value_bytes),
            file.display(),
            r.dir.display()
        )?;
    }
    Ok(Outcome::Success)
}
