//! Service throughput over the channel (results in README): 4 client processes (this binary
//! re-run) each send rounds of initialise (a 4 KiB buffer, its word in a memfd pool), unlock
//! and delete for 256 resources over their Unix-domain socket, as fast as they can; the
//! service (this process, one thread, the accounting back end) serves them all. Reported:
//! messages served per second, and, measured in the same run, the same operations applied
//! to the service manager directly in one process (no socket, no decoding) for the ratio.
//!
//! `cargo bench -p gpucache-discardable --bench channel` (`-- --quick` for a short run).

use std::io::{BufRead, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpucache::PolicyKind;
use gpucache_discardable::{
    ChannelClient, ClientDiscardableManager, CountingBackend, ResourceDesc, Server, ServerConfig,
    ServiceDiscardableManager,
};

const CLIENTS: usize = 4;
const BATCH: u32 = 256;
const ROLE: &str = "GPUCACHE_CHANNEL_BENCH_CLIENT";
const BUF: ResourceDesc = ResourceDesc::Buffer { bytes: 4096 };

/// A client process: waits for "go" on stdin, then sends `rounds` rounds and syncs.
fn client(socket: &str, rounds: u32) {
    let mut c = ChannelClient::connect(socket.as_ref()).expect("connect");
    c.sync().expect("sync");
    println!("ready");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).expect("go");
    for _ in 0..rounds {
        for r in 0..BATCH {
            c.create(r, BUF).expect("create");
        }
        for r in 0..BATCH {
            c.unlock(r).expect("unlock");
        }
        for r in 0..BATCH {
            c.delete(r).expect("delete");
        }
    }
    let reply = c.sync().expect("sync");
    assert_eq!(reply.errors, 0);
    c.goodbye().expect("goodbye");
}

/// One run over the socket: messages served per second.
fn socket_run(rounds: u32) -> (f64, u64) {
    let dir = std::env::temp_dir().join(format!("gpucache-channel-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("s");
    let config = ServerConfig {
        budget: 1 << 40,
        policy: PolicyKind::default(),
        max_errors: 0,
    };
    let mut server = Server::bind(&path, config, CountingBackend::default()).expect("bind");
    let exe = std::env::current_exe().expect("exe");
    let mut children: Vec<Child> = (0..CLIENTS)
        .map(|_| {
            Command::new(&exe)
                .env(ROLE, format!("{}:{rounds}", path.display()))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    // Serve the connections and first syncs until every client is ready.
    let mut readers: Vec<_> = children
        .iter_mut()
        .map(|c| std::io::BufReader::new(c.stdout.take().expect("stdout")))
        .collect();
    while server.stats().accepted < CLIENTS as u64 || server.stats().messages < CLIENTS as u64 {
        server.turn(Duration::from_millis(5)).expect("turn");
    }
    for r in &mut readers {
        let mut line = String::new();
        r.read_line(&mut line).expect("ready");
    }
    let before = server.stats().messages;
    let start = Instant::now();
    for c in &mut children {
        let mut stdin = c.stdin.take().expect("stdin");
        stdin.write_all(b"go\n").expect("go");
    }
    while server.stats().connected > 0 {
        server.turn(Duration::from_millis(5)).expect("turn");
    }
    let secs = start.elapsed().as_secs_f64();
    for mut c in children {
        assert!(c.wait().expect("wait").success());
    }
    let st = server.stats();
    assert_eq!(st.errors, 0);
    let _ = std::fs::remove_dir_all(&dir);
    let n = st.messages - before;
    (n as f64 / secs, n)
}

/// The same operations on the managers directly (one process, no socket): operations/s.
fn direct_run(rounds: u32) -> f64 {
    let mut service = ServiceDiscardableManager::new(1 << 40, PolicyKind::default());
    let mut clients: Vec<ClientDiscardableManager> = (0..CLIENTS)
        .map(|_| ClientDiscardableManager::default())
        .collect();
    let mut ops = 0u64;
    let start = Instant::now();
    for cid in 0..CLIENTS {
        service.add_client(cid as u32);
    }
    for _ in 0..rounds {
        for (cid, c) in clients.iter_mut().enumerate() {
            let cid = cid as u32;
            let mut hs = Vec::with_capacity(BATCH as usize);
            for r in 0..BATCH {
                let h = c.initialize().expect("init");
                for pool in c.take_new_pools() {
                    let mem = c.pool_memory(pool).expect("pool");
                    service
                        .register_pool(cid, pool, Arc::clone(mem))
                        .expect("register");
                }
                for pool in c.take_released_pools() {
                    service.release_pool(cid, pool).expect("release");
                }
                service
                    .initialize(cid, cid, r, h.pool, h.offset, 4096)
                    .expect("initialize");
                hs.push(h);
            }
            for r in 0..BATCH {
                service.unlock(cid, r).expect("unlock");
            }
            for (r, h) in hs.into_iter().enumerate() {
                assert!(c.lock(h.id).expect("lock"));
                service.delete(cid, r as u32).expect("delete");
                c.free(h.id).expect("free");
            }
            ops += 3 * u64::from(BATCH);
        }
    }
    ops as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        let (socket, rounds) = role.rsplit_once(':').expect("role");
        client(socket, rounds.parse().expect("rounds"));
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick") || !args.iter().any(|a| a == "--bench");
    let (runs, rounds) = if quick { (1, 20) } else { (5, 200) };
    println!(
        "channel throughput: {CLIENTS} client processes, rounds of initialise + unlock + delete of {BATCH} resources, {rounds} rounds each"
    );
    let (mut sock, mut direct, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let (s, n) = socket_run(rounds);
        let d = direct_run(rounds);
        println!(
            "  run: {n} messages, {s:>10.0} messages/s over the socket; {d:>10.0} ops/s direct"
        );
        sock.push(s);
        direct.push(d);
        ratio.push(s / d);
    }
    println!(
        "  median: {:.0} messages/s over the socket, {:.0} ops/s direct, socket/direct {:.2}",
        median(sock),
        median(direct),
        median(ratio)
    );
}
