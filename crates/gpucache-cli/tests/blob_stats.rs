//! `gpucache stats` on a directory written by a real EGL blob cache: the "blob cache (EGL)"
//! section, its JSON, the Mesa hint, and a damaged diagnostics file.

use std::path::Path;
use std::process::{Command, Output};

use gpucache::egl::{BlobCache, BlobCacheConfig};
use serde_json::Value;

const IDENTITY: &[u8] = b"mesa 25.0.7 llvmpipe";
/// What Mesa passes to `get`.
const MESA_BUFFER: usize = 64 << 10;

fn gpucache(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpucache"))
        .args(args)
        .output()
        .unwrap()
}

fn stats(dir: &Path, json: bool) -> (String, String) {
    let mut args = vec!["stats", dir.to_str().unwrap()];
    if json {
        args.push("--json");
    }
    let out = gpucache(&args);
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert_eq!(out.status.code(), Some(0), "{args:?}\n{stdout}\n{stderr}");
    (stdout, stderr)
}

fn stats_json(dir: &Path) -> Value {
    serde_json::from_str(&stats(dir, true).0).unwrap()
}

fn config(dir: &Path) -> BlobCacheConfig {
    BlobCacheConfig::default()
        .cache(|c| c.directory(dir).identity(IDENTITY).max_value_size(100_000))
}

/// A driver's session: three sets (one too large), four gets (two hits, one value larger
/// than Mesa's buffer, one miss).
fn driver_session(dir: &Path) {
    let cache = BlobCache::new(config(dir)).unwrap();
    cache.set(b"vs-hash", &[1u8; 100]);
    cache.set(b"fs-hash", &vec![2u8; 70_000]);
    cache.set(b"huge-hash", &vec![3u8; 200_000]);
    let mut buf = vec![0u8; MESA_BUFFER];
    assert_eq!(cache.get(b"vs-hash", &mut buf), 100);
    assert_eq!(
        cache.get(b"fs-hash", &mut buf),
        70_000,
        "too small: the size"
    );
    assert_eq!(cache.get(b"absent", &mut buf), 0);
    assert_eq!(cache.get(b"vs-hash", &mut buf), 100);
    let st = cache.stats();
    assert_eq!((st.gets, st.hits, st.gets_buffer_too_small), (4, 2, 1));
    // Dropped without an explicit flush: dropping persists entries and counters.
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{v} is not a count"))
}

#[test]
fn stats_shows_the_blob_cache_counters_and_the_mesa_hint() {
    let dir = tempfile::tempdir().unwrap();
    driver_session(dir.path());

    let (text, stderr) = stats(dir.path(), false);
    assert!(stderr.is_empty(), "{stderr}");
    assert!(text.contains("live entries          2"), "{text}");
    assert!(text.contains("blob cache (EGL)"), "{text}");
    let row = |name: &str| -> Vec<String> {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name:?} row in\n{text}"));
        line[name.len() + 2..]
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(row("gets"), ["4", "4"]);
    assert_eq!(row("hits"), ["2", "2"]);
    assert_eq!(row("misses"), ["1", "1"]);
    assert_eq!(row("gets buffer too small"), ["1", "1"]);
    assert_eq!(row("sets"), ["3", "3"]);
    assert_eq!(row("sets dropped"), ["1", "1"]);
    assert_eq!(row("calls while disabled"), ["0", "0"]);
    assert_eq!(row("hit rate"), ["50.0", "%", "50.0", "%"]);
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
    assert!(text.contains("miss-on-oversize off"), "{text}");
    let hint = text.lines().find(|l| l.starts_with("hint: ")).expect(&text);
    assert!(hint.contains("the driver's buffer was too small for 1 value"));
    assert!(hint.contains("Mesa needs miss-on-oversize"));

    let json = stats_json(dir.path());
    assert_eq!(json["blob_cache_warning"], Value::Null);
    let blob = &json["blob_cache"];
    assert_eq!(n(&blob["format_version"]), 1);
    assert_eq!(n(&blob["updates"]), 1);
    for scope in ["lifetime", "last_process"] {
        let c = &blob[scope];
        assert_eq!(n(&c["gets"]), 4, "{scope}");
        assert_eq!(n(&c["hits"]), 2, "{scope}");
        assert_eq!(n(&c["misses"]), 1, "{scope}");
        assert_eq!(n(&c["gets_buffer_too_small"]), 1, "{scope}");
        assert_eq!(n(&c["sets"]), 3, "{scope}");
        assert_eq!(n(&c["sets_dropped"]), 1, "{scope}");
        assert_eq!(n(&c["calls_while_disabled"]), 0, "{scope}");
        assert_eq!(c["hit_rate_percent"].as_f64(), Some(50.0), "{scope}");
    }
    let last = &blob["last_process"];
    assert_eq!(n(&last["pid"]), u64::from(std::process::id()));
    assert_eq!(last["miss_on_oversize"], Value::Bool(false));
    assert!(n(&last["updated_unix_s"]) >= n(&last["started_unix_s"]));
    assert!(n(&last["started_unix_s"]) >= n(&blob["since_unix_s"]) - 1);
    assert!(blob["hint"].as_str().unwrap().contains("miss-on-oversize"));

    // The integrator turns miss-on-oversize on: the next process's counts add up, it is the
    // last process, and the hint goes away.
    {
        let cache = BlobCache::new(config(dir.path()).miss_on_oversize(true)).unwrap();
        let mut buf = vec![0u8; MESA_BUFFER];
        assert_eq!(cache.get(b"fs-hash", &mut buf), 0, "a miss for Mesa");
        assert_eq!(cache.get(b"vs-hash", &mut buf), 100);
        cache.flush().unwrap();
    }
    let json = stats_json(dir.path());
    let blob = &json["blob_cache"];
    assert_eq!(n(&blob["updates"]), 2);
    assert_eq!(n(&blob["lifetime"]["gets"]), 6);
    assert_eq!(n(&blob["lifetime"]["hits"]), 3);
    assert_eq!(n(&blob["lifetime"]["gets_buffer_too_small"]), 2);
    assert_eq!(blob["lifetime"]["hit_rate_percent"].as_f64(), Some(50.0));
    assert_eq!(n(&blob["last_process"]["gets"]), 2);
    assert_eq!(n(&blob["last_process"]["sets"]), 0);
    assert_eq!(blob["last_process"]["miss_on_oversize"], Value::Bool(true));
    assert_eq!(blob["hint"], Value::Null);
    let (text, _) = stats(dir.path(), false);
    assert!(text.contains("miss-on-oversize on"), "{text}");
    assert!(!text.contains("hint:"), "{text}");
}

