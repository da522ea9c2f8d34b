//! Helpers shared by the crash, multi-process and fault tests: self-verifying values, a small
//! deterministic RNG, and running this test executable again as a child process.
//!
//! Each test file uses a different subset, so unused items are expected here.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Environment variable that turns an ignored `child_*` test into a child process's job.
pub const CHILD_ENV: &str = "GPUCACHE_CHILD";

// ---------------------------------------------------------------------------------------
// Self-verifying values.

const MAGIC: [u8; 4] = *b"GPCV";
/// magic, key id, version, total length, then the body, then an FNV-1a-64 of all before it.
const HEADER_LEN: usize = 4 + 4 + 8 + 4;
const TRAILER_LEN: usize = 8;
/// The shortest value [`value_for`] makes.
pub const MIN_VALUE_LEN: usize = HEADER_LEN + TRAILER_LEN;

/// The key of key id `id`: a readable prefix, and a length that varies with the id.
pub fn key(id: u32) -> Vec<u8> {
    let mut k = format!("key/{id:08}/").into_bytes();
    let pad = (id.wrapping_mul(2_654_435_761) >> 27) as usize; // 0..32
    k.extend((0..pad).map(|i| b'a' + ((id as usize + i) % 26) as u8));
    k
}

/// A value that can only be the value `version` of key `id`: a header naming both, bytes
/// derived from them, and a trailing hash of everything before it.
pub fn value_for(id: u32, version: u64, len: usize) -> Vec<u8> {
    let len = len.max(MIN_VALUE_LEN);
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&MAGIC);
    v.extend_from_slice(&id.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    v.extend_from_slice(&(len as u32).to_le_bytes());
    let mut rng = Rng::new(u64::from(id) << 40 ^ version.rotate_left(17) ^ len as u64);
    while v.len() < len - TRAILER_LEN {
        let word = rng.next_u64().to_le_bytes();
        let n = (len - TRAILER_LEN - v.len()).min(8);
        v.extend_from_slice(&word[..n]);
    }
    let h = fnv1a(&v);
    v.extend_from_slice(&h.to_le_bytes());
    v
}

/// Checks that `bytes` is exactly a value [`value_for`] makes for key `id`; returns its
/// version. Any torn, truncated, extended or misdirected value fails.
pub fn verify(id: u32, bytes: &[u8]) -> Result<u64, String> {
    if bytes.len() < MIN_VALUE_LEN {
        return Err(format!(
            "key {id}: value of {} bytes is too short",
            bytes.len()
        ));
    }
    if bytes[..4] != MAGIC {
        return Err(format!("key {id}: bad magic {:02x?}", &bytes[..4]));
    }
    let owner = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
    if owner != id {
        return Err(format!("key {id}: value belongs to key {owner}"));
    }
    let version = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    let len = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    if len != bytes.len() {
        return Err(format!(
            "key {id} v{version:#x}: length {} but the header says {len}",
            bytes.len()
        ));
    }
    let body_end = len - TRAILER_LEN;
    let stored = u64::from_le_bytes(bytes[body_end..].try_into().unwrap());
    if fnv1a(&bytes[..body_end]) != stored {
        return Err(format!("key {id} v{version:#x}: trailing hash mismatch"));
    }
    if value_for(id, version, len) != bytes {
        return Err(format!(
            "key {id} v{version:#x}: body differs from the generator's"
        ));
    }
    Ok(version)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

// ---------------------------------------------------------------------------------------
// A small deterministic RNG (SplitMix64): the tests must not depend on `rand`.

#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (`hi > lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo)
    }

    /// True with probability `percent`/100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }
}

/// The seed of a test run: `GPUCACHE_SEED` if set, else from the clock; printed so that a
/// failure can be replayed.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("GPUCACHE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            now.as_nanos() as u64 ^ u64::from(std::process::id())
        });
    println!("{test}: seed {seed} (replay with GPUCACHE_SEED={seed})");
    seed
}

// ---------------------------------------------------------------------------------------
// Child processes: this test executable, running one ignored `child_*` test.

/// The child's job if this process is a child of the given kind; `None` otherwise (a plain
/// `cargo test -- --ignored` runs the child tests as no-ops).
pub fn child_role(kind: &str) -> Option<()> {
    (std::env::var(CHILD_ENV).ok()? == kind).then_some(())
}

/// A required environment variable of a child.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child needs {name}"))
}

pub fn env_u64(name: &str) -> u64 {
    env(name)
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number"))
}

/// The arguments that make a libtest executable run exactly one (ignored) test.
pub fn child_args(test: &str) -> [&str; 5] {
    [
        test,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]
}

