//! Poisoned entries written straight into Redis: rejected, counted, never returned.

mod common;

use std::time::Duration;

use common::*;
use gpucache::{Identity, Lookup};
use gpucache_fleet::entry::{self, identity_bytes};
use gpucache_fleet::names::{key_hash, Names};
use gpucache_fleet::testing::RedisServer;
use gpucache_fleet::FleetKey;

const MATERIAL: &[u8] = b"the fleet's own key, 32 bytes or more";

fn set(redis: &RedisServer, names: &Names, key: &[u8], bytes: &[u8]) {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut c = client.get_connection().unwrap();
    let h = key_hash(key);
    let _: () = redis::cmd("SET")
        .arg(names.entry(&h))
        .arg(bytes)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SADD")
        .arg(names.index())
        .arg(&h[..])
        .query(&mut c)
        .unwrap();
}

#[test]
fn poisoned_entries_are_rejected_and_counted() {
    if skip_without_redis() {
        return;
    }
    let redis = RedisServer::start(&[]).unwrap();
    let tmp = tmp();
    let kf = key_file(tmp.path(), "fleet.key", MATERIAL);
    let ours = FleetKey::from_material(MATERIAL).unwrap();
    let theirs = FleetKey::from_material(b"an attacker's key, also 32 bytes long").unwrap();
    let names = Names::new(identity().namespace());
    let id = identity_bytes(&identity());
    let other_id = identity_bytes(&Identity::new(b"another driver".to_vec()));
    let good = value(1, 4000);

    // key -> (bytes in Redis, counter expected to move)
    let cases: Vec<(&[u8], Vec<u8>)> = vec![
        (
            b"wrong mac",
            entry::encode(&theirs, &id, b"wrong mac", &good),
        ),
        (
            b"other identity",
            entry::encode(&ours, &other_id, b"other identity", &good),
        ),
        (
            b"other key",
            entry::encode(&ours, &id, b"not this key", &good),
        ),
        (b"truncated", {
            let e = entry::encode(&ours, &id, b"truncated", &good);
            e[..e.len() - 5].to_vec()
        }),
        (
            b"oversized",
            entry::encode(&ours, &id, b"oversized", &value(2, 64 << 10)),
        ),
        (
            b"garbage",
            b"GPCF\x01 certainly not an entry, but long enough to look at it".to_vec(),
        ),
        (b"flipped", {
            let mut e = entry::encode(&ours, &id, b"flipped", &good);
            let mid = e.len() / 2;
            e[mid] ^= 1;
            e
        }),
    ];
    for (key, bytes) in &cases {
        set(&redis, &names, key, bytes);
    }
    // A key of another type at an entry's name: the server answers WRONGTYPE.
    {
        let client = redis::Client::open(redis.url()).unwrap();
        let mut c = client.get_connection().unwrap();
        let _: () = redis::cmd("RPUSH")
            .arg(names.entry(&key_hash(b"a list")))
            .arg("x")
            .query(&mut c)
            .unwrap();
    }
    // One good entry beside them.
    set(
        &redis,
        &names,
        b"good",
        &entry::encode(&ours, &id, b"good", &good),
    );

    // The bulk pull: only the good entry arrives.
    let m = machine_with(&tmp.path().join("pull"), &redis.url(), &kf, true, |b| {
        b.max_value_size(32 << 10)
    });
    m.cache.wait_for_preload();
    let s = m.fleet.fleet_stats();
    assert_eq!(s.pulled, 1, "{s:?}");
    assert_eq!(s.rejected_mac, 2, "wrong key, flipped byte: {s:?}");
    assert_eq!(s.rejected_identity, 1, "{s:?}");
    assert_eq!(s.rejected_key, 1, "{s:?}");
    assert_eq!(s.rejected_format, 3, "truncated, oversized, garbage: {s:?}");
    assert_eq!(m.cache.memory().get(b"good").as_deref(), Some(&good[..]));
    for (key, _) in &cases {
        assert!(m.cache.memory().get(key).is_none());
    }
    drop(m);

    // Read-through: each poisoned key misses, and is counted again.
    let m = machine_with(&tmp.path().join("read"), &redis.url(), &kf, false, |b| {
        b.max_value_size(32 << 10)
            .read_budget(Duration::from_secs(1))
    });
    for (key, _) in &cases {
        assert!(matches!(m.cache.lookup(key), Lookup::Miss), "{key:?}");
    }
    assert!(matches!(m.cache.lookup(b"a list"), Lookup::Miss));
    assert!(matches!(m.cache.lookup(b"good"), Lookup::Hit(v) if v[..] == good[..]));
    let s = m.fleet.fleet_stats();
    assert_eq!(s.rejected(), 7, "{s:?}");
    assert_eq!(s.read_errors, 1, "WRONGTYPE: {s:?}");
    let tier = m
        .cache
        .stats()
        .tiers
        .into_iter()
        .find(|t| t.name == "fleet")
        .unwrap();
    assert_eq!(tier.errors, 8);
    assert!(tier.last_error.is_some());
}
