//! `gpucache dropin`: the vendor JSON, enable/disable for the user and system-wide (in a
//! scratch vendor directory), and `stats` of a drop-in root's per-application namespaces.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use gpucache::egl::{BlobCache, BlobCacheConfig};
use serde_json::Value;

fn gpucache(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpucache"));
    c.args(args)
        .env_remove("__EGL_VENDOR_LIBRARY_FILENAMES")
        .env_remove("GPUCACHE_DROPIN_VENDOR")
        .env_remove("GPUCACHE_DROPIN_DIR");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn json_enable_and_disable() {
    let tmp = tempfile::tempdir().unwrap();
    let lib = tmp.path().join("libEGL_gpucache.so");
    std::fs::write(&lib, b"").unwrap();
    let lib_s = lib.to_str().unwrap();
    let json: Value =
        serde_json::from_str(&text(&gpucache(&["dropin", "json", "--lib", lib_s], &[]))).unwrap();
    let real = std::fs::canonicalize(&lib).unwrap();
    assert_eq!(json["ICD"]["library_path"], real.to_str().unwrap());
    assert_eq!(json["file_format_version"], "1.0.0");

    // System-wide: 10_gpucache.json, world-readable, sorted before Mesa's 50_mesa.json.
    let vd = tmp.path().join("egl_vendor.d");
    let vd_s = vd.to_str().unwrap();
    gpucache(
        &[
            "dropin",
            "enable",
            "--lib",
            lib_s,
            "--system",
            "--vendor-dir",
            vd_s,
        ],
        &[],
    );
    let file = vd.join("10_gpucache.json");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
    assert!("10_gpucache.json" < "50_mesa.json");
    gpucache(
        &["dropin", "disable", "--system", "--vendor-dir", vd_s],
        &[],
    );
    assert!(!file.exists());

    // For the user: the file under XDG_DATA_HOME and the shell lines; the vendors named
    // before are handed to the drop-in.
    let data = tmp.path().join("data");
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpucache"));
    let out = c
        .args(["dropin", "enable", "--lib", lib_s])
        .env("XDG_DATA_HOME", &data)
        .env("__EGL_VENDOR_LIBRARY_FILENAMES", "/x/mesa.json")
        .output()
        .unwrap();
    let lines = text(&out);
    let user_file = data.join("gpucache/egl_vendor.d/10_gpucache.json");
    assert!(user_file.exists());
    assert!(
        lines.contains("export GPUCACHE_DROPIN_VENDOR='/x/mesa.json'"),
        "{lines}"
    );
    assert!(
        lines.contains(&format!(
            "export __EGL_VENDOR_LIBRARY_FILENAMES='{}'",
            user_file.display()
        )),
        "{lines}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_gpucache"))
        .args(["dropin", "disable"])
        .env("XDG_DATA_HOME", &data)
        .env("GPUCACHE_DROPIN_VENDOR", "/x/mesa.json")
        .output()
        .unwrap();
    let lines = text(&out);
    assert!(lines.contains("export __EGL_VENDOR_LIBRARY_FILENAMES='/x/mesa.json'"));
    assert!(lines.contains("unset GPUCACHE_DROPIN_VENDOR"));
    assert!(!user_file.exists());
}

#[test]
fn stats_shows_each_applications_namespace() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("gpucache");
    for (ns, n) in [("glxgears-0123456789abcdef", 3u8), ("shader_runner", 5)] {
        let cache = BlobCache::new(BlobCacheConfig::default().cache(|c| {
            c.directory(root.join(ns))
                .identity(b"gpucache-dropin 1\nvendor=Mesa".to_vec())
                .driver_versioned(true)
        }))
        .unwrap();
        for i in 0..n {
            cache.set(&[i; 20], &[i; 100]);
        }
        cache.flush().unwrap();
    }
    let out = gpucache(
        &["dropin", "stats", "--json"],
        &[("GPUCACHE_DROPIN_DIR", &root)],
    );
    let v: Value = serde_json::from_str(&text(&out)).unwrap();
    assert_eq!(v["kind"], "dropin_root");
    let list = v["namespaces"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["application"], "glxgears");
    assert_eq!(list[0]["build_id"], "0123456789abcdef");
    assert_eq!(list[1]["application"], "shader_runner");
    assert_eq!(list[1]["build_id"], Value::Null);
    let entries = |i: usize| {
        list[i]["cache"]["caches"][0]["live_entries"]
            .as_u64()
            .unwrap()
    };
    assert_eq!((entries(0), entries(1)), (3, 5));

    let out = gpucache(&["stats", root.to_str().unwrap()], &[]);
    let t = text(&out);
    assert!(t.contains("holds 2 per-application namespaces"), "{t}");
    assert!(t.contains("== namespace glxgears-0123456789abcdef: application glxgears"));
}

