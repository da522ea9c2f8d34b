//! The "blob cache (EGL)" section of `stats`: the `blob-cache-stats` file that an EGL blob
//! cache keeps in its directory (`docs/blob-cache-stats.md`).

use std::io::Write;
use std::path::Path;
use std::time::SystemTime;

use anyhow::Result;
use gpucache::egl::diagnostics::{self, BlobCounters, PersistedBlobStats};
use serde_json::{json, Value};

/// What `stats` found of a directory's blob-cache diagnostics.
pub enum BlobSection {
    /// No diagnostics file: the directory was never used by a blob cache (or was cleared).
    Absent,
    /// The file, decoded and checked.
    Found(PersistedBlobStats),
    /// The file exists but cannot be used; the message says why.
    Unreadable(String),
}

impl BlobSection {
    /// Reads the diagnostics of cache directory `dir`. Never fails: an unreadable file is a
    /// warning, and the rest of `stats` is shown all the same.
    pub fn load(dir: &Path) -> Self {
        match diagnostics::read_persisted_stats(dir) {
            Ok(None) => Self::Absent,
            Ok(Some(stats)) => Self::Found(stats),
            Err(e) => Self::Unreadable(format!(
                "{} is unusable ({e}); blob cache diagnostics not shown",
                dir.join(diagnostics::STATS_FILE).display()
            )),
        }
    }

    /// Writes the warning, if any, to standard error.
    pub fn warn(&self) {
        if let Self::Unreadable(message) = self {
            eprintln!("warning: {message}");
        }
    }

    /// Adds `blob_cache` (null without a usable file) and `blob_cache_warning` to `value`.
    pub fn add_json(&self, value: &mut Value) {
        let (section, warning) = match self {
            Self::Absent => (Value::Null, Value::Null),
            Self::Found(s) => (found_json(s), Value::Null),
            Self::Unreadable(message) => (Value::Null, json!(message)),
        };
        value["blob_cache"] = section;
        value["blob_cache_warning"] = warning;
    }

    /// Prints the section (nothing without a usable file).
    pub fn print(&self, out: &mut dyn Write) -> Result<()> {
        let Self::Found(s) = self else {
            return Ok(());
        };
        let now = unix_now();
        writeln!(out)?;
        writeln!(
            out,
            "blob cache (EGL)      from {}",
            diagnostics::STATS_FILE
        )?;
        writeln!(
            out,
            "  lifetime            since {}, {}",
            time(s.since_unix_s, now),
            plural(s.updates, "update")
        )?;
        let on_off = if s.last.miss_on_oversize { "on" } else { "off" };
        writeln!(
            out,
            "  last process        pid {}, miss-on-oversize {on_off}",
            s.last.pid
        )?;
        writeln!(
            out,
            "                      opened {}, updated {}",
            time(s.last.started_unix_s, now),
            time(s.last.updated_unix_s, now)
        )?;
        writeln!(out, "  {:<24}{:>16}{:>16}", "", "lifetime", "last process")?;
        let (all, last) = (&s.lifetime, &s.last.counters);
        let rows = [
            ("gets", all.gets, last.gets),
            ("hits", all.hits, last.hits),
            ("misses", all.misses, last.misses),
            (
                "gets buffer too small",
                all.gets_buffer_too_small,
                last.gets_buffer_too_small,
            ),
            ("sets", all.sets, last.sets),
            ("sets dropped", all.sets_dropped, last.sets_dropped),
            (
                "calls while disabled",
                all.calls_while_disabled,
                last.calls_while_disabled,
            ),
        ];
        for (name, lifetime, last) in rows {
            writeln!(out, "  {name:<24}{lifetime:>16}{last:>16}")?;
        }
        let rate = |c: &BlobCounters| {
            c.hit_rate_percent()
                .map_or("n/a".to_owned(), |p| format!("{p:.1} %"))
        };
        writeln!(
            out,
            "  {:<24}{:>16}{:>16}",
            "hit rate",
            rate(all),
            rate(last)
        )?;
        if let Some(hint) = hint(s) {
            writeln!(out, "hint: {hint}")?;
        }
        Ok(())
    }
}

/// The advice for a driver integrator, when the counts call for it: values were larger than
/// the driver's buffer while the cache answered such gets with the size, which Mesa takes
/// for "copied" (it always passes a 64 KiB buffer and reads it after any non-zero answer).
pub fn hint(s: &PersistedBlobStats) -> Option<String> {
    let n = s.lifetime.gets_buffer_too_small;
    (n > 0 && !s.last.miss_on_oversize).then(|| {
        format!(
            "the driver's buffer was too small for {} and miss-on-oversize was off; Mesa \
             needs miss-on-oversize on (BlobCacheConfig::miss_on_oversize), or it reads its \
             buffer as if the value had been copied",
            plural(n, "value")
        )
    })
}

/// `1 value`, `2 values`.
fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn counters_json(c: &BlobCounters) -> Value {
    json!({
        "gets": c.gets,
        "hits": c.hits,
        "misses": c.misses,
        "gets_buffer_too_small": c.gets_buffer_too_small,
        "sets": c.sets,
        "sets_dropped": c.sets_dropped,
        "calls_while_disabled": c.calls_while_disabled,
        "hit_rate_percent": c.hit_rate_percent(),
    })
}

fn found_json(s: &PersistedBlobStats) -> Value {
    let mut last = counters_json(&s.last.counters);
    last["pid"] = json!(s.last.pid);
    last["miss_on_oversize"] = json!(s.last.miss_on_oversize);
    last["started_unix_s"] = json!(s.last.started_unix_s);
    last["updated_unix_s"] = json!(s.last.updated_unix_s);
    json!({
        "format_version": diagnostics::STATS_FORMAT_VERSION,
        "since_unix_s": s.since_unix_s,
        "updates": s.updates,
        "lifetime": counters_json(&s.lifetime),
        "last_process": last,
        "hint": hint(s),
    })
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `2025-06-01 12:00:00 UTC (3 min ago)`.
fn time(unix_s: u64, now: u64) -> String {
    let ago = match now.checked_sub(unix_s) {
        Some(s) if s < 120 => format!("{s} s ago"),
        Some(s) if s < 7200 => format!("{} min ago", s / 60),
        Some(s) if s < 172_800 => format!("{} h ago", s / 3600),
        Some(s) => format!("{} days ago", s / 86_400),
        None => "in the future".to_owned(),
    };
    format!("{} ({ago})", utc(unix_s))
}

/// A Unix time as `YYYY-MM-DD hh:mm:ss UTC` (proleptic Gregorian calendar).
fn utc(unix_s: u64) -> String {
    let (days, secs) = (unix_s / 86_400, unix_s % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// The calendar date `days` days after 1970-01-01. Counts in 400-year eras (146,097 days),
/// with years starting on 1 March so that the leap day ends the year.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468; // Days since 0000-03-01.
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // 0 = March.
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
        assert_eq!(utc(4_107_542_399), "2100-02-28 23:59:59 UTC");
        assert_eq!(time(1_000, 1_090), "1970-01-01 00:16:40 UTC (90 s ago)");
    }
}
