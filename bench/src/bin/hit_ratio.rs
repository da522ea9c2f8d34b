//! Hit ratio of gpucache's eviction policies against Belady's optimum on synthetic traces.
//!
//! Every policy runs in a real `gpucache::Store` (one shard, entry-bounded) replaying the
//! trace as a cache would see it: `get`, and `insert` on a miss.
//!
//! Usage: `hit_ratio [--requests N] [--capacity C]`.

use gpucache::PolicyKind;
use gpucache_bench::belady::optimal_hits;
use gpucache_bench::traces::{replay_hits, standard, Trace};

const POLICIES: [PolicyKind; 2] = [PolicyKind::Lru, PolicyKind::S3Fifo];

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
    println!("# Hit ratio against Belady's optimum ({requests} requests, {capacity} entries)\n");
    print!("| trace | Belady |");
    for p in POLICIES {
        print!(" {} | % of Belady |", p.name());
    }
    println!();
    println!("|---|---:|{}", "---:|---:|".repeat(POLICIES.len()));
    let mut failures = Vec::new();
    for trace in standard(requests, capacity) {
        let n = trace.keys.len() as f64;
        let best = optimal_hits(&trace.keys, trace.capacity);
        print!("| {} | {:.1}% |", trace.name, 100.0 * best as f64 / n);
        let mut ratios = Vec::new();
        for policy in POLICIES {
            let hits = replay_hits(&trace, policy);
            let of_best = if best == 0 {
                0.0
            } else {
                hits as f64 / best as f64
            };
            print!(
                " {:.1}% | {:.1}% |",
                100.0 * hits as f64 / n,
                100.0 * of_best
            );
            ratios.push((policy, hits as f64 / n, of_best));
        }
        println!();
        check_targets(&trace, &ratios, &mut failures);
    }
    println!();
    println!("Traces: {}", trace_notes(requests, capacity));
    if failures.is_empty() {
        println!("\nTargets met: S3-FIFO >= 50% of Belady on the loop; within 2 points of the better of LRU/S3-FIFO on Zipf.");
    } else {
        for f in &failures {
            println!("TARGET MISSED: {f}");
        }
        std::process::exit(1);
    }
}

/// The targets for the resistant policy (S3-FIFO).
fn check_targets(trace: &Trace, ratios: &[(PolicyKind, f64, f64)], failures: &mut Vec<String>) {
    let get = |kind| ratios.iter().find(|r| r.0 == kind).copied();
    let (Some(lru), Some(s3)) = (get(PolicyKind::Lru), get(PolicyKind::S3Fifo)) else {
        return;
    };
    if trace.name.starts_with("loop") && s3.2 < 0.5 {
        failures.push(format!(
            "{}: S3-FIFO at {:.1}% of Belady",
            trace.name,
            100.0 * s3.2
        ));
    }
    if trace.name.starts_with("zipf") && s3.1 + 0.02 < lru.1.max(s3.1) {
        failures.push(format!("{}: S3-FIFO more than 2 points behind", trace.name));
    }
}

fn trace_notes(requests: usize, capacity: usize) -> String {
    standard(requests.min(1000), capacity)
        .iter()
        .map(|t| format!("{} ({})", t.name, t.about))
        .collect::<Vec<_>>()
        .join("; ")
}
