//! The drop-in (`libEGL_gpucache.so`, a GLVND vendor wrapping Mesa's) under unmodified
//! applications on real Mesa 25 (llvmpipe), each run a fresh process:
//!
//! - a C program that links libEGL (`bench/c/dropin_app.c`): its second run is served by
//!   gpucache (hits, nothing stored again) in its own namespace directory, with the pixels
//!   of a run without any cache; with threads, two displays, terminate and re-initialise,
//!   and a fork;
//! - a Rust program that loads libEGL itself (`gl_run`, khronos-egl's dynamic loading);
//! - an application with its own blob cache, installed after the context (its callbacks
//!   take over) or before (gpucache stays out);
//! - the ways to step aside: disabled, an unusable directory, a directory of another owner,
//!   a killed run before, another identity's cache beside.

mod harness;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use gpucache_bench::gl::{corpus, mesa};
use harness::{
    app, assert_served, dropin_json, dropin_lib, namespace, namespace_of, run, run_app, Run,
    Sandbox,
};

#[test]
fn a_c_program_linking_libegl_is_served_by_gpucache_with_the_same_pixels() {
    let s = Sandbox::new();
    let args = ["--programs", "6"];
    let baseline = run_app(&s, false, args);
    let cold = run_app(&s, true, args);
    let warm = run_app(&s, true, args);
    assert_eq!(cold.installs(), 1, "{}", cold.stderr);
    assert_eq!(baseline.get("pixels"), cold.get("pixels"));
    assert_eq!(baseline.get("pixels"), warm.get("pixels"));
    assert_served(&cold, &warm);

    // Its own namespace, private modes; Mesa's context-creation files inside it; nothing in
    // the XDG cache (Mesa's default place).
    let (ns, id) = namespace(&s.root(), "dropin_app");
    for dir in [&ns, &id] {
        let mode = std::fs::metadata(dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", dir.display());
    }
    // Every file and folder below, Mesa's own included (gpucache makes them before Mesa
    // would, with its own modes).
    let mut pending = vec![id.clone()];
    while let Some(dir) = pending.pop() {
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap();
            let mode = f.metadata().unwrap().permissions().mode() & 0o777;
            if f.file_type().unwrap().is_dir() {
                assert_eq!(mode, 0o700, "{}", f.path().display());
                pending.push(f.path());
            } else {
                assert_eq!(mode, 0o600, "{}", f.path().display());
            }
        }
    }
    assert!(
        id.join("mesa-context/mesa_shader_cache_db").is_dir(),
        "the hybrid: Mesa's own cache in the namespace"
    );
    // The identity names the driver library that holds the compiler (Mesa 25:
    // libgallium), by its build id, and Mesa's EGL library.
    let meta = String::from_utf8_lossy(&std::fs::read(id.join("meta")).unwrap()).into_owned();
    for field in [
        "\ndriver=swrast\n",
        "\ndriver_build_id=",
        "\nlibrary_build_id=",
    ] {
        assert!(meta.contains(field), "{field:?} in the identity: {meta:?}");
    }
    assert!(!meta.contains("driver_config="), "{meta:?}");
    assert!(!s.dir.path().join("xdg-cache").exists());
    // The hybrid's variables were put back once Mesa had read them: the application (and
    // whatever it starts) sees its own environment.
    assert_eq!(cold.get("env_mesa_shader_cache_dir"), "-");
    assert_eq!(warm.get("env_mesa_shader_cache_dir"), "-");
}

#[test]
fn threads_two_displays_reinitialise_and_fork() {
    for (name, args) in [
        ("threads", &["--programs", "6", "--threads", "3"][..]),
        ("displays", &["--programs", "3", "--displays", "2"]),
        ("reinit", &["--programs", "4", "--reinit"]),
        ("fork", &["--programs", "4", "--fork"]),
    ] {
        let s = Sandbox::new();
        let baseline = run_app(&s, false, args);
        let cold = run_app(&s, true, args);
        let warm = run_app(&s, true, args);
        assert_eq!(baseline.get("pixels"), cold.get("pixels"), "{name}");
        assert_eq!(baseline.get("pixels"), warm.get("pixels"), "{name}");
        let installs = match name {
            // One install per display, and again after the display was re-initialised.
            "displays" | "reinit" => 2,
            _ => 1,
        };
        assert_eq!(cold.installs(), installs, "{name}: {}", cold.stderr);
        assert_served(&cold, &warm);
        // Every display's first context (re-initialised ones too) had Mesa's own cache in
        // the namespace, never in the XDG cache.
        assert!(!s.dir.path().join("xdg-cache").exists(), "{name}");
        if name == "reinit" {
            // The second round of the cold run was served from what its first stored.
            let c = cold.counters().unwrap();
            assert!(c["hits"] > 0, "{name}: {c:?}");
        }
    }
}

