//! Runs the real `gpucache report` on program cache directories that `gpucache-gl` made: two
//! runs of one identity, two identities, no program data, damaged streams.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpucache_gl::{
    Api, Bindings, GlIdentity, Metric, ProgramBinary, ProgramCache, ProgramEntry, ShaderKind,
    HISTOGRAMS_STREAM,
};
use serde_json::Value;

const RENDERER: &str = "Report Test Renderer 9000";

fn identity(api: Api) -> GlIdentity {
    GlIdentity {
        vendor: "gpucache tests".into(),
        renderer: RENDERER.into(),
        version: "4.6 (Core Profile) Test 1.2.3".into(),
        shading_language_version: "4.60".into(),
        api,
        build_id: "report-test 7".into(),
        arch: "x86_64".into(),
    }
}

/// One run of an application: opens the program cache, stores the programs `first..last`,
/// flushes and closes.
fn run_programs(dir: &Path, identity: &GlIdentity, programs: std::ops::Range<u32>) {
    let cache = ProgramCache::builder()
        .directory(dir)
        .open(identity)
        .unwrap();
    for i in programs {
        let vertex =
            cache.shader_hash(ShaderKind::Vertex, &format!("void main() {{ /* v{i} */ }}"));
        let fragment = cache.shader_hash(
            ShaderKind::Fragment,
            &format!("void main() {{ /* f{i} */ }}"),
        );
        let key = cache.program_key(&vertex, &fragment, &Bindings::new().attribute("pos", 0));
        let entry = ProgramEntry {
            vertex,
            fragment,
            binary: ProgramBinary {
                format: 0x875F,
                data: vec![i as u8; 1000 + 500 * i as usize],
            },
            attributes: vec![("pos".into(), 0)],
            uniforms: vec![],
        };
        assert!(cache.store(&key, &entry));
    }
    cache.flush().unwrap();
}

/// A program cache with two runs of [`identity`]: 3 programs, then 2 more.
fn two_runs(dir: &Path) -> PathBuf {
    let id = identity(Api::Gl);
    run_programs(dir, &id, 0..3);
    run_programs(dir, &id, 3..5);
    id_dirs(dir).remove(0)
}

fn id_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("id-"))
        .collect();
    dirs.sort();
    dirs
}

fn gpucache(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpucache"))
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

/// Runs and checks the exit code; returns stdout and stderr.
fn expect(args: &[&str], cwd: &Path, code: i32) -> (String, String) {
    let out = gpucache(args, cwd);
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}\nstdout: {stdout}\nstderr: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    (stdout, stderr)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn assert_svg(path: &Path) {
    let svg = fs::read_to_string(path).unwrap();
    assert!(svg.starts_with("<svg"), "{svg}");
    assert!(svg.trim_end().ends_with("</svg>"), "{svg}");
    assert!(svg.contains(RENDERER), "{svg}");
}

#[test]
fn reports_both_runs_of_an_identity() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("programs");
    let id_dir = two_runs(&root);
    let svg = dir.path().join("report.svg");

    let (text, _) = expect(&["report", s(&root), "--svg", s(&svg)], dir.path(), 0);
    assert!(
        text.contains(&format!("renderer         {RENDERER}")),
        "{text}"
    );
    assert!(text.contains("API              gl"), "{text}");
    assert!(text.contains("build id         report-test 7"), "{text}");
    assert!(text.contains("runs             2"), "{text}");
    assert!(text.contains("cached programs  5"), "{text}");
    for metric in Metric::ALL {
        assert!(text.contains(metric.name()), "{text}");
    }
    // Every run holds both runs' five binaries; the last run its two.
    let (every, last) = text.split_once("\nlast run\n").unwrap();
    assert!(every.contains("every run (2 runs merged)"), "{text}");
    let binary_sizes = |part: &str| {
        part.lines()
            .find(|l| l.starts_with(Metric::BinarySize.name()))
            .unwrap()
            .to_owned()
    };
    assert!(binary_sizes(every).contains("n=5"), "{text}");
    assert!(binary_sizes(last).contains("n=2"), "{text}");
    assert!(
        text.contains(&format!("image            {}", svg.display())),
        "{text}"
    );
    assert_svg(&svg);

    // One identity's directory works as well.
    let (text, _) = expect(&["report", s(&id_dir), "--no-svg"], dir.path(), 0);
    assert!(text.contains("cached programs  5"), "{text}");
    assert!(!text.contains("image"), "{text}");
}

#[test]
fn json_has_the_same_facts() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("programs");
    let id_dir = two_runs(&root);

    // Without --svg the image goes to the current directory.
    let (stdout, _) = expect(&["report", "--json", s(&root)], dir.path(), 0);
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let caches = v["caches"].as_array().unwrap();
    assert_eq!(caches.len(), 1);
    let c = &caches[0];
    assert_eq!(c["dir"], s(&id_dir));
    assert_eq!(c["identity"]["renderer"], RENDERER);
    assert_eq!(c["identity"]["api"], "gl");
    assert_eq!(c["identity"]["arch"], "x86_64");
    assert_eq!(c["runs"], 2);
    assert_eq!(c["programs"], 5);
    assert_eq!(c["svg"], "gpucache-report.svg");
    assert_svg(&dir.path().join("gpucache-report.svg"));
    let metrics = |set: &str| c[set].as_array().unwrap().clone();
    assert_eq!(metrics("every_run").len(), Metric::ALL.len());
    let every = &metrics("every_run")[0];
    assert_eq!(every["metric"], Metric::BinarySize.name());
    assert_eq!(every["unit"], "bytes");
    assert_eq!(every["count"], 5);
    assert_eq!(every["max"], 1000 + 500 * 4);
    let p50 = every["p50"].as_u64().unwrap();
    assert!((1000..=3000).contains(&p50), "{every}");
    let last = &metrics("last_run")[0];
    assert_eq!(last["count"], 2);
    // A metric nothing recorded.
    let hit_time = &metrics("every_run")[3];
    assert_eq!(hit_time["metric"], Metric::BinaryHitTime.name());
    assert_eq!(hit_time["count"], 0);
    assert_eq!(hit_time["p50"], Value::Null);

    let (stdout, _) = expect(&["report", "--json", "--no-svg", s(&root)], dir.path(), 0);
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["caches"][0]["svg"], Value::Null);
}

