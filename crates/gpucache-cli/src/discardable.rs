//! `gpucache discardable-demo`: discardable GPU memory across real processes. This process is
//! the service: it owns real GL textures and buffers (Mesa llvmpipe through EGL; `--no-gl`
//! for plain accounting) and serves a Unix-domain socket. It spawns `--clients` client
//! processes (`gpucache discardable-client`, this binary again); every frame each client
//! locks its textures through shared memory (re-creating those the service deleted: a failed
//! lock), asks the service to draw a quad with each, unlocks them, and ends the frame with a
//! sync whose token carries (frame, failed locks). The service prints, per frame, the budget,
//! bytes used and locked, evictions and failed locks, then a summary.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gpucache::PolicyKind;
use gpucache_discardable::{
    Backend, ChannelClient, CountingBackend, ResourceDesc, Server, ServerConfig, SyncReply,
    TexelFormat,
};
use gpucache_gl::{Api, GlContext, GlDiscardableBackend};
use serde_json::json;

use crate::Outcome;

const MIB: f64 = 1048576.0;
/// `EGL_VENDOR`.
const EGL_VENDOR: i32 = 0x3053;

/// The demo's settings.
#[derive(Clone, Debug)]
pub struct DemoArgs {
    pub clients: u32,
    pub frames: u32,
    pub budget_mib: u64,
    pub policy: PolicyKind,
    pub textures: u32,
    pub seed: u64,
    pub no_gl: bool,
    pub json: bool,
}

/// What a back end reports for the summary.
trait Report {
    fn report(&self) -> serde_json::Value;
}

impl Report for CountingBackend {
    fn report(&self) -> serde_json::Value {
        json!({ "backend": "counting", "uses": self.uses, "delete_batches": self.delete_batches })
    }
}

impl Report for GlDiscardableBackend {
    fn report(&self) -> serde_json::Value {
        let s = self.stats();
        json!({
            "backend": "gl",
            "egl_vendor": self.context().query_string(EGL_VENDOR).unwrap_or_default(),
            "textures_created": s.textures_created,
            "buffers_created": s.buffers_created,
            "quads_drawn": s.draws,
            "delete_batches": s.delete_batches,
            "objects_deleted": s.objects_deleted,
            "centre_pixel": self.read_centre(),
        })
    }
}

struct Rng(u64);

impl Rng {
    /// Distinct streams for neighbouring seeds (a multiply spreads them; never 0).
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// The client's resources: textures of 64² to 512² (full chains, RGBA8) and, one in eight,
/// buffers of 64 KiB to 1 MiB.
fn working_set(n: u32, seed: u64) -> Vec<ResourceDesc> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            if i % 8 == 7 {
                ResourceDesc::Buffer {
                    bytes: 65536 << rng.below(5),
                }
            } else {
                let side = 64 << rng.below(4);
                ResourceDesc::texture(side, side, TexelFormat::Rgba8)
            }
        })
        .collect()
}

/// `gpucache discardable-client`: one client process of the demo.
pub fn client(socket: &Path, frames: u32, textures: u32, seed: u64) -> Result<Outcome> {
    let mut c = ChannelClient::connect(socket).context("connecting to the service")?;
    let descs = working_set(textures, seed);
    let mut rng = Rng::new(!seed);
    let mut created = vec![false; descs.len()];
    let stdin = std::io::stdin();
    let mut line = String::new();
    for frame in 1..=u64::from(frames) {
        // The frame clock: the service starts every frame of every client together.
        line.clear();
        if stdin.read_line(&mut line)? == 0 {
            bail!("the service closed the frame clock");
        }
        let mut failed = 0u64;
        for (r, desc) in descs.iter().enumerate() {
            // Each frame uses about three quarters of the working set.
            if rng.below(4) == 0 {
                continue;
            }
            let id = r as u32;
            if !created[r] || !c.lock(id)? {
                if created[r] {
                    failed += 1;
                }
                c.create(id, *desc)?;
                created[r] = true;
            }
            c.use_resource(id)?;
            c.unlock(id)?;
        }
        c.sync_with((frame << 32) | failed)?;
    }
    c.goodbye()?;
    Ok(Outcome::Success)
}

/// `gpucache discardable-demo`.
pub fn demo(out: &mut dyn Write, args: &DemoArgs) -> Result<Outcome> {
    if args.clients == 0 || args.frames == 0 {
        bail!("--clients and --frames must be at least 1");
    }
    let socket = std::env::temp_dir().join(format!(
        "gpucache-discardable-demo-{}.sock",
        std::process::id()
    ));
    let config = ServerConfig {
        budget: args.budget_mib << 20,
        policy: args.policy,
        max_errors: 0,
    };
    let result = if args.no_gl {
        let server = Server::bind(&socket, config, CountingBackend::default())?;
        serve(out, args, &socket, server)
    } else {
        let ctx = GlContext::create(Api::Gles).context("creating the GL context")?;
        let backend = GlDiscardableBackend::new(ctx)?;
        let server = Server::bind(&socket, config, backend)?;
        serve(out, args, &socket, server)
    };
    let _ = std::fs::remove_file(&socket);
    result
}

#[derive(Default)]
struct FrameTally {
    reports: u32,
    failed: u64,
    /// The counts at the frame's last sync.
    last: SyncReply,
}