#[test]
fn a_rust_program_loading_libegl_itself_is_served() {
    let corpus_dir = corpus::default_dir();
    assert!(
        corpus_dir.join("../.complete").exists(),
        "the kodi corpus is missing: run scripts/fetch-corpus (scripts/test does)"
    );
    let gl_run = PathBuf::from(env!("CARGO_BIN_EXE_gl_run"));
    let s = Sandbox::new();
    let pixels = |n: &str| s.dir.path().join(n);
    let cmd = |mut c: Command, p: &str| {
        c.args(["--callbacks", "none", "--api", "gles", "--limit", "4"])
            .arg("--corpus")
            .arg(&corpus_dir)
            .arg("--pixels")
            .arg(pixels(p));
        c
    };
    let _ = run(cmd(s.plain(&gl_run), "baseline"));
    let cold = run(cmd(s.dropin(&gl_run), "cold"));
    let warm = run(cmd(s.dropin(&gl_run), "warm"));
    assert_eq!(cold.installs(), 1, "{}", cold.stderr);
    assert_served(&cold, &warm);
    let read = |n: &str| std::fs::read_to_string(pixels(n)).unwrap();
    assert_eq!(read("baseline"), read("cold"));
    assert_eq!(read("baseline"), read("warm"));
    namespace(&s.root(), "gl_run");
}

#[test]
fn the_applications_own_blob_cache_takes_precedence() {
    // Installed after the context (over gpucache's): its callbacks receive every call, and
    // a second install is refused as without gpucache (the program checks both).
    let s = Sandbox::new();
    let args = ["--programs", "4", "--own-cache", "after"];
    let plain = run_app(&s, false, args);
    for _ in 0..2 {
        let with = run_app(&s, true, args);
        assert_eq!(plain.get("pixels"), with.get("pixels"));
        assert!(with.num("own_sets") > 0, "{:?}", with.values);
        assert!(with.num("own_gets") > 0, "{:?}", with.values);
        assert!(with.stderr.contains("its callbacks take over"));
        // The programs went to the application; gpucache got at most what context creation
        // compiled (the race in `assert_served`), never a program's entries.
        let c = with.counters().unwrap();
        assert!(c["sets"] <= 3, "{c:?}");
        assert!(with.num("own_sets") >= 4, "{:?}", with.values);
    }

    // Installed right after eglInitialize: gpucache stays out of the display, and the
    // application sees what it sees without gpucache.
    let s = Sandbox::new();
    let args = ["--programs", "4", "--own-cache", "before"];
    let plain = run_app(&s, false, args);
    let with = run_app(&s, true, args);
    assert_eq!(plain.get("pixels"), with.get("pixels"));
    assert_eq!(with.installs(), 0, "{}", with.stderr);
    for k in ["own_sets", "own_gets"] {
        assert_eq!(plain.get(k), with.get(k), "{k}");
    }
    assert!(!s.root().exists(), "nothing configured");
}

#[test]
fn stepping_aside_leaves_the_application_as_without_the_dropin() {
    let args = ["--programs", "3"];
    let s = Sandbox::new();
    let baseline = run_app(&s, false, args);
    let expect_aside = |mut c: Command, why: &str| {
        c.args(args);
        let r = run(c);
        assert_eq!(baseline.get("pixels"), r.get("pixels"), "{why}");
        assert_eq!(r.installs(), 0, "{why}: {}", r.stderr);
        r
    };

    // Disabled.
    let mut c = s.dropin(app());
    c.env("GPUCACHE_DROPIN", "0");
    expect_aside(c, "disabled");
    assert!(!s.root().exists());

    // A directory that cannot be created (a file where a folder should be; /proc).
    let blocker = s.dir.path().join("file");
    std::fs::write(&blocker, b"x").unwrap();
    for dir in [
        blocker.join("sub"),
        PathBuf::from("/proc/gpucache-dropin-test"),
    ] {
        let mut c = s.dropin(app());
        c.env("GPUCACHE_DROPIN_DIR", &dir);
        let r = expect_aside(c, "unusable directory");
        assert!(r.stderr.contains("stepping aside"), "{}", r.stderr);
    }

    // A read-only directory (root ignores permission bits: only checked as another user).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let ro = s.dir.path().join("ro");
        std::fs::create_dir(&ro).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o500)).unwrap();
        let mut c = s.dropin(app());
        c.env("GPUCACHE_DROPIN_DIR", &ro);
        expect_aside(c, "read-only directory");
    }

    // A directory that belongs to another user: refused (its owner could plant entries).
    if unsafe { libc::geteuid() } == 0 {
        let foreign = s.dir.path().join("foreign");
        std::fs::create_dir(&foreign).unwrap();
        std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
        let mut c = s.dropin(app());
        c.env("GPUCACHE_DROPIN_DIR", &foreign)
            .env("GPUCACHE_DROPIN_NAMESPACE", "shared");
        expect_aside(c, "foreign owner");
        assert_eq!(std::fs::read_dir(&foreign).unwrap().count(), 0);
        assert_eq!(std::fs::metadata(&foreign).unwrap().uid(), 65534);
    }
}

