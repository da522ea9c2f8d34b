//! The cases of the warm-start benchmark: how each one's process is started and where its
//! cache lives.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

use super::RunReport;

/// One column of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    /// `MESA_SHADER_CACHE_DISABLE=true`, no callbacks.
    NoCache,
    /// Mesa's default back end in 25.0.7.
    MesaDb,
    /// `MESA_DISK_CACHE_MULTI_FILE=1`.
    MesaMultiFile,
    /// `MESA_DISK_CACHE_SINGLE_FILE=1`.
    MesaSingleFile,
    /// gpucache through the callbacks; Mesa's own cache only for what context creation
    /// compiles, inside gpucache's directory (the hybrid).
    Gpucache,
    /// gpucache's callbacks and its program cache (gpucache-gl) together.
    GpucachePrograms,
    /// Callbacks over an in-process map filled from one file.
    Floor,
    /// An unmodified application (`gl_run --callbacks none`) under the drop-in
    /// (`libEGL_gpucache.so` as the only GLVND vendor, wrapping Mesa's): gpucache through
    /// the callbacks and the hybrid, set up by the drop-in alone.
    Dropin,
}

impl Case {
    /// Every case, in table order.
    pub const ALL: [Case; 8] = [
        Case::NoCache,
        Case::MesaDb,
        Case::MesaMultiFile,
        Case::MesaSingleFile,
        Case::Gpucache,
        Case::GpucachePrograms,
        Case::Floor,
        Case::Dropin,
    ];

    /// The row label.
    pub fn label(self) -> &'static str {
        match self {
            Case::NoCache => "no cache",
            Case::MesaDb => "Mesa-DB",
            Case::MesaMultiFile => "Mesa multi-file",
            Case::MesaSingleFile => "Mesa single-file",
            Case::Gpucache => "gpucache",
            Case::GpucachePrograms => "gpucache + program cache",
            Case::Floor => "floor (in-process map)",
            Case::Dropin => "drop-in (unmodified app)",
        }
    }

    /// A folder name.
    pub fn slug(self) -> &'static str {
        match self {
            Case::NoCache => "nocache",
            Case::MesaDb => "mesa-db",
            Case::MesaMultiFile => "mesa-multi",
            Case::MesaSingleFile => "mesa-single",
            Case::Gpucache => "gpucache",
            Case::GpucachePrograms => "gpucache-programs",
            Case::Floor => "floor",
            Case::Dropin => "dropin",
        }
    }

    /// Whether the case keeps anything between processes.
    pub fn caches(self) -> bool {
        self != Case::NoCache
    }

    /// The one folder a Mesa back end must create in `MESA_SHADER_CACHE_DIR`: a run that
    /// creates another is mislabelled.
    pub fn mesa_folder(self) -> Option<&'static str> {
        match self {
            Case::MesaDb => Some("mesa_shader_cache_db"),
            Case::MesaMultiFile => Some("mesa_shader_cache"),
            Case::MesaSingleFile => Some("mesa_shader_cache_sf"),
            _ => None,
        }
    }

    /// What holds the case's cache under its own folder `home`.
    pub fn cache_path(self, home: &Path) -> PathBuf {
        match self {
            Case::NoCache => home.join("none"),
            Case::MesaDb | Case::MesaMultiFile | Case::MesaSingleFile => home.join("mesa"),
            Case::Gpucache | Case::GpucachePrograms => home.join("gpucache"),
            Case::Floor => home.join("floor.bin"),
            Case::Dropin => home.join("dropin"),
        }
    }

    /// The `gl_run` command of one process of this case.
    pub fn command(self, gl_run: &Path, home: &Path, workload: &Workload) -> Result<Command> {
        let mut cmd = Command::new(gl_run);
        cmd.envs(super::mesa::env()?);
        // Nothing inherited may choose another back end, and nothing may reach ~/.cache.
        for (name, _) in std::env::vars_os() {
            let name_s = name.to_string_lossy();
            if name_s.starts_with("MESA_SHADER_CACHE")
                || name_s.starts_with("MESA_DISK_CACHE")
                || name_s.starts_with("MESA_GLSL_CACHE")
            {
                cmd.env_remove(&name);
            }
        }
        cmd.env("HOME", home)
            .env("XDG_CACHE_HOME", home.join("xdg"));
        let callbacks = match self {
            Case::NoCache => {
                cmd.env("MESA_SHADER_CACHE_DISABLE", "true");
                "none"
            }
            Case::MesaDb | Case::MesaMultiFile | Case::MesaSingleFile => {
                cmd.env("MESA_SHADER_CACHE_DIR", self.cache_path(home));
                match self {
                    Case::MesaMultiFile => cmd.env("MESA_DISK_CACHE_MULTI_FILE", "1"),
                    Case::MesaSingleFile => cmd.env("MESA_DISK_CACHE_SINGLE_FILE", "1"),
                    _ => &mut cmd,
                };
                "none"
            }
            Case::Gpucache | Case::GpucachePrograms => {
                // The hybrid: gl_run points Mesa's own cache into gpucache's directory
                // (gpucache_egl_mesa_context_cache) for what context creation compiles.
                cmd.arg("--mesa-context-cache");
                cmd.arg("--cache-path").arg(self.cache_path(home));
                if self == Case::GpucachePrograms {
                    cmd.args(["--programs", "cache", "--programs-path"])
                        .arg(home.join("programs"));
                }
                "gpucache"
            }
            Case::Floor => {
                cmd.env("MESA_SHADER_CACHE_DISABLE", "true");
                cmd.arg("--cache-path").arg(self.cache_path(home));
                "floor"
            }
            Case::Dropin => {
                let json = home.join("gpucache.json");
                std::fs::write(&json, dropin_json(gl_run)?)?;
                cmd.env("__EGL_VENDOR_LIBRARY_FILENAMES", &json)
                    .env(
                        "GPUCACHE_DROPIN_VENDOR",
                        super::mesa::root().join("egl_vendor.json"),
                    )
                    .env("GPUCACHE_DROPIN_DIR", self.cache_path(home))
                    .env("XDG_CONFIG_HOME", home.join("config"));
                "none"
            }
        };
        cmd.args(["--callbacks", callbacks])
            .arg("--corpus")
            .arg(&workload.corpus)
            .args(["--variants", &workload.variants.to_string()]);
        if let Some(limit) = workload.limit {
            cmd.args(["--limit", &limit.to_string()]);
        }
        Ok(cmd)
    }

    /// After a populating run: the case created exactly the cache it claims to be.
    pub fn check_folders(self, home: &Path) -> Result<()> {
        let path = self.cache_path(home);
        if let Some(expected) = self.mesa_folder() {
            let mut made: Vec<String> = std::fs::read_dir(&path)
                .with_context(|| format!("{} made no cache at {}", self.label(), path.display()))?
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            made.sort();
            if made != [expected] {
                bail!(
                    "{} should create only {expected}/, found {made:?}",
                    self.label()
                );
            }
        } else if self.caches() && !path.exists() {
            bail!("{} made no cache at {}", self.label(), path.display());
        }
        // No case may fall back to Mesa's default location.
        let stray = home.join("xdg");
        if stray.exists() {
            bail!("{} wrote to {}", self.label(), stray.display());
        }
        Ok(())
    }
}

