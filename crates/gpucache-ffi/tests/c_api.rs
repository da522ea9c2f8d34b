//! The C API as C programs use it: each program in `tests/c` is compiled with
//! `-std=c11 -Wall -Wextra -Werror -fsanitize=address,undefined` against
//! `include/gpucache.h`, linked with the crate's staticlib and run.

mod common;

use std::path::Path;

use common::{
    build_c_program, build_c_program_with_libs, crate_dir, output, repo_root, run, sanitized,
    scratch,
};

fn c_source(name: &str) -> std::path::PathBuf {
    crate_dir().join("tests/c").join(name)
}

/// Builds `tests/c/<name>.c` into a scratch directory and returns (program, directory).
fn build(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = scratch(name);
    let program = dir.join(name);
    build_c_program(&[c_source(&format!("{name}.c"))], &program, &[]);
    (program, dir)
}

/// Runs a C test program in `dir`, in developer mode (the programs exercise cache control;
/// `c_cache_control_only_in_developer_mode` checks the refusal outside it).
fn run_in(program: &Path, dir: &Path, args: &[&str]) -> String {
    let cache_root = dir.join("gpucache-root");
    run(sanitized(program)
        .args(args)
        .current_dir(dir)
        .env("GPUCACHE_DIR", &cache_root)
        .env("GPUCACHE_DEVELOPER_MODE", "1"))
}

#[test]
fn c_cache_control_only_in_developer_mode() {
    let (program, dir) = build("developer_mode");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let cache = dir.join("blob-cache");
    let system_file = Path::new("/etc/gpucache/developer-mode").exists();
    for (mode, env) in [("on", Some("1")), ("off", None), ("off", Some("0"))] {
        if mode == "off" && system_file {
            eprintln!("note: /etc/gpucache/developer-mode exists: the refusal is not checked");
            continue;
        }
        let mut cmd = sanitized(&program);
        cmd.arg(mode)
            .arg(&cache)
            .current_dir(&dir)
            .env("GPUCACHE_DIR", dir.join("gpucache-root"))
            .env("XDG_CONFIG_HOME", &home)
            .env("HOME", &home)
            .env_remove("GPUCACHE_DEVELOPER_MODE");
        if let Some(v) = env {
            cmd.env("GPUCACHE_DEVELOPER_MODE", v);
        }
        assert!(run(&mut cmd).contains(&format!("developer_mode {mode}: ok")));
    }
}

#[test]
fn c_error_codes_names_and_messages() {
    let (program, dir) = build("errors");
    assert!(run_in(&program, &dir, &[]).contains("errors: ok"));
}

#[test]
fn c_sessions() {
    let (program, dir) = build("sessions");
    assert!(run_in(&program, &dir, &[]).contains("sessions: ok"));
}

#[test]
fn c_egl_blob_cache() {
    let (program, dir) = build("egl_blob_cache");
    assert!(run_in(&program, &dir, &[]).contains("egl_blob_cache: ok"));
}

/// One process stores and returns from `main` with only `atexit(gpucache_egl_shutdown)`,
/// while another thread still calls `set`; a second process finds every value; a third,
/// with another identity, finds the directory wiped.
#[test]
fn c_blob_cache_persists_across_processes() {
    let (program, dir) = build("persist");
    let cache = dir.join("blob-cache");
    let cache = cache.to_str().expect("UTF-8 scratch path");
    assert!(run_in(&program, &dir, &["write", cache]).contains("persist write: ok"));
    assert!(run_in(&program, &dir, &["read", cache]).contains("persist read: ok"));
    assert!(run_in(&program, &dir, &["wiped", cache]).contains("persist wiped: ok"));
}

/// The same with `atexit(gpucache_egl_shutdown_at_exit)`, which leaves the values in memory
/// to the exit: everything is persisted, and LeakSanitizer (the C programs are built with
/// `-fsanitize=address`) reports no leak.
#[test]
fn c_blob_cache_left_to_exit_persists_across_processes() {
    // A scratch directory of its own: `build("persist")` would share (and wipe) the one of
    // the test above, which runs in parallel.
    let dir = scratch("persist-at-exit");
    let program = dir.join("persist");
    build_c_program(&[c_source("persist.c")], &program, &[]);
    let cache = dir.join("blob-cache-at-exit");
    let cache = cache.to_str().expect("UTF-8 scratch path");
    let written = run_in(&program, &dir, &["write-at-exit", cache]);
    assert!(written.contains("persist write-at-exit: ok"), "{written}");
    assert!(run_in(&program, &dir, &["read", cache]).contains("persist read: ok"));
}

