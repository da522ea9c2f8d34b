//! Runs the real `gpucache` binary on real cache directories: every disk command, its
//! `--json` output, its exit codes, and that read-only commands write nothing.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::SystemTime;

use gpucache::Cache;
use serde_json::Value;

const IDENTITY: &str = "mesa 24.0 radeonsi";

fn gpucache(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpucache"))
        .args(args)
        .output()
        .unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs and checks the exit code, returning stdout.
fn expect(args: &[&str], code: i32) -> Vec<u8> {
    let out = gpucache(args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn json(args: &[&str]) -> Value {
    serde_json::from_slice(&expect(args, 0)).unwrap()
}

fn stderr_of(args: &[&str], code: i32) -> String {
    let out = gpucache(args);
    assert_eq!(out.status.code(), Some(code), "{args:?}");
    String::from_utf8(out.stderr).unwrap()
}

/// A cache with text keys, a binary key, overwrites and a removal; returns what is live.
fn populate(dir: &Path, identity: &str) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let c = Cache::builder()
        .directory(dir)
        .identity(identity.as_bytes())
        .version(2)
        .open()
        .unwrap();
    let mut live = BTreeMap::new();
    for i in 0..50u32 {
        let key = format!("shader/{i}").into_bytes();
        let value: Vec<u8> = (0..100 + i).map(|j| (i * 31 + j) as u8).collect();
        c.insert(&key, value.clone()).unwrap();
        live.insert(key, value);
    }
    c.insert(b"\x00\xff\\bin", b"binary key".to_vec()).unwrap();
    live.insert(b"\x00\xff\\bin".to_vec(), b"binary key".to_vec());
    c.flush().unwrap();
    for i in 0..10u32 {
        let key = format!("shader/{i}").into_bytes();
        c.insert(&key, b"new".to_vec()).unwrap();
        live.insert(key, b"new".to_vec());
    }
    c.remove(b"shader/49");
    live.remove(&b"shader/49"[..]);
    live
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn file_state(dir: &Path) -> Vec<(PathBuf, u64, SystemTime)> {
    let mut out: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            (e.path(), m.len(), m.modified().unwrap())
        })
        .collect();
    out.sort();
    out
}

fn data_file(dir: &Path) -> PathBuf {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "dat"))
        .unwrap()
}

#[test]
fn stats_reports_meta_and_space_as_text_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let live = populate(dir.path(), IDENTITY);
    let text = String::from_utf8(expect(&["stats", s(dir.path())], 0)).unwrap();
    assert!(text.contains(&format!("{IDENTITY:?}")), "{text}");
    assert!(text.contains("space amplification"), "{text}");
    let v = json(&["stats", "--json", s(dir.path())]);
    assert_eq!(v["kind"], "cache");
    assert_eq!(v["format_version"], 2);
    assert_eq!(v["cache_version"], 2);
    assert_eq!(v["identity_text"], IDENTITY);
    assert_eq!(v["identity_hex"], hex(IDENTITY.as_bytes()));
    assert_eq!(v["driver_versioned"], false);
    assert_eq!(v["segments"], 1);
    assert_eq!(v["live_entries"], live.len() as u64);
    let kv: usize = live.iter().map(|(k, v)| k.len() + v.len()).sum();
    assert_eq!(v["key_value_bytes"], kv as u64);
    assert!(v["dead_bytes"].as_u64().unwrap() > 0);
    let amplification = v["space_amplification"].as_f64().unwrap();
    let file_bytes = v["file_bytes"].as_u64().unwrap() as f64;
    assert!((amplification - file_bytes / kv as f64).abs() < 1e-9);
}

