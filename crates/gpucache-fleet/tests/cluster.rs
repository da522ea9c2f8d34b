//! A three-master Redis Cluster: entries spread over the masters, a bulk pull across them,
//! and a master killed and restarted mid-run.

mod common;

use std::time::{Duration, Instant};

use common::*;
use gpucache_fleet::names::Names;
use gpucache_fleet::testing::RedisCluster;

const N: u32 = 150;
const LEN: usize = 6_000;

#[test]
fn two_machines_on_a_cluster_with_a_master_killed_and_restarted() {
    if skip_without_redis() {
        return;
    }
    let mut cluster = RedisCluster::start(3, &[]).unwrap();
    let url = cluster.url();
    let tmp = tmp();
    let kf = key_file(
        tmp.path(),
        "fleet.key",
        b"a cluster-wide fleet key, 32+ bytes",
    );

    // Machine one populates.
    {
        let one = machine(&tmp.path().join("one"), &url, &kf, true);
        one.cache.wait_for_preload();
        for i in 0..N {
            one.cache.insert(&key(i), value(i, LEN)).unwrap();
        }
        one.cache.flush().unwrap();
        // A loaded machine may take longer than the flush's bound to send it all.
        assert!(one.fleet.wait_for_push(std::time::Duration::from_secs(60)));
        let s = one.fleet.fleet_stats();
        assert_eq!(s.pushed, u64::from(N), "{s:?}");
    }
    // Every master holds some of the entries.
    for node in &cluster.nodes {
        let n: u64 = node.cli(&["DBSIZE"]).unwrap().trim().parse().unwrap();
        assert!(n > 10, "entries spread over the masters: {n}");
    }
    // Machine two starts empty and pulls everything, across the masters.
    {
        let two = machine(&tmp.path().join("two"), &url, &kf, true);
        two.cache.wait_for_preload();
        let s = two.fleet.fleet_stats();
        assert_eq!(s.pulled, u64::from(N), "{s:?}");
        assert_eq!(s.errors(), 0, "{s:?}");
        assert_eq!(
            two.cache.memory().get(&key(5)).as_deref(),
            Some(&value(5, LEN)[..])
        );
    }

    // Kill a master that does not hold the index, with machine three running.
    let index = Names::new(identity().namespace()).index();
    let victim = cluster
        .nodes
        .iter()
        .position(|n| n.cli(&["EXISTS", &index]).map_or(true, |o| o.trim() != "1"))
        .unwrap();
    let three_dir = tmp.path().join("three");
    let three = machine(&three_dir, &url, &kf, false);
    cluster.nodes[victim].kill();
    // The pull gets what the live masters hold; lookups and stores go on within budget.
    let got = three
        .fleet
        .pull(&mut |k, v| three.cache.memory().insert(k, v.to_vec()).is_ok());
    assert!(got > 0 && got < u64::from(N), "partial pull: {got}");
    let mut worst = Duration::ZERO;
    for i in 0..N {
        let t = Instant::now();
        let _ = three.cache.lookup(&key(i));
        three.cache.insert(&key(N + i), value(N + i, LEN)).unwrap();
        worst = worst.max(t.elapsed());
    }
    assert!(worst < Duration::from_millis(250), "worst call {worst:?}");
    three.cache.flush().unwrap();
    let s = three.fleet.fleet_stats();
    assert!(s.errors() > 0, "{s:?}");

    // The master comes back (empty: no persistence) and the cluster heals.
    cluster.nodes[victim].restart().unwrap();
    cluster.wait_ok().unwrap();
    let before = three.fleet.fleet_stats().pushed;
    let healed = eventually(Duration::from_secs(20), || {
        three.cache.insert(b"after", value(1, 100)).unwrap();
        three.cache.remove(b"after");
        three.cache.insert(b"after", value(2, 100)).unwrap();
        three.fleet.wait_for_push(Duration::from_millis(200));
        three.fleet.fleet_stats().pushed > before
    });
    assert!(healed, "pushes resume: {:?}", three.fleet.fleet_stats());
    drop(three);

    // Nothing local was lost, and a fourth machine finds what the fleet still holds: the
    // entries the restarted master lost are gone from the index after the pull.
    let alone = gpucache::Cache::builder()
        .directory(&three_dir)
        .identity(IDENTITY.to_vec())
        .open()
        .unwrap();
    for i in N..2 * N {
        assert_eq!(alone.get(&key(i)).as_deref(), Some(&value(i, LEN)[..]));
    }
    drop(alone);
    let four = machine(&tmp.path().join("four"), &url, &kf, true);
    four.cache.wait_for_preload();
    let s = four.fleet.fleet_stats();
    assert!(s.pulled >= u64::from(N) / 2, "{s:?}");
    assert_eq!(s.rejected(), 0, "{s:?}");
    for i in 0..2 * N {
        if let Some(v) = four.cache.memory().get(&key(i)) {
            assert_eq!(v[..], value(i, LEN)[..]);
        }
    }
}
