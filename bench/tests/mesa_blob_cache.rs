//! gpucache's blob-cache callbacks under a real driver: Mesa 25 (llvmpipe) through EGL, the
//! kodi shadertoy corpus. `scripts/test` unpacks Mesa (scripts/setup-mesa) and downloads the
//! corpus (scripts/fetch-corpus) before the tests run.
//!
//! - A first process compiles everything and Mesa hands its entries to gpucache's `set`
//!   (from Mesa's worker threads); a second process finds every `get` a hit, stores nothing
//!   new (no program was recompiled), and every program links and draws the same pixels.
//! - The install helper recognises Mesa and answers too-small buffers with a miss.
//! - Each Mesa back end of the benchmark creates the folder it is named after.
//! - The hybrid (`gpucache_egl_mesa_context_cache`): Mesa keeps what context creation
//!   compiles inside gpucache's directory, every program goes to the callbacks.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpucache_bench::gl::cases::{run, Case, Workload};
use gpucache_bench::gl::{corpus, mesa, RunReport};

fn gl_run() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gl_run"))
}

/// The corpus, or a clear failure naming the script that fetches it.
fn corpus_dir() -> PathBuf {
    let dir = corpus::default_dir();
    assert!(
        dir.join("../.complete").exists(),
        "the kodi corpus is missing in {}: run scripts/fetch-corpus (scripts/test does)",
        dir.display()
    );
    dir
}

fn gpucache_run(cache: &Path, pixels: &Path) -> RunReport {
    let out = Command::new(gl_run())
        .envs(mesa::env().expect("Mesa 25: run scripts/setup-mesa (scripts/test does)"))
        .env("MESA_SHADER_CACHE_DISABLE", "true")
        .args(["--callbacks", "gpucache", "--cache-path"])
        .arg(cache)
        .arg("--corpus")
        .arg(corpus_dir())
        .arg("--pixels")
        .arg(pixels)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gl_run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    RunReport::parse(&String::from_utf8_lossy(&out.stdout)).unwrap()
}

#[test]
fn a_second_process_hits_every_get_and_draws_the_same_pixels() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let (first_pixels, second_pixels) = (tmp.path().join("first"), tmp.path().join("second"));

    let first = gpucache_run(&cache, &first_pixels);
    assert_eq!(first.programs, 80, "the whole kodi corpus");
    assert_eq!(first.linked, 80, "every program compiles and links");
    assert!(
        first.sets >= 80,
        "Mesa stored its entries through set: {first:?}"
    );
    assert!(first.miss_on_oversize, "the install helper recognised Mesa");

    let second = gpucache_run(&cache, &second_pixels);
    assert_eq!(second.linked, 80);
    assert!(
        second.gets >= first.sets,
        "Mesa looked its entries up: {second:?}"
    );
    // Mesa asks with a fixed 64 KiB buffer, so an entry larger than that can never be served
    // (the machine code of a complex shader; whether one is that large depends on the CPU
    // LLVM generates code for). Mesa compiles such a shader again and stores it again; every
    // other get hits, and nothing else is compiled again.
    let too_large = second.gets_buffer_too_small;
    assert_eq!(
        second.hits + too_large,
        second.gets,
        "every get hits: {second:?}"
    );
    assert!(
        second.sets <= too_large,
        "only what could not be served was compiled again: {second:?}"
    );
    assert!(
        too_large * 50 <= second.gets,
        "at most one get in 50 finds an entry over 64 KiB: {second:?}"
    );
    eprintln!("first run: {first:?}\nsecond run: {second:?}");
    assert_eq!(
        std::fs::read_to_string(&first_pixels).unwrap(),
        std::fs::read_to_string(&second_pixels).unwrap(),
        "every program draws the same pixels from the cache"
    );
    // The cache warmed the second process: without LLVM code generation the first draws
    // take a fraction of the time (on every machine seen, under a tenth).
    assert!(
        second.draw_ms * 3.0 < first.draw_ms,
        "draws did not get faster: {:.0} ms then {:.0} ms",
        first.draw_ms,
        second.draw_ms
    );
}

