//! The crash harness in short (`scripts/crash` runs it for longer): about 8 seconds of
//! SIGKILLs of the Rust API, EGL (C library) and session children, while they write and
//! while compaction runs, with no corrupt, lost or stale read after any kill.

use std::process::Command;

/// A numeric `name=value` field of `line`.
fn field(line: &str, name: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {line}"))
}

#[test]
fn kills_of_every_front_end_lose_and_corrupt_nothing() {
    let out = Command::new(env!("CARGO_BIN_EXE_crash"))
        .args(["--seconds", "8"])
        .output()
        .expect("run the crash harness");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "crash harness: {}\n{stdout}\n{stderr}",
        out.status
    );
    for kind in ["cache", "egl", "session"] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("crash: {kind}:")))
            .unwrap_or_else(|| panic!("no {kind} line in\n{stdout}"));
        assert!(field(line, "kills") >= 3, "{line}");
        assert!(field(line, "values") > 0, "nothing was read back: {line}");
        for bad in ["corrupt", "lost", "stale", "failures"] {
            assert_eq!(field(line, bad), 0, "{line}\n{stderr}");
        }
    }
}
