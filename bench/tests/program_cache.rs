//! The GPU program cache (gpucache-gl) on a real driver: Mesa 25 llvmpipe through EGL, the
//! kodi shadertoy corpus, every run a process of its own (`gl_run`), GL calls counted by the
//! process itself. The GLSL error tests run in this test binary, re-executed under Mesa's
//! environment.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpucache_bench::gl::{corpus, mesa, RunReport};
use gpucache_gl::{
    Api, Bindings, Error, Gl, GlContext, GlIdentity, ProgramCache, ProgramManager, ShaderKind,
    Status,
};

fn corpus_dir() -> PathBuf {
    let dir = corpus::default_dir();
    assert!(
        dir.join("../.complete").exists(),
        "the kodi corpus is missing in {}: run scripts/fetch-corpus (scripts/test does)",
        dir.display()
    );
    dir
}

/// One `gl_run` process with Mesa's own cache disabled; returns its report and its
/// `name linked pixels` lines.
fn gl_run(args: &[&str], dir: &Path) -> (RunReport, String) {
    let pixels = dir.join(format!("pixels-{}", rand_suffix()));
    let out = Command::new(env!("CARGO_BIN_EXE_gl_run"))
        .envs(mesa::env().expect("Mesa 25: run scripts/setup-mesa (scripts/test does)"))
        .env("MESA_SHADER_CACHE_DISABLE", "true")
        .args(args)
        .arg("--corpus")
        .arg(corpus_dir())
        .arg("--pixels")
        .arg(&pixels)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gl_run {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = RunReport::parse(&String::from_utf8_lossy(&out.stdout)).unwrap();
    (report, std::fs::read_to_string(pixels).unwrap())
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Three processes over the same programs: from source (the reference pixels), through the
/// cache while it is empty, and through the warm cache. Blob callbacks keep the draws short.
fn compile_then_load(api: &str, limit: Option<usize>) {
    let tmp = tempfile::tempdir().unwrap();
    let (blob, programs) = (tmp.path().join("blob"), tmp.path().join("programs"));
    let limit_args: Vec<String> = limit
        .map(|n| vec!["--limit".to_string(), n.to_string()])
        .unwrap_or_default();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--api",
            api,
            "--callbacks",
            "gpucache",
            "--cache-path",
            path(&blob),
        ];
        args.extend(limit_args.iter().map(String::as_str));
        args.extend_from_slice(extra);
        gl_run(&args, tmp.path())
    };
    let (source, reference) = run(&["--programs", "source"]);
    let cache_args = ["--programs", "cache", "--programs-path", path(&programs)];
    let (first, first_pixels) = run(&cache_args);
    let (second, second_pixels) = run(&cache_args);
    eprintln!("{api}: source {source:?}\nfirst {first:?}\nsecond {second:?}");

    assert!(first.linked >= first.programs - 1, "{first:?}");
    assert_eq!(first.links, first.linked, "every program linked once");
    assert_eq!(first.binary_loads, 0);
    assert_eq!(second.linked, first.linked, "every program links again");
    assert_eq!(
        second.binary_loads, second.linked,
        "each loaded from its binary"
    );
    assert_eq!(second.links, 0, "no link in the second process");
    // A shader that fails to compile (one of the corpus under GLSL ES) is compiled again:
    // failures are never cached. Nothing else is compiled.
    assert_eq!(
        second.compiles,
        second.programs - second.linked,
        "no compile but the failing shaders"
    );
    assert_eq!(
        first_pixels, reference,
        "the first run draws what the source draws"
    );
    assert_eq!(
        second_pixels, reference,
        "the loaded programs draw the same pixels"
    );
}

#[test]
fn the_gl_corpus_links_in_one_process_and_loads_in_the_next() {
    compile_then_load("gl", None);
}

#[test]
fn the_gles_corpus_links_in_one_process_and_loads_in_the_next() {
    compile_then_load("gles", Some(16));
}

/// Damaged binaries: the driver rejects them, the flow compiles and links from source,
/// draws the same pixels, and replaces the entries, so that the next process loads again.
#[test]
fn damaged_binaries_fall_back_to_compiling_and_are_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let (blob, programs) = (tmp.path().join("blob"), tmp.path().join("programs"));
    let base = [
        "--limit",
        "6",
        "--callbacks",
        "gpucache",
        "--cache-path",
        path(&blob),
        "--programs",
        "cache",
        "--programs-path",
        path(&programs),
    ];
    let (populated, reference) = gl_run(&base, tmp.path());
    assert_eq!((populated.linked, populated.links), (6, 6));
    for damage in ["flip", "truncate", "foreign"] {
        let mut args = base.to_vec();
        args.extend(["--damage", damage]);
        let (damaged, pixels) = gl_run(&args, tmp.path());
        assert_eq!(damaged.linked, 6, "{damage}: {damaged:?}");
        assert_eq!(damaged.binary_loads, 6, "{damage}: each binary was tried");
        assert_eq!(
            damaged.links, 6,
            "{damage}: each was rejected and linked: {damaged:?}"
        );
        assert_eq!(
            damaged.compiles, 7,
            "{damage}: the deferred shaders were compiled"
        );
        assert_eq!(pixels, reference, "{damage}");
        let (next, pixels) = gl_run(&base, tmp.path());
        assert_eq!(
            (next.binary_loads, next.links, next.compiles),
            (6, 0, 0),
            "{damage}"
        );
        assert_eq!(pixels, reference, "{damage}");
    }
}

