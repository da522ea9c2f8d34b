//! Slow storage for cold starts: the kernel's block-I/O throttle (cgroup v1 `blkio`, or
//! cgroup v2 `io.max`) on the device that holds the caches, shared by the benchmarks. The
//! warm-start benchmark moves itself into a throttled control group for a cold run, so the
//! `gl_run` child it starts reads through the limits, and moves back before the hot run;
//! `disk_bench` has its probe process move itself in ([`Throttle::procs_file`]) once its
//! code is warm. `../shared/notes/slow-storage.md` (and
//! `docs/warm-start.md`) describe the method.
//!
//! Where the throttle is unavailable (no root, no controller), [`Throttle::create`] answers
//! why and the caller skips the profiles with a printed note.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context as _, Result};

/// A storage profile: reads limited to `iops` I/Os and `bps` bytes per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    /// The name in the tables.
    pub name: &'static str,
    /// Read I/Os per second.
    pub iops: u64,
    /// Read bytes per second.
    pub bps: u64,
}

impl Profile {
    /// eMMC (Chromebooks, Android, single-board computers).
    pub const EMMC: Profile = Profile {
        name: "eMMC",
        iops: 2_000,
        bps: 150_000_000,
    };
    /// A SATA SSD.
    pub const SSD: Profile = Profile {
        name: "SATA SSD",
        iops: 10_000,
        bps: 500_000_000,
    };
    /// A hard disk.
    pub const HDD: Profile = Profile {
        name: "hard disk",
        iops: 150,
        bps: 50_000_000,
    };

    /// The profiles a `--storage` list names, `none` naming none.
    pub fn parse_list(list: &[String]) -> Result<Vec<Profile>> {
        list.iter()
            .filter(|s| s.as_str() != "none")
            .map(|s| Profile::parse(s))
            .collect()
    }

    /// `emmc`, `ssd`, `hdd`, or `IOPS:BYTES_PER_SECOND` (a custom profile).
    pub fn parse(s: &str) -> Result<Profile> {
        match s {
            "emmc" => Ok(Self::EMMC),
            "ssd" => Ok(Self::SSD),
            "hdd" => Ok(Self::HDD),
            custom => {
                let (iops, bps) = custom
                    .split_once(':')
                    .ok_or_else(|| anyhow!("storage profile {s:?}: emmc, ssd, hdd or IOPS:BPS"))?;
                let iops: u64 = iops.parse().context("IOPS of a custom profile")?;
                let bps: u64 = bps.parse().context("bytes/s of a custom profile")?;
                if iops == 0 || bps == 0 {
                    bail!("a custom profile needs non-zero IOPS and bytes/s");
                }
                Ok(Profile {
                    name: "custom",
                    iops,
                    bps,
                })
            }
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} IOPS, {} MB/s)",
            self.name,
            self.iops,
            self.bps / 1_000_000
        )
    }
}

/// Reads that reached the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoCount {
    /// Read I/Os.
    pub reads: u64,
    /// Bytes read.
    pub bytes: u64,
}

#[derive(Debug)]
enum Version {
    V1,
    V2,
}

/// A control group of this process's own, throttling reads of one device; removed on drop
/// (after this process has moved back to where it was).
#[derive(Debug)]
pub struct Throttle {
    version: Version,
    /// The throttled group.
    dir: PathBuf,
    /// The group this process came from.
    home: PathBuf,
    /// `major:minor` of the whole disk.
    device: String,
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {text:?} to {}", path.display()))
}

/// `major:minor` of the disk (not the partition) holding `path`.
pub fn device_of(path: &Path) -> Result<String> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path)
        .with_context(|| format!("stat {}", path.display()))?
        .dev();
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    if !sys.exists() {
        bail!(
            "{} is on {major}:{minor}, not a block device (tmpfs, overlay?)",
            path.display()
        );
    }
    if sys.join("partition").exists() {
        let parent = std::fs::canonicalize(&sys)?
            .parent()
            .map(|p| p.join("dev"))
            .ok_or_else(|| anyhow!("no parent disk of {major}:{minor}"))?;
        return Ok(std::fs::read_to_string(parent)?.trim().to_string());
    }
    Ok(format!("{major}:{minor}"))
}

/// This process's group in the hierarchy whose `/proc/self/cgroup` line matches.
fn own_group(matches: impl Fn(&str, &str) -> bool) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        matches(id, controllers).then(|| path.to_string())
    })
}

