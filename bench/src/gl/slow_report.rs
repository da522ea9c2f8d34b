//! The warm-start tables of the cold runs under storage profiles, and their verdicts.

use std::fmt::Write as _;

use super::cases::{Case, Run};
use super::warm_start::{cld, create, median_of, wall, Results};

fn reads(runs: &[Run]) -> f64 {
    median_of(runs, |r| r.io.map_or(0.0, |io| io.reads as f64))
}

fn read_mb(runs: &[Run]) -> f64 {
    median_of(runs, |r| r.io.map_or(0.0, |io| io.bytes as f64 / 1e6))
}

impl Results {
    /// One table per storage profile, and the targets' verdicts.
    pub(super) fn render_profiles(&self) -> String {
        let mut out = String::new();
        if let Some(note) = &self.profiles_skipped {
            let _ = writeln!(out, "\nNote: {note}");
        }
        let mesa = [Case::MesaDb, Case::MesaMultiFile, Case::MesaSingleFile];
        for (p, profile) in self.profiles.iter().enumerate() {
            let _ = writeln!(
                out,
                "\n#### {} programs, cold on {profile}: medians (ms)\n",
                self.programs
            );
            let _ = writeln!(
                out,
                "| case | cold | × own hot | cold wall | × own hot wall | create | reads (I/Os) | read MB |"
            );
            let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|");
            for (case, runs) in &self.cases {
                let Some(slow) = runs.slow.get(p).filter(|r| !r.is_empty()) else {
                    continue;
                };
                let _ = writeln!(
                    out,
                    "| {} | {:.1} | {:.2}× | {:.0} | {:.2}× | {:.1} | {:.0} | {:.2} |",
                    case.label(),
                    cld(slow),
                    cld(slow) / cld(&runs.hot),
                    wall(slow),
                    wall(slow) / wall(&runs.hot),
                    create(slow),
                    reads(slow),
                    read_mb(slow),
                );
            }
            let g = self.case(Case::Gpucache);
            let Some(g_slow) = g.slow.get(p).filter(|r| !r.is_empty()) else {
                continue;
            };
            let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
            let own = cld(g_slow) / cld(&g.hot);
            let best = |f: &dyn Fn(&[Run]) -> f64| {
                mesa.iter()
                    .filter_map(|&c| self.case(c).slow.get(p).map(|r| f(r)))
                    .fold(f64::INFINITY, f64::min)
            };
            let (best_cld, best_wall) = (best(&cld), best(&wall));
            let worst_wall = mesa
                .iter()
                .filter_map(|&c| self.case(c).slow.get(p).map(|r| wall(r)))
                .fold(0.0, f64::max);
            if let Some(d_slow) = self
                .case(Case::Dropin)
                .slow
                .get(p)
                .filter(|r| !r.is_empty())
            {
                let _ = writeln!(
                    out,
                    "\n- {}: drop-in cold wall {:.0} ms against the best Mesa back end's {best_wall:.0} ms and the worst's {worst_wall:.0} ms (target: ahead of every one): {}",
                    profile.name,
                    wall(d_slow),
                    verdict(wall(d_slow) < best_wall),
                );
            }
            let _ = writeln!(
                out,
                "\n- {}: gpucache cold {own:.3}× its hot (target ≤ 1.05×): {}; {:.1} ms against the best Mesa back end's {best_cld:.1} ms (target: ahead of all): {}; cold wall {:.0} ms against {best_wall:.0} ms (target: no more): {}",
                profile.name,
                verdict(own <= 1.05),
                cld(g_slow),
                verdict(cld(g_slow) < best_cld),
                wall(g_slow),
                verdict(wall(g_slow) <= best_wall),
            );
        }
        out
    }
}
