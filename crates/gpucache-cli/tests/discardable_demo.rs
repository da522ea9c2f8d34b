//! `gpucache discardable-demo` end to end: the real binary as the service (real GL textures
//! and buffers on Mesa 25 llvmpipe through EGL) and as its client processes, over the real
//! socket and memfd pools. Checks the per-frame lines and the summary.

use std::path::PathBuf;
use std::process::Command;

fn mesa_env(cmd: &mut Command) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/mesa25");
    let lib = root.join("usr/lib/x86_64-linux-gnu");
    assert!(
        lib.join("libEGL_mesa.so.0").exists(),
        "Mesa 25 missing in {}: run scripts/setup-mesa (scripts/test does)",
        root.display()
    );
    cmd.env("LD_LIBRARY_PATH", &lib)
        .env("LIBGL_DRIVERS_PATH", lib.join("dri"))
        .env(
            "__EGL_VENDOR_LIBRARY_FILENAMES",
            root.join("egl_vendor.json"),
        )
        .env("GALLIUM_DRIVER", "llvmpipe")
        .env("MESA_SHADER_CACHE_DISABLE", "true");
}

fn demo(args: &[&str], gl: bool) -> serde_json::Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpucache"));
    cmd.arg("discardable-demo").args(args).arg("--json");
    if gl {
        mesa_env(&mut cmd);
    } else {
        cmd.arg("--no-gl");
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn check(v: &serde_json::Value, frames: u64) {
    let s = &v["summary"];
    assert_eq!(s["budget_violations"], 0, "{s}");
    assert_eq!(s["client_failures"], 0, "{s}");
    assert_eq!(s["refused_messages"], 0, "{s}");
    assert!(s["evictions"].as_u64().unwrap() > 0, "{s}");
    assert!(s["failed_locks"].as_u64().unwrap() > 0, "{s}");
    assert!(s["failed_locks"].as_u64() <= s["evictions"].as_u64(), "{s}");
    let rows = v["frames"].as_array().unwrap();
    assert_eq!(rows.len() as u64, frames);
    for (i, f) in rows.iter().enumerate() {
        assert_eq!(f["frame"], i as u64 + 1);
        let (used, budget, locked) = (
            f["used"].as_u64().unwrap(),
            f["budget"].as_u64().unwrap(),
            f["locked"].as_u64().unwrap(),
        );
        assert!(used <= budget + locked, "{f}");
    }
}

#[test]
fn demo_on_real_gl_with_three_clients() {
    let v = demo(
        &[
            "--clients",
            "3",
            "--frames",
            "15",
            "--budget-mib",
            "8",
            "--policy",
            "lru",
        ],
        true,
    );
    check(&v, 15);
    let svc = &v["summary"]["service"];
    assert_eq!(svc["backend"], "gl");
    // Every object made was deleted (evicted, or at its client's goodbye).
    assert_eq!(
        svc["textures_created"].as_u64().unwrap() + svc["buffers_created"].as_u64().unwrap(),
        svc["objects_deleted"].as_u64().unwrap()
    );
    assert!(svc["quads_drawn"].as_u64().unwrap() > 0);
    assert_eq!(svc["centre_pixel"][3], 255);
}

#[test]
fn demo_without_gl_tinylfu() {
    let v = demo(
        &[
            "--clients",
            "2",
            "--frames",
            "10",
            "--budget-mib",
            "4",
            "--policy",
            "tinylfu",
        ],
        false,
    );
    check(&v, 10);
    assert_eq!(v["summary"]["policy"], "TinyLfu");
}
