//! The seed's tests of the LRU helper, ProgramCache, MemoryProgramCache and ProgramManager,
//! with a recording GL that checks the exact call sequence. Each behaviour is also tested on
//! real GL in tests/real_gl.rs.

mod common;

use common::recording::{RecordingGl, FORMAT};
use gpucache::{EvictionPolicy, Lru, PolicyKind};
use gpucache_gl::{
    Api, Bindings, Error, GlIdentity, ProgramCache, ProgramManager, ShaderKind, Status,
};

const VS: &str = "attribute vec4 pos; void main() { gl_Position = pos; }";
const FS: &str = "void main() { gl_FragColor = vec4(1.0); }";
const FS2: &str = "void main() { gl_FragColor = vec4(0.5); }";

fn memory_cache(gl: &RecordingGl, bytes: u64, policy: PolicyKind) -> ProgramCache {
    let identity = GlIdentity::query(gl, Api::Gl, "tests");
    ProgramCache::builder()
        .max_memory_bytes(bytes)
        .policy(policy)
        .open(&identity)
        .unwrap()
}

fn cache(gl: &RecordingGl) -> ProgramCache {
    memory_cache(gl, 1 << 20, PolicyKind::Lru)
}

// ProgramCacheLruHelper: the memory tier's LRU policy is the helper.

#[test]
fn lru_evicts_in_order_without_reuse() {
    let mut lru = Lru::default();
    for id in 0..4 {
        lru.insert(id, u64::from(id), 1);
    }
    let order: Vec<_> = std::iter::from_fn(|| lru.evict()).collect();
    assert_eq!(order, vec![0, 1, 2, 3]);
    assert!(lru.is_empty());
}

#[test]
fn lru_evicts_in_order_with_reuse() {
    let mut lru = Lru::default();
    for id in 0..4 {
        lru.insert(id, u64::from(id), 1);
    }
    lru.touch(0);
    lru.touch(2);
    // Peek/pop: the next victim is the least recently used.
    assert_eq!(lru.evict(), Some(1));
    lru.touch(3);
    let order: Vec<_> = std::iter::from_fn(|| lru.evict()).collect();
    assert_eq!(order, vec![0, 2, 3]);
}

#[test]
fn lru_clear_empties_it() {
    let mut lru = Lru::default();
    for id in 0..4 {
        lru.insert(id, u64::from(id), 1);
    }
    lru.clear();
    assert_eq!(lru.len(), 0);
    assert_eq!(lru.evict(), None);
    lru.insert(7, 7, 1);
    assert_eq!(lru.evict(), Some(7));
}

// MemoryProgramCache.

#[test]
fn saving_a_binary_makes_the_expected_calls_and_the_link_status_success() {
    let gl = RecordingGl::new();
    let cache = cache(&gl);
    let m = ProgramManager::new(&gl, &cache);
    let bindings = Bindings::new().attribute("pos", 3);
    let p = m.program(VS, FS, &bindings).unwrap();
    assert!(!p.from_cache);
    assert_eq!(
        gl.take(),
        [
            "CreateShader(vertex) = 1",
            "ShaderSource(1)",
            "CompileShader(1)",
            "CreateShader(fragment) = 2",
            "ShaderSource(2)",
            "CompileShader(2)",
            "CreateProgram() = 3",
            "AttachShader(3, 1)",
            "AttachShader(3, 2)",
            "BindAttribLocation(3, 3, pos)",
            "ProgramParameteri(3, RETRIEVABLE_HINT)",
            "LinkProgram(3)",
            "DetachShader(3, 1)",
            "DetachShader(3, 2)",
            "GetActiveAttributes(3)",
            "GetActiveUniforms(3)",
            "GetProgramBinary(3)",
            "DeleteShader(1)",
            "DeleteShader(2)",
        ]
    );
    let v = cache.shader_hash(ShaderKind::Vertex, VS);
    let f = cache.shader_hash(ShaderKind::Fragment, FS);
    let key = cache.program_key(&v, &f, &bindings);
    assert_eq!(cache.program_status(&key), Status::Success);
    assert_eq!(cache.shader_status(&v), Status::Success);
    let entry = cache.load(&key).unwrap();
    assert_eq!(entry.binary.format, FORMAT);
    assert_eq!(entry.binary.data, RecordingGl::binary_of(VS, FS));
}

