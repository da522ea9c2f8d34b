//! Command-line settings of `disk_bench`.

use std::path::PathBuf;

use anyhow::{bail, Context};

/// What one run measures, and where it keeps its files.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Entries of the main load (100,000 by default, 10,000 with `--quick`).
    pub entries: usize,
    /// Fewer and smaller rounds, for a run of about a minute.
    pub quick: bool,
    /// Rounds of each comparison (medians are reported).
    pub rounds: usize,
    /// Size of the sequential-write reference file.
    pub seq_bytes: u64,
    /// Random keys read per pass of the get benchmarks.
    pub get_sample: usize,
    /// Sections to run (1 to 7); 1 to 6 by default (7 loads a million entries per engine).
    pub only: Vec<u8>,
    /// Peers to compare with in section 6 (gpucache always runs); all by default.
    pub peers: Option<Vec<String>>,
    /// Where scratch directories are created (a temporary directory inside it is removed
    /// at the end).
    pub scratch_parent: Option<PathBuf>,
    /// Entry counts of section 7 (open to first hit at scale).
    pub scale_sizes: Vec<usize>,
    /// Value length of section 7's loads.
    pub scale_value_len: usize,
    /// Where section 7 keeps its loads between runs (default: inside the scratch directory,
    /// removed at the end).
    pub data_dir: Option<PathBuf>,
    /// Storage profiles of section 7's cold runs (`hdd`, `emmc`, `ssd`, `IOPS:BPS`, `none`).
    pub storage: Vec<String>,
}

/// How to run the binary.
pub const USAGE: &str =
    "usage: disk_bench [--entries N] [--quick] [--rounds R] [--dir PARENT] [--only 1,4,...] [--peers foyer,redb,...] [--scale-sizes 100000,1000000] [--value-len B] [--data DIR] [--storage hdd|emmc|ssd|IOPS:BPS|none]";

impl Settings {
    /// Parses `--entries N`, `--quick`, `--rounds R`, `--dir PARENT`, `--only LIST` and
    /// `--peers LIST`.
    pub fn from_args(args: impl IntoIterator<Item = String>) -> anyhow::Result<Self> {
        let mut entries = None;
        let mut rounds = 3;
        let mut quick = false;
        let mut scratch_parent = None;
        let mut only = vec![1, 2, 3, 4, 5, 6];
        let mut peers = None;
        let mut scale_sizes = None;
        let mut scale_value_len = 1024;
        let mut data_dir = None;
        let mut storage = vec!["hdd".to_string()];
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let mut value =
                |name: &str| args.next().with_context(|| format!("{name} needs a value"));
            match arg.as_str() {
                "--entries" => entries = Some(value("--entries")?.parse().context("--entries")?),
                "--rounds" => rounds = value("--rounds")?.parse().context("--rounds")?,
                "--dir" => scratch_parent = Some(PathBuf::from(value("--dir")?)),
                "--only" => only = parse_sections(&value("--only")?)?,
                "--peers" => {
                    peers = Some(value("--peers")?.split(',').map(str::to_owned).collect());
                }
                "--scale-sizes" => {
                    scale_sizes = Some(
                        value("--scale-sizes")?
                            .split(',')
                            .map(|s| s.trim().parse::<usize>())
                            .collect::<Result<Vec<_>, _>>()
                            .context("--scale-sizes")?,
                    );
                }
                "--value-len" => {
                    scale_value_len = value("--value-len")?.parse().context("--value-len")?;
                }
                "--data" => data_dir = Some(PathBuf::from(value("--data")?)),
                "--storage" => {
                    storage = value("--storage")?.split(',').map(str::to_owned).collect();
                }
                "--quick" => quick = true,
                "-h" | "--help" => bail!("{USAGE}"),
                other => bail!("unknown argument {other:?}\n{USAGE}"),
            }
        }
        let entries: usize = entries.unwrap_or(if quick { 10_000 } else { 100_000 });
        if entries < 10 || rounds == 0 {
            bail!("--entries must be at least 10 and --rounds at least 1");
        }
        Ok(Self {
            entries,
            quick,
            rounds,
            seq_bytes: if quick { 512 << 20 } else { 1 << 30 },
            get_sample: entries.min(if quick { 5_000 } else { 20_000 }),
            only,
            peers,
            scratch_parent,
            scale_sizes: scale_sizes.unwrap_or(if quick {
                vec![10_000, 100_000]
            } else {
                vec![100_000, 1_000_000]
            }),
            scale_value_len,
            data_dir,
            storage,
        })
    }

    /// Whether section `n` runs.
    pub fn runs(&self, n: u8) -> bool {
        self.only.contains(&n)
    }

    /// Entry counts of the growth rows: a tenth, three tenths and all of the main load.
    pub fn sizes(&self) -> [usize; 3] {
        [self.entries / 10, self.entries * 3 / 10, self.entries]
    }
}

/// Parses a comma-separated list of section numbers (1 to 7).
fn parse_sections(list: &str) -> anyhow::Result<Vec<u8>> {
    list.split(',')
        .map(|s| match s.trim().parse::<u8>() {
            Ok(n @ 1..=7) => Ok(n),
            _ => bail!("--only takes section numbers 1 to 7, not {s:?}"),
        })
        .collect()
}
