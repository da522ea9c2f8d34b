//! `gpucache`: the command-line tool. `docs/cli.md` describes every command.
//!
//! Every disk command takes the cache directory as its first positional argument. Exit
//! codes: 0 success; 1 a negative answer (`get`: key absent or its record corrupt;
//! `verify`: corruption found; `report`: no program cache data); 2 an error (bad arguments,
//! not a cache directory, a damaged file, I/O).

mod bundle;
mod discardable;
mod dropin;
mod fleet;
mod maintain;
mod output;
mod progress;
mod read;
mod replay;
mod report;
mod verify;

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use gpucache::PolicyKind;

#[derive(Parser)]
#[command(
    name = "gpucache",
    version,
    about = "Inspect, maintain and exercise gpucache caches"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a trace (one key per line; `-` for standard input) through the memory tier and
    /// report the hit ratio of each policy: a miss stores the key.
    Replay {
        /// The trace file.
        trace: PathBuf,
        /// Cache capacity in entries.
        #[arg(long, default_value_t = 1000)]
        capacity: u64,
        /// Policies to compare (lru, s3-fifo, w-tinylfu); by default all three, the default
        /// policy (w-tinylfu) among them.
        #[arg(long, value_delimiter = ',', default_value = "lru,s3-fifo,w-tinylfu")]
        policy: Vec<PolicyKind>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Install the drop-in (libEGL_gpucache.so, a GLVND EGL vendor) or show its caches.
    Dropin {
        #[command(subcommand)]
        command: DropinCommand,
    },
    /// Show meta, segments, entries and space use (read-only). On a driver-versioned root,
    /// show each identity's cache; on the drop-in's root, each application's namespace.
    Stats {
        /// The cache directory (or driver-versioned root).
        dir: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List live entries in write order: value size, segment, offset, key (read-only).
    Ls {
        /// The cache directory.
        dir: PathBuf,
        /// Print keys as text (non-printable bytes as \xNN, backslash as \\) instead of hex.
        #[arg(long)]
        text: bool,
        /// Print a JSON array, one entry per line.
        #[arg(long)]
        json: bool,
    },
    /// Write a value's bytes to standard output or --out (read-only, checksum-verified).
    /// Exit 1 if the key is absent or its record is corrupt.
    Get {
        /// The cache directory.
        dir: PathBuf,
        /// The key, in hex (or text with --text).
        key: String,
        /// Take KEY as text; \\ and \xNN escapes as `ls --text` prints them.
        #[arg(long)]
        text: bool,
        /// Write the value to this file instead of standard output.
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
    /// Read and check every record and index entry (read-only). Exit 1 if anything is
    /// corrupt.
    Verify {
        /// The cache directory.
        dir: PathBuf,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
        /// Progress bar on standard error.
        #[arg(long, value_enum, default_value = "auto")]
        progress: progress::When,
    },
    /// Print the GPU program cache's histograms (gpucache-gl) kept in DIR, every run's and
    /// the last run's, and draw them as an SVG image (DIR is only read). Exit 1 if DIR holds
    /// no program cache data.
    Report {
        /// The program cache directory (a driver-versioned root: each identity is reported),
        /// or one identity's `id-...` directory.
        dir: PathBuf,
        /// Where to write the image. With several identities, each gets its own file:
        /// `-<id>` is inserted before the extension.
        #[arg(long, value_name = "PATH", default_value = "gpucache-report.svg")]
        svg: PathBuf,
        /// Write no image.
        #[arg(long, conflicts_with = "svg")]
        no_svg: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove every entry (the directory keeps its identity). Safe while the cache is in use.
    Clear {
        /// The cache directory.
        dir: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Reclaim all dead space by rewriting segments. Safe while the cache is in use.
    Compact {
        /// The cache directory.
        dir: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write every live entry to a single bundle file.
    Export {
        /// The cache directory.
        dir: PathBuf,
        /// The bundle file to write (replaced whole once complete).
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// A fleet tier's Redis: push a directory's entries, pull an identity's entries into a
    /// directory, or show what the fleet holds (`docs/fleet.md`).
    Fleet {
        #[command(subcommand)]
        command: FleetCommand,
    },
    /// Store a bundle's entries into a cache directory (created if missing; for a
    /// driver-versioned bundle DIR may be the root).
    Import {
        /// The cache directory (or driver-versioned root).
        dir: PathBuf,
        /// The bundle file.
        file: PathBuf,
        /// Wipe a directory of another identity, version or flags and give it to the
        /// bundle's.
        #[arg(long)]
        force: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Discardable GPU memory across processes: this process serves real GL textures and
    /// buffers (Mesa llvmpipe through EGL) under one budget; `--clients` client processes
    /// lock, draw with and unlock theirs every frame. Prints budget, bytes used, evictions and
    /// failed locks per frame, then a summary.
    DiscardableDemo {
        /// Client processes.
        #[arg(long, default_value_t = 3)]
        clients: u32,
        /// Frames each client runs.
        #[arg(long, default_value_t = 120)]
        frames: u32,
        /// The service's budget in MiB.
        #[arg(long, default_value_t = 64)]
        budget_mib: u64,
        /// Eviction policy (lru, s3-fifo, tinylfu).
        #[arg(long, default_value = "tinylfu")]
        policy: PolicyKind,
        /// Resources per client (textures of 64² to 512² and, one in eight, buffers).
        #[arg(long, default_value_t = 64)]
        textures: u32,
        /// Seed of the clients' working sets and frame choices.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Plain accounting instead of GL objects.
        #[arg(long)]
        no_gl: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One client process of `discardable-demo` (started by it).
    #[command(hide = true)]
    DiscardableClient {
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        frames: u32,
        #[arg(long)]
        textures: u32,
        #[arg(long)]
        seed: u64,
    },
}

#[derive(Subcommand)]
enum FleetCommand {
    /// Send every live entry of DIR to the fleet, under DIR's identity (entries the fleet
    /// already holds are skipped).
    Push {
        /// The cache directory.
        dir: PathBuf,
        #[command(flatten)]
        conn: fleet::Conn,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Progress bar on standard error.
        #[arg(long, value_enum, default_value = "auto")]
        progress: progress::When,
    },
    /// Store the fleet's entries of DIR's identity into DIR (verified: MAC, identity, key).
    /// Exit 1 if any entry was rejected.
    Pull {
        /// The cache directory (created with --identity if it is not one).
        dir: PathBuf,
        /// The identity bytes, as text, of a directory to create.
        #[arg(long)]
        identity: Option<String>,
        #[command(flatten)]
        conn: fleet::Conn,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Progress bar on standard error.
        #[arg(long, value_enum, default_value = "auto")]
        progress: progress::When,
    },
    /// What the fleet holds per identity, and each server's memory.
    Stats {
        #[command(flatten)]
        conn: fleet::Conn,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum DropinCommand {
    /// Print the GLVND vendor JSON file naming the drop-in library.
    Json {
        /// The library (default: libEGL_gpucache.so next to this executable).
        #[arg(long)]
        lib: Option<PathBuf>,
    },
    /// For this user: write the JSON file and print the shell lines that enable it
    /// (`eval "$(gpucache dropin enable)"`); with --system, install it in
    /// /etc/glvnd/egl_vendor.d for every process.
    Enable {
        /// The library (default: libEGL_gpucache.so next to this executable).
        #[arg(long)]
        lib: Option<PathBuf>,
        /// Install system-wide (needs root).
        #[arg(long)]
        system: bool,
        /// The vendor directory --system writes to.
        #[arg(long, default_value = dropin::SYSTEM_DIR, requires = "system")]
        vendor_dir: PathBuf,
    },
    /// The reverse of enable (`eval "$(gpucache dropin disable)"`; --system removes the file).
    Disable {
        /// Remove the system-wide file.
        #[arg(long)]
        system: bool,
        /// The vendor directory --system removes from.
        #[arg(long, default_value = dropin::SYSTEM_DIR, requires = "system")]
        vendor_dir: PathBuf,
    },
    /// `stats` of the drop-in's root (its per-application namespaces), found from the same
    /// settings an application reads (GPUCACHE_DROPIN_DIR, the config file, XDG_CACHE_HOME).
    Stats {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove the least recently used caches under the drop-in's root until the rest take
    /// no more than the limit (applications do this once a day on their own); caches that
    /// a running application holds are kept.
    Prune {
        /// The limit (`K`, `M`, `G` suffixes; default: the settings' total_max_bytes).
        #[arg(long)]
        max_bytes: Option<String>,
        /// List the caches by last use and what a prune would remove; remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// How a command that ran to completion ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Exit code 0.
    Success,
    /// Exit code 1: a negative answer, not an error.
    Negative,
}

fn run(command: Command, out: &mut dyn Write) -> Result<Outcome> {
    match command {
        Command::Replay {
            trace,
            capacity,
            policy,
            json,
        } => replay::run(out, &trace, capacity, &policy, json).map(|()| Outcome::Success),
        Command::Stats { dir, json } => read::stats(out, &dir, json),
        Command::Dropin { command } => match command {
            DropinCommand::Json { lib } => dropin::json(out, lib.as_deref()),
            DropinCommand::Enable {
                lib,
                system,
                vendor_dir,
            } => dropin::enable(out, lib.as_deref(), system.then_some(vendor_dir.as_path())),
            DropinCommand::Disable { system, vendor_dir } => {
                dropin::disable(out, system.then_some(vendor_dir.as_path()))
            }
            DropinCommand::Stats { json } => read::stats(out, &dropin::root()?, json),
            DropinCommand::Prune { max_bytes, dry_run } => {
                dropin::prune(out, max_bytes.as_deref(), dry_run)
            }
        },
        Command::Ls { dir, text, json } => read::ls(out, &dir, text, json),
        Command::Get {
            dir,
            key,
            text,
            out: file,
        } => {
            let key = if text {
                output::unescape(&key)?
            } else {
                output::parse_hex(&key)?
            };
            read::get(out, &dir, &key, file.as_deref())
        }
        Command::Verify {
            dir,
            json,
            progress,
        } => verify::run(out, &dir, json, progress),
        Command::Report {
            dir,
            svg,
            no_svg,
            json,
        } => report::run(out, &dir, (!no_svg).then_some(svg.as_path()), json),
        Command::Clear { dir, json } => maintain::clear(out, &dir, json),
        Command::Compact { dir, json } => maintain::compact(out, &dir, json),
        Command::Export { dir, file, json } => bundle::export(out, &dir, &file, json),
        Command::Import {
            dir,
            file,
            force,
            json,
        } => bundle::import(out, &dir, &file, force, json),
        Command::DiscardableDemo {
            clients,
            frames,
            budget_mib,
            policy,
            textures,
            seed,
            no_gl,
            json,
        } => discardable::demo(
            out,
            &discardable::DemoArgs {
                clients,
                frames,
                budget_mib,
                policy,
                textures,
                seed,
                no_gl,
                json,
            },
        ),
        Command::DiscardableClient {
            socket,
            frames,
            textures,
            seed,
        } => discardable::client(&socket, frames, textures, seed),
        Command::Fleet { command } => match command {
            FleetCommand::Push {
                dir,
                conn,
                json,
                progress,
            } => fleet::push(out, &dir, &conn, json, progress),
            FleetCommand::Pull {
                dir,
                identity,
                conn,
                json,
                progress,
            } => fleet::pull(out, &dir, identity.as_deref(), &conn, json, progress),
            FleetCommand::Stats { conn, json } => fleet::stats(out, &conn, json),
        },
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = BufWriter::new(io::stdout().lock());
    let result = run(cli.command, &mut out).and_then(|outcome| {
        out.flush()?;
        Ok(outcome)
    });
    match result {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Negative) => ExitCode::from(1),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpucache: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The reader of our output went away (`gpucache ls DIR | head`): not an error.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}