#[test]
fn a_damaged_diagnostics_file_is_a_warning_and_the_rest_is_shown() {
    let dir = tempfile::tempdir().unwrap();
    driver_session(dir.path());
    let file = dir.path().join("blob-cache-stats");
    let bytes = std::fs::read(&file).unwrap();
    let mut flipped = bytes.clone();
    flipped[40] ^= 1;
    for (what, damaged) in [
        ("truncated", bytes[..60].to_vec()),
        ("flipped", flipped),
        ("empty", Vec::new()),
    ] {
        std::fs::write(&file, &damaged).unwrap();
        let (text, stderr) = stats(dir.path(), false);
        assert!(stderr.starts_with("warning: "), "{what}: {stderr}");
        assert!(stderr.contains("blob-cache-stats"), "{what}: {stderr}");
        assert!(text.contains("live entries          2"), "{what}: {text}");
        assert!(!text.contains("blob cache (EGL)"), "{what}: {text}");
        let json = stats_json(dir.path());
        assert_eq!(json["blob_cache"], Value::Null, "{what}");
        assert!(json["blob_cache_warning"].as_str().is_some(), "{what}");
        assert_eq!(n(&json["live_entries"]), 2, "{what}");
        assert_eq!(
            std::fs::read(&file).unwrap(),
            damaged,
            "stats wrote nothing"
        );
    }

    // The next blob cache starts the totals afresh.
    {
        let cache = BlobCache::new(config(dir.path())).unwrap();
        let mut buf = vec![0u8; MESA_BUFFER];
        assert_eq!(cache.get(b"vs-hash", &mut buf), 100);
    }
    let json = stats_json(dir.path());
    assert_eq!(json["blob_cache_warning"], Value::Null);
    assert_eq!(n(&json["blob_cache"]["lifetime"]["gets"]), 1);
    assert_eq!(n(&json["blob_cache"]["updates"]), 1);
}

#[test]
fn without_a_blob_cache_there_is_no_section_and_clear_resets_it() {
    let dir = tempfile::tempdir().unwrap();
    let cache = gpucache::Cache::builder()
        .directory(dir.path())
        .identity(IDENTITY)
        .open()
        .unwrap();
    cache.insert(b"k", b"v".to_vec()).unwrap();
    drop(cache);
    let (text, stderr) = stats(dir.path(), false);
    assert!(
        !text.contains("blob cache (EGL)") && stderr.is_empty(),
        "{text}{stderr}"
    );
    let json = stats_json(dir.path());
    assert_eq!(json["blob_cache"], Value::Null);
    assert_eq!(json["blob_cache_warning"], Value::Null);

    driver_session(dir.path());
    assert_eq!(
        n(&stats_json(dir.path())["blob_cache"]["lifetime"]["gets"]),
        4
    );
    let out = gpucache(&["clear", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let json = stats_json(dir.path());
    assert_eq!(
        json["blob_cache"],
        Value::Null,
        "clear resets the diagnostics"
    );
    assert_eq!(n(&json["live_entries"]), 0);
}
