//! What one `gl_run` process reports: `name value` lines on stdout.

use anyhow::{anyhow, Context as _, Result};

/// Times and counters of one process.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunReport {
    /// Programs drawn.
    pub programs: u64,
    /// Programs that compiled and linked.
    pub linked: u64,
    /// Before the context: opening gpucache, or reading the floor's file.
    pub setup_ms: f64,
    /// `eglGetPlatformDisplay` .. `eglMakeCurrent` plus installing the callbacks.
    pub create_ms: f64,
    /// Compiling, summed over the programs.
    pub compile_ms: f64,
    /// Linking, summed.
    pub link_ms: f64,
    /// First draws and read-backs, summed.
    pub draw_ms: f64,
    /// Destroying the context and terminating the display (Mesa finishes its cache writes),
    /// then closing the callbacks' cache (gpucache: shutdown, which persists).
    pub teardown_ms: f64,
    /// `get` calls of the driver (callback cases).
    pub gets: u64,
    /// `get` calls answered with a value.
    pub hits: u64,
    /// `set` calls stored.
    pub sets: u64,
    /// `set` calls dropped (too large or empty).
    pub sets_dropped: u64,
    /// `get` calls that found a value larger than the driver's buffer.
    pub gets_buffer_too_small: u64,
    /// Whether gpucache answered too-small buffers with a miss (set by the install helper).
    pub miss_on_oversize: bool,
    /// Bytes of the values held (floor only).
    pub values_bytes: u64,
    /// `glCompileShader` calls.
    pub compiles: u64,
    /// `glLinkProgram` calls.
    pub links: u64,
    /// `glProgramBinary` calls.
    pub binary_loads: u64,
}

macro_rules! fields {
    ($m:ident) => {
        $m!(
            programs,
            linked,
            setup_ms,
            create_ms,
            compile_ms,
            link_ms,
            draw_ms,
            teardown_ms,
            gets,
            hits,
            sets,
            sets_dropped,
            gets_buffer_too_small,
            miss_on_oversize,
            values_bytes,
            compiles,
            links,
            binary_loads
        )
    };
}

impl RunReport {
    /// Compile + link + draw.
    pub fn cld_ms(&self) -> f64 {
        self.compile_ms + self.link_ms + self.draw_ms
    }

    /// Compile + link: the time to have every program linked.
    pub fn linked_ms(&self) -> f64 {
        self.compile_ms + self.link_ms
    }

    /// The report as `name value` lines.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        macro_rules! write_all {
            ($($f:ident),*) => {
                $( out.push_str(&format!("{} {}\n", stringify!($f), self.$f)); )*
            };
        }
        fields!(write_all);
        out
    }

    /// Parses [`Self::to_text`]'s output; other lines are ignored.
    pub fn parse(text: &str) -> Result<Self> {
        let mut report = Self::default();
        let mut seen = 0;
        macro_rules! count_all {
            ($($f:ident),*) => { [$(stringify!($f)),*].len() };
        }
        let field_count = fields!(count_all);
        for line in text.lines() {
            let Some((name, value)) = line.split_once(' ') else {
                continue;
            };
            macro_rules! read_all {
                ($($f:ident),*) => {
                    match name {
                        $( stringify!($f) => {
                            report.$f = value.trim().parse().with_context(|| format!("{name} {value}"))?;
                            seen += 1;
                        } )*
                        _ => {}
                    }
                };
            }
            fields!(read_all);
        }
        if seen < field_count {
            return Err(anyhow!("incomplete report ({seen} fields):\n{text}"));
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_reads_back() {
        let report = RunReport {
            programs: 80,
            linked: 79,
            create_ms: 12.5,
            draw_ms: 1.25,
            gets: 400,
            hits: 399,
            miss_on_oversize: true,
            ..RunReport::default()
        };
        assert_eq!(RunReport::parse(&report.to_text()).unwrap(), report);
        assert!(RunReport::parse("programs 1\n").is_err());
    }
}