#[test]
fn each_identity_gets_its_own_image() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("programs");
    run_programs(&root, &identity(Api::Gl), 0..2);
    run_programs(&root, &identity(Api::Gles), 0..3);
    let ids = id_dirs(&root);
    assert_eq!(ids.len(), 2);

    let svg = dir.path().join("out.svg");
    let (stdout, _) = expect(
        &["report", "--json", s(&root), "--svg", s(&svg)],
        dir.path(),
        0,
    );
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let caches = v["caches"].as_array().unwrap();
    assert_eq!(caches.len(), 2);
    for (c, id_dir) in caches.iter().zip(&ids) {
        let name = id_dir.file_name().unwrap().to_str().unwrap();
        let id = name.strip_prefix("id-").unwrap();
        let image = dir.path().join(format!("out-{id}.svg"));
        assert_eq!(c["id"], id);
        assert_eq!(c["svg"], s(&image));
        assert_svg(&image);
    }
    let programs: Vec<u64> = caches
        .iter()
        .map(|c| c["programs"].as_u64().unwrap())
        .collect();
    let apis: Vec<&str> = caches
        .iter()
        .map(|c| c["identity"]["api"].as_str().unwrap())
        .collect();
    let mut by_api: Vec<(&str, u64)> = apis.into_iter().zip(programs).collect();
    by_api.sort();
    assert_eq!(by_api, [("gl", 2), ("gles", 3)]);
    assert!(!svg.exists());
}

#[test]
fn no_program_data_is_a_negative_answer() {
    let dir = tempfile::tempdir().unwrap();
    // Not a cache directory at all: an error.
    let (_, stderr) = expect(&["report", s(dir.path()), "--no-svg"], dir.path(), 2);
    assert!(stderr.contains("not a gpucache directory"), "{stderr}");

    // A cache of the engine without a program cache: nothing to report.
    let plain = dir.path().join("plain");
    let cache = gpucache::Cache::builder()
        .directory(&plain)
        .identity(b"mesa 24.0 radeonsi".to_vec())
        .open()
        .unwrap();
    cache.insert(b"key", b"value".to_vec()).unwrap();
    cache.flush().unwrap();
    drop(cache);
    let (stdout, stderr) = expect(&["report", s(&plain)], dir.path(), 1);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("no program cache data"), "{stderr}");
    assert!(stderr.contains("gl-histograms"), "{stderr}");
    assert!(!dir.path().join("gpucache-report.svg").exists());
}

#[test]
fn a_damaged_stream_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("programs");
    let id_dir = two_runs(&root);
    let file = HISTOGRAMS_STREAM.path(&id_dir);
    let good = fs::read(&file).unwrap();

    // A flipped byte fails the stream's checksum.
    let mut bad = good.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x40;
    fs::write(&file, &bad).unwrap();
    for args in [
        vec!["report", s(&root), "--no-svg"],
        vec!["report", "--json", s(&id_dir)],
    ] {
        let (stdout, stderr) = expect(&args, dir.path(), 2);
        assert!(stdout.is_empty(), "{stdout}");
        assert!(
            stderr.contains(&format!("{} is damaged", file.display())),
            "{stderr}"
        );
    }
    assert!(!dir.path().join("gpucache-report.svg").exists());

    // A well-formed stream whose body is not histograms.
    fs::write(&file, HISTOGRAMS_STREAM.encode(b"not histograms")).unwrap();
    let (_, stderr) = expect(&["report", s(&root), "--no-svg"], dir.path(), 2);
    assert!(
        stderr.contains(&format!("{} is damaged", file.display())),
        "{stderr}"
    );

    // A stream of a format version this build does not read.
    let newer = gpucache::MetadataStream::new("gl-histograms", *b"GLHI", 2);
    fs::write(&file, newer.encode(b"from the future")).unwrap();
    let (_, stderr) = expect(&["report", s(&root), "--no-svg"], dir.path(), 2);
    let expected = format!("{} was written by another version", file.display());
    assert!(stderr.contains(&expected), "{stderr}");

    // A damaged program table.
    fs::write(&file, &good).unwrap();
    let programs = gpucache_gl::PROGRAMS_STREAM.path(&id_dir);
    let mut table = fs::read(&programs).unwrap();
    table.truncate(table.len() - 1);
    fs::write(&programs, &table).unwrap();
    let (_, stderr) = expect(&["report", s(&root), "--no-svg"], dir.path(), 2);
    assert!(
        stderr.contains(&format!("{} is damaged", programs.display())),
        "{stderr}"
    );
}
