//! Runs the real `gpucache` binary on a trace file.

use std::process::Command;

#[test]
fn replay_reports_each_policy() {
    let dir = std::env::temp_dir().join(format!("gpucache-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.txt");
    // A loop over 11 keys with room for 10: LRU never hits, S3-FIFO does.
    let lines: Vec<String> = (0..1100).map(|i| format!("key{}", i % 11)).collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpucache"))
        .args(["replay", "--capacity", "10", "--json"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("\"policy\":\"lru\",\"requests\":1100,\"hits\":0,"),
        "{text}"
    );
    let s3 = text.split("\"policy\":\"s3-fifo\"").nth(1).unwrap();
    let hits: u64 = s3
        .split("\"hits\":")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(hits > 500, "{text}");

    let missing = Command::new(env!("CARGO_BIN_EXE_gpucache"))
        .args(["replay", "/nonexistent/trace"])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot open trace"));
    std::fs::remove_dir_all(&dir).unwrap();
}