/// A command running `test` of `exe` as a child of `kind`, stdout and stderr piped.
pub fn child_command_for(exe: &Path, test: &str, kind: &str) -> Command {
    let mut cmd = Command::new(exe);
    cmd.args(child_args(test))
        .env(CHILD_ENV, kind)
        .env_remove("RUST_TEST_THREADS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

pub fn child_command(test: &str, kind: &str) -> Command {
    child_command_for(&std::env::current_exe().unwrap(), test, kind)
}

/// A running child whose stdout lines and stderr are collected by threads.
pub struct Running {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    stdout: Vec<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Running {
    pub fn spawn(mut cmd: Command) -> std::io::Result<Running> {
        let mut child = cmd.spawn()?;
        let out = child.stdout.take().expect("stdout piped");
        let mut err = child.stderr.take().expect("stderr piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Ok(Running {
            child,
            lines: rx,
            stdout: Vec::new(),
            stderr: Some(stderr),
        })
    }

    /// Waits up to `timeout` for a stdout line holding `prefix` (libtest may print its
    /// `test name ... ` before it on the same line); false if the child closed its stdout or
    /// the time ran out.
    pub fn wait_for_line(&mut self, prefix: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(prefix);
                    self.stdout.push(line);
                    if found {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
    }

    /// SIGKILLs the child (`Child::kill` is SIGKILL on Unix) and reaps it.
    pub fn kill(mut self) -> Finished {
        let _ = self.child.kill();
        self.finish()
    }

    /// Waits for the child to exit on its own, killing it after `timeout`.
    pub fn wait(mut self, timeout: Duration) -> Finished {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return self.finish();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let mut finished = self.finish();
        finished.timed_out = true;
        finished
    }

    fn finish(mut self) -> Finished {
        let status = self.child.wait().expect("reap child");
        // The pipes close once the child is gone; collect what it printed.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(10)) {
            self.stdout.push(line);
        }
        let stderr = self
            .stderr
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        Finished {
            status,
            stdout: self.stdout,
            stderr,
            timed_out: false,
        }
    }
}

/// What a child left behind.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<String>,
    pub stderr: String,
    pub timed_out: bool,
}

impl Finished {
    /// Whether SIGKILL ended it.
    pub fn was_killed(&self) -> bool {
        use std::os::unix::process::ExitStatusExt;
        self.status.signal() == Some(9)
    }

    /// Panics with the child's output unless it exited 0.
    pub fn assert_success(&self, what: &str) {
        assert!(
            self.status.success() && !self.timed_out,
            "{what} failed: {:?} (timed out: {})\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.timed_out,
            self.stdout.join("\n"),
            self.stderr
        );
    }

    /// The `key=value` fields after `prefix` on the first stdout line holding it.
    pub fn report(&self, prefix: &str) -> Option<Vec<(String, String)>> {
        let line = self
            .stdout
            .iter()
            .find_map(|l| Some(&l[l.find(prefix)?..]))?;
        Some(
            line[prefix.len()..]
                .split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        )
    }

    /// The stdout lines holding `prefix`, each from `prefix` on.
    pub fn lines_with<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.stdout
            .iter()
            .filter_map(move |l| Some(&l[l.find(prefix)?..]))
    }

    /// A numeric field of the report line holding `prefix`.
    pub fn field(&self, prefix: &str, name: &str) -> Option<u64> {
        self.report(prefix)?
            .into_iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.parse().ok())
    }
}

/// Bytes of the segment files actually in `dir` (whatever the index says).
pub fn segment_file_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    // Segment files, not the hash table (`seg-table.hix`).
                    name.starts_with("seg-") && (name.ends_with(".dat") || name.ends_with(".idx"))
                })
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The names of the files in `dir`, sorted, for failure messages.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| {
                    let len = e.metadata().map(|m| m.len()).unwrap_or(0);
                    format!("{} ({len} B)", e.file_name().to_string_lossy())
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Path of a segment file in a cache directory.
/// A segment file header as `docs/disk-format.md` lays it out: magic, format version 2,
/// segment id, 12 reserved bytes, CRC32C of the first 28 bytes. Written here from the
/// document, independently of the library's encoder.
pub fn segment_header(magic: &[u8; 8], id: u32) -> Vec<u8> {
    let mut b = magic.to_vec();
    b.extend_from_slice(&2u32.to_le_bytes());
    b.extend_from_slice(&id.to_le_bytes());
    b.extend_from_slice(&[0; 12]);
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

pub fn seg_path(dir: &Path, seg: u32, ext: &str) -> PathBuf {
    dir.join(format!("seg-{seg:08x}.{ext}"))
}

// ---------------------------------------------------------------------------------------
// Developer mode (cache control is refused outside it).

/// Whether this process is the developer-mode child of a test. If it is not, runs `test`
/// of this executable again as that child, with `GPUCACHE_DEVELOPER_MODE=1` (how a developer
/// turns it on; a test cannot change its own environment safely), panics unless it passed,
/// and returns false: the caller then returns.
pub fn in_developer_mode(test: &str) -> bool {
    if child_role("developer-mode").is_some() {
        return true;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "developer-mode")
        .env("GPUCACHE_DEVELOPER_MODE", "1")
        .output()
        .expect("run the developer-mode child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{test} in developer mode failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    false
}