#[test]
fn prune_removes_the_least_recently_used_caches() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("gpucache");
    let mut ids = Vec::new();
    for (ns, age_days) in [("old_app-0123456789abcdef", 40u64), ("new_app", 1)] {
        let cache = BlobCache::new(BlobCacheConfig::default().cache(|c| {
            c.directory(root.join(ns))
                .identity(b"gpucache-dropin 1\nvendor=Mesa".to_vec())
                .driver_versioned(true)
        }))
        .unwrap();
        for i in 0..20u8 {
            cache.set(&[i; 20], &[i; 4000]);
        }
        cache.flush().unwrap();
        drop(cache);
        let id = std::fs::read_dir(root.join(ns))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.is_dir())
            .unwrap();
        // Last used `age_days` ago: the directory and every file in it.
        let when =
            std::time::SystemTime::now() - std::time::Duration::from_secs(age_days * 24 * 60 * 60);
        for e in std::fs::read_dir(&id).unwrap() {
            let p = e.unwrap().path();
            std::fs::File::open(&p).unwrap().set_modified(when).unwrap();
        }
        std::fs::File::open(&id)
            .unwrap()
            .set_modified(when)
            .unwrap();
        ids.push(id);
    }
    let env = [("GPUCACHE_DROPIN_DIR", root.as_path())];
    let new_bytes = EGL_gpucache::prune::caches(&root)
        .unwrap()
        .into_iter()
        .find(|c| c.dir == ids[1])
        .unwrap()
        .bytes;
    let limit = new_bytes.to_string();

    let dry = || {
        text(&gpucache(
            &["dropin", "prune", "--dry-run", "--max-bytes", &limit],
            &env,
        ))
    };
    let out = dry();
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("2 caches"), "{out}");
    assert!(lines[1].starts_with("would remove") && lines[1].contains("used 40 days ago"));
    assert!(lines[2].starts_with("keep") && lines[2].ends_with(ids[1].to_str().unwrap()));
    assert!(ids[0].exists(), "a dry run removes nothing");

    // Held by a process (this one, as a running application holds its cache).
    let held = EGL_gpucache::prune::hold(&ids[0]).expect("held");
    // Holding marks a use; an application running for 40 days would not have since.
    let inuse = ids[0].with_file_name(format!(
        "{}.inuse",
        ids[0].file_name().unwrap().to_string_lossy()
    ));
    std::fs::File::open(&inuse)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(40 * 86_400))
        .unwrap();
    // The dry run says what the prune would do: pass the held cache over, and so remove
    // the newer one to meet the limit.
    let out = dry();
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[1].starts_with("in use") && lines[1].ends_with(ids[0].to_str().unwrap()));
    assert!(lines[2].starts_with("would remove"), "{out}");
    drop(held);

    let out = text(&gpucache(&["dropin", "prune", "--max-bytes", &limit], &env));
    assert!(out.contains("removed\t"), "{out}");
    assert!(out.ends_with(&format!(
        "1 removed, {new_bytes} bytes left, limit {new_bytes}\n"
    )));
    assert!(!ids[0].exists() && ids[1].exists());
    // Its namespace stays, marked as emptied, until it has been so for a day.
    let old_ns = root.join("old_app-0123456789abcdef");
    let left: Vec<_> = std::fs::read_dir(&old_ns)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, vec![".emptied~"]);

    // `stats` reads the root as before (the prune's marker and lock files are not caches).
    let out = gpucache(&["dropin", "stats", "--json"], &env);
    let v: Value = serde_json::from_str(&text(&out)).unwrap();
    assert_eq!(v["namespaces"].as_array().unwrap().len(), 1);

    // No limit configured (0) and none given: refused, nothing removed.
    let out = Command::new(env!("CARGO_BIN_EXE_gpucache"))
        .args(["dropin", "prune"])
        .env("GPUCACHE_DROPIN_DIR", &root)
        .env("GPUCACHE_DROPIN_TOTAL_MAX_BYTES", "0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-bytes"));
    assert!(ids[1].exists());
    // A root that does not exist yet: nothing to do.
    let missing = tmp.path().join("none");
    let out = text(&gpucache(
        &["dropin", "prune"],
        &[("GPUCACHE_DROPIN_DIR", missing.as_path())],
    ));
    assert!(out.starts_with("nothing to prune"), "{out}");
}