#[test]
fn loading_makes_the_expected_calls_and_returns_the_maps_and_binary_saved() {
    let gl = RecordingGl::new();
    let cache = cache(&gl);
    let m = ProgramManager::new(&gl, &cache);
    let bindings = Bindings::new().attribute("pos", 3);
    let first = m.program(VS, FS, &bindings).unwrap();
    gl.take();
    let second = m.program(VS, FS, &bindings).unwrap();
    assert!(second.from_cache);
    let binary_len = RecordingGl::binary_of(VS, FS).len();
    assert_eq!(
        gl.take(),
        [
            "CreateProgram() = 4".to_string(),
            format!("ProgramBinary(4, {FORMAT:#x}, {binary_len} bytes)"),
        ]
    );
    assert_eq!(second.attributes, first.attributes);
    assert_eq!(second.attributes, vec![("pos".to_string(), 3)]);
    assert_eq!(second.uniforms, first.uniforms);
    assert_eq!(second.uniform_location("iResolution"), Some(1));
    assert_eq!(second.attribute_location("pos"), Some(3));
}

#[test]
fn another_source_is_another_program() {
    let gl = RecordingGl::new();
    let cache = cache(&gl);
    let m = ProgramManager::new(&gl, &cache);
    m.program(VS, FS, &Bindings::new()).unwrap();
    let other = m.program(VS, FS2, &Bindings::new()).unwrap();
    assert!(!other.from_cache);
    let calls = gl.take_only(&["LinkProgram", "ProgramBinary"]);
    assert_eq!(calls, ["LinkProgram(3)", "LinkProgram(6)"]);
}

#[test]
fn another_attribute_binding_is_another_program() {
    let gl = RecordingGl::new();
    let cache = cache(&gl);
    let m = ProgramManager::new(&gl, &cache);
    m.program(VS, FS, &Bindings::new().attribute("pos", 0))
        .unwrap();
    let other = m
        .program(VS, FS, &Bindings::new().attribute("pos", 1))
        .unwrap();
    assert!(!other.from_cache);
    assert_eq!(other.attribute_location("pos"), Some(1));
}

#[test]
fn saving_into_a_full_cache_evicts_and_forgets_the_statuses() {
    let gl = RecordingGl::new();
    // Room for about two entries of ~400 bytes (192 of overhead each) in one shard.
    let cache = memory_cache(&gl, 1000, PolicyKind::Lru);
    let m = ProgramManager::new(&gl, &cache);
    let sources = [FS, FS2, "void main() { gl_FragColor = vec4(0.25); }"];
    let keys: Vec<_> = sources
        .iter()
        .map(|fs| {
            m.program(VS, fs, &Bindings::new()).unwrap();
            let v = cache.shader_hash(ShaderKind::Vertex, VS);
            let f = cache.shader_hash(ShaderKind::Fragment, fs);
            (cache.program_key(&v, &f, &Bindings::new()), f)
        })
        .collect();
    assert_eq!(
        cache.program_status(&keys[0].0),
        Status::Unknown,
        "oldest evicted"
    );
    assert_eq!(
        cache.shader_status(&keys[0].1),
        Status::Unknown,
        "its fragment shader too"
    );
    assert_eq!(cache.program_status(&keys[2].0), Status::Success);
    let v = cache.shader_hash(ShaderKind::Vertex, VS);
    assert_eq!(
        cache.shader_status(&v),
        Status::Success,
        "shared: still used"
    );
    assert!(cache.stats().cache.memory.evictions >= 1);
}

#[test]
fn lru_keeps_the_program_used_last() {
    let gl = RecordingGl::new();
    let cache = memory_cache(&gl, 1000, PolicyKind::Lru);
    let m = ProgramManager::new(&gl, &cache);
    m.program(VS, FS, &Bindings::new()).unwrap();
    m.program(VS, FS2, &Bindings::new()).unwrap();
    assert!(m.program(VS, FS, &Bindings::new()).unwrap().from_cache);
    m.program(
        VS,
        "void main() { gl_FragColor = vec4(0.25); }",
        &Bindings::new(),
    )
    .unwrap();
    assert!(
        m.program(VS, FS, &Bindings::new()).unwrap().from_cache,
        "reused: kept"
    );
    assert!(
        !m.program(VS, FS2, &Bindings::new()).unwrap().from_cache,
        "evicted"
    );
}

