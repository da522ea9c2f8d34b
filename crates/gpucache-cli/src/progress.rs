//! The progress bar on standard error, for long runs (drawn by `indicatif`).

use std::io::{self, Write};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

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

/// `[#####.....]  45%  123.40 MiB / 270.00 MiB  56.70 MiB/s`.
const TEMPLATE: &str =
    "[{bar:30}] {percent:>3}%  {binary_bytes} / {binary_total_bytes}  {binary_bytes_per_sec}";
/// `[#####.....]  45%  1234 / 2700 entries  560/s`.
const ENTRIES: &str = "[{bar:30}] {percent:>3}%  {pos} / {len} entries  {per_sec}";
/// Redraws a second, at most.
const HZ: u8 = 10;
/// How long `--progress auto` waits before drawing: short runs stay quiet.
const AUTO_DELAY: Duration = Duration::from_millis(500);

/// A byte-count progress bar that appears once [`When`] says so.
pub struct Bar {
    bar: ProgressBar,
    /// Where the bar is drawn once `delay` has passed; taken when it is handed to the bar.
    target: Option<ProgressDrawTarget>,
    delay: Duration,
    start: Instant,
    /// The target is [`PlainStderr`], whose last line the bar leaves open.
    plain: bool,
}

impl Bar {
    pub fn new(when: When) -> Bar {
        let terminal = ProgressDrawTarget::stderr_with_hz(HZ);
        let (target, plain) = match when {
            When::Never => (None, false),
            // indicatif hides a bar whose standard error is not a terminal.
            When::Auto => (Some(terminal), false),
            When::Always if terminal.is_hidden() => (
                Some(ProgressDrawTarget::term_like_with_hz(
                    Box::new(PlainStderr),
                    HZ,
                )),
                true,
            ),
            When::Always => (Some(terminal), false),
        };
        let delay = if when == When::Always {
            Duration::ZERO
        } else {
            AUTO_DELAY
        };
        let bar = ProgressBar::hidden();
        bar.set_style(style());
        Bar {
            bar,
            target,
            delay,
            start: Instant::now(),
            plain,
        }
    }

    /// The same bar counting entries instead of bytes.
    pub fn entries(self) -> Bar {
        if let Ok(style) = ProgressStyle::with_template(ENTRIES) {
            self.bar.set_style(style.progress_chars("#."));
        }
        self
    }

    /// Records progress: `done` of `total` bytes (or entries).
    pub fn update(&mut self, done: u64, total: u64) {
        self.bar.set_length(total);
        if self.target.is_some() && self.start.elapsed() >= self.delay {
            if let Some(target) = self.target.take() {
                self.bar.set_draw_target(target);
            }
        }
        self.bar.set_position(done);
    }

    /// Draws the bar as it stands a last time (not filled up: a run that failed shows where
    /// it stopped), if it was drawn at all.
    pub fn finish(&mut self) {
        if self.bar.is_hidden() {
            return;
        }
        self.bar.abandon();
        if self.plain {
            eprintln!();
        }
    }
}

fn style() -> ProgressStyle {
    ProgressStyle::with_template(TEMPLATE)
        .map(|s| s.progress_chars("#."))
        .unwrap_or_else(|_| ProgressStyle::default_bar())
}

/// Standard error when it is not a terminal (a file, a pipe): `--progress always` draws
/// there too, each state after a carriage return.
#[derive(Debug)]
struct PlainStderr;

impl PlainStderr {
    fn escape(&self, n: usize, code: char) -> io::Result<()> {
        if n == 0 {
            return Ok(());
        }
        write!(io::stderr(), "\x1b[{n}{code}")
    }
}

impl TermLike for PlainStderr {
    fn width(&self) -> u16 {
        80
    }

    fn move_cursor_up(&self, n: usize) -> io::Result<()> {
        self.escape(n, 'A')
    }

    fn move_cursor_down(&self, n: usize) -> io::Result<()> {
        self.escape(n, 'B')
    }

    fn move_cursor_right(&self, n: usize) -> io::Result<()> {
        self.escape(n, 'C')
    }

    fn move_cursor_left(&self, n: usize) -> io::Result<()> {
        self.escape(n, 'D')
    }

    fn write_line(&self, s: &str) -> io::Result<()> {
        writeln!(io::stderr(), "{s}")
    }

    fn write_str(&self, s: &str) -> io::Result<()> {
        io::stderr().write_all(s.as_bytes())
    }

    fn clear_line(&self) -> io::Result<()> {
        // Every state is padded to the full width, so it covers the one before.
        io::stderr().write_all(b"\r")
    }

    fn flush(&self) -> io::Result<()> {
        io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_is_valid() {
        assert!(ProgressStyle::with_template(TEMPLATE).is_ok());
        assert!(ProgressStyle::with_template(ENTRIES).is_ok());
    }

    #[test]
    fn never_and_auto_off_a_terminal_stay_hidden() {
        let mut bar = Bar::new(When::Never);
        bar.update(5, 10);
        assert!(bar.bar.is_hidden());
        bar.finish();
        // Before the delay, auto draws nothing whatever standard error is.
        let mut bar = Bar::new(When::Auto);
        bar.update(5, 10);
        assert!(bar.bar.is_hidden());
    }
}
