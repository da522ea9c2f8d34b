//! A hand-written progress bar on standard error, for long runs.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// When to draw the bar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum When {
    /// When standard error is a terminal and the run has taken more than half a second.
    Auto,
    /// Always, from the start (also when standard error is not a terminal).
    Always,
    /// Never.
    Never,
}

/// Draws `[#####.....]  45%  123.4 / 270.0 MiB  56.7 MiB/s`, at most ten times a second.
pub struct Bar {
    enabled: bool,
    delay: Duration,
    start: Instant,
    last: Option<Instant>,
}

impl Bar {
    pub fn new(when: When) -> Bar {
        let enabled = match when {
            When::Auto => std::io::stderr().is_terminal(),
            When::Always => true,
            When::Never => false,
        };
        let delay = if when == When::Always {
            Duration::ZERO
        } else {
            Duration::from_millis(500)
        };
        Bar {
            enabled,
            delay,
            start: Instant::now(),
            last: None,
        }
    }

    /// Records progress: `done` of `total` bytes.
    pub fn update(&mut self, done: u64, total: u64) {
        let now = Instant::now();
        if !self.enabled || now - self.start < self.delay {
            return;
        }
        if self
            .last
            .is_some_and(|t| now - t < Duration::from_millis(100) && done < total)
        {
            return;
        }
        self.last = Some(now);
        let fraction = if total == 0 {
            1.0
        } else {
            done as f64 / total as f64
        };
        const WIDTH: usize = 30;
        let filled = ((fraction * WIDTH as f64) as usize).min(WIDTH);
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let secs = (now - self.start).as_secs_f64().max(1e-3);
        let _ = write!(
            std::io::stderr(),
            "\r[{}{}] {:>3.0}%  {:.1} / {:.1} MiB  {:.1} MiB/s ",
            "#".repeat(filled),
            ".".repeat(WIDTH - filled),
            fraction * 100.0,
            mib(done),
            mib(total),
            mib(done) / secs
        );
    }

    /// Ends the bar's line, if one was drawn.
    pub fn finish(&mut self) {
        if self.last.is_some() {
            let _ = writeln!(std::io::stderr());
        }
    }
}
