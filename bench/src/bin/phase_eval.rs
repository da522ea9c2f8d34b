//! W-TinyLFU on fixed hash seeds against the peers, on a wide set of traces and sizes: the
//! comparison used to judge policy changes (README, "Hit ratio against Belady's optimum").
//!
//! Usage: `phase_eval [--seeds N] [--caps 100,300,...] [--only SUBSTR] [--peers FILE]
//! [--base FILE] [--verbose 1] [--threads N]`: W-TinyLFU averaged over hash seeds 1..=N
//! (default 8) on every trace at each capacity (default 100, 300, 1,000 and 5,000 entries),
//! as a share of requests and as a ratio to the best peer. The peers' hits are computed once
//! and cached in FILE (default /tmp/phase_peers.txt; moka varies run to run, and a cache
//! keeps the comparison of two builds fair; with `--requests N`, traces of N requests
//! rather than 200,000, and FILE /tmp/phase_peers_N.txt; with `--trace-seed K`, other draws
//! of the random traces, FILE /tmp/phase_peers_N_tK.txt). `--extra` replays the held-out
//! families instead ([`gpucache_bench::heldout`]: shapes not tuned on; peers files named
//! `phase_peers_extra...`). With `--base`, each row is printed beside the
//! ratio of a previous run's output (its stdout saved to FILE), rows lower by more than 0.003
//! are marked WORSE, and the geometric means are compared. `--series NAME@CAP [--seed S]`
//! prints instead the hit rate per 5,000 requests of ours, moka and quick_cache on that trace.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use gpucache::PolicyKind;
use gpucache_bench::replay::{replay, replay_seeded, Contender, Hits};
use gpucache_bench::traces::{
    drifting, loop_over, one_hit_wonders, pages_share_programs, phase_change, phase_cycle,
    scan_with_zipf, sized_zipf_drawn, zipf, Trace,
};

/// Requests per trace unless `--requests` says otherwise.
const REQUESTS: usize = 200_000;

/// Requests per trace: `--requests N`, else [`REQUESTS`].
fn requests() -> usize {
    let n = arg("--requests").map_or(REQUESTS, |s| s.parse().expect("a number"));
    assert!(n > 0, "--requests must be positive");
    n
}

/// One replay: the trace's index, the hash seed (`None`: the peers, moka then quick_cache)
/// and the hits.
type Replayed = (usize, Option<u64>, Vec<Hits>);

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// `--trace-seed K`: added to every trace's seed, so that a change can be checked on other
/// draws of the same traces than the ones it was measured on (0, the default, gives the
/// usual draws). Each K keeps its own peers file.
fn trace_seed() -> u64 {
    arg("--trace-seed").map_or(0, |s| s.parse().expect("a number"))
}

/// `--extra`: the held-out families ([`gpucache_bench::heldout`]) instead of the usual set,
/// with their own peers file.
fn extra() -> bool {
    std::env::args().any(|a| a == "--extra")
}

fn traces(cap: usize) -> Vec<Trace> {
    let n = requests();
    let k = trace_seed();
    if extra() {
        return gpucache_bench::heldout::extra(n, cap, k);
    }
    vec![
        phase_change(0.8, n, cap, 15 + k),
        phase_change(1.0, n, cap, 15 + k),
        phase_cycle(0.8, n, cap, 19 + k),
        phase_cycle(1.0, n, cap, 19 + k),
        drifting(0.7, n, cap, 17 + k),
        drifting(0.9, n, cap, 17 + k),
        zipf(0.8, cap * 10, n, cap, 1 + k),
        zipf(1.0, cap * 10, n, cap, 2 + k),
        loop_over(1.05, n, cap),
        loop_over(2.0, n, cap),
        loop_over(3.0, n, cap),
        scan_with_zipf(0.8, cap * 10, n, cap, 3 + k),
        scan_with_zipf(1.0, cap * 10, n, cap, 3 + k),
        one_hit_wonders(0.9, 0.3, n, cap, 16 + k),
        pages_share_programs(n, cap, 4 + k),
        sized_zipf_drawn(0.9, n, cap, 18 + k, k),
    ]
}

/// Hit rate per 5,000 requests of ours (seed 1), moka and quick_cache on the first trace
/// named `name`.
fn series(name: &str, caps: &[usize]) {
    for &cap in caps {
        for t in traces(cap) {
            if format!("{}@{}", t.name, cap) != name {
                continue;
            }
            let mut cols = Vec::new();
            for c in [None, Some(Contender::Moka), Some(Contender::QuickCache)] {
                let mut v = Vec::new();
                let mut n = 0u64;
                let mut obs = |s: gpucache_bench::replay::Step| {
                    n += u64::from(s.hit);
                    v.push(n);
                };
                gpucache_bench::replay::replay_observed(
                    &t,
                    c.unwrap_or(Contender::Gpucache(PolicyKind::TinyLfu)),
                    c.is_none()
                        .then_some(arg("--seed").map_or(1, |s| s.parse().expect("a number"))),
                    Some(&mut obs),
                );
                cols.push(v);
            }
            let w = 5000;
            for i in (w..=t.keys.len()).step_by(w) {
                let r: Vec<String> = cols
                    .iter()
                    .map(|v| {
                        format!(
                            "{:.3}",
                            (v[i - 1] - if i > w { v[i - w - 1] } else { 0 }) as f64 / w as f64
                        )
                    })
                    .collect();
                println!("{i} {}", r.join(" "));
            }
            return;
        }
    }
}