/// GLES and GL binaries, and binaries of another application build, never load into each
/// other's processes; each identity keeps its own.
#[test]
fn another_identity_never_loads_the_binaries() {
    let tmp = tempfile::tempdir().unwrap();
    let programs = tmp.path().join("programs");
    let run = |api: &str, build: &str| {
        let args = [
            "--limit",
            "4",
            "--callbacks",
            "none",
            "--api",
            api,
            "--build-id",
            build,
            "--programs",
            "cache",
            "--programs-path",
            path(&programs),
        ];
        gl_run(&args, tmp.path()).0
    };
    assert_eq!(run("gl", "a").links, 4);
    let gles = run("gles", "a");
    assert_eq!(
        (gles.binary_loads, gles.links),
        (0, 4),
        "GLES never loads GL binaries"
    );
    let other_build = run("gl", "b");
    assert_eq!((other_build.binary_loads, other_build.links), (0, 4));
    let back = run("gl", "a");
    assert_eq!(
        (back.binary_loads, back.links),
        (4, 0),
        "the first identity kept its own"
    );
    let back = run("gles", "a");
    assert_eq!((back.binary_loads, back.links), (4, 0));
    let identities = std::fs::read_dir(&programs)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("id-")
        })
        .count();
    assert_eq!(identities, 3);
}

/// Two processes populate one directory at once; a third loads every program.
#[test]
fn two_processes_populate_one_cache_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let programs = tmp.path().join("programs");
    let spawn = |limit: &str| {
        Command::new(env!("CARGO_BIN_EXE_gl_run"))
            .envs(mesa::env().unwrap())
            .env("MESA_SHADER_CACHE_DISABLE", "true")
            .args([
                "--callbacks",
                "none",
                "--limit",
                limit,
                "--programs",
                "cache",
            ])
            .arg("--programs-path")
            .arg(&programs)
            .arg("--corpus")
            .arg(corpus_dir())
            .output()
            .unwrap()
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| spawn("5"));
        let b = s.spawn(|| spawn("8"));
        (a.join().unwrap(), b.join().unwrap())
    });
    for out in [&a, &b] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (third, _) = gl_run(
        &[
            "--callbacks",
            "none",
            "--limit",
            "8",
            "--programs",
            "cache",
            "--programs-path",
            path(&programs),
        ],
        tmp.path(),
    );
    assert_eq!(
        (third.binary_loads, third.links, third.compiles),
        (8, 0, 0),
        "{third:?}"
    );
}

// ---- GLSL errors, in this process under Mesa's environment.

