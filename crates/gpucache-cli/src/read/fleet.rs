//! The "fleet tier" section of `stats`: the `fleet-stats` file a fleet tier keeps in the
//! cache directory (`docs/fleet.md`).

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use gpucache_fleet::{read_persisted, PersistedFleetStats};
use serde_json::{json, Map, Value};

/// The directory's fleet counters, if a fleet tier wrote any.
pub fn load(dir: &Path) -> Option<PersistedFleetStats> {
    match read_persisted(dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("warning: fleet-stats is unusable ({e}); fleet counters not shown");
            None
        }
    }
}

/// Adds `fleet` (null without counters) to `value`.
pub fn add_json(s: Option<&PersistedFleetStats>, value: &mut Value) {
    value["fleet"] = match s {
        None => Value::Null,
        Some(s) => {
            let map = |v: &[(&str, u64)]| {
                Value::Object(
                    v.iter()
                        .map(|(k, v)| (k.to_string(), json!(v)))
                        .collect::<Map<_, _>>(),
                )
            };
            json!({
                "lifetime": map(&s.lifetime),
                "last_process": map(&s.last),
                "last_pid": s.last_pid,
                "last_error": s.last_error,
                "lifetime_errors": s.lifetime_errors(),
            })
        }
    };
}

/// Prints the section (nothing without counters).
pub fn print(s: Option<&PersistedFleetStats>, out: &mut dyn Write) -> Result<()> {
    let Some(s) = s else {
        return Ok(());
    };
    writeln!(out)?;
    writeln!(
        out,
        "fleet tier            from fleet-stats; last process pid {}",
        s.last_pid
    )?;
    writeln!(out, "  {:<24}{:>16}{:>16}", "", "lifetime", "last process")?;
    for ((name, all), (_, last)) in s.lifetime.iter().zip(&s.last) {
        writeln!(out, "  {:<24}{all:>16}{last:>16}", name.replace('_', " "))?;
    }
    writeln!(out, "  {:<24}{:>16}", "errors", s.lifetime_errors())?;
    if let Some(e) = &s.last_error {
        writeln!(out, "  last error          {e}")?;
    }
    Ok(())
}