// ProgramManager.

#[test]
fn a_status_miss_compiles_and_records_success() {
    let gl = RecordingGl::new();
    let cache = cache(&gl);
    let m = ProgramManager::new(&gl, &cache);
    let s = m.compile_shader(ShaderKind::Fragment, FS).unwrap();
    assert!(s.compiled() && !s.deferred());
    assert_eq!(gl.take_only(&["CompileShader"]), ["CompileShader(1)"]);
    assert_eq!(cache.shader_status(s.hash()), Status::Success);
}

#[test]
fn a_compile_error_records_no_status_and_reports_the_log() {
    let gl = RecordingGl::new();
    let cache = cache(&gl);
    let m = ProgramManager::new(&gl, &cache);
    let bad = "#error nope";
    let s = m.compile_shader(ShaderKind::Fragment, bad).unwrap();
    assert!(!s.compiled());
    assert_eq!(s.info_log().unwrap(), format!("ERROR: {bad}"));
    assert_eq!(cache.shader_status(s.hash()), Status::Unknown);
    match m.program(VS, bad, &Bindings::new()) {
        Err(Error::Compile { kind, log }) => {
            assert_eq!(kind, ShaderKind::Fragment);
            assert_eq!(log, format!("ERROR: {bad}"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(cache.stats().programs, 0);
}

#[test]
fn a_cached_success_does_not_compile() {
    let gl = RecordingGl::new();
    let cache = cache(&gl);
    let m = ProgramManager::new(&gl, &cache);
    m.compile_shader(ShaderKind::Fragment, FS).unwrap();
    gl.take();
    let s = m.compile_shader(ShaderKind::Fragment, FS).unwrap();
    assert!(s.compiled() && s.deferred());
    assert!(gl.take().is_empty(), "no GL call at all");
}

#[test]
fn a_link_error_caches_nothing_and_reports_the_log() {
    let gl = RecordingGl::new();
    let cache = cache(&gl);
    let m = ProgramManager::new(&gl, &cache);
    let fs = "void main() {} // LINK_ERROR";
    match m.program(VS, fs, &Bindings::new()) {
        Err(Error::Link { log }) => assert!(log.contains("LINK_ERROR"), "{log}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(cache.stats().programs, 0);
    assert!(gl.take_only(&["GetProgramBinary"]).is_empty());
    // Linking again links again.
    assert!(matches!(
        m.program(VS, fs, &Bindings::new()),
        Err(Error::Link { .. })
    ));
}

#[test]
fn a_miss_links() {
    let gl = RecordingGl::new();
    let cache = cache(&gl);
    let m = ProgramManager::new(&gl, &cache);
    let v = m.compile_shader(ShaderKind::Vertex, VS).unwrap();
    let f = m.compile_shader(ShaderKind::Fragment, FS).unwrap();
    gl.take();
    let p = m.link(&v, &f, &Bindings::new()).unwrap();
    assert!(!p.from_cache);
    assert_eq!(
        gl.take_only(&[
            "CompileShader",
            "LinkProgram",
            "ProgramBinary",
            "GetProgramBinary"
        ]),
        ["LinkProgram(3)", "GetProgramBinary(3)"]
    );
}

#[test]
fn a_miss_compiles_deferred_shared_shaders_then_links() {
    let gl = RecordingGl::new();
    let cache = cache(&gl);
    let m = ProgramManager::new(&gl, &cache);
    m.program(VS, FS, &Bindings::new()).unwrap();
    gl.take();
    // Both shaders' statuses are cached: compiling them compiles nothing...
    let v = m.compile_shader(ShaderKind::Vertex, VS).unwrap();
    let f = m.compile_shader(ShaderKind::Fragment, FS).unwrap();
    assert!(v.deferred() && f.deferred());
    assert!(gl.take().is_empty());
    // ...and a program of them with another binding misses: both are compiled, then linked.
    let p = m
        .link(&v, &f, &Bindings::new().attribute("pos", 2))
        .unwrap();
    assert!(!p.from_cache);
    assert_eq!(
        gl.take_only(&["CompileShader", "LinkProgram"]),
        ["CompileShader(4)", "CompileShader(5)", "LinkProgram(6)"]
    );
    // The compiled vertex shader is reused by the next link, not compiled again.
    let f2 = m.compile_shader(ShaderKind::Fragment, FS2).unwrap();
    m.link(&v, &f2, &Bindings::new()).unwrap();
    assert_eq!(
        gl.take_only(&["CompileShader", "LinkProgram"]),
        ["CompileShader(7)", "LinkProgram(8)"]
    );
}

#[test]
fn a_hit_loads_and_neither_links_nor_caches_again() {
    let gl = RecordingGl::new();
    let cache = cache(&gl);
    let m = ProgramManager::new(&gl, &cache);
    m.program(VS, FS, &Bindings::new()).unwrap();
    let stores = cache.stats().cache.memory.stores;
    gl.take();
    let p = m.program(VS, FS, &Bindings::new()).unwrap();
    assert!(p.from_cache);
    let calls = gl.take();
    assert!(calls.iter().any(|c| c.starts_with("ProgramBinary")));
    for forbidden in [
        "CompileShader",
        "LinkProgram",
        "GetProgramBinary",
        "CreateShader",
    ] {
        assert!(!calls.iter().any(|c| c.starts_with(forbidden)), "{calls:?}");
    }
    assert_eq!(
        cache.stats().cache.memory.stores,
        stores,
        "not cached again"
    );
}

#[test]
fn a_rejected_binary_compiles_links_and_replaces_the_entry() {
    let gl = RecordingGl::new();
    let cache = cache(&gl);
    let m = ProgramManager::new(&gl, &cache);
    m.program(VS, FS, &Bindings::new()).unwrap();
    // Damage the stored binary the way a driver update would: the driver rejects it.
    let v = cache.shader_hash(ShaderKind::Vertex, VS);
    let f = cache.shader_hash(ShaderKind::Fragment, FS);
    let key = cache.program_key(&v, &f, &Bindings::new());
    let mut entry = cache.load(&key).unwrap();
    entry.binary.data[0] ^= 0xff;
    assert!(cache.store(&key, &entry));
    gl.take();

    let p = m.program(VS, FS, &Bindings::new()).unwrap();
    assert!(!p.from_cache);
    assert_eq!(
        gl.take_only(&[
            "ProgramBinary",
            "DeleteProgram",
            "CompileShader",
            "LinkProgram",
            "GetProgramBinary"
        ]),
        [
            format!(
                "ProgramBinary(4, {FORMAT:#x}, {} bytes)",
                entry.binary.data.len()
            ),
            "DeleteProgram(4)".to_string(),
            "CompileShader(5)".to_string(),
            "CompileShader(6)".to_string(),
            "LinkProgram(7)".to_string(),
            "GetProgramBinary(7)".to_string(),
        ]
    );
    assert_eq!(
        cache.load(&key).unwrap().binary.data,
        RecordingGl::binary_of(VS, FS)
    );
    assert!(m.program(VS, FS, &Bindings::new()).unwrap().from_cache);
}

#[test]
fn transform_feedback_and_frag_data_are_bound_before_linking() {
    let gl = RecordingGl::new();
    let cache = cache(&gl);
    let m = ProgramManager::new(&gl, &cache);
    let bindings = Bindings::new()
        .frag_data("color", 0)
        .transform_feedback(["a", "b"], gpucache_gl::SEPARATE_ATTRIBS);
    m.program(VS, FS, &bindings).unwrap();
    assert_eq!(
        gl.take_only(&[
            "BindFragDataLocation",
            "TransformFeedbackVaryings",
            "LinkProgram"
        ]),
        [
            "BindFragDataLocation(3, 0, color)",
            "TransformFeedbackVaryings(3, [\"a\", \"b\"], 0x8c8d)",
            "LinkProgram(3)",
        ]
    );
}

#[test]
fn clear_forgets_programs_and_statuses() {
    let gl = RecordingGl::new();
    let cache = cache(&gl);
    let m = ProgramManager::new(&gl, &cache);
    m.program(VS, FS, &Bindings::new()).unwrap();
    cache.clear().unwrap();
    assert_eq!(cache.stats().programs, 0);
    assert_eq!(cache.stats().shaders, 0);
    assert!(!m.program(VS, FS, &Bindings::new()).unwrap().from_cache);
}

#[test]
fn another_identity_never_loads_the_binaries() {
    let dir = tempfile::tempdir().unwrap();
    let gl = RecordingGl::new();
    let open = |gl: &RecordingGl, api| {
        ProgramCache::builder()
            .directory(dir.path())
            .open(&GlIdentity::query(gl, api, "tests"))
            .unwrap()
    };
    {
        let cache = open(&gl, Api::Gl);
        ProgramManager::new(&gl, &cache)
            .program(VS, FS, &Bindings::new())
            .unwrap();
    }
    *gl.renderer.borrow_mut() = "another renderer".into();
    for api in [Api::Gl, Api::Gles] {
        let cache = open(&gl, api);
        let p = ProgramManager::new(&gl, &cache)
            .program(VS, FS, &Bindings::new())
            .unwrap();
        assert!(!p.from_cache, "{api:?}");
    }
    *gl.renderer.borrow_mut() = "recording".into();
    let cache = open(&gl, Api::Gles);
    let p = ProgramManager::new(&gl, &cache)
        .program(VS, FS, &Bindings::new())
        .unwrap();
    assert!(!p.from_cache, "GLES never loads the GL binaries");
    let cache = open(&gl, Api::Gl);
    let p = ProgramManager::new(&gl, &cache)
        .program(VS, FS, &Bindings::new())
        .unwrap();
    assert!(p.from_cache, "the first identity still finds its own");
}

#[test]
fn a_new_process_knows_the_statuses_before_the_preload() {
    let dir = tempfile::tempdir().unwrap();
    let gl = RecordingGl::new();
    let identity = GlIdentity::query(&gl, Api::Gl, "tests");
    {
        let cache = ProgramCache::builder()
            .directory(dir.path())
            .open(&identity)
            .unwrap();
        ProgramManager::new(&gl, &cache)
            .program(VS, FS, &Bindings::new())
            .unwrap();
    }
    let cache = ProgramCache::builder()
        .directory(dir.path())
        .preload(false)
        .open(&identity)
        .unwrap();
    let m = ProgramManager::new(&gl, &cache);
    gl.take();
    let p = m.program(VS, FS, &Bindings::new()).unwrap();
    assert!(p.from_cache, "read from disk on the memory miss");
    let calls = gl.take();
    assert!(
        !calls.iter().any(|c| c.starts_with("CompileShader")),
        "{calls:?}"
    );
    let h = cache.histograms();
    assert_eq!(h.get(gpucache_gl::Metric::StatusHitTime).count(), 2);
    assert_eq!(h.get(gpucache_gl::Metric::BinaryHitTime).count(), 1);
}

#[test]
fn histograms_are_kept_across_runs() {
    let dir = tempfile::tempdir().unwrap();
    let gl = RecordingGl::new();
    let identity = GlIdentity::query(&gl, Api::Gl, "tests");
    for _ in 0..2 {
        let cache = ProgramCache::builder()
            .directory(dir.path())
            .open(&identity)
            .unwrap();
        ProgramManager::new(&gl, &cache)
            .program(VS, FS, &Bindings::new())
            .unwrap();
    }
    let cache = ProgramCache::builder()
        .directory(dir.path())
        .open(&identity)
        .unwrap();
    let p = cache.persisted_histograms().unwrap().unwrap();
    use gpucache_gl::Metric;
    assert_eq!(p.runs, 2);
    assert_eq!(p.total.get(Metric::BinaryMissLinkTime).count(), 1);
    assert_eq!(p.total.get(Metric::BinaryHitTime).count(), 1);
    assert_eq!(p.total.get(Metric::BinarySize).count(), 1);
    assert_eq!(p.last_run.get(Metric::BinaryHitTime).count(), 1);
    assert_eq!(p.last_run.get(Metric::BinaryMissLinkTime).count(), 0);
}