/// Runs the test `name` again in a child process with Mesa 25's environment; returns true
/// in the child, which then runs the body.
fn in_mesa(name: &str) -> bool {
    if std::env::var_os("GPUCACHE_GL_TEST_CHILD").is_some() {
        return true;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .envs(mesa::env().expect("Mesa 25: run scripts/setup-mesa (scripts/test does)"))
        .env("MESA_SHADER_CACHE_DISABLE", "true")
        .env("GPUCACHE_GL_TEST_CHILD", "1")
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "{name} under Mesa:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

const VERTEX: &str = "#version 300 es
in vec4 position;
out vec4 color;
void main() { gl_Position = position; color = position; }
";
const FRAGMENT: &str = "#version 300 es
precision mediump float;
in vec4 color;
out vec4 result;
void main() { result = color; }
";

/// What GL itself says of a source, without the cache: compile log, or link log with
/// `VERTEX`.
fn raw_logs(gl: &impl Gl, fragment: &str) -> (bool, String, Option<String>) {
    let s = gl.create_shader(ShaderKind::Fragment).unwrap();
    gl.shader_source(s, fragment);
    gl.compile_shader(s);
    let compiled = gl.compile_status(s);
    let compile_log = gl.shader_info_log(s);
    let mut link_log = None;
    if compiled {
        let v = gl.create_shader(ShaderKind::Vertex).unwrap();
        gl.shader_source(v, VERTEX);
        gl.compile_shader(v);
        let p = gl.create_program().unwrap();
        gl.attach_shader(p, v);
        gl.attach_shader(p, s);
        gl.link_program(p);
        if !gl.link_status(p) {
            link_log = Some(gl.program_info_log(p));
        }
        gl.delete_program(p);
        gl.delete_shader(v);
    }
    gl.delete_shader(s);
    (compiled, compile_log, link_log)
}

#[test]
fn glsl_errors_are_reported_as_without_the_cache_and_never_cached() {
    if !in_mesa("glsl_errors_are_reported_as_without_the_cache_and_never_cached") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let context = GlContext::create(Api::Gles).unwrap();
    let gl = context.gl();
    let cache = ProgramCache::builder()
        .directory(dir.path())
        .open(&GlIdentity::query(&gl, Api::Gles, "tests"))
        .unwrap();
    let m = ProgramManager::new(&gl, &cache);

    // A compile error.
    let bad = "#version 300 es\nprecision mediump float;\nout vec4 r;\nvoid main() { r = vec4(1.0) + undefined_name; }\n";
    let (compiled, raw_log, _) = raw_logs(&gl, bad);
    assert!(!compiled && raw_log.contains("undefined_name"), "{raw_log}");
    for _ in 0..2 {
        let shader = m.compile_shader(ShaderKind::Fragment, bad).unwrap();
        assert!(!shader.compiled());
        assert_eq!(shader.info_log().unwrap(), raw_log);
        assert_eq!(cache.shader_status(shader.hash()), Status::Unknown);
        m.delete_shader(shader);
        match m.program(VERTEX, bad, &Bindings::new()) {
            Err(Error::Compile { kind, log }) => {
                assert_eq!(kind, ShaderKind::Fragment);
                assert_eq!(log, raw_log);
            }
            other => panic!("{other:?}"),
        }
    }

    // A link error: the fragment shader reads a varying the vertex shader does not write.
    let unlinked = "#version 300 es\nprecision mediump float;\nin vec4 missing;\nout vec4 r;\nvoid main() { r = missing; }\n";
    let (compiled, _, raw_link_log) = raw_logs(&gl, unlinked);
    let raw_link_log = raw_link_log.expect("Mesa refuses to link it");
    assert!(compiled);
    for _ in 0..2 {
        match m.program(VERTEX, unlinked, &Bindings::new()) {
            Err(Error::Link { log }) => assert_eq!(log, raw_link_log),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(cache.stats().programs, 0, "nothing cached");

    // And a good program next to them links, is cached, and loads.
    let p = m
        .program(VERTEX, FRAGMENT, &Bindings::new().attribute("position", 3))
        .unwrap();
    assert!(!p.from_cache);
    assert_eq!(p.attribute_location("position"), Some(3));
    m.delete_program(p);
    let p = m
        .program(VERTEX, FRAGMENT, &Bindings::new().attribute("position", 3))
        .unwrap();
    assert!(p.from_cache);
    assert!(gl.link_status(p.program));
    assert_eq!(cache.stats().programs, 1);
}

/// On real GL: a memory budget for about two programs evicts the oldest (its statuses go
/// with it, the shared vertex shader stays), the evicted program is read back from disk on
/// the next link (nothing compiled or linked), and `trim` gives memory back.
#[test]
fn a_full_cache_evicts_on_real_gl_and_reads_the_evicted_back_from_disk() {
    if !in_mesa("a_full_cache_evicts_on_real_gl_and_reads_the_evicted_back_from_disk") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let context = GlContext::create(Api::Gles).unwrap();
    let gl = context.gl();
    let identity = GlIdentity::query(&gl, Api::Gles, "tests");
    let fragments: Vec<String> = (0..3)
        .map(|i| FRAGMENT.replace("result = color;", &format!("result = color * {i}.5;")))
        .collect();
    let entry_size = {
        let cache = ProgramCache::builder().open(&identity).unwrap();
        let m = ProgramManager::new(&gl, &cache);
        m.program(VERTEX, &fragments[0], &Bindings::new()).unwrap();
        cache.stats().cache.memory.bytes
    };
    let cache = ProgramCache::builder()
        .directory(dir.path())
        .max_memory_bytes(entry_size * 5 / 2)
        .open(&identity)
        .unwrap();
    let m = ProgramManager::new(&gl, &cache);
    for f in &fragments {
        assert!(!m.program(VERTEX, f, &Bindings::new()).unwrap().from_cache);
    }
    let stats = cache.stats();
    assert!(stats.cache.memory.evictions >= 1, "{stats:?}");
    let oldest = cache.shader_hash(ShaderKind::Fragment, &fragments[0]);
    assert_eq!(
        cache.shader_status(&oldest),
        Status::Unknown,
        "evicted with its program"
    );
    let vertex = cache.shader_hash(ShaderKind::Vertex, VERTEX);
    assert_eq!(
        cache.shader_status(&vertex),
        Status::Success,
        "still used by the others"
    );
    cache.flush().unwrap();
    let p = m.program(VERTEX, &fragments[0], &Bindings::new()).unwrap();
    assert!(p.from_cache, "read back from disk on the memory miss");
    assert!(gl.link_status(p.program));
    cache.trim(gpucache::MemoryPressure::Critical);
    assert_eq!(cache.stats().cache.memory.entries, 0);
    assert_eq!(cache.stats().programs, 0);
    assert!(
        m.program(VERTEX, &fragments[1], &Bindings::new())
            .unwrap()
            .from_cache
    );
}
