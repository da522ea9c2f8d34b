//! `gpucache report DIR`: the GPU program cache's histograms (`gpucache-gl`), as each
//! identity's directory keeps them in its `gl-histograms` metadata stream: printed as text or
//! JSON and drawn as an SVG image. Nothing in DIR is written.

mod identity;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use gpucache::inspect::{self, DirKind};
use gpucache::{FormatError, HistogramSnapshot, Identity, MetadataStream};
use gpucache_gl::report::{histograms_svg, histograms_text};
use gpucache_gl::{
    GlIdentity, HistogramSet, Metric, PersistedHistograms, HISTOGRAMS_STREAM, PROGRAMS_STREAM,
};
use serde_json::{json, Value};

use crate::output::{self, hex, text_or_null};
use crate::Outcome;

/// The program cache data of one identity's directory.
struct ProgramCacheData {
    dir: PathBuf,
    /// The 16 hex digits of the directory's `id-` name (its whole name without that prefix).
    id: String,
    identity: Identity,
    /// The identity read as a GL identity, when it is one.
    gl: Option<GlIdentity>,
    histograms: PersistedHistograms,
    /// Rows of the `gl-programs` table.
    programs: usize,
}

/// `report DIR`: every identity of DIR that has histograms. [`Outcome::Negative`] (exit 1)
/// when there is none. `svg` is where the image goes (`None`: no image); with several
/// identities each gets its own file, named after its id.
pub fn run(out: &mut dyn Write, dir: &Path, svg: Option<&Path>, as_json: bool) -> Result<Outcome> {
    let caches = load(dir)?;
    if caches.is_empty() {
        eprintln!(
            "gpucache: no program cache data in {} (no {} stream; a gpucache-gl program \
             cache writes one when it flushes)",
            dir.display(),
            HISTOGRAMS_STREAM.name()
        );
        return Ok(Outcome::Negative);
    }
    let images = write_images(&caches, svg)?;
    if as_json {
        let list: Vec<Value> = caches
            .iter()
            .zip(&images)
            .map(|(c, image)| cache_json(c, image.as_deref()))
            .collect();
        let value = json!({ "dir": dir.display().to_string(), "caches": list });
        output::json(out, &value)?;
    } else {
        for (i, (c, image)) in caches.iter().zip(&images).enumerate() {
            if i > 0 {
                writeln!(out)?;
            }
            print_cache(out, c, image.as_deref())?;
        }
    }
    Ok(Outcome::Success)
}

/// The identity directories of `dir` (itself, or those of a driver-versioned root) that hold
/// histograms.
fn load(dir: &Path) -> Result<Vec<ProgramCacheData>> {
    let dirs = match inspect::classify(dir)? {
        DirKind::Cache(identity) => vec![(dir.to_path_buf(), identity)],
        DirKind::VersionedRoot(ids) => ids
            .into_iter()
            .map(|id| inspect::read_meta(&id).map(|meta| (id, meta)))
            .collect::<Result<_, _>>()?,
    };
    let mut found = Vec::new();
    for (dir, identity) in dirs {
        let Some(histograms) = read_histograms(&dir)? else {
            continue;
        };
        found.push(ProgramCacheData {
            id: id_of(&dir),
            gl: identity::decode(identity.bytes()),
            programs: count_programs(&dir)?,
            dir,
            identity,
            histograms,
        });
    }
    Ok(found)
}

fn id_of(dir: &Path) -> String {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    name.strip_prefix("id-").map(str::to_owned).unwrap_or(name)
}

fn read_histograms(dir: &Path) -> Result<Option<PersistedHistograms>> {
    let Some(body) = read_stream(&HISTOGRAMS_STREAM, dir)? else {
        return Ok(None);
    };
    let histograms =
        PersistedHistograms::decode(&body).map_err(|e| damaged(&HISTOGRAMS_STREAM, dir, &e))?;
    Ok(Some(histograms))
}

/// The programs in the `gl-programs` table (0 without one).
fn count_programs(dir: &Path) -> Result<usize> {
    let Some(body) = read_stream(&PROGRAMS_STREAM, dir)? else {
        return Ok(0);
    };
    let table =
        gpucache_gl::decode_program_table(&body).map_err(|e| damaged(&PROGRAMS_STREAM, dir, &e))?;
    Ok(table.len())
}

/// A stream's body (`None` when there is no such file); an error names the file.
fn read_stream(stream: &MetadataStream, dir: &Path) -> Result<Option<Vec<u8>>> {
    stream.read(dir).map_err(|e| match e {
        gpucache::Error::Corrupt(why) => damaged(stream, dir, &why),
        e => anyhow::Error::new(e).context(format!("cannot read {}", stream.path(dir).display())),
    })
}

fn damaged(stream: &MetadataStream, dir: &Path, why: &FormatError) -> anyhow::Error {
    let path = stream.path(dir);
    match why {
        FormatError::Version(_) => anyhow!(
            "{} was written by another version of the program cache ({why})",
            path.display()
        ),
        _ => anyhow!("{} is damaged ({why})", path.display()),
    }
}

