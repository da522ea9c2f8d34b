//! Discardable memory's GL side on real Mesa llvmpipe through EGL (Mesa 25 from
//! `.cache/mesa25`, the test re-run in a child process under its environment): the service
//! owns real textures and buffers, sized from their levels; clients reach it over the real
//! socket with real memfd pools; evicted textures are really gone (`glIsTexture` false) and
//! deletes come batched per context.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use gpucache::PolicyKind;
use gpucache_discardable::{ChannelClient, ResourceDesc, Server, ServerConfig, TexelFormat};
use gpucache_gl::{Api, GlContext, GlDiscardableBackend, GlObject};

/// Runs the test `name` again in a child process with Mesa 25's environment; true in the child.
fn in_mesa(name: &str) -> bool {
    if std::env::var_os("GPUCACHE_GL_TEST_CHILD").is_some() {
        return true;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/mesa25");
    let lib = root.join("usr/lib/x86_64-linux-gnu");
    assert!(
        lib.join("libEGL_mesa.so.0").exists(),
        "Mesa 25 missing in {}: run scripts/setup-mesa (scripts/test does)",
        root.display()
    );
    let out = Command::new(std::env::current_exe().unwrap())
        .env("LD_LIBRARY_PATH", &lib)
        .env("LIBGL_DRIVERS_PATH", lib.join("dri"))
        .env(
            "__EGL_VENDOR_LIBRARY_FILENAMES",
            root.join("egl_vendor.json"),
        )
        .env("GALLIUM_DRIVER", "llvmpipe")
        .env("MESA_SHADER_CACHE_DISABLE", "true")
        .env("GPUCACHE_GL_TEST_CHILD", "1")
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "{name} under Mesa:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

/// Serves until `n` more messages have been handled.
fn serve(server: &mut Server<GlDiscardableBackend>, n: u64) {
    let target = server.stats().messages + n;
    let start = std::time::Instant::now();
    while server.stats().messages < target {
        server.turn(Duration::from_millis(5)).unwrap();
        assert!(start.elapsed() < Duration::from_secs(20), "service stalled");
    }
}

fn accept(server: &mut Server<GlDiscardableBackend>) -> u32 {
    let before = server.stats().accepted;
    while server.stats().accepted == before {
        server.turn(Duration::from_millis(5)).unwrap();
    }
    before as u32 + 1
}

#[test]
fn gl_textures_and_buffers_under_discardable_memory() {
    if !in_mesa("gl_textures_and_buffers_under_discardable_memory") {
        return;
    }
    let ctx = GlContext::create(Api::Gles).unwrap();
    let renderer = ctx.query_string(khronos_egl::VENDOR).unwrap_or_default();
    eprintln!("EGL vendor: {renderer}");
    let backend = GlDiscardableBackend::new(ctx).unwrap();
    let tex = ResourceDesc::texture(64, 64, TexelFormat::Rgba8);
    let t = tex.byte_size().unwrap();
    // Sizes from the levels: 64², 32², ..., 1², 4 bytes each.
    assert_eq!(t, (0..7).map(|l| (64u64 >> l).pow(2) * 4).sum::<u64>());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let config = ServerConfig {
        budget: 3 * t + 4096,
        policy: PolicyKind::Lru,
        max_errors: 0,
    };
    let mut server = Server::bind(&path, config, backend).unwrap();
    let mut a = ChannelClient::connect(&path).unwrap();
    let ida = accept(&mut server);

    // Three textures and a buffer, drawn with, unlocked.
    for r in 1..=3 {
        a.create(r, tex).unwrap();
    }
    a.create(10, ResourceDesc::Buffer { bytes: 4096 }).unwrap();
    for r in [1, 2, 3, 10] {
        a.use_resource(r).unwrap();
        a.unlock(r).unwrap();
    }
    a.flush().unwrap();
    serve(&mut server, 1 + 4 + 8);
    assert_eq!(server.stats().errors, 0, "{:?}", server.take_errors());
    let m = server.manager();
    assert_eq!(m.size_of(ida, 1), Some(t));
    assert_eq!(m.size_of(ida, 10), Some(4096));
    assert_eq!(m.stats().total_bytes, 3 * t + 4096);
    let b = server.backend();
    assert_eq!(b.stats().draws, 4);
    // The last quad sampled texture 3's colour: opaque.
    assert_eq!(b.read_centre()[3], 255);
    let objs: Vec<GlObject> = [1, 2, 3, 10]
        .iter()
        .map(|&r| b.object(ida, r).unwrap())
        .collect();
    assert!(objs.iter().all(|&o| b.gl_is_live(o)));

    // A partial chain of a non-square float texture: 100x30, 50x15, 25x7 at 8 bytes.
    let odd = ResourceDesc::Texture {
        width: 100,
        height: 30,
        levels: 3,
        format: TexelFormat::Rgba16f,
    };
    a.create(5, odd).unwrap();
    a.flush().unwrap();
    serve(&mut server, 1);
    let want = (100 * 30 + 50 * 15 + 25 * 7) * 8;
    assert_eq!(server.manager().size_of(ida, 5), Some(want));
    // Over budget: LRU evicts texture 1 (and 2: 5 is larger than one texture). Really gone.
    assert!(!a.lock(1).unwrap());
    let b = server.backend();
    assert!(b.object(ida, 1).is_none());
    assert!(!b.gl_is_live(objs[0]), "evicted texture still a GL texture");
    let evicted = server.manager().stats().evictions;
    assert!(evicted >= 1);
    assert!(b.batches().iter().all(|&(ctx, _)| ctx == ida));

    // A second client: deletes under pressure come as one batch per context.
    server.set_budget(1 << 30);
    let mut c = ChannelClient::connect(&path).unwrap();
    let idc = accept(&mut server);
    c.create(1, tex).unwrap();
    c.create(2, ResourceDesc::Buffer { bytes: 1024 }).unwrap();
    c.unlock(1).unwrap();
    c.unlock(2).unwrap();
    c.flush().unwrap();
    a.unlock(5).unwrap();
    a.flush().unwrap();
    serve(&mut server, 1 + 4 + 1);
    let before = server.backend().batches().len();
    let live_a: Vec<GlObject> = [2, 3, 10]
        .iter()
        .filter_map(|&r| server.backend().object(ida, r))
        .collect();
    server.set_budget(0);
    let b = server.backend();
    let batches = &b.batches()[before..];
    assert_eq!(batches.len(), 2, "{batches:?}");
    let mut ctxs: Vec<u32> = batches.iter().map(|&(ctx, _)| ctx).collect();
    ctxs.sort_unstable();
    assert_eq!(ctxs, vec![ida, idc]);
    assert!(batches.iter().all(|&(_, n)| n >= 2), "{batches:?}");
    assert!(live_a.iter().all(|&o| !b.gl_is_live(o)));
    assert_eq!(b.object_count(), 0);
    assert_eq!(server.manager().stats().total_bytes, 0);
    assert_eq!(server.stats().budget_violations, 0);

    // Goodbye: nothing left; the service outlives its clients.
    a.goodbye().unwrap();
    c.goodbye().unwrap();
    serve(&mut server, 2);
    assert_eq!(server.stats().connected, 0);
    assert_eq!(server.stats().errors, 0, "{:?}", server.take_errors());
}
