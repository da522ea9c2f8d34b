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

/// One timed run of `n` operations: ns per operation.
fn once(n: u32, f: &mut dyn FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed().as_nanos() as f64 / f64::from(n)
}

/// Rounds of the baseline and the case back to back (the machine is shared: its load
/// changes between rounds); the medians of the case's ns and of the per-round ratios.
fn versus(
    rounds: usize,
    n: u32,
    base: &mut dyn FnMut(),
    case: &mut dyn FnMut(),
) -> (f64, f64, f64) {
    let (mut b, mut c, mut r) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let tb = once(n, base);
        let tc = once(n, case);
        b.push(tb);
        c.push(tc);
        r.push(tc / tb);
    }
    (median(b), median(c), median(r))
}

fn lock_bench(quick: bool) {
    let (rounds, n) = if quick {
        (3, 1_000_000)
    } else {
        (9, 10_000_000)
    };
    let base = Box::new(AtomicU32::new(2));
    let mem = Arc::new(SharedMemory::create(1, false).expect("memfd"));
    let h = DiscardableHandle::new(mem, 0).expect("word 0");
    h.initialize_locked();
    let mut client = ClientDiscardableManager::default();
    let ch = client.initialize().expect("handle");
    let mut b = || {
        black_box(cas_loop(black_box(&base)));
    };
    let mut l = || {
        black_box(black_box(&h).lock());
    };
    println!(
        "lock fast path: ns per lock, median of {rounds} rounds of {n}, each round after a round"
    );
    println!("of the baseline (an uncontended AtomicU32 CAS loop on the heap); ratio = median per round:");
    let (tb, tl, rl) = versus(rounds, n, &mut b, &mut l);
    println!("  baseline CAS loop                        {tb:6.2}");
    println!("  DiscardableHandle::lock, shm, uncont.    {tl:6.2}  ({rl:.2}x)");
    let (_, tm, rm) = versus(rounds, n, &mut b, &mut || {
        black_box(client.lock(black_box(ch.id)).ok());
    });
    println!("  ClientDiscardableManager::lock (by id)   {tm:6.2}  ({rm:.2}x)");
    // The service unlocks the same word as fast as it can (worst case, a core spinning on the
    // cache line), then paced: an unlock, then a 10 us sleep (a service waiting for messages).
    for paced in [false, true] {
        let stop = Arc::new(AtomicBool::new(false));
        let svc = {
            let (h, stop) = (h.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut unlocks = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if h.unlock().is_ok() {
                        unlocks += 1;
                    }
                    if paced {
                        std::thread::sleep(std::time::Duration::from_micros(10));
                    }
                }
                unlocks
            })
        };
        let (_, t, r) = versus(rounds, n, &mut b, &mut l);
        stop.store(true, Ordering::Relaxed);
        let unlocks = svc.join().unwrap_or(0);
        let what = if paced { "every 10 us" } else { "flat out   " };
        println!("  lock, service unlocking {what}      {t:6.2}  ({r:.2}x, {unlocks} unlocks)");
    }
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