impl Throttle {
    /// A new throttled group for the disk holding `dir`, or why there can be none.
    pub fn create(dir: &Path) -> Result<Throttle> {
        let device = device_of(dir)?;
        static GROUPS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = GROUPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("gpucache-bench-{}-{n}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/blkio");
        if v1.join("blkio.throttle.read_iops_device").exists() {
            let home = own_group(|_, c| c.split(',').any(|c| c == "blkio"))
                .ok_or_else(|| anyhow!("no blkio line in /proc/self/cgroup"))?;
            let home = v1.join(home.trim_start_matches('/'));
            let dir = v1.join(&name);
            std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
            return Ok(Throttle {
                version: Version::V1,
                dir,
                home,
                device,
            });
        }
        let v2 = Path::new("/sys/fs/cgroup");
        let controllers =
            std::fs::read_to_string(v2.join("cgroup.controllers")).unwrap_or_default();
        if controllers.split_whitespace().any(|c| c == "io") {
            let home = own_group(|id, _| id == "0")
                .ok_or_else(|| anyhow!("no cgroup v2 line in /proc/self/cgroup"))?;
            let home = v2.join(home.trim_start_matches('/'));
            let parent = home.parent().unwrap_or(v2).to_path_buf();
            // The io controller must be enabled for the parent's children (a group with
            // processes of its own may refuse: then there is no throttle).
            write(&parent.join("cgroup.subtree_control"), "+io")?;
            let dir = parent.join(&name);
            std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
            return Ok(Throttle {
                version: Version::V2,
                dir,
                home,
                device,
            });
        }
        bail!("neither cgroup v1 blkio nor the cgroup v2 io controller is available")
    }

    /// Limits reads to `profile`.
    pub fn limit(&self, profile: &Profile) -> Result<()> {
        let d = &self.device;
        match self.version {
            Version::V1 => {
                write(
                    &self.dir.join("blkio.throttle.read_iops_device"),
                    &format!("{d} {}", profile.iops),
                )?;
                write(
                    &self.dir.join("blkio.throttle.read_bps_device"),
                    &format!("{d} {}", profile.bps),
                )
            }
            Version::V2 => write(
                &self.dir.join("io.max"),
                &format!("{d} riops={} rbps={}", profile.iops, profile.bps),
            ),
        }
    }

    /// Moves this process (and the children it starts from now on) into the group.
    pub fn enter(&self) -> Result<()> {
        write(
            &self.dir.join("cgroup.procs"),
            &std::process::id().to_string(),
        )
    }

    /// The file a process writes its id to in order to join the group.
    pub fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Moves this process back to the group it came from.
    pub fn leave(&self) -> Result<()> {
        write(
            &self.home.join("cgroup.procs"),
            &std::process::id().to_string(),
        )
    }

    /// Reads of the device by the group's processes so far.
    pub fn counts(&self) -> Result<IoCount> {
        let d = &self.device;
        let mut count = IoCount::default();
        match self.version {
            Version::V1 => {
                let field = |file: &str| -> Result<u64> {
                    let text = std::fs::read_to_string(self.dir.join(file))?;
                    Ok(text
                        .lines()
                        .filter_map(|l| {
                            let mut w = l.split_whitespace();
                            (w.next() == Some(d.as_str()) && w.next() == Some("Read"))
                                .then(|| w.next()?.parse::<u64>().ok())
                                .flatten()
                        })
                        .sum())
                };
                count.reads = field("blkio.throttle.io_serviced")?;
                count.bytes = field("blkio.throttle.io_service_bytes")?;
            }
            Version::V2 => {
                let text = std::fs::read_to_string(self.dir.join("io.stat"))?;
                for line in text.lines() {
                    let mut w = line.split_whitespace();
                    if w.next() != Some(d.as_str()) {
                        continue;
                    }
                    for kv in w {
                        match kv.split_once('=') {
                            Some(("rios", v)) => count.reads += v.parse::<u64>().unwrap_or(0),
                            Some(("rbytes", v)) => count.bytes += v.parse::<u64>().unwrap_or(0),
                            _ => {}
                        }
                    }
                }
            }
        }
        Ok(count)
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        let _ = self.leave();
        // A group can be removed once no process is in it (the children have exited).
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        eprintln!(
            "gpucache-bench: could not remove the control group {}",
            self.dir.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_parse() {
        assert_eq!(Profile::parse("hdd").unwrap(), Profile::HDD);
        assert_eq!(Profile::parse("emmc").unwrap(), Profile::EMMC);
        assert_eq!(Profile::parse("ssd").unwrap(), Profile::SSD);
        let c = Profile::parse("100:1000000").unwrap();
        assert_eq!((c.iops, c.bps), (100, 1_000_000));
        assert!(Profile::parse("floppy").is_err());
        assert!(Profile::parse("0:5").is_err());
        assert!(Profile::parse("5:x").is_err());
    }
}
