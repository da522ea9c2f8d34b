//! `gpucache fleet push|pull|stats` against a real redis-server.

use std::path::Path;
use std::process::{Command, Output};

use gpucache::Cache;
use gpucache_fleet::testing::{redis_available, RedisServer};
use serde_json::Value;

const IDENTITY: &str = "llvmpipe 25.0.7 gl4.5";

fn gpucache(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpucache"))
        .args(args)
        .env_remove("GPUCACHE_FLEET_URL")
        .env_remove("GPUCACHE_FLEET_KEY_FILE")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn json(args: &[&str], code: i32) -> Value {
    let out = gpucache(args, &[]);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn push_stats_pull() {
    if !redis_available() {
        assert!(std::env::var_os("CI").is_none(), "redis-server is missing");
        return;
    }
    let redis = RedisServer::start(&[]).unwrap();
    let url = redis.url();
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("fleet.key");
    std::fs::write(&key, "0123456789abcdef0123456789abcdef").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        // Readable by others: refused, with the fix in the message.
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let dir = tmp.path().join("x");
        let out = gpucache(
            &[
                "fleet",
                "pull",
                s(&dir),
                "--identity",
                "x",
                "--url",
                &url,
                "--key-file",
                s(&key),
            ],
            &[],
        );
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("chmod 600"));
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let src = tmp.path().join("src");
    {
        let cache = Cache::builder()
            .directory(&src)
            .identity(IDENTITY)
            .open()
            .unwrap();
        for i in 0..50u32 {
            cache
                .insert(format!("k{i}").as_bytes(), vec![i as u8; 3000])
                .unwrap();
        }
    }
    let conn = [
        "--url",
        &url,
        "--key-file",
        s(&key),
        "--json",
        "--progress",
        "always",
    ];
    let mut args = vec!["fleet", "push", s(&src)];
    args.extend(conn);
    let v = json(&args, 0);
    assert_eq!(v["pushed"], 50, "{v}");
    assert!(
        v["wire_bytes"].as_u64().unwrap() * 10 < v["value_bytes"].as_u64().unwrap(),
        "{v}"
    );
    // Again: everything is already held.
    let v = json(&args, 0);
    assert_eq!(
        (v["pushed"].as_u64(), v["already_held"].as_u64()),
        (Some(0), Some(50))
    );

    // Stats need no key; the URL may come from the environment.
    let out = gpucache(
        &["fleet", "stats", "--json"],
        &[("GPUCACHE_FLEET_URL", &url)],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["identities"][0]["indexed_entries"], 50, "{v}");
    assert!(v["identities"][0]["identity"]
        .as_str()
        .unwrap()
        .contains("llvmpipe"));
    assert!(v["servers"][0]["used_memory"].as_u64().unwrap() > 0);
    let text = gpucache(&["fleet", "stats", "--url", &url], &[]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("50 entries indexed"));

    // Pull into a new directory of the same identity.
    let dst = tmp.path().join("dst");
    let mut args = vec!["fleet", "pull", s(&dst), "--identity", IDENTITY];
    args.extend(conn);
    let v = json(&args, 0);
    assert_eq!(v["pulled"], 50, "{v}");
    let cache = Cache::builder()
        .directory(&dst)
        .identity(IDENTITY)
        .open()
        .unwrap();
    assert_eq!(cache.get(b"k7").as_deref(), Some(&[7u8; 3000][..]));
    drop(cache);
    // Another identity's directory gets nothing.
    let other = tmp.path().join("other");
    let mut args = vec!["fleet", "pull", s(&other), "--identity", "radeonsi"];
    args.extend(conn);
    assert_eq!(json(&args, 0)["pulled"], 0);
}

#[test]
fn stats_show_the_fleet_counters_and_errors() {
    if !redis_available() {
        assert!(std::env::var_os("CI").is_none(), "redis-server is missing");
        return;
    }
    let mut redis = RedisServer::start(&[]).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let identity = gpucache::Identity::new(IDENTITY.as_bytes().to_vec());
    {
        let fleet = gpucache_fleet::FleetBuilder::new(redis.url(), identity)
            .key(gpucache_fleet::FleetKey::from_material(&[7; 32]).unwrap())
            .stats_directory(&dir)
            .build()
            .unwrap();
        let cache = Cache::builder()
            .directory(&dir)
            .identity(IDENTITY)
            .tier(fleet)
            .open()
            .unwrap();
        for i in 0..5u8 {
            cache.insert(&[i], vec![i; 100]).unwrap();
        }
        cache.flush().unwrap();
        // The server goes away: lookups that reach the fleet fail, and are counted.
        redis.kill();
        for i in 10..13u8 {
            let _ = cache.lookup(&[i]);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let v = json(&["stats", dir.to_str().unwrap(), "--json"], 0);
    let fleet = &v["fleet"];
    assert_eq!(fleet["lifetime"]["pushed"], 5, "{v}");
    assert!(fleet["lifetime_errors"].as_u64().unwrap() > 0, "{v}");
    assert!(fleet["last_error"].is_string(), "{v}");
    let out = gpucache(&["stats", dir.to_str().unwrap()], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("fleet tier") && text.contains("pushed"),
        "{text}"
    );
}
