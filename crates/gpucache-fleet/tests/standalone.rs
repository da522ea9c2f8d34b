//! Two "machines" (two cache directories) and one real Redis server.

mod common;

use std::time::Duration;

use common::*;
use gpucache::Lookup;
use gpucache_fleet::testing::RedisServer;

#[test]
fn a_second_machine_starts_warm_from_the_fleet() {
    if skip_without_redis() {
        return;
    }
    let redis = RedisServer::start(&[]).unwrap();
    let tmp = tmp();
    let kf = key_file(
        tmp.path(),
        "fleet.key",
        b"an example fleet key of 32+ bytes!!",
    );
    let n = 300;

    // Machine one compiles and stores; closing it pushes what is queued.
    {
        let one = machine(&tmp.path().join("one"), &redis.url(), &kf, true);
        one.cache.wait_for_preload();
        for i in 0..n {
            one.cache.insert(&key(i), value(i, 20_000)).unwrap();
        }
        one.cache.flush().unwrap();
        // A loaded machine may take longer than the flush's bound to send it all.
        assert!(one.fleet.wait_for_push(std::time::Duration::from_secs(60)));
        let s = one.fleet.fleet_stats();
        assert_eq!(s.pushed, u64::from(n), "{s:?}");
        assert_eq!(s.errors(), 0, "{s:?}");
        assert!(
            s.pushed_wire_bytes * 2 < s.pushed_value_bytes,
            "compressed: {s:?}"
        );
    }

    // Machine two starts with an empty directory and finds everything local after its pull.
    let two_dir = tmp.path().join("two");
    {
        let two = machine(&two_dir, &redis.url(), &kf, true);
        two.cache.wait_for_preload();
        let s = two.fleet.fleet_stats();
        assert_eq!(s.pulled, u64::from(n), "{s:?}");
        assert!(s.pull_done);
        for i in 0..n {
            assert_eq!(
                two.cache.memory().get(&key(i)).as_deref(),
                Some(&value(i, 20_000)[..])
            );
        }
        // What was pulled is not pushed back.
        two.cache.insert(&key(0), value(0, 20_000)).unwrap();
        two.cache.flush().unwrap();
        // A loaded machine may take longer than the flush's bound to send it all.
        assert!(two.fleet.wait_for_push(std::time::Duration::from_secs(60)));
        let s = two.fleet.fleet_stats();
        assert_eq!(s.pushed, 0, "{s:?}");
        let tiers = two.cache.stats().tiers;
        let fleet = tiers.iter().find(|t| t.name == "fleet").unwrap();
        assert_eq!(fleet.entries, u64::from(n));
        assert_eq!(fleet.errors, 0);
    }
    // The pull went to the disk tier too: machine two has them without the fleet.
    let alone = gpucache::Cache::builder()
        .directory(&two_dir)
        .identity(IDENTITY.to_vec())
        .open()
        .unwrap();
    alone.wait_for_preload();
    assert_eq!(
        alone.get(&key(n - 1)).as_deref(),
        Some(&value(n - 1, 20_000)[..])
    );
    drop(alone);

    // Machine three does not pull at open: lookups read through, within the budget (a
    // late value is put in memory, so the next lookup finds it).
    let three = machine(&tmp.path().join("three"), &redis.url(), &kf, false);
    for i in [3, 7, 11] {
        let found = eventually(
            Duration::from_secs(5),
            || matches!(three.cache.lookup(&key(i)), Lookup::Hit(v) if v[..] == value(i, 20_000)[..]),
        );
        assert!(found, "program {i} read through");
    }
    assert!(matches!(three.cache.lookup(b"never stored"), Lookup::Miss));
    let s = three.fleet.fleet_stats();
    assert!(s.hits >= 3, "{s:?}");
    assert_eq!(s.errors(), 0, "{s:?}");
}

#[test]
fn identities_live_side_by_side_and_keys_rotate() {
    if skip_without_redis() {
        return;
    }
    let redis = RedisServer::start(&[]).unwrap();
    let tmp = tmp();
    let old = key_file(tmp.path(), "old.key", &[1; 32]);
    let new = key_file(tmp.path(), "new.key", &[2; 32]);
    let other = b"radeonsi 25.0.7".to_vec();

    // Two drivers store the same key with different binaries, signed with the old key.
    for (ident, dir) in [(IDENTITY.to_vec(), "a"), (other.clone(), "b")] {
        let fleet =
            gpucache_fleet::FleetBuilder::new(redis.url(), gpucache::Identity::new(ident.clone()))
                .key_file(&old)
                .build()
                .unwrap();
        let cache = gpucache::Cache::builder()
            .directory(tmp.path().join(dir))
            .identity(ident.clone())
            .tier(fleet)
            .open()
            .unwrap();
        cache.insert(b"same key", ident.clone()).unwrap();
        cache.flush().unwrap();
    }
    // A machine rotated to the new key still reads entries of the previous one...
    let rotated = machine_with(&tmp.path().join("c"), &redis.url(), &new, true, |b| {
        b.previous_key_file(&old)
    });
    rotated.cache.wait_for_preload();
    assert_eq!(rotated.cache.get(b"same key").as_deref(), Some(IDENTITY));
    // ...and one with the new key alone rejects them.
    let strict = machine(&tmp.path().join("d"), &redis.url(), &new, true);
    strict.cache.wait_for_preload();
    assert_eq!(strict.fleet.fleet_stats().rejected_mac, 1);
    assert!(strict.cache.memory().get(b"same key").is_none());

    let mut admin = gpucache_fleet::FleetAdmin::connect(
        &redis.url(),
        Some(gpucache_fleet::KeyRing::new(
            gpucache_fleet::FleetKey::from_material(&[2; 32]).unwrap(),
            None,
        )),
        Duration::from_secs(1),
    )
    .unwrap();
    let ids = admin.identities().unwrap();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids.iter().all(|i| i.indexed == 1));
    assert!(ids.iter().any(|i| i.identity.contains("radeonsi")));
}
