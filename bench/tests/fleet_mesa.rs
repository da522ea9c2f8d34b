//! The fleet tier under a real driver: Mesa 25 (llvmpipe) through EGL and gpucache's C ABI,
//! configured from `GPUCACHE_FLEET_URL` / `GPUCACHE_FLEET_KEY_FILE`, against real Redis
//! servers (a standalone one and a three-master cluster). Two "machines" are two `gl_run`
//! processes on two cache directories: the first compiles and its entries reach the fleet;
//! the second starts with an empty directory, finds its programs in the fleet, compiles
//! nothing, and draws the same pixels. Entries damaged in Redis are never handed to Mesa.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gpucache_bench::gl::{corpus, mesa, RunReport};
use gpucache_fleet::testing::{redis_available, RedisCluster, RedisServer};

/// Programs per run: enough for every kind of entry, few enough to keep the test short.
const PROGRAMS: u64 = 6;

fn gl_run() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gl_run"))
}

fn skip_without_redis() -> bool {
    if redis_available() {
        return false;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "redis-server is missing: run scripts/install-deps"
    );
    eprintln!("skipped: redis-server is not installed (scripts/install-deps)");
    true
}

fn key_file(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("fleet.key");
    std::fs::write(&path, "a key shared by every machine of this test fleet\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// Starts one machine: `gl_run` on `cache` with the fleet at `url`.
fn start(url: &str, key: &Path, cache: &Path, pixels: &Path) -> Child {
    let corpus = corpus::default_dir();
    assert!(
        corpus.join("../.complete").exists(),
        "the kodi corpus is missing: run scripts/fetch-corpus (scripts/test does)"
    );
    Command::new(gl_run())
        .envs(mesa::env().expect("Mesa 25: run scripts/setup-mesa (scripts/test does)"))
        .env("MESA_SHADER_CACHE_DISABLE", "true")
        .env("GPUCACHE_FLEET_URL", url)
        .env("GPUCACHE_FLEET_KEY_FILE", key)
        // An unoptimised test build verifies and decompresses slowly; the budget itself is
        // tested in crates/gpucache-fleet/tests/faults.rs.
        .env("GPUCACHE_FLEET_READ_BUDGET_MS", "50")
        .args(["--callbacks", "gpucache", "--cache-path"])
        .arg(cache)
        .arg("--corpus")
        .arg(&corpus)
        .args(["--limit", &PROGRAMS.to_string(), "--pixels"])
        .arg(pixels)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(child: Child) -> RunReport {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "gl_run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    RunReport::parse(&String::from_utf8_lossy(&out.stdout)).unwrap()
}

fn machine(url: &str, key: &Path, dir: &Path, name: &str) -> (RunReport, String) {
    let pixels = dir.join(format!("{name}.pixels"));
    let report = finish(start(url, key, &dir.join(name), &pixels));
    (report, std::fs::read_to_string(pixels).unwrap())
}

/// The second machine found every program it could use in the fleet.
fn assert_warm(first: &RunReport, second: &RunReport) {
    assert_eq!(second.linked, PROGRAMS);
    let too_large = second.gets_buffer_too_small;
    assert_eq!(
        second.hits + too_large,
        second.gets,
        "every get hits (first {first:?}, second {second:?})"
    );
    assert!(
        second.sets <= too_large,
        "nothing compiled again: {second:?}"
    );
}

#[test]
fn a_fresh_machine_finds_its_programs_in_the_fleet_and_poison_never_reaches_mesa() {
    if skip_without_redis() {
        return;
    }
    let redis = RedisServer::start(&[]).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let key = key_file(tmp.path());

    let (first, first_pixels) = machine(&redis.url(), &key, tmp.path(), "one");
    assert_eq!(first.linked, PROGRAMS);
    assert!(first.sets >= PROGRAMS, "Mesa stored through set: {first:?}");
    let (second, second_pixels) = machine(&redis.url(), &key, tmp.path(), "two");
    assert_warm(&first, &second);
    assert_eq!(
        first_pixels, second_pixels,
        "the same pixels from the fleet"
    );

    // Damage every entry in Redis (one byte of each value): a third fresh machine is handed
    // none of them, compiles everything, and still draws the same pixels.
    let keys = redis
        .cli(&["--scan", "--pattern", "gpucache:v1:*:e:*"])
        .unwrap();
    let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
    assert!(keys.len() as u64 >= PROGRAMS, "{keys:?}");
    for k in &keys {
        redis.cli(&["SETRANGE", k, "40", "X"]).unwrap();
    }
    let (third, third_pixels) = machine(&redis.url(), &key, tmp.path(), "three");
    // It runs as cold as the first machine did: the only hits are of what it stored itself
    // (the vertex shader every program shares).
    assert_eq!(
        (third.sets, third.hits),
        (first.sets, first.hits),
        "no damaged entry reached Mesa: first {first:?}, third {third:?}"
    );
    assert_eq!(first_pixels, third_pixels);
}

#[test]
fn machines_on_a_cluster_with_a_master_killed_mid_run_and_restarted() {
    if skip_without_redis() {
        return;
    }
    let mut cluster = RedisCluster::start(3, &[]).unwrap();
    let url = cluster.url();
    let tmp = tempfile::tempdir().unwrap();
    let key = key_file(tmp.path());

    let (first, first_pixels) = machine(&url, &key, tmp.path(), "one");
    assert_eq!(first.linked, PROGRAMS);
    let (second, second_pixels) = machine(&url, &key, tmp.path(), "two");
    assert_warm(&first, &second);
    assert_eq!(first_pixels, second_pixels);

    // A master dies while a third machine runs: it completes, with the same pixels
    // (what the dead master held is compiled again).
    let pixels = tmp.path().join("three.pixels");
    let child = start(&url, &key, &tmp.path().join("three"), &pixels);
    std::thread::sleep(Duration::from_millis(150));
    cluster.nodes[1].kill();
    let third = finish(child);
    assert_eq!(third.linked, PROGRAMS);
    assert_eq!(first_pixels, std::fs::read_to_string(&pixels).unwrap());

    // It comes back empty; the cluster heals and a fourth machine runs as usual.
    cluster.nodes[1].restart().unwrap();
    cluster.wait_ok().unwrap();
    let (fourth, fourth_pixels) = machine(&url, &key, tmp.path(), "four");
    assert_eq!(fourth.linked, PROGRAMS);
    assert_eq!(first_pixels, fourth_pixels);
}
