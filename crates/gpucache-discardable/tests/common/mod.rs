//! A service on a real Unix-domain socket in a temporary directory, served by its own thread
//! (joined on drop), for the channel tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gpucache::PolicyKind;
use gpucache_discardable::{CountingBackend, Server, ServerConfig};

pub struct Rig {
    pub server: Arc<Mutex<Server<CountingBackend>>>,
    pub path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Rig {
    pub fn new(budget: u64, policy: PolicyKind) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("discardable.sock");
        let config = ServerConfig {
            budget,
            policy,
            max_errors: 16,
        };
        let server = Arc::new(Mutex::new(
            Server::bind(&path, config, CountingBackend::default()).unwrap(),
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (server, stop) = (server.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    server
                        .lock()
                        .unwrap()
                        .turn(Duration::from_millis(2))
                        .unwrap();
                }
            })
        };
        Rig {
            server,
            path,
            stop,
            thread: Some(thread),
            _dir: dir,
        }
    }

    pub fn s(&self) -> MutexGuard<'_, Server<CountingBackend>> {
        self.server.lock().unwrap()
    }

    /// Waits (up to 10 s) until `f` holds of the server.
    pub fn wait(&self, what: &str, f: impl Fn(&Server<CountingBackend>) -> bool) {
        let t = Instant::now();
        while !f(&self.s()) {
            assert!(t.elapsed() < Duration::from_secs(10), "timed out: {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
