//! Randomized multi-process stress: real client processes (this test binary re-run), real
//! memfd pools passed over the real socket, a service thread in this process. For a bounded
//! time, honest clients lock (through shared memory), use and unlock random textures and
//! buffers, keep a few locked across frames, delete some, and re-create what failed to lock;
//! a hostile client scribbles on its own words; one honest client is killed with SIGKILL
//! mid-frame. Checked:
//! - after every message (every enforcement) the total is over the budget by at most what is
//!   locked (the server counts violations);
//! - no locked resource is ever deleted (a client holding a lock re-reads its word: never 0);
//! - every failed lock matches a resource the service deleted (the client re-creates it under
//!   the same id, which the service refuses, as a counted error, unless it deleted it);
//! - the killed client's resources, objects and pools are gone;
//! - the scribbler harms only itself: honest clients get no error and lose nothing locked.
//!
//! `GPUCACHE_STRESS_SEED=n` replays a run; the seed is printed (shown on failure).

mod common;

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Rig;
use gpucache::PolicyKind;
use gpucache_discardable::{ChannelClient, Error, ResourceDesc, TexelFormat};

const ROLE_ENV: &str = "GPUCACHE_STRESS_ROLE";
const SOCKET_ENV: &str = "GPUCACHE_STRESS_SOCKET";
const SEED_ENV: &str = "GPUCACHE_STRESS_SEED";
const RUN: Duration = Duration::from_millis(2500);
/// How long the victim runs if it is not killed first: it is killed once it holds resources,
/// and with a tight budget the service may purge them between the test's looks for a while,
/// so it must still be running then (with `RUN`, a victim that finished first failed the
/// wait now and then).
const VICTIM_RUN: Duration = Duration::from_secs(30);
const WORKING_SET: u32 = 24;

struct Rng(u64);

