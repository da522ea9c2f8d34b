//! Hot-path latency of the memory tier under each eviction policy, side by side: gets that
//! hit, puts of new keys into a store that still has room (it grows from a quarter of its
//! entry budget to full), puts of new keys into a full store (each one evicts), puts that
//! replace a stored value, and evicting puts of values of mixed sizes (1–64 KiB,
//! log-uniform) into a store bounded only by bytes, where the weights of the policy's
//! entries differ as they do in a shader cache. Rounds alternate between the policies so that
//! drifts of a noisy machine fall on all of them; each cell is the median over the rounds, and
//! the ratios are against S3-FIFO (the default before W-TinyLFU). Until issue 15's last round
//! the evicting column also timed the growing puts (its first 12% of puts).
//!
//! Usage: `policy_hot_path [rounds]`.

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use gpucache::{PolicyKind, Store, StoreBuilder};

const ENTRIES: u32 = 4096;
const PASSES: u32 = 100;
const KEY_BYTES: usize = 20;
// The evicting puts follow the 3 * ENTRIES growing ones within a quarter of the passes.
const _: () = assert!(ENTRIES * PASSES / 4 > 3 * ENTRIES);

fn key(i: u32) -> [u8; KEY_BYTES] {
    let mut k = [0u8; KEY_BYTES];
    k[..4].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_le_bytes());
    k[4..8].copy_from_slice(&i.to_le_bytes());
    k
}

fn store(policy: PolicyKind) -> Store {
    StoreBuilder::new()
        .max_bytes(256 << 20)
        .max_entries(u64::from(4 * ENTRIES))
        .policy(policy)
        .build()
        .expect("store")
}

/// Nanoseconds per operation of `op` over `n` operations.
fn time(n: u32, mut op: impl FnMut(u32)) -> f64 {
    let start = Instant::now();
    for i in 0..n {
        op(i);
    }
    start.elapsed().as_nanos() as f64 / f64::from(n)
}

/// One round for `policy`: (get ns, growing put ns, evicting put ns, replacing put ns).
fn round(policy: PolicyKind, value: &Bytes) -> [f64; 4] {
    let s = store(policy);
    for i in 0..ENTRIES {
        s.insert(&key(i), value.clone()).expect("fits");
    }
    let n = ENTRIES * PASSES;
    let get = time(n, |i| {
        let k = key((i.wrapping_mul(7919)) % ENTRIES);
        assert!(black_box(s.get(&k)).is_some(), "every get hits");
    });
    let replace = time(n / 4, |i| {
        s.insert(&key(i % ENTRIES), value.clone()).expect("fits");
    });
    // The store holds ENTRIES of its 4 * ENTRIES: the next 3 * ENTRIES new keys fill it
    // (shards fill unevenly, so a few of them evict and a few of the next ones do not).
    let growing = time(3 * ENTRIES, |i| {
        s.insert(&key(ENTRIES + i), value.clone()).expect("fits");
    });
    let evicting = time(n / 4 - 3 * ENTRIES, |i| {
        s.insert(&key(4 * ENTRIES + i), value.clone())
            .expect("fits");
    });
    [get, growing, evicting, replace]
}

/// Largest value of the mixed-size round.
const MIXED_MAX: usize = 64 << 10;

/// The mixed-size round's value length for put `i`: log-uniform over 1–64 KiB.
fn mixed_len(i: u32) -> usize {
    let u = f64::from(i.wrapping_mul(2_654_435_761) >> 8) / f64::from(1u32 << 24);
    (1024.0 * 64f64.powf(u)) as usize
}

/// Nanoseconds per evicting put of a mixed-size value, in a store that holds about
/// `ENTRIES` of them (bounded by bytes only).
fn round_mixed(policy: PolicyKind, big: &Bytes) -> f64 {
    let s = StoreBuilder::new()
        .max_bytes(64 << 20)
        .policy(policy)
        .build()
        .expect("store");
    let put = |i: u32| {
        s.insert(&key(i), big.slice(..mixed_len(i))).expect("fits");
    };
    // Fill until evictions run, then time.
    for i in 0..ENTRIES * 4 {
        put(i);
    }
    time(ENTRIES * PASSES / 4, |i| put(ENTRIES * 4 + i))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(5, |s| s.parse().expect("rounds"));
    let value = Bytes::from(vec![1u8; 4096]);
    let big = Bytes::from(vec![2u8; MIXED_MAX]);
    let policies = PolicyKind::ALL;
    let mut cells = vec![vec![Vec::new(); 5]; policies.len()];
    for _ in 0..rounds {
        for (p, &policy) in policies.iter().enumerate() {
            let [get, growing, evicting, replacing] = round(policy, &value);
            let mixed = round_mixed(policy, &big);
            for (c, ns) in [get, growing, evicting, replacing, mixed]
                .into_iter()
                .enumerate()
            {
                cells[p][c].push(ns);
            }
        }
    }
    let medians: Vec<[f64; 5]> = cells
        .into_iter()
        .map(|c| {
            let mut it = c.into_iter().map(median);
            [0; 5].map(|_| it.next().unwrap_or(f64::NAN))
        })
        .collect();
    let base = policies
        .iter()
        .position(|&p| p == PolicyKind::S3Fifo)
        .map_or([f64::NAN; 5], |i| medians[i]);
    println!("median ns/op over {rounds} alternating rounds ({ENTRIES} entries, {KEY_BYTES} B keys, 4 KiB values, 1 thread; mixed: 1–64 KiB values, 64 MiB bound)\n");
    println!("| policy | get hit ns | put growing ns | put evicting ns | put replacing ns | put evicting, mixed sizes ns | get / s3-fifo | growing / s3-fifo | evicting / s3-fifo | replacing / s3-fifo | mixed / s3-fifo |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (p, m) in policies.iter().zip(&medians) {
        let ratios: Vec<String> = (0..5).map(|c| format!("{:.2}", m[c] / base[c])).collect();
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            p.name(),
            m[0],
            m[1],
            m[2],
            m[3],
            m[4],
            ratios.join(" | ")
        );
    }
}
