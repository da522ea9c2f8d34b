//! The C API as C programs use it: each program in `tests/c` is compiled with
//! `-std=c11 -Wall -Wextra -Werror -fsanitize=address,undefined` against
//! `include/gpucache.h`, linked with the crate's staticlib and run.

mod common;

use std::path::Path;

use common::{build_c_program, crate_dir, output, run, sanitized, scratch};

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

fn run_in(program: &Path, dir: &Path, args: &[&str]) -> String {
    let cache_root = dir.join("gpucache-root");
    run(sanitized(program)
        .args(args)
        .current_dir(dir)
        .env("GPUCACHE_DIR", &cache_root))
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
