//! Benchmarks of discardable memory (results in README):
//! 1. the client's lock fast path on a word in shared memory, uncontended and with a service
//!    thread unlocking the same word concurrently, against an uncontended `AtomicU32`
//!    compare-and-swap loop on the heap measured in the same run;
//! 2. the seed's just-over-budget frame loop: re-creations per frame under each policy.
//!
//! `cargo bench -p gpucache-discardable --bench discardable` (add `-- --quick` for a short run).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use gpucache::PolicyKind;
use gpucache_discardable::{frame_loop, ClientDiscardableManager, DiscardableHandle, SharedMemory};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// ns per operation of `f` run `n` times; median of `rounds`.
fn time(rounds: usize, n: u32, mut f: impl FnMut(u32)) -> f64 {
    let v = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            for i in 0..n {
                f(i);
            }
            t.elapsed().as_nanos() as f64 / f64::from(n)
        })
        .collect();
    median(v)
}

fn cas_loop(w: &AtomicU32) -> bool {
    let mut cur = w.load(Ordering::Relaxed);
    loop {
        match w.compare_exchange_weak(
            cur,
            cur.wrapping_add(1),
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => return true,
            Err(seen) => cur = seen,
        }
    }
}

fn lock_bench(quick: bool) {
    let (rounds, n) = if quick {
        (3, 1_000_000)
    } else {
        (7, 20_000_000)
    };
    let base = Box::new(AtomicU32::new(2));
    let mem = Arc::new(SharedMemory::create(1, false).expect("memfd"));
    let h = DiscardableHandle::new(mem, 0).expect("word 0");
    h.initialize_locked();
    let mut client = ClientDiscardableManager::default();
    let ch = client.initialize().expect("handle");

    let t_base = time(rounds, n, |_| {
        black_box(cas_loop(black_box(&base)));
    });
    let t_lock = time(rounds, n, |_| {
        black_box(black_box(&h).lock());
    });
    let t_mgr = time(rounds, n, |_| {
        black_box(client.lock(black_box(ch.id)).ok());
    });
    // The service unlocks the same word as fast as it can (worst case), then paced.
    let contended = |pause: u32| {
        let stop = Arc::new(AtomicBool::new(false));
        let svc = {
            let (h, stop) = (h.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut unlocks = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if h.unlock().is_ok() {
                        unlocks += 1;
                    }
                    for _ in 0..pause {
                        std::hint::spin_loop();
                    }
                }
                unlocks
            })
        };
        let t = time(rounds, n, |_| {
            black_box(black_box(&h).lock());
        });
        stop.store(true, Ordering::Relaxed);
        let unlocks = svc.join().unwrap_or(0);
        (t, unlocks)
    };
    let (t_hot, u_hot) = contended(0);
    let (t_paced, u_paced) = contended(1000);
    println!("lock fast path, ns per lock (median of {rounds} rounds of {n}):");
    println!("  AtomicU32 CAS loop, heap, uncontended   {t_base:6.2}");
    println!(
        "  DiscardableHandle::lock, shm, uncont.   {t_lock:6.2}  ({:.2}x)",
        t_lock / t_base
    );
    println!(
        "  ClientDiscardableManager::lock (by id)  {t_mgr:6.2}  ({:.2}x)",
        t_mgr / t_base
    );
    println!(
        "  lock, service unlocking flat out        {t_hot:6.2}  ({:.2}x, {u_hot} unlocks)",
        t_hot / t_base
    );
    println!(
        "  lock, service unlocking paced           {t_paced:6.2}  ({:.2}x, {u_paced} unlocks)",
        t_paced / t_base
    );
}

fn frame_bench(quick: bool) {
    let (warmup, frames) = if quick { (10, 20) } else { (50, 200) };
    println!("frame loop: budget 100 resources, re-creations per frame over {frames} frames after {warmup}:");
    println!(
        "  working set  {:>10} {:>10} {:>10}   LRU / best",
        "lru", "s3-fifo", "w-tinylfu"
    );
    for pct in [105, 110, 150] {
        let r: Vec<f64> = PolicyKind::ALL
            .iter()
            .map(|&k| {
                frame_loop::run(k, pct, warmup, frames, 65536)
                    .map(|r| r.recreations_per_frame)
                    .unwrap_or(f64::NAN)
            })
            .collect();
        let best = r[1..].iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "  {pct:>10}%  {:>10.2} {:>10.2} {:>10.2}   {:.1}x",
            r[0],
            r[1],
            r[2],
            r[0] / best
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    // `cargo test --benches` runs this binary with `--test`-like flags: keep it short.
    let quick = quick || !args.iter().any(|a| a == "--bench");
    lock_bench(quick);
    frame_bench(quick);
}