#[test]
fn read_only_commands_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let live = populate(dir.path(), IDENTITY);
    let elsewhere = tempfile::tempdir().unwrap();
    let before = file_state(dir.path());
    let d = s(dir.path());
    let (key, _) = live.iter().next().unwrap();
    let bundle = elsewhere.path().join("b");
    for args in [
        vec!["stats", d],
        vec!["stats", "--json", d],
        vec!["ls", d],
        vec!["ls", "--json", d],
        vec!["get", d, &hex(key)],
        vec!["get", d, "00"],
        vec!["verify", d],
        vec!["verify", "--json", d],
        vec!["export", d, s(&bundle)],
    ] {
        let out = gpucache(&args);
        assert!(out.status.code().unwrap() <= 1, "{args:?}");
        assert_eq!(
            file_state(dir.path()),
            before,
            "{args:?} changed the directory"
        );
    }
}

#[test]
fn a_driver_versioned_root_is_named_and_listed() {
    let root = tempfile::tempdir().unwrap();
    let mut subdirs = Vec::new();
    for id in ["driver A", "driver B"] {
        let c = Cache::builder()
            .directory(root.path())
            .identity(id.as_bytes())
            .driver_versioned(true)
            .open()
            .unwrap();
        c.insert(b"k", id.as_bytes().to_vec()).unwrap();
        subdirs.push(c.directory().unwrap().to_path_buf());
    }
    let v = json(&["stats", "--json", s(root.path())]);
    assert_eq!(v["kind"], "driver_versioned_root");
    let caches = v["caches"].as_array().unwrap();
    assert_eq!(caches.len(), 2);
    let identities: Vec<&str> = caches
        .iter()
        .map(|c| c["identity_text"].as_str().unwrap())
        .collect();
    assert!(identities.contains(&"driver A") && identities.contains(&"driver B"));
    assert!(caches.iter().all(|c| c["driver_versioned"] == true));
    let text = String::from_utf8(expect(&["stats", s(root.path())], 0)).unwrap();
    assert!(text.contains("driver-versioned root"), "{text}");

    // Commands that need one cache say what the root holds.
    let err = stderr_of(&["ls", s(root.path())], 2);
    assert!(err.contains("driver-versioned root"), "{err}");
    for sub in &subdirs {
        assert!(err.contains(s(sub)), "{err}");
    }
    // A subdirectory is a cache directory.
    let value = expect(&["get", "--text", s(&subdirs[0]), "k"], 0);
    assert!(value.starts_with(b"driver"));
    let v = json(&["verify", "--json", s(&subdirs[1])]);
    assert_eq!(v["clean"], true);
}

#[test]
fn not_a_cache_directory_is_a_clear_error() {
    let empty = tempfile::tempdir().unwrap();
    let err = stderr_of(&["stats", s(empty.path())], 2);
    assert!(err.contains("no meta file"), "{err}");
    let err = stderr_of(&["verify", s(&empty.path().join("missing"))], 2);
    assert!(err.contains("no such directory"), "{err}");
    fs::write(empty.path().join("meta"), b"not a meta file").unwrap();
    let err = stderr_of(&["ls", s(empty.path())], 2);
    assert!(err.contains("corrupt"), "{err}");
}

#[test]
fn ls_lists_every_live_entry() {
    let dir = tempfile::tempdir().unwrap();
    let live = populate(dir.path(), IDENTITY);
    let v = json(&["ls", "--json", s(dir.path())]);
    let items = v.as_array().unwrap();
    assert_eq!(items.len(), live.len());
    for item in items {
        let key: Vec<u8> = (0..item["key"].as_str().unwrap().len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&item["key"].as_str().unwrap()[i..i + 2], 16).unwrap())
            .collect();
        assert_eq!(item["value_len"], live[&key].len() as u64);
        assert!(item["offset"].as_u64().unwrap() >= 32);
        assert!(item["segment"].as_u64().unwrap() >= 1);
        match std::str::from_utf8(&key) {
            Ok(text) => assert_eq!(item["key_text"], text),
            Err(_) => assert!(item["key_text"].is_null()),
        }
    }
    let text = String::from_utf8(expect(&["ls", "--text", s(dir.path())], 0)).unwrap();
    assert_eq!(text.lines().count(), live.len());
    assert!(text.lines().any(|l| l.ends_with(" shader/7")), "{text}");
    assert!(
        text.lines().any(|l| l.ends_with(" \\x00\\xff\\\\bin")),
        "{text}"
    );
    let plain = String::from_utf8(expect(&["ls", s(dir.path())], 0)).unwrap();
    assert!(
        plain.lines().any(|l| l.ends_with(&hex(b"shader/7"))),
        "{plain}"
    );
}

