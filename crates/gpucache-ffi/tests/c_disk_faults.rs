//! The blob cache's directory as it can go wrong, seen from C (issue 11, items 3, 4.1 and
//! 4.5): `tests/c/egl_disk_faults.c` run against an identity over 64 KiB, a directory of
//! another user (chown'ed to nobody: this test runs as root, who owns everything it
//! creates), a read-only bind mount and a full tmpfs. Mount cases skip with a note where
//! mount is refused.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{build_c_program, crate_dir, run, sanitized, scratch};

const NOBODY: u32 = 65534;

/// Builds the program into a scratch directory of the test's own (tests run in parallel).
fn build(test: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(&format!("egl_disk_faults_{test}"));
    let program = dir.join("egl_disk_faults");
    build_c_program(
        &[crate_dir().join("tests/c/egl_disk_faults.c")],
        &program,
        &[],
    );
    (program, dir)
}

fn fault(program: &Path, mode: &str, dir: &Path) -> String {
    let out = run(sanitized(program).arg(mode).arg(dir));
    assert!(
        out.contains(&format!("egl_disk_faults {mode}: ok")),
        "{out}"
    );
    out
}

/// Unmounts on drop.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn mount(args: &[&str], target: &Path) -> Option<Mount> {
    let ok = Command::new("mount")
        .args(args)
        .arg(target)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        println!("note: `mount {args:?}` is refused here; skipping");
    }
    ok.then(|| Mount(target.to_path_buf()))
}

#[test]
fn c_identity_limit_and_config_fields() {
    let (program, dir) = build("limits");
    fault(&program, "limits", &dir.join("limits"));
}

#[test]
fn c_foreign_owner_is_refused_unless_allowed() {
    let (program, dir) = build("foreign");
    let cache = dir.join("foreign");
    std::fs::create_dir(&cache).unwrap();
    std::os::unix::fs::chown(&cache, Some(NOBODY), Some(NOBODY)).unwrap();
    fault(&program, "foreign", &cache);
}

#[test]
fn c_read_only_directory_reports_disk_unavailable() {
    let (program, dir) = build("readonly");
    let cache = dir.join("readonly");
    std::fs::create_dir(&cache).unwrap();
    let p = cache.to_str().unwrap();
    let Some(_bind) = mount(&["--bind", p], &cache) else {
        return;
    };
    // The same mount, made read-only: `_ro` unmounts it, and `_bind`'s second umount finds
    // nothing mounted there (harmless; forgetting a guard instead leaks under LeakSanitizer).
    let Some(_ro) = mount(&["-o", "remount,ro,bind"], &cache) else {
        return;
    };
    println!("{}", fault(&program, "readonly", &cache));
}

#[test]
fn c_full_file_system_reports_disk_unavailable() {
    let (program, dir) = build("full");
    let mnt = dir.join("full");
    std::fs::create_dir(&mnt).unwrap();
    let Some(_tmpfs) = mount(&["-t", "tmpfs", "-o", "size=256k", "tmpfs"], &mnt) else {
        return;
    };
    println!("{}", fault(&program, "full", &mnt.join("cache")));
}
