//! Shuttle model of the lock word: a client's locks racing the service's unlocks, deletes and
//! force-deletes, over many random schedules. (Shuttle explores interleavings under
//! sequential consistency; the orderings themselves are argued in docs/discardable.md.)

use std::sync::atomic::Ordering;

use gpucache_discardable::word::{self, AtomicWord};
use shuttle::sync::atomic::{AtomicBool, AtomicU32};
use shuttle::sync::{mpsc, Arc};
use shuttle::thread;

struct W(AtomicU32);

impl AtomicWord for W {
    fn load_word(&self, order: Ordering) -> u32 {
        self.0.load(order)
    }
    fn cas_word(&self, c: u32, n: u32, s: Ordering, f: Ordering) -> Result<u32, u32> {
        self.0.compare_exchange_weak(c, n, s, f)
    }
    fn store_word(&self, v: u32, order: Ordering) {
        self.0.store(v, order)
    }
}

enum Msg {
    Unlock,
    Done,
}

const ITERATIONS: usize = 3000;

#[test]
fn lock_unlock_delete_race() {
    shuttle::check_random(
        || {
            let w = Arc::new(W(AtomicU32::new(word::LOCKED_ONCE)));
            let gone = Arc::new(AtomicBool::new(false));
            let (tx, rx) = mpsc::channel();
            let client = {
                let (w, gone) = (w.clone(), gone.clone());
                thread::spawn(move || {
                    let mut locks = 0;
                    for _ in 0..3 {
                        if word::lock(&*w) {
                            // Holding a lock: the service cannot have deleted the resource.
                            assert!(!gone.load(Ordering::SeqCst), "deleted while locked");
                            locks += 1;
                            tx.send(Msg::Unlock).unwrap();
                        } else {
                            assert_eq!(w.load_word(Ordering::SeqCst), word::DELETED);
                        }
                        thread::yield_now();
                    }
                    tx.send(Msg::Done).unwrap();
                    locks
                })
            };
            // The service: drops the initial lock, then tries to delete between messages.
            assert!(word::unlock(&*w).is_ok(), "the initial lock");
            let mut deleted = false;
            let mut unlocks = 0;
            loop {
                if !deleted && word::delete(&*w).is_ok() {
                    deleted = true;
                    gone.store(true, Ordering::SeqCst);
                }
                match rx.recv().unwrap() {
                    Msg::Unlock => {
                        assert!(!deleted, "an unlock after a successful delete");
                        word::unlock(&*w).expect("unlock of a locked word");
                        unlocks += 1;
                    }
                    Msg::Done => break,
                }
            }
            let locks = client.join().unwrap();
            assert_eq!(locks, unlocks);
            if !deleted {
                assert_eq!(
                    word::delete(&*w),
                    Ok(()),
                    "every lock dropped: delete succeeds"
                );
            }
            assert!(!word::lock(&*w));
            assert_eq!(word::unlock(&*w), Err(word::DELETED));
        },
        ITERATIONS,
    );
}

#[test]
fn force_delete_races_lock() {
    shuttle::check_random(
        || {
            let w = Arc::new(W(AtomicU32::new(word::UNLOCKED)));
            let client = {
                let w = w.clone();
                thread::spawn(move || {
                    let mut failed = false;
                    for _ in 0..4 {
                        let ok = word::lock(&*w);
                        // Once a lock fails, no later lock succeeds.
                        assert!(!(failed && ok));
                        failed |= !ok;
                    }
                })
            };
            word::force_delete(&*w);
            client.join().unwrap();
            assert_eq!(w.load_word(Ordering::SeqCst), word::DELETED);
        },
        ITERATIONS,
    );
}
