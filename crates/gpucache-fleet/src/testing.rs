//! Real Redis servers for tests and benchmarks: `redis-server` processes on loopback ports
//! of their own, in temporary directories, stopped (and their directories removed) when
//! dropped, also when a test panics. Needs `redis-server` and `redis-cli` on `PATH`
//! (`scripts/install-deps`).

use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A temporary directory removed when dropped.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new empty directory under the system's temporary directory.
    pub fn new(prefix: &str) -> io::Result<Self> {
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "{prefix}-{}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed),
            Instant::now().elapsed().subsec_nanos()
        ));
        std::fs::create_dir_all(&path)?;
        Ok(Self(path))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether `redis-server` and `redis-cli` can be run.
pub fn redis_available() -> bool {
    ["redis-server", "redis-cli"].iter().all(|b| {
        Command::new(b)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// A free loopback port whose cluster bus port (+10000) is free too.
fn free_port() -> io::Result<u16> {
    for _ in 0..200 {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let port = l.local_addr()?.port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return Ok(port);
        }
    }
    Err(io::Error::other("no free port pair"))
}

/// One `redis-server` process.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    args: Vec<String>,
    paused: bool,
}

impl RedisServer {
    /// Starts a standalone server; `extra` are more `redis-server` arguments
    /// (`["--maxmemory", "2mb"]`).
    pub fn start(extra: &[&str]) -> io::Result<Self> {
        Self::start_with(extra.iter().map(|s| s.to_string()).collect())
    }

    fn start_with(args: Vec<String>) -> io::Result<Self> {
        let mut server = Self {
            child: None,
            port: free_port()?,
            dir: TempDir::new("gpucache-redis")?,
            args,
            paused: false,
        };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> io::Result<()> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&self) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.cli(&["PING"]).is_ok_and(|o| o.trim() == "PONG") {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(io::Error::other(format!(
            "redis-server on port {} did not start",
            self.port
        )))
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli` against it; its standard output.
    pub fn cli(&self, args: &[&str]) -> io::Result<String> {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .stderr(Stdio::null())
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!("redis-cli {args:?} failed")));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn signal(&self, sig: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args([sig, &child.id().to_string()])
                .status();
        }
    }

    /// Pauses the process (`SIGSTOP`): connections stay open, nothing answers.
    pub fn pause(&mut self) {
        self.signal("-STOP");
        self.paused = true;
    }

    /// Resumes a paused process (`SIGCONT`).
    pub fn resume(&mut self) {
        self.signal("-CONT");
        self.paused = false;
    }

    /// Kills the process (`SIGKILL`); its data is lost (no persistence), its cluster
    /// configuration file is kept.
    pub fn kill(&mut self) {
        if self.paused {
            self.resume();
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a killed server again on the same port and directory.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.spawn()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis Cluster of masters without replicas, made with `redis-cli --cluster create`.
#[derive(Debug)]
pub struct RedisCluster {
    /// The masters.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `masters` nodes and makes them a cluster; `extra` go to every server.
    pub fn start(masters: usize, extra: &[&str]) -> io::Result<Self> {
        let mut nodes = Vec::new();
        for _ in 0..masters {
            let mut args: Vec<String> = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                "--cluster-require-full-coverage",
                "no",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            args.extend(extra.iter().map(|s| s.to_string()));
            nodes.push(RedisServer::start_with(args)?);
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !out.success() {
            return Err(io::Error::other("redis-cli --cluster create failed"));
        }
        let cluster = Self { nodes };
        cluster.wait_ok()?;
        Ok(cluster)
    }

    /// Waits until every live node reports `cluster_state:ok`.
    pub fn wait_ok(&self) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.nodes.iter().all(|n| {
                n.cli(&["CLUSTER", "INFO"])
                    .is_ok_and(|o| o.contains("cluster_state:ok"))
            }) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(io::Error::other("cluster did not become ok"))
    }

    /// `redis+cluster://127.0.0.1:p1,127.0.0.1:p2,...`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }
}
