//! Real shared memory across processes: a child process (this test binary re-run) is the
//! client; it maps the memfd its parent made, initialises and locks handles, while the
//! parent (the service) unlocks, deletes under pressure, and finally kills it.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use gpucache::PolicyKind;
use gpucache_discardable::{
    DiscardableHandle, MemoryPressure, ServiceDiscardableManager, SharedMemory,
};

const FD_ENV: &str = "GPUCACHE_DISCARDABLE_CHILD_FD";
const N: u32 = 64;
const RACE_LOCKS: u32 = 20_000;

/// The child: runs only when started by `cross_process_lock_unlock_delete`.
#[test]
fn child_client() {
    let Ok(fd) = std::env::var(FD_ENV) else {
        return;
    };
    // The inherited memfd, reopened through /proc: the same shared memory object.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{fd}"))
        .unwrap();
    let mem = Arc::new(SharedMemory::from_fd(file.into()).unwrap());
    let hs: Vec<_> = (0..N)
        .map(|i| DiscardableHandle::new(mem.clone(), i * 4).unwrap())
        .collect();
    for h in &hs {
        h.initialize_locked();
    }
    println!("C:init");
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    while let Some(Ok(cmd)) = lines.next() {
        match cmd.as_str() {
            "lock" => {
                let s: String = hs
                    .iter()
                    .map(|h| if h.lock() { '1' } else { '0' })
                    .collect();
                println!("C:{s}");
            }
            "race" => {
                let mut counts = vec![0u32; N as usize];
                for i in 0..RACE_LOCKS {
                    let k = (i % N) as usize;
                    if hs[k].lock() {
                        counts[k] += 1;
                    }
                }
                let s: Vec<String> = counts.iter().map(u32::to_string).collect();
                println!("C:{}", s.join(","));
            }
            _ => {}
        }
    }
}

fn read(lines: &mut impl Iterator<Item = std::io::Result<String>>) -> String {
    for l in lines.by_ref() {
        let l = l.unwrap();
        // libtest may print "test child_client ... " before the child's first line.
        if let Some(at) = l.find("C:") {
            return l[at + 2..].to_string();
        }
    }
    panic!("the child ended early");
}

#[test]
fn cross_process_lock_unlock_delete() {
    let mem = Arc::new(SharedMemory::create(1, true).unwrap());
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_client", "--nocapture", "--test-threads=1"])
        .env(FD_ENV, mem.fd().as_raw_fd().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(read(&mut lines), "init");

    let deleted: Arc<Mutex<Vec<u32>>> = Arc::default();
    let mut s = ServiceDiscardableManager::new(u64::from(N / 2), PolicyKind::Lru);
    let d = deleted.clone();
    s.set_delete_callback(Box::new(move |_, batch| {
        d.lock().unwrap().extend(batch.iter().map(|x| x.resource))
    }));
    s.add_client(1);
    s.register_pool(1, 1, mem.clone()).unwrap();
    for i in 0..N {
        s.initialize(1, 0, i, 1, i * 4, 1).unwrap();
    }
    // Unlock all: the first half unlocked goes to keep the budget (LRU order).
    for i in 0..N {
        s.unlock(1, i).unwrap();
    }
    assert_eq!(*deleted.lock().unwrap(), (0..N / 2).collect::<Vec<_>>());
    writeln!(stdin, "lock").unwrap();
    let got = read(&mut lines);
    let want: String = (0..N).map(|i| if i < N / 2 { '0' } else { '1' }).collect();
    assert_eq!(
        got, want,
        "the child's locks fail exactly on the deleted handles"
    );
    for i in 0..N {
        let w = mem
            .word(i * 4)
            .unwrap()
            .load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(w, if i < N / 2 { 0 } else { 2 });
    }

    // Race: the child locks while the service unlocks and deletes under pressure.
    writeln!(stdin, "race").unwrap();
    let mut unlocks = vec![0u32; N as usize];
    for round in 0..4 * RACE_LOCKS {
        let i = round % N;
        if s.unlock(1, i).is_ok() {
            unlocks[i as usize] += 1;
        }
        if round % 512 == 0 {
            s.memory_pressure(MemoryPressure::Critical);
        }
    }
    let counts: Vec<u32> = read(&mut lines)
        .split(',')
        .map(|x| x.parse().unwrap())
        .collect();
    for i in N / 2..N {
        let w = mem
            .word(i * 4)
            .unwrap()
            .load(std::sync::atomic::Ordering::SeqCst);
        let held = 2 + counts[i as usize] - unlocks[i as usize];
        if s.contains(1, i) {
            assert_eq!(w, held, "resource {i}: word = locks - unlocks");
        } else {
            assert_eq!(w, 0);
            assert_eq!(held, 1, "resource {i} deleted while locked");
            assert!(deleted.lock().unwrap().contains(&i));
        }
    }

    // The client dies mid-frame (SIGKILL): its resources go, its pool is unmapped.
    child.kill().unwrap();
    child.wait().unwrap();
    let live = s.stats().resources;
    let before = deleted.lock().unwrap().len();
    assert_eq!(s.remove_client(1).unwrap(), live);
    assert_eq!(deleted.lock().unwrap().len(), before + live);
    assert_eq!(s.stats().total_bytes, 0);
    assert_eq!(s.pool_count(1), 0);
}
