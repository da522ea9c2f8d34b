//! The smallest front end: a cache of compiled programs keyed by source, with a histogram of
//! compile times kept in a metadata stream and cache control registered. `docs/design.md`
//! walks through it.
//!
//! Run: `cargo run -p gpucache --example front_end`

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpucache::codec::{LeReader, LeWriter};
use gpucache::control::{self, CacheKinds, ControlTarget};
use gpucache::{Cache, Histogram, HistogramSnapshot, InsertMode, Lookup, MetadataStream};

/// The front end's own file beside the entries: magic `GPUCDEMO`, version 1.
const TIMES: MetadataStream = MetadataStream::new("demo-compile-times", *b"DEMO", 1);

struct ProgramCache {
    cache: Cache,
    compile_us: Histogram,
}

impl ProgramCache {
    fn open(dir: &std::path::Path, driver: &str) -> gpucache::Result<Arc<Self>> {
        let cache = Cache::builder()
            .directory(dir)
            .identity(driver.as_bytes().to_vec()) // Entries of another driver are never read.
            .version(1)
            .open()?;
        let this = Arc::new(Self {
            cache,
            compile_us: Histogram::new(),
        });
        let target: Arc<dyn ControlTarget> = this.clone();
        control::register(CacheKinds::APPLICATION_MANAGED, &target);
        Ok(this)
    }

    fn program(&self, source: &str) -> gpucache::Result<Vec<u8>> {
        let key = source.as_bytes();
        if let Lookup::Hit(binary) = self.cache.lookup(key) {
            return Ok(binary.to_vec());
        }
        let start = Instant::now();
        let binary = format!("compiled({source})").into_bytes(); // The slow part.
        self.compile_us.record_micros(start.elapsed());
        // Another thread may have stored it meanwhile: keep theirs.
        match self.cache.insert_with(
            key,
            binary.clone(),
            InsertMode::REPLACE.refuse_existing(true),
        ) {
            Ok(()) | Err(gpucache::Error::AlreadyExists(_)) => Ok(binary),
            Err(e) => Err(e),
        }
    }

    /// Adds this run's compile times to the directory's histogram.
    fn save_times(&self) -> gpucache::Result<()> {
        let Some(dir) = self.cache.directory() else {
            return Ok(());
        };
        let run = self.compile_us.snapshot();
        TIMES.update(dir, self.cache.identity(), Duration::from_secs(1), |old| {
            let mut total = old
                .and_then(|b| HistogramSnapshot::decode(&mut LeReader::new(&b)).ok())
                .unwrap_or_default();
            total.merge(&run);
            let mut body = Vec::new();
            total.encode(&mut LeWriter::new(&mut body));
            body
        })
    }
}

impl ControlTarget for ProgramCache {
    fn clear(&self) -> gpucache::Result<()> {
        self.cache.clear()
    }
}

fn main() -> gpucache::Result<()> {
    let dir = std::env::temp_dir().join(format!("gpucache-front-end-{}", std::process::id()));
    let programs = ProgramCache::open(&dir, "llvmpipe 25.0.7")?;
    for _ in 0..3 {
        programs.program("void main() {}")?;
    }
    programs.save_times()?;
    let body = TIMES.read(&dir)?.expect("saved");
    let times = HistogramSnapshot::decode(&mut LeReader::new(&body))?;
    println!("compiled {} time(s) in all runs so far", times.count());
    assert!(times.count() >= 1);
    // Cache control is for developers (GPUCACHE_DEVELOPER_MODE=1 turns it on).
    match gpucache::cache_control(
        CacheKinds::APPLICATION_MANAGED,
        gpucache::CacheControl::CLEAR,
    ) {
        Ok(()) => assert!(programs.cache.get(b"void main() {}").is_none()),
        Err(gpucache::Error::DeveloperModeRequired) => {
            println!("cache control needs developer mode: nothing cleared");
        }
        Err(e) => return Err(e),
    }
    drop(programs);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