/// Writes each cache's image; returns where each went.
fn write_images(caches: &[ProgramCacheData], svg: Option<&Path>) -> Result<Vec<Option<PathBuf>>> {
    let Some(svg) = svg else {
        return Ok(vec![None; caches.len()]);
    };
    caches
        .iter()
        .map(|c| {
            let path = if caches.len() == 1 {
                svg.to_path_buf()
            } else {
                with_id(svg, &c.id)
            };
            fs::write(&path, histograms_svg(&title(c), &c.histograms))
                .with_context(|| format!("cannot write {}", path.display()))?;
            Ok(Some(path))
        })
        .collect()
}

/// `report.svg` -> `report-<id>.svg`.
fn with_id(path: &Path, id: &str) -> PathBuf {
    let mut name = path.file_stem().unwrap_or_default().to_os_string();
    name.push("-");
    name.push(id);
    if let Some(extension) = path.extension() {
        name.push(".");
        name.push(extension);
    }
    path.with_file_name(name)
}

fn title(c: &ProgramCacheData) -> String {
    match &c.gl {
        Some(gl) => format!(
            "GPU program cache: {} ({}, build {})",
            gl.renderer,
            gl.api.name(),
            gl.build_id
        ),
        None => format!("GPU program cache: id-{}", c.id),
    }
}

fn print_cache(out: &mut dyn Write, c: &ProgramCacheData, image: Option<&Path>) -> Result<()> {
    let mut rows = vec![("program cache", c.dir.display().to_string())];
    match &c.gl {
        Some(gl) => rows.extend([
            ("renderer", gl.renderer.clone()),
            ("vendor", gl.vendor.clone()),
            ("GL version", gl.version.clone()),
            ("GLSL version", gl.shading_language_version.clone()),
            ("API", gl.api.name().to_owned()),
            ("build id", gl.build_id.clone()),
            ("arch", gl.arch.clone()),
        ]),
        None => rows.push(("identity", output::identity(c.identity.bytes()))),
    }
    rows.push(("runs", c.histograms.runs.to_string()));
    rows.push(("cached programs", c.programs.to_string()));
    for (name, value) in rows {
        writeln!(out, "{name:<17}{value}")?;
    }
    writeln!(out)?;
    let runs = c.histograms.runs;
    let s = if runs == 1 { "" } else { "s" };
    writeln!(out, "every run ({runs} run{s} merged)")?;
    write!(out, "{}", histograms_text(&c.histograms.total))?;
    writeln!(out)?;
    writeln!(out, "last run")?;
    write!(out, "{}", histograms_text(&c.histograms.last_run))?;
    if let Some(path) = image {
        writeln!(out)?;
        writeln!(out, "{:<17}{}", "image", path.display())?;
    }
    Ok(())
}

fn cache_json(c: &ProgramCacheData, image: Option<&Path>) -> Value {
    let gl = c.gl.as_ref().map_or(Value::Null, |gl| {
        json!({
            "vendor": gl.vendor,
            "renderer": gl.renderer,
            "version": gl.version,
            "shading_language_version": gl.shading_language_version,
            "api": gl.api.name(),
            "build_id": gl.build_id,
            "arch": gl.arch,
        })
    });
    json!({
        "dir": c.dir.display().to_string(),
        "id": c.id,
        "identity": gl,
        "identity_text": text_or_null(c.identity.bytes()),
        "identity_hex": hex(c.identity.bytes()),
        "runs": c.histograms.runs,
        "programs": c.programs,
        "every_run": set_json(&c.histograms.total),
        "last_run": set_json(&c.histograms.last_run),
        "svg": image.map(|p| p.display().to_string()),
    })
}

/// One object per metric, in the order the text prints them.
fn set_json(set: &HistogramSet) -> Value {
    Metric::ALL
        .into_iter()
        .map(|metric| metric_json(metric, set.get(metric)))
        .collect()
}

fn metric_json(metric: Metric, h: &HistogramSnapshot) -> Value {
    json!({
        "metric": metric.name(),
        "unit": metric.unit(),
        "count": h.count(),
        "min": h.min(),
        "mean": h.mean(),
        "p50": h.quantile(0.5),
        "p90": h.quantile(0.9),
        "p99": h.quantile(0.99),
        "max": h.max(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_images_are_named_after_their_id() {
        let id = "0123456789abcdef";
        assert_eq!(
            with_id(Path::new("out/report.svg"), id),
            Path::new("out/report-0123456789abcdef.svg")
        );
        assert_eq!(
            with_id(Path::new("report"), id),
            Path::new("report-0123456789abcdef")
        );
        assert_eq!(id_of(Path::new("/c/id-0123456789abcdef")), id);
        assert_eq!(id_of(Path::new("/c/programs")), "programs");
    }
}
