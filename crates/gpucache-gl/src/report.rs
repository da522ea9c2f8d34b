//! The histograms as text (for terminals and benchmark logs) and as an SVG image (for
//! people): what `gpucache report DIR` prints and draws.

use std::fmt::Write as _;

use gpucache::HistogramSnapshot;

use crate::histograms::{HistogramSet, Metric, PersistedHistograms};

/// A value with its unit, short: `812 µs`, `12.4 ms`, `25.1 KiB`.
pub fn format_value(metric: Metric, v: u64) -> String {
    if metric.unit() == "bytes" {
        match v {
            0..=1023 => format!("{v} B"),
            1024..=1_048_575 => format!("{:.1} KiB", v as f64 / 1024.0),
            _ => format!("{:.1} MiB", v as f64 / 1_048_576.0),
        }
    } else {
        match v {
            0..=999 => format!("{v} µs"),
            1000..=999_999 => format!("{:.1} ms", v as f64 / 1000.0),
            _ => format!("{:.2} s", v as f64 / 1e6),
        }
    }
}

fn summary(metric: Metric, h: &HistogramSnapshot) -> String {
    if h.count() == 0 {
        return "no values".into();
    }
    let q = |q| format_value(metric, h.quantile(q).unwrap_or(0));
    format!(
        "n={} mean={} p50={} p90={} p99={} max={}",
        h.count(),
        format_value(metric, h.mean().unwrap_or(0.0) as u64),
        q(0.5),
        q(0.9),
        q(0.99),
        format_value(metric, h.max().unwrap_or(0)),
    )
}

/// One line per histogram: name, count and quantiles, then a bar per non-empty bucket.
pub fn histograms_text(set: &HistogramSet) -> String {
    let mut out = String::new();
    for metric in Metric::ALL {
        let h = set.get(metric);
        let _ = writeln!(out, "{:<32} {}", metric.name(), summary(metric, h));
        let peak = h.buckets().map(|b| b.count).max().unwrap_or(0);
        for bucket in h.buckets() {
            let width = ((bucket.count as f64 / peak as f64) * 40.0).ceil() as usize;
            let _ = writeln!(
                out,
                "  {:>10} .. {:<10} {:>6} {}",
                format_value(metric, bucket.low),
                format_value(metric, bucket.high),
                bucket.count,
                "#".repeat(width)
            );
        }
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// An SVG image: one panel per histogram, every run's values as bars and the last run's as a
/// second colour, each panel titled with its quantiles.
pub fn histograms_svg(title: &str, persisted: &PersistedHistograms) -> String {
    const W: f64 = 460.0;
    const H: f64 = 170.0;
    const COLS: usize = 2;
    let rows = Metric::ALL.len().div_ceil(COLS);
    let (width, height) = (W * COLS as f64 + 20.0, H * rows as f64 + 70.0);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="20" y="28" font-size="18" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let _ = writeln!(
        svg,
        r##"<text x="20" y="50" font-size="12" fill="#444">{} runs. <tspan fill="#4a78c2">■ every run</tspan>  <tspan fill="#e0823d">■ last run</tspan></text>"##,
        persisted.runs
    );
    for (i, metric) in Metric::ALL.into_iter().enumerate() {
        let (x0, y0) = (10.0 + (i % COLS) as f64 * W, 60.0 + (i / COLS) as f64 * H);
        panel(&mut svg, x0, y0, W - 20.0, H - 20.0, metric, persisted);
    }
    svg.push_str("</svg>\n");
    svg
}

fn panel(
    svg: &mut String,
    x0: f64,
    y0: f64,
    w: f64,
    h: f64,
    metric: Metric,
    persisted: &PersistedHistograms,
) {
    let total = persisted.total.get(metric);
    let last = persisted.last_run.get(metric);
    let _ = writeln!(
        svg,
        r##"<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="#f7f7f7" stroke="#ddd"/>"##
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" font-size="13" font-weight="bold">{}</text>"#,
        x0 + 8.0,
        y0 + 17.0,
        escape(metric.name())
    );
    let _ = writeln!(
        svg,
        r##"<text x="{}" y="{}" font-size="10" fill="#444">{}</text>"##,
        x0 + 8.0,
        y0 + 31.0,
        escape(&summary(metric, total))
    );
    // Bars over the union of non-empty buckets, in value order.
    let mut lows: Vec<(u64, u64)> = total
        .buckets()
        .chain(last.buckets())
        .map(|b| (b.low, b.high))
        .collect();
    lows.sort_unstable();
    lows.dedup();
    if lows.is_empty() {
        let _ = writeln!(
            svg,
            r##"<text x="{}" y="{}" font-size="12" fill="#999">no values yet</text>"##,
            x0 + w / 2.0 - 35.0,
            y0 + h / 2.0 + 10.0
        );
        return;
    }
    let count_of =
        |s: &HistogramSnapshot, low: u64| s.buckets().find(|b| b.low == low).map_or(0, |b| b.count);
    let peak = lows
        .iter()
        .map(|&(low, _)| count_of(total, low).max(count_of(last, low)))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let (plot_x, plot_y, plot_w, plot_h) = (x0 + 8.0, y0 + 40.0, w - 16.0, h - 62.0);
    let slot = plot_w / lows.len() as f64;
    for (j, &(low, _)) in lows.iter().enumerate() {
        for (k, (snapshot, colour)) in [(total, "#4a78c2"), (last, "#e0823d")].iter().enumerate() {
            let n = count_of(snapshot, low);
            if n == 0 {
                continue;
            }
            let bar_h = (n as f64 / peak) * plot_h;
            let bar_w = (slot * 0.42).max(1.0);
            let x = plot_x + j as f64 * slot + k as f64 * bar_w + slot * 0.08;
            let _ = writeln!(
                svg,
                r#"<rect x="{x:.1}" y="{:.1}" width="{bar_w:.1}" height="{bar_h:.1}" fill="{colour}"><title>{} .. : {n}</title></rect>"#,
                plot_y + plot_h - bar_h,
                escape(&format_value(metric, low)),
            );
        }
    }
    // Axis labels: the first, middle and last bucket.
    for j in [0, lows.len() / 2, lows.len() - 1] {
        let x = plot_x + j as f64 * slot + slot / 2.0;
        let _ = writeln!(
            svg,
            r##"<text x="{x:.1}" y="{:.1}" font-size="10" text-anchor="middle" fill="#444">{}</text>"##,
            plot_y + plot_h + 13.0,
            escape(&format_value(metric, lows[j].0))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histograms::Recorder;

    #[test]
    fn text_and_svg_show_every_histogram() {
        let r = Recorder::new();
        for v in [100, 200, 200, 5000] {
            r.record(Metric::BinaryHitTime, v);
        }
        r.record(Metric::BinarySize, 25_000);
        let text = histograms_text(&r.run());
        for metric in Metric::ALL {
            assert!(text.contains(metric.name()), "{text}");
        }
        assert!(text.contains("n=4"), "{text}");
        let persisted = PersistedHistograms::decode(&r.merged(None, &r.take_pending())).unwrap();
        let svg = histograms_svg("a <cache>", &persisted);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("a &lt;cache&gt;"));
        assert_eq!(svg.matches("<rect").count(), 1 + 7 + 3 * 2 + 2, "{svg}");
    }
}
