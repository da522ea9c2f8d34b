//! The CLI and private caches (issue 11, items 3 and 4.5): `export` and `import` create
//! private files whatever the umask, and `stats` says whether the directory takes writes (a
//! read-only bind mount here; skipped with a note where mount is refused).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use gpucache::Cache;
use serde_json::Value;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs `gpucache args` under `umask 000`, checking that it succeeds.
fn gpucache_umask0(args: &[&str]) -> Output {
    let out = Command::new("bash")
        .arg("-c")
        .arg(r#"umask 000; exec "$0" "$@""#)
        .arg(env!("CARGO_BIN_EXE_gpucache"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().mode() & 0o7777
}

fn populate(dir: &Path) {
    let c = Cache::builder()
        .directory(dir)
        .identity(&b"cli"[..])
        .open()
        .unwrap();
    for i in 0..20u32 {
        c.insert(&i.to_le_bytes(), vec![i as u8; 300]).unwrap();
    }
    c.flush().unwrap();
}

#[test]
fn export_and_import_create_private_files_whatever_the_umask() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    populate(&src);
    let bundle = tmp.path().join("cache.bundle");
    gpucache_umask0(&["export", s(&src), s(&bundle)]);
    assert_eq!(mode(&bundle), 0o600);
    let dst = tmp.path().join("fresh").join("dst");
    gpucache_umask0(&["import", s(&dst), s(&bundle)]);
    for p in [tmp.path().join("fresh"), dst.clone()] {
        assert_eq!(mode(&p), 0o700, "{}", p.display());
    }
    for entry in fs::read_dir(&dst).unwrap() {
        let p = entry.unwrap().path();
        assert_eq!(mode(&p), 0o600, "{}", p.display());
    }
    let v: Value =
        serde_json::from_slice(&gpucache_umask0(&["stats", "--json", s(&dst)]).stdout).unwrap();
    assert_eq!(v["mode"], "0700");
    assert_eq!(v["writable"], true);
    assert_eq!(v["live_entries"], 20);
}

/// Unmounts on drop.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn mount(args: &[&str], target: &Path) -> bool {
    Command::new("mount")
        .args(args)
        .arg(target)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|st| st.success())
}

#[test]
fn stats_says_when_the_directory_takes_no_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    populate(&dir);
    if !mount(&["--bind", s(&dir)], &dir) {
        println!("note: cannot bind-mount here; skipping");
        return;
    }
    let _mount = Mount(dir.clone());
    if !mount(&["-o", "remount,ro,bind"], &dir) {
        println!("note: cannot remount read-only here; skipping");
        return;
    }
    let text = String::from_utf8(gpucache_umask0(&["stats", s(&dir)]).stdout).unwrap();
    assert!(text.contains("writable              no: "), "{text}");
    let v: Value =
        serde_json::from_slice(&gpucache_umask0(&["stats", "--json", s(&dir)]).stdout).unwrap();
    assert_eq!(v["writable"], false, "{v}");
    assert!(
        v["not_writable"].as_str().unwrap().contains("Read-only"),
        "{v}"
    );
}
