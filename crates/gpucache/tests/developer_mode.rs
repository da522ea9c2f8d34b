//! Cache control only in developer mode (seed 003: "This API may only be used in developer
//! mode"), turned on by the user or the administrator outside the process, and the support
//! query. Each case is a real process with its own environment and configuration directory.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::{child_args, child_role, env, CHILD_ENV};
use gpucache::egl::{self, BlobCacheConfig};
use gpucache::session::{self, SessionDesc};
use gpucache::{cache_control, CacheControl, CacheKinds, Error, ShaderCacheSupport};

/// Runs the control child with `GPUCACHE_EXPECT` (`on` or `off`), a private
/// `XDG_CONFIG_HOME` and `HOME`, and `GPUCACHE_DEVELOPER_MODE` only when given.
fn control_child(config_home: &Path, developer_env: Option<&str>, expect: &str) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(child_args("child_control"))
        .env(CHILD_ENV, "control")
        .env("GPUCACHE_EXPECT", expect)
        .env("XDG_CONFIG_HOME", config_home)
        .env("HOME", config_home)
        .env_remove("GPUCACHE_DEVELOPER_MODE");
    if let Some(v) = developer_env {
        cmd.env("GPUCACHE_DEVELOPER_MODE", v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("control child: ok"),
        "developer mode {expect} (env {developer_env:?}): {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The administrator's file would turn developer mode on for every case here.
fn system_file_present() -> bool {
    let present = Path::new(gpucache::control::SYSTEM_DEVELOPER_MODE_FILE).exists();
    if present {
        eprintln!("note: /etc/gpucache/developer-mode exists: the refusals are not checked");
    }
    present
}

#[test]
fn cache_control_is_refused_outside_developer_mode() {
    if system_file_present() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    control_child(home.path(), None, "off");
    control_child(home.path(), Some("0"), "off");
    control_child(home.path(), Some("yes please"), "off");
}

#[test]
fn the_environment_variable_turns_developer_mode_on() {
    let home = tempfile::tempdir().unwrap();
    control_child(home.path(), Some("1"), "on");
}

#[test]
fn the_users_own_file_turns_developer_mode_on_and_a_writable_one_does_not() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("gpucache");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("developer-mode");
    std::fs::write(&file, b"").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    control_child(home.path(), None, "on");
    if system_file_present() {
        return;
    }
    // Writable by others: anyone could have planted it.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    control_child(home.path(), None, "off");
    // A link is not the user's file either.
    std::fs::remove_file(&file).unwrap();
    let elsewhere = home.path().join("elsewhere");
    std::fs::write(&elsewhere, b"").unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
    control_child(home.path(), None, "off");
}

#[test]
#[ignore = "child process of the developer-mode tests"]
fn child_control() {
    if child_role("control").is_none() {
        return;
    }
    let on = env("GPUCACHE_EXPECT") == "on";
    assert_eq!(gpucache::developer_mode(), on);
    let mut buf = [0u8; 16];

    // The support query: single blobs always; the driver-managed cache only once the blob
    // cache is configured, on disk only with a directory.
    let single = ShaderCacheSupport::SINGLE_PSO;
    assert_eq!(session::shader_cache_support(), single);
    egl::configure(BlobCacheConfig::default()).unwrap();
    let in_memory = single
        | ShaderCacheSupport::AUTOMATIC_INPROC_CACHE
        | ShaderCacheSupport::DRIVER_MANAGED_CACHE;
    assert_eq!(session::shader_cache_support(), in_memory);
    let dir = tempfile::tempdir().unwrap();
    egl::configure(BlobCacheConfig::new().cache(|c| c.directory(dir.path()))).unwrap();
    assert_eq!(
        gpucache::shader_cache_support(),
        in_memory | ShaderCacheSupport::AUTOMATIC_DISK_CACHE
    );

    egl::set(b"driver", b"blob");
    let s = session::open(SessionDesc::new([7; 16]).max_in_memory_bytes(1 << 16)).unwrap();
    s.store(b"app", b"entry".to_vec()).unwrap();
    let every = CacheKinds::all();
    for control in [CacheControl::DISABLE, CacheControl::CLEAR] {
        let result = cache_control(every, control);
        if on {
            result.unwrap();
        } else {
            assert!(
                matches!(result, Err(Error::DeveloperModeRequired)),
                "{result:?}"
            );
        }
    }
    let result = session::SessionRegistry::global().control(every, CacheControl::CLEAR);
    assert_eq!(result.is_ok(), on, "{result:?}");
    if on {
        // Disabled, then cleared.
        assert!(matches!(s.find(b"app"), Err(Error::NotCurrentlyAvailable)));
        cache_control(every, CacheControl::ENABLE).unwrap();
        assert!(matches!(s.find(b"app"), Err(Error::NotFound)));
        assert_eq!(egl::get(b"driver", &mut buf), 0);
    } else {
        // Neither disabled nor cleared.
        assert_eq!(s.find(b"app").unwrap(), &b"entry"[..]);
        assert_eq!(egl::get(b"driver", &mut buf), 4);
    }
    egl::shutdown();
    assert_eq!(session::shader_cache_support(), single);
    println!("control child: ok");
}