#[test]
fn get_writes_exact_bytes_and_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let live = populate(dir.path(), IDENTITY);
    let d = s(dir.path());
    for (key, value) in &live {
        assert_eq!(&expect(&["get", d, &hex(key)], 0), value);
    }
    assert_eq!(
        expect(&["get", "--text", d, "shader/20"], 0),
        live[&b"shader/20"[..]]
    );
    // The text form of a binary key, as `ls --text` prints it.
    assert_eq!(
        expect(&["get", "--text", d, "\\x00\\xff\\\\bin"], 0),
        b"binary key"
    );
    let file = dir.path().join("..").join("value.out");
    expect(&["get", d, &hex(b"shader/30"), "--out", s(&file)], 0);
    assert_eq!(fs::read(&file).unwrap(), live[&b"shader/30"[..]]);
    fs::remove_file(&file).unwrap();

    let err = stderr_of(&["get", "--text", d, "shader/49"], 1);
    assert!(err.contains("not found"), "{err}");
    let err = stderr_of(&["get", d, "xyz"], 2);
    assert!(err.contains("hex"), "{err}");
}

#[test]
fn get_never_prints_the_bytes_of_a_corrupt_record() {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path(), IDENTITY);
    let path = data_file(dir.path());
    let mut bytes = fs::read(&path).unwrap();
    // Damage the value of the record of "shader/20" (value bytes follow its key).
    let at = bytes.windows(9).position(|w| w == b"shader/20").unwrap() + 9 + 5;
    bytes[at] ^= 0x40;
    fs::write(&path, bytes).unwrap();
    let out = gpucache(&["get", "--text", s(dir.path()), "shader/20"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("corrupt"));
}

#[test]
fn verify_passes_clean_and_fails_corrupt_directories() {
    let dir = tempfile::tempdir().unwrap();
    let live = populate(dir.path(), IDENTITY);
    let v = json(&["verify", "--json", s(dir.path())]);
    assert_eq!(v["clean"], true);
    assert_eq!(v["records_corrupt"], 0);
    assert!(
        v["records_ok"].as_u64().unwrap() > live.len() as u64,
        "dead records too"
    );
    let text = String::from_utf8(expect(&["verify", s(dir.path())], 0)).unwrap();
    assert!(text.contains("clean"), "{text}");
    // The bar, forced on although standard error is not a terminal.
    let out = gpucache(&["verify", "--progress", "always", s(dir.path())]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("100%"));

    let path = data_file(dir.path());
    let mut bytes = fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    fs::write(&path, bytes).unwrap();
    let out = gpucache(&["verify", "--json", s(dir.path())]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["clean"], false);
    assert_eq!(v["records_corrupt"], 1);
    assert_eq!(v["problems"].as_array().unwrap().len(), 1);
    let text = String::from_utf8(expect(&["verify", s(dir.path())], 1)).unwrap();
    assert!(text.contains("CORRUPT"), "{text}");
}

#[test]
fn clear_removes_every_entry() {
    let dir = tempfile::tempdir().unwrap();
    let live = populate(dir.path(), IDENTITY);
    let v = json(&["clear", "--json", s(dir.path())]);
    assert_eq!(v["removed_entries"], live.len() as u64);
    let v = json(&["stats", "--json", s(dir.path())]);
    assert_eq!(v["live_entries"], 0);
    assert_eq!(v["identity_text"], IDENTITY);
    stderr_of(&["get", "--text", s(dir.path()), "shader/1"], 1);
    let text = String::from_utf8(expect(&["clear", s(dir.path())], 0)).unwrap();
    assert!(text.contains("removed 0 entries"), "{text}");
}