fn serve<B: Backend + Report>(
    out: &mut dyn Write,
    args: &DemoArgs,
    socket: &PathBuf,
    mut server: Server<B>,
) -> Result<Outcome> {
    let exe = std::env::current_exe()?;
    let mut children: Vec<Child> = Vec::new();
    for i in 0..args.clients {
        let child = Command::new(&exe)
            .arg("discardable-client")
            .arg("--socket")
            .arg(socket)
            .args(["--frames", &args.frames.to_string()])
            .args(["--textures", &args.textures.to_string()])
            .args(["--seed", &args.seed.wrapping_add(u64::from(i)).to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .context("spawning a client")?;
        children.push(child);
    }
    let mut clocks: Vec<_> = children.iter_mut().filter_map(|c| c.stdin.take()).collect();
    // Every client connected before frame 1 starts.
    let start = Instant::now();
    while server.stats().accepted < u64::from(args.clients) {
        server.turn(Duration::from_millis(20))?;
        if children
            .iter_mut()
            .any(|c| matches!(c.try_wait(), Ok(Some(_))))
        {
            bail!("a client exited before connecting");
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!("the clients did not connect within a minute");
        }
    }
    let tick = |clocks: &mut Vec<std::process::ChildStdin>| {
        // A client that died has no reader: its clock is dropped.
        clocks.retain_mut(|c| c.write_all(b"go\n").and_then(|()| c.flush()).is_ok());
    };
    tick(&mut clocks);
    let start = Instant::now();
    let mut tallies: BTreeMap<u64, FrameTally> = BTreeMap::new();
    let mut frames_json = Vec::new();
    let mut next_frame = 1u64;
    let mut last_evictions = 0u64;
    let (mut failed_total, mut peak_used) = (0u64, 0u64);
    let mut statuses = Vec::new();
    let budget = args.budget_mib << 20;
    if !args.json {
        writeln!(
            out,
            "discardable demo: {} clients, {} frames, budget {} MiB, policy {:?}, {} resources per client",
            args.clients, args.frames, args.budget_mib, args.policy, args.textures
        )?;
    }
    loop {
        server.turn(Duration::from_millis(20))?;
        for (_, reply) in server.take_syncs() {
            let t = tallies.entry(reply.token >> 32).or_default();
            t.reports += 1;
            t.failed += reply.token & 0xffff_ffff;
            t.last = reply;
        }
        peak_used = peak_used.max(server.manager().stats().total_bytes);
        // A frame is complete once every client still running has reported it; then the
        // clock starts the next one for all of them.
        let done = children.is_empty() && server.stats().connected == 0;
        while let Some(t) = tallies
            .get(&next_frame)
            .filter(|t| done || t.reports as usize >= children.len())
        {
            let s = t.last;
            let failed = t.failed;
            tallies.remove(&next_frame);
            let evictions = s.evictions - last_evictions;
            last_evictions = s.evictions;
            failed_total += failed;
            if args.json {
                frames_json.push(json!({
                    "frame": next_frame, "budget": s.budget, "used": s.total_bytes,
                    "locked": s.locked_bytes, "evictions": evictions, "failed_locks": failed,
                }));
            } else {
                writeln!(
                    out,
                    "frame {next_frame:>4}  budget {:>6.1} MiB  used {:>6.1} MiB  locked {:>5.1} MiB  evictions {evictions:>4}  failed locks {failed:>4}",
                    s.budget as f64 / MIB,
                    s.total_bytes as f64 / MIB,
                    s.locked_bytes as f64 / MIB,
                )?;
            }
            next_frame += 1;
            if next_frame <= u64::from(args.frames) {
                tick(&mut clocks);
            }
        }
        if done {
            break;
        }
        for c in &mut children {
            if let Some(st) = c.try_wait()? {
                statuses.push(st);
            }
        }
        children.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        if start.elapsed() > Duration::from_secs(600) {
            bail!("the demo ran for 10 minutes: giving up");
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let st = server.stats();
    let ms = server.manager().stats();
    let failures = statuses.iter().filter(|s| !s.success()).count();
    let summary = json!({
        "clients": args.clients,
        "frames": args.frames,
        "policy": format!("{:?}", args.policy),
        "budget": budget,
        "peak_used": peak_used,
        "evictions": ms.evictions,
        "lock_races": ms.lock_races,
        "failed_locks": failed_total,
        "messages": st.messages,
        "messages_per_second": st.messages as f64 / elapsed,
        "seconds": elapsed,
        "refused_messages": st.errors,
        "budget_violations": st.budget_violations,
        "client_failures": failures,
        "service": server.backend().report(),
    });
    if args.json {
        serde_json::to_writer_pretty(
            &mut *out,
            &json!({ "frames": frames_json, "summary": summary }),
        )?;
        writeln!(out)?;
    } else {
        writeln!(out, "summary: {}", serde_json::to_string_pretty(&summary)?)?;
    }
    if failures > 0 || st.errors > 0 || st.budget_violations > 0 {
        bail!(
            "{failures} client(s) failed, {} refused messages, {} budget violations",
            st.errors,
            st.budget_violations
        );
    }
    Ok(Outcome::Success)
}
