//! Hit ratio of gpucache's eviction policies and of its peers moka and quick_cache, against
//! Belady's optimum, on synthetic traces.
//!
//! gpucache runs in a real `gpucache::Store` (one shard); every cache replays the trace as
//! an application would: `get`, and `insert` on a miss. Unit traces bound every cache in
//! entries; sized traces bound them in bytes and are counted twice, in hits and in bytes hit.
//!
//! Usage: `hit_ratio [--requests N] [--capacity C]`. Exits 1 when a target is missed: the
//! default policy at least 0.995x the best peer on every row, and at least 95% of Belady's
//! hits on loop-1.05x.

use gpucache::PolicyKind;
use gpucache_bench::belady::optimal_hits;
use gpucache_bench::replay::{replay, Contender, Hits};
use gpucache_bench::traces::standard;

/// The least share of the best peer's hits the default policy must keep, on every row.
const OF_BEST_PEER: f64 = 0.995;
/// The least share of Belady's hits the default policy must keep on loop-1.05x.
const LOOP_OF_BELADY: f64 = 0.95;

/// One table row of a trace: its name, what it counts of a replay, and the total it is a
/// share of.
type Row = (String, fn(&Hits) -> u64, f64);

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

fn main() {
    let requests = arg("--requests", 200_000);
    let capacity = arg("--capacity", 1_000);
    let contenders = Contender::all();
    let default = Contender::Gpucache(PolicyKind::default());
    println!(
        "# Hit ratio against Belady's optimum and the peers ({requests} requests, {capacity} entries unless the trace says @N)\n"
    );
    print!("| trace | Belady |");
    for c in &contenders {
        print!(" {} |", c.name());
    }
    println!(" {} / best peer |", default.name());
    println!("|---|---:|{}---:|", "---:|".repeat(contenders.len()));
    let mut failures = Vec::new();
    let mut worst = f64::INFINITY;
    let mut loop_note = String::new();
    for trace in standard(requests, capacity) {
        let n = trace.keys.len() as f64;
        let belady = (!trace.sized()).then(|| optimal_hits(&trace.keys, trace.capacity));
        let results: Vec<(Contender, Hits)> =
            contenders.iter().map(|&c| (c, replay(&trace, c))).collect();
        let rows: Vec<Row> = if trace.sized() {
            let bytes: u64 = trace.sizes.iter().map(|&s| u64::from(s)).sum();
            vec![
                (format!("{} (hits)", trace.name), |h| h.hits, n),
                (format!("{} (bytes)", trace.name), |h| h.bytes, bytes as f64),
            ]
        } else {
            vec![(trace.name.clone(), |h| h.hits, n)]
        };
        for (name, metric, total) in rows {
            let of = |c: Contender| {
                results
                    .iter()
                    .find(|r| r.0 == c)
                    .map_or(0, |r| metric(&r.1))
            };
            let best_peer = contenders
                .iter()
                .filter(|c| c.is_peer())
                .map(|&c| of(c))
                .max()
                .unwrap_or(0);
            let ratio = of(default) as f64 / best_peer.max(1) as f64;
            worst = worst.min(ratio);
            match belady {
                Some(b) => print!("| {name} | {:.1}% |", 100.0 * b as f64 / total),
                None => print!("| {name} | n/a |"),
            }
            for &c in &contenders {
                print!(" {:.1}% |", 100.0 * of(c) as f64 / total);
            }
            println!(" {ratio:.3} |");
            if ratio < OF_BEST_PEER {
                failures.push(format!("{name}: default at {ratio:.3} of the best peer"));
            }
            if let (Some(b), true) = (belady, trace.name == "loop-1.05x") {
                let share = of(default) as f64 / b.max(1) as f64;
                loop_note = format!(
                    "loop-1.05x: {} at {:.1}% of Belady's hits",
                    default.name(),
                    100.0 * share
                );
                if share < LOOP_OF_BELADY {
                    failures.push(format!("{name}: default at {share:.3} of Belady"));
                }
            }
        }
    }
    println!();
    println!("Worst ratio of the default to the best peer: {worst:.3}");
    println!("{loop_note}");
    println!("{}", policy_memory());
    println!("Traces: {}", trace_notes(requests, capacity));
    if failures.is_empty() {
        println!(
            "\nTargets met: default >= {OF_BEST_PEER}x the best peer on every row; loop-1.05x >= {:.0}% of Belady.",
            100.0 * LOOP_OF_BELADY
        );
    } else {
        for f in &failures {
            println!("TARGET MISSED: {f}");
        }
        std::process::exit(1);
    }
}

/// W-TinyLFU's heap per tracked entry (metadata, links, pending hits, sketch, regret table)
/// at a few sizes, full as the store fills it: tables sized for the budget and the one id a
/// newcomer takes at the door (where the store's doubling stops), then the first eviction
/// (which makes the sketch).
fn policy_memory() -> String {
    use gpucache::{EvictionPolicy, TinyLfu};
    let hash = |id: u32| u64::from(id).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let cells: Vec<String> = [1_000u32, 10_000, 100_000]
        .iter()
        .map(|&n| {
            let mut p = TinyLfu::default();
            p.reserve_ids(n as usize + 1);
            for id in 0..=n {
                p.insert(id, hash(id), 1);
            }
            p.evict().expect("full");
            format!("{:.1} B at {n}", p.heap_bytes() as f64 / f64::from(n))
        })
        .collect();
    format!("W-TinyLFU policy memory per entry: {}", cells.join(", "))
}

fn trace_notes(requests: usize, capacity: usize) -> String {
    standard(requests.min(1000), capacity.min(100))
        .iter()
        .map(|t| format!("{} ({})", t.name.split('@').next().unwrap_or(""), t.about))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
        .join("; ")
}