fn main() {
    if let Some(name) = arg("--series") {
        let caps: Vec<usize> = arg("--caps").map_or(vec![100, 300, 1000, 5000], |s| {
            s.split(',').map(|c| c.parse().expect("a number")).collect()
        });
        series(&name, &caps);
        return;
    }
    let seeds: u64 = arg("--seeds").map_or(8, |s| s.parse().expect("a number"));
    let set = if extra() { "extra_" } else { "" };
    let peers_file = arg("--peers").unwrap_or_else(|| match (requests(), trace_seed()) {
        (REQUESTS, 0) if extra() => "/tmp/phase_peers_extra.txt".into(),
        (REQUESTS, 0) => "/tmp/phase_peers.txt".into(),
        (n, 0) => format!("/tmp/phase_peers_{set}{n}.txt"),
        (n, k) => format!("/tmp/phase_peers_{set}{n}_t{k}.txt"),
    });
    let only = arg("--only");
    let caps: Vec<usize> = arg("--caps").map_or(vec![100, 300, 1000, 5000], |s| {
        s.split(',').map(|c| c.parse().expect("a number")).collect()
    });
    let mut peers: HashMap<String, (u64, u64)> = std::fs::read_to_string(&peers_file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((
                f.next()?.to_string(),
                (f.next()?.parse().ok()?, f.next()?.parse().ok()?),
            ))
        })
        .collect();
    let mut all = Vec::new();
    for &cap in &caps {
        for t in traces(cap) {
            let name = format!("{}@{}", t.name, cap);
            if only.as_ref().is_some_and(|o| !name.contains(o.as_str())) {
                continue;
            }
            all.push((name, t));
        }
    }
    // Jobs: peers missing from the cache, then every (trace, seed).
    let best = |h: &[Hits], sized_bytes: bool| {
        h.iter()
            .map(|x| if sized_bytes { x.bytes } else { x.hits })
            .max()
            .unwrap_or(0)
    };
    let jobs: Vec<(usize, Option<u64>)> = all
        .iter()
        .enumerate()
        .flat_map(|(i, (name, _))| {
            let peer = (!peers.contains_key(name)).then_some((i, None));
            peer.into_iter()
                .chain((0..seeds).map(move |s| (i, Some(s + 1))))
        })
        .collect();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Replayed>> = Mutex::new(Vec::new());
    let threads: usize = arg("--threads").map_or(2, |s| s.parse().expect("a number"));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let j = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(i, seed)) = jobs.get(j) else { break };
                let t = &all[i].1;
                let h = match seed {
                    Some(seed) => vec![replay_seeded(t, PolicyKind::TinyLfu, seed)],
                    None => vec![replay(t, Contender::Moka), replay(t, Contender::QuickCache)],
                };
                results.lock().unwrap().push((i, seed, h));
            });
        }
    });
    let results = results.into_inner().unwrap();
    for (i, seed, h) in &results {
        if seed.is_none() {
            peers.insert(all[*i].0.clone(), (best(h, false), best(h, true)));
        }
    }
    let mut out: String = peers
        .iter()
        .map(|(k, (a, b))| format!("{k} {a} {b}\n"))
        .collect();
    out.push('\n');
    std::fs::write(&peers_file, out).expect("peers file written");
    let base: HashMap<String, f64> = arg("--base")
        .and_then(|f| std::fs::read_to_string(f).ok())
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.to_string(), f.nth(1)?.parse().ok()?))
        })
        .collect();
    let mut logs = (0.0, 0usize, 0.0);
    let mut worse = 0;
    for (i, (name, t)) in all.iter().enumerate() {
        let mine: Vec<&Hits> = results
            .iter()
            .filter(|r| r.0 == i && r.1.is_some())
            .map(|r| &r.2[0])
            .collect();
        let mut rows = vec![(name.clone(), false)];
        if t.sized() {
            rows = vec![
                (format!("{name}(hits)"), false),
                (format!("{name}(bytes)"), true),
            ];
        }
        for (row, bytes) in rows {
            let ours = mine
                .iter()
                .map(|h| if bytes { h.bytes } else { h.hits })
                .sum::<u64>() as f64
                / mine.len() as f64;
            let p = peers[name];
            let peer = if bytes { p.1 } else { p.0 };
            let ratio = ours / peer.max(1) as f64;
            let share = ours / if bytes { 1.0 } else { t.keys.len() as f64 };
            logs.0 += ratio.ln();
            logs.1 += 1;
            match base.get(&row) {
                Some(b) => {
                    let d = ratio - b;
                    logs.2 += b.ln();
                    if d < -0.003 {
                        worse += 1;
                    }
                    let flag = if d < -0.003 {
                        " WORSE"
                    } else if d > 0.003 {
                        " better"
                    } else {
                        ""
                    };
                    println!("{row} {share:.4} {ratio:.4} base {b:.4} {d:+.4}{flag}");
                }
                None => println!("{row} {share:.4} {ratio:.4}"),
            }
            if arg("--verbose").is_some() {
                let mut per: Vec<_> = results
                    .iter()
                    .filter(|r| r.0 == i && r.1.is_some())
                    .map(|r| (r.1, r.2[0].hits))
                    .collect();
                per.sort();
                println!("  {per:?}");
            }
        }
    }
    let n = logs.1 as f64;
    println!(
        "# geomean {:.4} base {:.4} rows {} worse {}",
        (logs.0 / n).exp(),
        (logs.2 / n).exp(),
        logs.1,
        worse
    );
}