/// The callbacks are assignable to `EGLSetBlobFuncANDROID`/`EGLGetBlobFuncANDROID` without
/// casts: with Khronos's declarations before or after the header, and with the system's
/// `<EGL/eglext.h>` when it is installed. The header also compiles as C++.
#[test]
fn c_callbacks_have_the_khronos_types() {
    let dir = scratch("khronos_types");
    let source = c_source("khronos_types.c");
    let mut variants = vec![("after", vec![]), ("first", vec!["-DKHRONOS_FIRST"])];
    if Path::new("/usr/include/EGL/eglext.h").is_file() {
        variants.push(("system", vec!["-DSYSTEM_EGL"]));
    } else {
        eprintln!("note: no <EGL/eglext.h> here; checked against written-out Khronos types only");
    }
    for (name, defines) in variants {
        let program = dir.join(name);
        build_c_program(std::slice::from_ref(&source), &program, &defines);
        assert!(run(&mut sanitized(&program)).contains("khronos_types: ok"));
    }

    let cpp = std::env::var_os("CXX").unwrap_or_else(|| "c++".into());
    let mut cmd = std::process::Command::new(&cpp);
    cmd.args([
        "-std=c++11",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fsyntax-only",
        "-x",
        "c++",
    ])
    .arg("-I")
    .arg(crate_dir().join("include"))
    .arg("-");
    match cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(mut child) => {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(
                    b"#include <gpucache.h>\nint main() { return gpucache_egl_flush() == 0; }\n",
                )
                .expect("write C++ source");
            let out = child.wait_with_output().expect("C++ compiler runs");
            assert!(
                out.status.success(),
                "the header does not compile as C++:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Err(e) => eprintln!("note: no C++ compiler ({cpp:?}: {e}); C++ check skipped"),
    }
}

/// The README-sized example compiles strictly and runs: cold first, warm the second time.
#[test]
fn c_example_blob_cache() {
    let dir = scratch("example_blob_cache");
    let program = dir.join("blob_cache");
    build_c_program(&[crate_dir().join("examples/blob_cache.c")], &program, &[]);
    let cache = dir.join("cache");
    let first = run(sanitized(&program).arg(&cache));
    assert!(first.contains("cold: compiled and stored"), "{first}");
    let second = run(sanitized(&program).arg(&cache));
    assert!(second.contains("warm: found a"), "{second}");
    assert!(second.contains("hit rate 100% (1 of 1 gets)"), "{second}");
    let memory_only = output(&mut sanitized(&program));
    assert!(memory_only.status.success());
}

/// The environment that makes libEGL load Mesa 25's llvmpipe from `.cache/mesa25`, where
/// `scripts/setup-mesa` unpacks it (as `bench/src/gl/mesa.rs` sets it up), with Mesa's own
/// shader cache off; `None` when Mesa 25 is not unpacked.
fn mesa25_env() -> Option<Vec<(&'static str, String)>> {
    let root = repo_root().join(".cache/mesa25");
    let lib = root.join("usr/lib/x86_64-linux-gnu");
    let vendor = root.join("egl_vendor.json");
    if !lib.join("libEGL_mesa.so.0").is_file() || !vendor.is_file() {
        return None;
    }
    let mut library_path = lib.display().to_string();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty()) {
        library_path = format!("{library_path}:{}", old.to_string_lossy());
    }
    Some(vec![
        ("LD_LIBRARY_PATH", library_path),
        ("LIBGL_DRIVERS_PATH", lib.join("dri").display().to_string()),
        (
            "__EGL_VENDOR_LIBRARY_FILENAMES",
            vendor.display().to_string(),
        ),
        ("GALLIUM_DRIVER", "llvmpipe".to_owned()),
        ("MESA_SHADER_CACHE_DISABLE", "true".to_owned()),
    ])
}

/// The program cache on Mesa 25's llvmpipe through a surfaceless EGL context the C program
/// creates: a first process links two programs from source, draws with them and meets a
/// compile error and a link error; a second process, on the same directory, loads both from
/// the cache, draws the same, and reads histograms of both runs.
///
/// Built and run with the same sanitizers as every C program here: AddressSanitizer's
/// runtime coexists with Mesa's LLVM, and LeakSanitizer finds no leak in Mesa 25 on this
/// path (context destroyed, display terminated), so no suppression file is needed.
#[test]
fn c_gl_program_cache_on_mesa() {
    let headers = ["/usr/include/EGL/egl.h", "/usr/include/GLES3/gl3.h"];
    if let Some(missing) = headers.iter().find(|h| !Path::new(h).is_file()) {
        eprintln!("note: no {missing} (libegl-dev, libgles-dev); GL program cache test skipped");
        return;
    }
    let Some(env) = mesa25_env() else {
        eprintln!(
            "note: Mesa 25 is not unpacked (scripts/setup-mesa); GL program cache test skipped"
        );
        return;
    };
    let dir = scratch("gl_program_cache");
    let program = dir.join("gl_program_cache");
    build_c_program_with_libs(&[c_source("gl_program_cache.c")], &program, &[], &["-lEGL"]);
    let cache = dir.join("programs");
    let mut cold = sanitized(&program);
    let cold = run(cold.arg("cold").arg(&cache).envs(env.clone()));
    assert!(cold.contains("gl_program_cache cold: ok"), "{cold}");
    assert!(
        cold.contains("llvmpipe") && cold.contains("Mesa 25."),
        "not Mesa 25's llvmpipe:\n{cold}"
    );
    let mut warm = sanitized(&program);
    let warm = run(warm.arg("warm").arg(&cache).envs(env));
    assert!(warm.contains("gl_program_cache warm: ok"), "{warm}");
}
