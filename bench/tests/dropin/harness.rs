//! The fixtures of the drop-in's tests: the drop-in library and its vendor file, the C
//! application, a sandboxed environment per test, and what a run printed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use gpucache_bench::gl::{corpus, mesa};

/// The drop-in library, built next to the test binaries (a dependency of this crate).
pub(crate) fn dropin_lib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let lib = exe.parent().unwrap().join("libEGL_gpucache.so");
    assert!(lib.exists(), "{} is not built", lib.display());
    lib
}

/// A scratch directory shared by this binary's tests: the compiled C program and the
/// drop-in's JSON file.
pub(crate) fn shared() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

/// `bench/c/dropin_app.c`, compiled once (it links libEGL: `libegl-dev`).
pub(crate) fn app() -> &'static Path {
    static APP: OnceLock<PathBuf> = OnceLock::new();
    APP.get_or_init(|| {
        let src = corpus::workspace_root().join("bench/c/dropin_app.c");
        let out = shared().join("dropin_app");
        let status = Command::new("cc")
            .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"])
            .arg(&src)
            .arg("-o")
            .arg(&out)
            .args(["-lEGL", "-lpthread"])
            .status()
            .expect("cc (scripts/install-deps installs it)");
        assert!(status.success(), "compiling {}", src.display());
        out
    })
}

/// The drop-in's vendor JSON file.
pub(crate) fn dropin_json() -> &'static Path {
    static JSON: OnceLock<PathBuf> = OnceLock::new();
    JSON.get_or_init(|| {
        let path = shared().join("gpucache.json");
        std::fs::write(
            &path,
            format!(
                "{{\"file_format_version\":\"1.0.0\",\"ICD\":{{\"library_path\":\"{}\"}}}}\n",
                dropin_lib().display()
            ),
        )
        .unwrap();
        path
    })
}

/// Where one test's files go; `HOME` and the XDG folders point here, so nothing reaches the
/// user's own caches.
pub(crate) struct Sandbox {
    pub(crate) dir: tempfile::TempDir,
}

impl Sandbox {
    pub(crate) fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub(crate) fn root(&self) -> PathBuf {
        // The real path: the drop-in resolves its root's links, and logs real paths.
        std::fs::canonicalize(self.dir.path())
            .unwrap()
            .join("gpucache")
    }

    /// A command with Mesa 25 and no drop-in (`MESA_SHADER_CACHE_DISABLE`: no cache at all).
    pub(crate) fn plain(&self, program: &Path) -> Command {
        let mut c = Command::new(program);
        c.envs(mesa::env().expect("Mesa 25: run scripts/setup-mesa (scripts/test does)"))
            .env("HOME", self.dir.path())
            .env("XDG_CACHE_HOME", self.dir.path().join("xdg-cache"))
            .env("XDG_CONFIG_HOME", self.dir.path().join("xdg-config"))
            .env("MESA_SHADER_CACHE_DISABLE", "true")
            .env_remove("GPUCACHE_DROPIN")
            .env_remove("MESA_SHADER_CACHE_DIR");
        c
    }

    /// A command with the drop-in as the only GLVND vendor, wrapping Mesa 25's, its cache in
    /// `root()`, Mesa's own cache on (the hybrid's default).
    pub(crate) fn dropin(&self, program: &Path) -> Command {
        let mut c = self.plain(program);
        let mesa_json = mesa::root().join("egl_vendor.json");
        c.env_remove("MESA_SHADER_CACHE_DISABLE")
            .env("__EGL_VENDOR_LIBRARY_FILENAMES", dropin_json())
            .env("GPUCACHE_DROPIN_VENDOR", mesa_json)
            .env("GPUCACHE_DROPIN_DIR", self.root())
            .env("GPUCACHE_DROPIN_LOG", "1");
        c
    }
}

/// What one run printed.
#[derive(Debug, Default)]
pub(crate) struct Run {
    pub(crate) values: BTreeMap<String, String>,
    pub(crate) stderr: String,
}