#[test]
fn compact_reclaims_dead_space_and_keeps_values() {
    let dir = tempfile::tempdir().unwrap();
    let live = populate(dir.path(), IDENTITY);
    let v = json(&["compact", "--json", s(dir.path())]);
    let (before, after) = (
        v["file_bytes_before"].as_u64().unwrap(),
        v["file_bytes_after"].as_u64().unwrap(),
    );
    assert!(after < before, "{v}");
    assert_eq!(v["records_copied"], live.len() as u64);
    let stats = json(&["stats", "--json", s(dir.path())]);
    assert_eq!(stats["dead_bytes"], 0);
    assert_eq!(stats["file_bytes"], after);
    for (key, value) in &live {
        assert_eq!(&expect(&["get", s(dir.path()), &hex(key)], 0), value);
    }
    let text = String::from_utf8(expect(&["compact", s(dir.path())], 0)).unwrap();
    assert!(text.contains("->"), "{text}");
}

#[test]
fn export_then_import_pre_warms_a_fresh_directory() {
    let src = tempfile::tempdir().unwrap();
    let live = populate(src.path(), IDENTITY);
    let work = tempfile::tempdir().unwrap();
    let bundle = work.path().join("cache.gpucb");
    let v = json(&["export", "--json", s(src.path()), s(&bundle)]);
    assert_eq!(v["entries"], live.len() as u64);
    assert_eq!(v["corrupt_skipped"], 0);

    let dst = work.path().join("fresh");
    let v = json(&["import", "--json", s(&dst), s(&bundle)]);
    assert_eq!(v["entries"], live.len() as u64);
    assert!(v["replaced"].is_null());
    for (key, value) in &live {
        assert_eq!(&expect(&["get", s(&dst), &hex(key)], 0), value);
    }
    let (a, b) = (
        json(&["stats", "--json", s(src.path())]),
        json(&["stats", "--json", s(&dst)]),
    );
    for field in [
        "identity_hex",
        "cache_version",
        "driver_versioned",
        "live_entries",
    ] {
        assert_eq!(a[field], b[field], "{field}");
    }
    // The application on the new machine, opening with its identity, hits.
    let c = Cache::builder()
        .directory(&dst)
        .identity(IDENTITY.as_bytes())
        .version(2)
        .open()
        .unwrap();
    assert_eq!(c.get(b"shader/33").unwrap(), live[&b"shader/33"[..]][..]);
}

#[test]
fn import_refuses_another_identity_unless_forced() {
    let src = tempfile::tempdir().unwrap();
    populate(src.path(), IDENTITY);
    let work = tempfile::tempdir().unwrap();
    let bundle = work.path().join("b");
    expect(&["export", s(src.path()), s(&bundle)], 0);
    let other = work.path().join("other");
    populate(&other, "another driver");
    let err = stderr_of(&["import", s(&other), s(&bundle)], 2);
    assert!(err.contains("--force"), "{err}");
    assert_eq!(
        json(&["stats", "--json", s(&other)])["identity_text"],
        "another driver"
    );
    let v = json(&["import", "--force", "--json", s(&other), s(&bundle)]);
    assert_eq!(v["replaced"]["identity_text"], "another driver");
    assert_eq!(
        json(&["stats", "--json", s(&other)])["identity_text"],
        IDENTITY
    );

    // A damaged bundle is refused before anything is stored.
    let mut bytes = fs::read(&bundle).unwrap();
    let last = bytes.len() - 30;
    bytes[last] ^= 1;
    fs::write(&bundle, bytes).unwrap();
    let target = work.path().join("never");
    let err = stderr_of(&["import", s(&target), s(&bundle)], 2);
    assert!(err.contains("bundle"), "{err}");
    assert!(!target.exists());
}
