//! Helpers of the tests that compile and run C programs against the library.

#![allow(dead_code)] // Each test binary uses its own subset.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Flags of every C compile: strict C11, warnings are errors, ASan and UBSan.
pub const STRICT_SANITIZED: &[&str] = &[
    "-std=c11",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-g",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=undefined",
    "-fno-omit-frame-pointer",
];

/// What the Rust staticlib needs from the system (`rustc --print native-static-libs`).
pub const SYSTEM_LIBS: &[&str] = &["-lpthread", "-ldl", "-lm"];

pub fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn repo_root() -> PathBuf {
    crate_dir()
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// Where cargo put this test binary (`target/debug/deps`). Cargo writes every crate type of
/// the library there, the staticlib and cdylib included, when it builds the tests; the copies
/// in `target/debug` are refreshed only by `cargo build` and may be stale.
pub fn artifact_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the test binary");
    exe.parent().expect("deps directory").to_path_buf()
}

pub fn staticlib() -> PathBuf {
    let lib = artifact_dir().join("libgpucache_ffi.a");
    assert!(
        lib.is_file(),
        "{} is missing: cargo builds it with the test binaries (crate-type staticlib)",
        lib.display()
    );
    lib
}

/// A fresh, empty directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("gpucache-ffi")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// The C compiler: `$CC`, else `cc`.
pub fn cc() -> Command {
    Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()))
}

/// Runs `cmd`, panicking with its output unless it succeeds; returns its stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = output(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn output(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Compiles and links `sources` with the strict sanitized flags against the header and the
/// staticlib into `out`.
pub fn build_c_program(sources: &[PathBuf], out: &Path, defines: &[&str]) {
    build_c_program_with_libs(sources, out, defines, &[]);
}

/// [`build_c_program`], also linking `libs` (`-lEGL`), which follow the objects.
pub fn build_c_program_with_libs(sources: &[PathBuf], out: &Path, defines: &[&str], libs: &[&str]) {
    let mut cmd = cc();
    cmd.args(STRICT_SANITIZED)
        .args(defines)
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg("-I")
        .arg(crate_dir().join("tests/c"))
        .args(sources)
        .arg(staticlib())
        .args(libs)
        .args(SYSTEM_LIBS)
        .arg("-o")
        .arg(out);
    run(&mut cmd);
}

/// A command that runs a sanitized C program: leaks and undefined behaviour fail it.
pub fn sanitized(program: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.env(
        "ASAN_OPTIONS",
        "detect_leaks=1:abort_on_error=0:exitcode=86",
    )
    .env("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1");
    cmd
}