impl Run {
    pub(crate) fn of(out: Output) -> Self {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "the application failed ({}):\n{stdout}\n{stderr}",
            out.status
        );
        let mut values = BTreeMap::new();
        for line in stdout.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            for pair in words.chunks(2) {
                if let [k, v] = pair {
                    values.insert(k.to_string(), v.to_string());
                }
            }
        }
        Self { values, stderr }
    }

    pub(crate) fn get(&self, key: &str) -> &str {
        self.values
            .get(key)
            .unwrap_or_else(|| panic!("no {key} in {:?}", self.values))
    }

    pub(crate) fn num(&self, key: &str) -> u64 {
        self.get(key).parse().unwrap()
    }

    /// The drop-in's counters at exit (`gets`, `hits`, `sets`, `sets_dropped`).
    pub(crate) fn counters(&self) -> Option<BTreeMap<String, u64>> {
        let line = self
            .stderr
            .lines()
            .find_map(|l| l.strip_prefix("gpucache-dropin: at exit: "))?;
        let words: Vec<&str> = line.split_whitespace().collect();
        Some(
            words
                .chunks(2)
                .map(|p| (p[0].to_string(), p[1].parse().unwrap()))
                .collect(),
        )
    }

    pub(crate) fn installs(&self) -> usize {
        self.stderr
            .matches("callbacks installed on display")
            .count()
    }
}

/// Runs the C app with `args`, plainly or under the drop-in.
pub(crate) fn run_app<I: IntoIterator<Item = S>, S: AsRef<std::ffi::OsStr>>(
    s: &Sandbox,
    dropin: bool,
    args: I,
) -> Run {
    let mut c = if dropin {
        s.dropin(app())
    } else {
        s.plain(app())
    };
    c.args(args);
    run(c)
}

pub(crate) fn run(mut c: Command) -> Run {
    Run::of(c.output().unwrap())
}

/// The application's namespace directory under `root` (`dropin_app-<build id>`), and the one
/// identity directory inside it.
pub(crate) fn namespace(root: &Path, exe: &str) -> (PathBuf, PathBuf) {
    let entries: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(entries.len(), 1, "one namespace: {entries:?}");
    let ns = entries[0].clone();
    let name = ns.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with(&format!("{exe}-")), "{name}");
    namespace_of(&ns)
}

pub(crate) fn assert_served(cold: &Run, warm: &Run) {
    let cold_c = cold
        .counters()
        .expect("the drop-in ran (GPUCACHE_DROPIN_LOG)");
    let warm_c = warm.counters().expect("the drop-in ran");
    assert!(
        cold_c["sets"] > 0,
        "Mesa stored through gpucache: {cold_c:?}"
    );
    assert!(warm_c["hits"] > 0, "the second run was served: {warm_c:?}");
    // Every lookup of the second run hit: no program was compiled again.
    assert_eq!(warm_c["gets"], warm_c["hits"], "every get hit: {warm_c:?}");
    // What it stored can only be what context creation compiled (the hybrid's known race,
    // docs/context-creation.md: Mesa queues those stores during eglCreateContext, and a job
    // that runs after the install reaches gpucache instead of Mesa's own files; never looked
    // up through the callbacks, so never a miss): a few entries, not a program's five.
    assert!(
        warm_c["sets"] - warm_c["sets_dropped"] <= 3,
        "nothing but context-creation entries stored in the second run: {warm_c:?}"
    );
}

/// The namespace `ns` and the one identity directory inside it.
pub(crate) fn namespace_of(ns: &Path) -> (PathBuf, PathBuf) {
    let ids: Vec<PathBuf> = std::fs::read_dir(ns)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("id-") && p.is_dir())
        .collect();
    assert_eq!(ids.len(), 1, "one identity: {ids:?}");
    (ns.to_path_buf(), ids[0].clone())
}