#[test]
fn each_mesa_back_end_creates_the_folder_it_is_named_after() {
    let tmp = tempfile::tempdir().unwrap();
    let workload = Workload {
        corpus: corpus_dir(),
        variants: 1,
        limit: Some(3),
    };
    for case in [Case::MesaDb, Case::MesaMultiFile, Case::MesaSingleFile] {
        let home = tmp.path().join(case.slug());
        std::fs::create_dir_all(&home).unwrap();
        let r = run(case, &gl_run(), &home, &workload).unwrap();
        assert_eq!(r.report.linked, 3);
        case.check_folders(&home).unwrap();
    }
}

/// One `gl_run` process of the hybrid on the first five programs: Mesa's own cache left on
/// (nothing inherited may disable or move it), pointed into gpucache's directory.
fn hybrid_run(home: &Path, cache: &Path) -> RunReport {
    let mut cmd = Command::new(gl_run());
    cmd.envs(mesa::env().expect("Mesa 25: run scripts/setup-mesa (scripts/test does)"));
    for (name, _) in std::env::vars_os() {
        let n = name.to_string_lossy();
        if n.starts_with("MESA_SHADER_CACHE")
            || n.starts_with("MESA_GLSL_CACHE")
            || n.starts_with("MESA_DISK_CACHE")
        {
            cmd.env_remove(&name);
        }
    }
    let out = cmd
        .env("HOME", home)
        .env("XDG_CACHE_HOME", home.join("xdg"))
        .args([
            "--callbacks",
            "gpucache",
            "--mesa-context-cache",
            "--cache-path",
        ])
        .arg(cache)
        .arg("--corpus")
        .arg(corpus_dir())
        .args(["--limit", "5"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gl_run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    RunReport::parse(&String::from_utf8_lossy(&out.stdout)).unwrap()
}

/// At most this many shaders are compiled inside `eglCreateContext` on Mesa 25 llvmpipe
/// (its blit and clear shaders; 1.2-1.8 KB in Mesa's files).
const CONTEXT_SHADERS: u64 = 3;

#[test]
fn the_hybrid_keeps_context_shaders_in_mesa_files_inside_gpucache_and_programs_in_gpucache() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let first = hybrid_run(tmp.path(), &cache);
    assert_eq!(first.linked, 5);
    assert!(
        first.sets >= 5,
        "every program went to gpucache's callbacks: {first:?}"
    );
    let db = cache.join("mesa-context/mesa_shader_cache_db/part0/mesa_cache.db");
    let mesa_bytes = std::fs::metadata(&db)
        .unwrap_or_else(|e| panic!("Mesa's files are not in gpucache's directory ({e}): {db:?}"))
        .len();
    let gpucache_bytes: u64 = std::fs::read_dir(&cache)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("seg-"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(
        mesa_bytes > 64,
        "context creation stored its shaders in Mesa's cache ({mesa_bytes} bytes)"
    );
    assert!(
        mesa_bytes * 4 < gpucache_bytes,
        "Mesa's files hold only what context creation compiles: {mesa_bytes} bytes against gpucache's {gpucache_bytes}"
    );
    assert!(
        !tmp.path().join("xdg").exists() && !tmp.path().join(".cache").exists(),
        "nothing reached Mesa's default location"
    );
    let second = hybrid_run(tmp.path(), &cache);
    assert_eq!(second.linked, 5);
    assert!(second.gets >= 5, "{second:?}");
    // No program was compiled again: every lookup hit.
    assert_eq!(second.hits, second.gets, "every get hits: {second:?}");
    // Mesa writes its entries from a queue that checks for callbacks when it runs: an entry
    // context creation compiled in the first process may have gone to gpucache instead (if
    // the queue ran after the install), and the second process then compiles it again during
    // context creation (before any callback) and stores it in Mesa's files, or, when its
    // queue too runs after the install (a loaded machine), in gpucache. So the second
    // process may store context creation's few shaders, never a program's (those all hit).
    assert!(
        second.sets <= CONTEXT_SHADERS,
        "only context creation's shaders are stored again: {second:?}"
    );
    // Either way Mesa's files keep only context creation's few shaders.
    let mesa_after = std::fs::metadata(&db).unwrap().len();
    assert!(
        mesa_after * 4 < gpucache_bytes,
        "Mesa's files still hold only what context creation compiles: {mesa_after} bytes"
    );
}