#[test]
fn a_killed_run_and_a_foreign_identity_leave_later_runs_correct() {
    let s = Sandbox::new();
    let baseline = run_app(&s, false, ["--programs", "4"]);
    // Killed while compiling (SIGKILL: no exit handler runs).
    let mut child = s
        .dropin(app())
        .args(["--programs", "40", "--pause-ms", "100"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().unwrap();
    child.wait().unwrap();

    // Another identity's cache in the namespace (another driver wrote it): left alone.
    let (ns, _) = if s.root().exists() && std::fs::read_dir(s.root()).unwrap().count() > 0 {
        namespace(&s.root(), "dropin_app")
    } else {
        panic!("the killed run created its namespace")
    };
    let foreign = ns.join("id-0123456789abcdef");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("meta"), b"not ours").unwrap();

    for _ in 0..2 {
        let r = run_app(&s, true, ["--programs", "4"]);
        assert_eq!(baseline.get("pixels"), r.get("pixels"));
        assert_eq!(r.installs(), 1);
    }
    assert_eq!(std::fs::read(foreign.join("meta")).unwrap(), b"not ours");
}

#[test]
fn the_ld_preload_interposer_serves_a_program_linking_libegl() {
    // Where GLVND is absent the same library is preloaded; here GLVND loads Mesa's vendor
    // alone and the interposed eglCreateContext does the work.
    let s = Sandbox::new();
    let args = ["--programs", "4"];
    let baseline = run_app(&s, false, args);
    let preloaded = || {
        let mut c = s.plain(app());
        c.env_remove("MESA_SHADER_CACHE_DISABLE")
            .env("LD_PRELOAD", dropin_lib())
            .env("GPUCACHE_DROPIN_DIR", s.root())
            .env("GPUCACHE_DROPIN_LOG", "1")
            .args(args);
        run(c)
    };
    let cold = preloaded();
    let warm = preloaded();
    assert_eq!(cold.installs(), 1, "{}", cold.stderr);
    assert!(
        !cold.stderr.contains("real vendor"),
        "not loaded as a vendor"
    );
    assert_eq!(baseline.get("pixels"), cold.get("pixels"));
    assert_eq!(baseline.get("pixels"), warm.get("pixels"));
    assert_served(&cold, &warm);
    namespace(&s.root(), "dropin_app");
}

/// piglit's `shader_runner` (Debian's `piglit`, which loads libEGL through waffle).
const PIGLIT: &str = "/usr/lib/x86_64-linux-gnu/piglit";
/// A handful of piglit's shader tests: GLSL 1.30 execution tests and one geometry shader
/// whose code generation takes seconds on llvmpipe.
const PIGLIT_TESTS: [&str; 7] = [
    "spec/glsl-1.30/execution/fs-modf-vec2",
    "spec/glsl-1.30/execution/fs-large-local-array-vec3",
    "spec/glsl-1.30/execution/vs-increment-int",
    "spec/glsl-1.30/execution/fs-isnan-vec3",
    "spec/glsl-1.30/execution/fs-mix-bvec4-infnan",
    "spec/glsl-1.30/execution/glsl-fs-bit-01",
    "spec/glsl-1.50/execution/geometry/max-input-components",
];

#[test]
fn piglit_shader_runner_results_are_unchanged_and_the_second_run_is_served() {
    let runner = Path::new(PIGLIT).join("bin/shader_runner");
    assert!(
        runner.exists(),
        "piglit is not installed (scripts/install-deps installs it)"
    );
    let s = Sandbox::new();
    let result = |mut c: Command, test: &str| {
        c.env("PIGLIT_PLATFORM", "surfaceless_egl")
            .arg(Path::new(PIGLIT).join(format!("tests/{test}.shader_test")))
            .args(["-auto", "-fbo"]);
        let out = c.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let line = stdout
            .lines()
            .find(|l| l.starts_with("PIGLIT: "))
            .unwrap_or_else(|| panic!("{test}: no result\n{stdout}\n{stderr}"))
            .to_string();
        (
            line,
            Run {
                values: BTreeMap::new(),
                stderr,
            },
        )
    };
    for test in PIGLIT_TESTS {
        let (plain, _) = result(s.plain(&runner), test);
        assert_eq!(
            plain, r#"PIGLIT: {"result": "pass" }"#,
            "{test} without cache"
        );
        let (cold, cold_run) = result(s.dropin(&runner), test);
        let (warm, warm_run) = result(s.dropin(&runner), test);
        assert_eq!(plain, cold, "{test}: {}", cold_run.stderr);
        assert_eq!(plain, warm, "{test}: {}", warm_run.stderr);
        assert_eq!(cold_run.installs(), 1, "{test}: {}", cold_run.stderr);
        assert_served(&cold_run, &warm_run);
    }
    namespace(&s.root(), "shader_runner");
}

#[test]
fn found_through_glvnds_own_list_it_skips_itself_and_lists_devices_once() {
    // `__EGL_VENDOR_LIBRARY_FILENAMES=<drop-in>:<Mesa>`, no GPUCACHE_DROPIN_VENDOR: the drop-in
    // finds Mesa in GLVND's own list (skipping its own file), and since GLVND loads Mesa's entry
    // too, leaves device enumeration to it: the application sees one device, as without the
    // drop-in, and the surfaceless display is cached.
    let s = Sandbox::new();
    let args = ["--programs", "2", "--displays", "2"];
    let baseline = run_app(&s, false, args);
    let both = || {
        let mut c = s.dropin(app());
        c.env_remove("GPUCACHE_DROPIN_VENDOR").env(
            "__EGL_VENDOR_LIBRARY_FILENAMES",
            format!(
                "{}:{}",
                dropin_json().display(),
                mesa::root().join("egl_vendor.json").display()
            ),
        );
        c.args(args);
        run(c)
    };
    let cold = both();
    let warm = both();
    assert_eq!(baseline.get("devices"), "1");
    assert_eq!(
        cold.get("devices"),
        baseline.get("devices"),
        "{}",
        cold.stderr
    );
    assert_eq!(baseline.get("pixels"), cold.get("pixels"));
    assert_eq!(baseline.get("pixels"), warm.get("pixels"));
    assert!(cold.stderr.contains("real vendor: "), "{}", cold.stderr);
    // The surfaceless display is the drop-in's; the device's is Mesa's own entry's.
    assert_eq!(cold.installs(), 1, "{}", cold.stderr);
    assert_served(&cold, &warm);
}

/// Two "machines" (two sandboxes, two cache roots) and one real Redis: the first runs the
/// unmodified application under the drop-in and its entries reach the fleet; the second
/// starts with an empty root and its very first run is served, from the fleet, with the same
/// pixels.
#[test]
fn a_fresh_machine_is_served_from_the_fleet_through_the_dropin() {
    use gpucache_fleet::testing::{redis_available, RedisServer};
    use std::os::unix::fs::PermissionsExt as _;
    if !redis_available() {
        assert!(
            std::env::var_os("CI").is_none(),
            "redis-server is missing: run scripts/install-deps"
        );
        eprintln!("skipped: redis-server is not installed (scripts/install-deps)");
        return;
    }
    let redis = RedisServer::start(&[]).unwrap();
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("fleet.key");
    std::fs::write(&key, "the key of this test's fleet of two machines\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let with_fleet = |s: &Sandbox| {
        let mut c = s.dropin(app());
        c.args(["--programs", "6"])
            .env("GPUCACHE_FLEET_URL", redis.url())
            .env("GPUCACHE_FLEET_KEY_FILE", &key)
            // An unoptimised test build verifies slowly; the budget itself is tested in
            // crates/gpucache-fleet/tests/faults.rs.
            .env("GPUCACHE_FLEET_READ_BUDGET_MS", "50");
        c
    };
    let (one, two) = (Sandbox::new(), Sandbox::new());
    let cold = run(with_fleet(&one));
    let fresh = run(with_fleet(&two));
    assert_eq!(cold.get("pixels"), fresh.get("pixels"));
    assert_served(&cold, &fresh);
    // The second machine's own root held nothing before: what served it came from the fleet.
    let (_, id) = namespace(&two.root(), "dropin_app");
    assert!(
        id.join("fleet-stats").exists(),
        "the fleet tier kept its counters beside the cache"
    );
}

#[test]
fn the_root_is_pruned_to_its_limit_sparing_caches_in_use() {
    let s = Sandbox::new();
    let root = s.root();
    // Drop-in caches that other applications (or earlier builds of this one) left: one no
    // process uses, one a running process holds (util-linux `flock` holding a shared lock on
    // its `.inuse` file, as the drop-in does for the life of each application). And an
    // application's own cache in the same root (not the drop-in's identity): never touched.
    let stale = old_cache(
        &root.join("old_app-00000000000000aa"),
        "gpucache-dropin 1\nold",
    );
    let held = old_cache(
        &root.join("other_app-00000000000000bb"),
        "gpucache-dropin 1\nheld",
    );
    let foreign = old_cache(&root.join("engine"), "an engine's own cache");
    let lock = held.with_file_name(format!(
        "{}.inuse",
        held.file_name().unwrap().to_string_lossy()
    ));
    // Its own process group, so that killing it also kills `sleep`, which shares the lock.
    let mut holder = {
        use std::os::unix::process::CommandExt;
        Command::new("flock")
            .arg("--shared")
            .arg(&lock)
            .args(["sleep", "60"])
            .process_group(0)
            .spawn()
            .expect("flock (util-linux)")
    };
    let is_held = || {
        let probe = Command::new("flock")
            .args(["--exclusive", "--nonblock"])
            .arg(&lock)
            .arg("true")
            .status()
            .unwrap();
        !probe.success()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !is_held() {
        assert!(
            std::time::Instant::now() < deadline,
            "flock never took the lock"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    let with_limit = || {
        let mut c = s.dropin(app());
        c.env("GPUCACHE_DROPIN_TOTAL_MAX_BYTES", "1K")
            .args(["--programs", "2"]);
        run(c)
    };
    let first = with_limit();
    let own: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("dropin_app-")
        })
        .collect();
    assert_eq!(own.len(), 1, "{own:?}");
    assert!(
        first
            .stderr
            .contains(&format!("pruned {}", stale.display())),
        "{}",
        first.stderr
    );
    assert!(!stale.exists());
    assert!(held.join("meta").exists(), "a held cache is kept");
    assert!(
        foreign.join("meta").exists(),
        "not a drop-in cache: never touched"
    );
    // Its own cache is kept too, marked in use (0600, as every file of the drop-in).
    let (_, id) = namespace_of(&own[0]);
    assert!(id.join("meta").exists());
    for file in [
        root.join(".last-prune~"),
        id.with_file_name(format!(
            "{}.inuse",
            id.file_name().unwrap().to_string_lossy()
        )),
    ] {
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", file.display());
    }

    // Released now, the other cache still stays until the next day's prune.
    // SAFETY: kill takes no pointers; the group is the holder's own.
    assert_eq!(
        unsafe { libc::kill(-(holder.id() as i32), libc::SIGKILL) },
        0
    );
    holder.wait().unwrap();
    // `sleep`, killed with it but not waited for here, lets go of the lock as it exits.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while is_held() {
        assert!(
            std::time::Instant::now() < deadline,
            "the lock outlived its holders"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let second = with_limit();
    assert!(!second.stderr.contains("pruned"), "{}", second.stderr);
    assert!(held.exists());
    // A day later it goes.
    std::fs::File::open(root.join(".last-prune~"))
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(2 * 86_400))
        .unwrap();
    let third = with_limit();
    assert!(
        third.stderr.contains(&format!("pruned {}", held.display())),
        "{}",
        third.stderr
    );
    assert!(!held.exists() && id.join("meta").exists() && foreign.exists());
}

/// A cache of `identity` in the namespace `ns` with 1 MiB of data, last used 40 days ago.
fn old_cache(ns: &Path, identity: &str) -> PathBuf {
    let builder = gpucache::Cache::builder()
        .directory(ns)
        .identity(identity.as_bytes().to_vec())
        .driver_versioned(true);
    let dir = builder.clone().resolved_directory().unwrap();
    let cache = builder.open().unwrap();
    cache.insert(b"key", vec![1u8; 1 << 20]).unwrap();
    cache.flush().unwrap();
    drop(cache);
    let when = std::time::SystemTime::now() - Duration::from_secs(40 * 86_400);
    for e in std::fs::read_dir(&dir).unwrap() {
        std::fs::File::open(e.unwrap().path())
            .unwrap()
            .set_modified(when)
            .unwrap();
    }
    std::fs::File::open(&dir)
        .unwrap()
        .set_modified(when)
        .unwrap();
    dir
}