impl Rng {
    /// Distinct streams for neighbouring seeds (a multiply spreads them; never 0).
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn desc(rng: &mut Rng) -> ResourceDesc {
    if rng.below(4) == 0 {
        ResourceDesc::Buffer {
            bytes: 1024 << rng.below(8),
        }
    } else {
        let side = 16 << rng.below(5);
        let format =
            [TexelFormat::Rgba8, TexelFormat::R8, TexelFormat::Rgba16f][rng.below(3) as usize];
        ResourceDesc::texture(side, side >> rng.below(2), format)
    }
}

/// The client process: frames until the time is up. Exits non-zero (a panic) when an
/// invariant breaks; prints its counts.
fn client(role: &str, seed: u64) -> Result<(u64, u64), Error> {
    let path = std::env::var(SOCKET_ENV).map_err(|e| Error::Backend(e.to_string()))?;
    let mut rng = Rng::new(seed);
    let mut c = ChannelClient::connect(path.as_ref())?;
    c.sync()?;
    let hostile = role == "scribbler";
    let mut descs: HashMap<u32, ResourceDesc> = HashMap::new();
    // Locks held across frames: resource → frames left.
    let mut pinned: HashMap<u32, u32> = HashMap::new();
    let (mut frames, mut failed_locks) = (0u64, 0u64);
    let run = if role == "victim" { VICTIM_RUN } else { RUN };
    let start = Instant::now();
    while start.elapsed() < run {
        let mut locked = Vec::new();
        for _ in 0..8 {
            let r = rng.below(u64::from(WORKING_SET)) as u32;
            if locked.contains(&r) || pinned.contains_key(&r) {
                continue;
            }
            let ok = match descs.get(&r) {
                Some(_) => c.lock(r)?,
                None => false,
            };
            if !ok {
                if descs.contains_key(&r) {
                    failed_locks += 1;
                }
                let d = desc(&mut rng);
                descs.insert(r, d);
                c.create(r, d)?;
            }
            locked.push(r);
        }
        for &r in &locked {
            c.use_resource(r)?;
        }
        if hostile {
            // Scribble on a few of its own words: zeros, ones, huge counts.
            for _ in 0..3 {
                let r = rng.below(u64::from(WORKING_SET)) as u32;
                if let Some(h) = c.handle(r) {
                    let v = [0, 1, u32::MAX, rng.next() as u32][rng.below(4) as usize];
                    if let Some(w) = h.memory().word(h.offset()) {
                        w.store(v, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
        } else {
            // Everything this client holds locked must still be alive.
            for r in locked.iter().chain(pinned.keys()) {
                let w = c.handle(*r).map_or(0, |h| h.value());
                assert!(w >= 2, "{role} seed {seed}: locked resource {r} reads {w}");
            }
        }
        for r in locked {
            if rng.below(10) == 0 && pinned.len() < 4 {
                pinned.insert(r, 1 + rng.below(4) as u32);
            } else {
                c.unlock(r)?;
            }
        }
        let due: Vec<u32> = pinned
            .iter_mut()
            .filter_map(|(&r, left)| {
                *left -= 1;
                (*left == 0).then_some(r)
            })
            .collect();
        for r in due {
            pinned.remove(&r);
            c.unlock(r)?;
        }
        if rng.below(4) == 0 {
            let r = rng.below(u64::from(WORKING_SET)) as u32;
            if descs.contains_key(&r) && !pinned.contains_key(&r) {
                descs.remove(&r);
                c.delete(r)?;
            }
        }
        let reply = c.sync()?;
        if !hostile {
            assert_eq!(reply.errors, 0, "{role} seed {seed}: refused messages");
        }
        frames += 1;
    }
    Ok((frames, failed_locks))
}

#[test]
fn stress_client_process() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    let seed: u64 = std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    match client(&role, seed) {
        Ok((frames, failed)) => println!("C:{role} frames={frames} failed_locks={failed}"),
        // The scribbler may be dropped by the service: its channel closes.
        Err(e) if role == "scribbler" => println!("C:{role} dropped: {e}"),
        Err(e) => panic!("{role} seed {seed}: {e}"),
    }
}

fn spawn(rig: &Rig, role: &str, seed: u64) -> (Child, u32) {
    // The service numbers its clients 1, 2, ... in the order it accepts them.
    let before = rig.s().stats().accepted;
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "stress_client_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE_ENV, role)
        .env(SOCKET_ENV, &rig.path)
        .env(SEED_ENV, seed.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    rig.wait(role, |s| s.stats().accepted > before);
    (child, before as u32 + 1)
}

#[test]
fn randomized_multi_process_stress() {
    let seed = std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(7, |d| d.as_nanos() as u64)
        });
    eprintln!("stress seed {seed} (replay with {SEED_ENV}={seed})");
    let mut rng = Rng::new(seed);
    let policy = PolicyKind::ALL[rng.below(PolicyKind::ALL.len() as u64) as usize];
    let budget = (1 + rng.below(4)) << 20;
    let rig = Rig::new(budget, policy);
    let honest: Vec<(Child, u32)> = (0..3)
        .map(|i| spawn(&rig, "honest", seed.wrapping_add(i)))
        .collect();
    let (scribbler, sid) = spawn(&rig, "scribbler", seed.wrapping_add(10));
    let (mut victim, vid) = spawn(&rig, "victim", seed.wrapping_add(20));
    // Kill the victim mid-run, once it has resources.
    std::thread::sleep(Duration::from_millis(300 + rng.below(700)));
    rig.wait("victim has resources", |s| {
        s.manager().resource_count(vid) > 0
    });
    victim.kill().unwrap();
    victim.wait().unwrap();
    rig.wait("victim gone", |s| !s.clients().contains(&vid));
    {
        let s = rig.s();
        assert_eq!(s.manager().resource_count(vid), 0, "seed {seed}");
        assert_eq!(s.manager().pool_count(vid), 0, "seed {seed}");
        assert!(
            s.backend().live.keys().all(|&(c, _)| c != vid),
            "seed {seed}"
        );
    }
    let mut ids = Vec::new();
    for (child, id) in honest {
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "seed {seed}: honest client failed:\n{text}"
        );
        assert!(text.contains("C:honest frames="), "seed {seed}: {text}");
        ids.push(id);
    }
    let out = scribbler.wait_with_output().unwrap();
    assert!(out.status.success(), "seed {seed}: scribbler crashed");
    rig.wait("all gone", |s| s.clients().is_empty());
    let mut s = rig.s();
    let stats = s.stats();
    assert_eq!(stats.budget_violations, 0, "seed {seed}: {stats:?}");
    let errors = s.take_errors();
    let honest_errors: Vec<_> = errors.iter().filter(|(c, _)| ids.contains(c)).collect();
    assert!(honest_errors.is_empty(), "seed {seed}: {honest_errors:?}");
    assert!(
        errors.iter().all(|(c, _)| *c == sid),
        "seed {seed}: {errors:?}"
    );
    assert_eq!(s.manager().stats().resources, 0, "seed {seed}");
    assert!(s.backend().live.is_empty(), "seed {seed}");
    assert!(
        s.manager().stats().evictions > 0,
        "seed {seed}: no eviction exercised"
    );
    eprintln!(
        "seed {seed}: policy {policy:?}, budget {budget}, {} messages, {} evictions, scribbler errors {}",
        stats.messages,
        s.manager().stats().evictions,
        errors.len()
    );
}
