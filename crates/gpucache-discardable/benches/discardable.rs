fn main() {
    for pct in [105, 110, 150] {
        for kind in gpucache::PolicyKind::ALL {
            let r = gpucache_discardable::frame_loop::run(kind, pct, 20, 100, 65536).unwrap();
            println!(
                "{pct}% {:?} {:.2} peak {:.3}",
                kind, r.recreations_per_frame, r.peak_over_budget
            );
        }
    }
}