/// The vendor JSON naming the drop-in library built beside `gl_run` (the bench crate depends
/// on gpucache-dropin, so cargo builds `libEGL_gpucache.so` in the same profile).
fn dropin_json(gl_run: &Path) -> Result<String> {
    let dir = gl_run.parent().unwrap_or(Path::new("."));
    // The newer of the two: building the benchmark updates only the copy in `deps/` (the
    // drop-in is a dependency there), so a copy beside `gl_run` from an earlier
    // `cargo build -p gpucache-dropin` may be stale.
    let lib = [
        dir.join("libEGL_gpucache.so"),
        dir.join("deps/libEGL_gpucache.so"),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max_by_key(|(modified, _)| *modified)
    .map(|(_, p)| p)
    .with_context(|| {
        format!(
            "libEGL_gpucache.so is not built beside {}",
            gl_run.display()
        )
    })?;
    let lib = std::fs::canonicalize(lib)?;
    Ok(format!(
        "{{\"file_format_version\":\"1.0.0\",\"ICD\":{{\"library_path\":\"{}\"}}}}\n",
        lib.display()
    ))
}

/// What every process draws.
#[derive(Clone, Debug)]
pub struct Workload {
    /// The corpus folder.
    pub corpus: PathBuf,
    /// `#define` variants per shader.
    pub variants: usize,
    /// Only the first N programs.
    pub limit: Option<usize>,
}

/// One process: its report and its wall time.
#[derive(Clone, Debug)]
pub struct Run {
    /// What the process printed.
    pub report: RunReport,
    /// Spawn to exit.
    pub wall: Duration,
    /// Reads that reached the device (cold runs under a storage profile).
    pub io: Option<super::throttle::IoCount>,
}

/// Runs one process of `case` and parses its report.
pub fn run(case: Case, gl_run: &Path, home: &Path, workload: &Workload) -> Result<Run> {
    let start = Instant::now();
    let out = case
        .command(gl_run, home, workload)?
        .output()
        .with_context(|| format!("starting {}", gl_run.display()))?;
    let wall = start.elapsed();
    if !out.status.success() {
        bail!(
            "{} run failed ({}):\n{}",
            case.label(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let report = RunReport::parse(&String::from_utf8_lossy(&out.stdout))?;
    Ok(Run {
        report,
        wall,
        io: None,
    })
}
