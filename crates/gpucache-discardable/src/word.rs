//! The lock word's state machine, over any 32-bit atomic (the real one in shared memory, or a
//! model checker's). Values: 0 deleted, 1 unlocked, `n >= 2` locked `n - 1` times.
//!
//! Memory ordering (see docs/discardable.md): every transition is a read-modify-write of
//! the one word, so the word's modification order alone decides which of a racing lock and
//! delete wins; no other memory is published through the word. A successful `lock` is
//! `Acquire` and `unlock` is `Release`, so that what the service did before its last unlock
//! happens-before the client's use after a relock; `delete` is `AcqRel` so that the service's
//! delete is ordered after the client's last lock it observed. Failed compare-and-swaps are
//! `Relaxed`: they only feed the next attempt.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

/// The word of a deleted handle.
pub const DELETED: u32 = 0;
/// The word of an unlocked handle.
pub const UNLOCKED: u32 = 1;
/// The word of a handle locked once (a new handle starts so).
pub const LOCKED_ONCE: u32 = 2;

/// What the state machine needs of an atomic 32-bit word.
pub trait AtomicWord {
    /// Loads the word.
    fn load_word(&self, order: std::sync::atomic::Ordering) -> u32;
    /// Weak compare-and-swap; `Err` carries the value seen.
    fn cas_word(
        &self,
        current: u32,
        new: u32,
        success: std::sync::atomic::Ordering,
        failure: std::sync::atomic::Ordering,
    ) -> Result<u32, u32>;
    /// Stores the word.
    fn store_word(&self, value: u32, order: std::sync::atomic::Ordering);
}

impl AtomicWord for std::sync::atomic::AtomicU32 {
    #[inline]
    fn load_word(&self, order: std::sync::atomic::Ordering) -> u32 {
        self.load(order)
    }
    #[inline]
    fn cas_word(
        &self,
        current: u32,
        new: u32,
        success: std::sync::atomic::Ordering,
        failure: std::sync::atomic::Ordering,
    ) -> Result<u32, u32> {
        self.compare_exchange_weak(current, new, success, failure)
    }
    #[inline]
    fn store_word(&self, value: u32, order: std::sync::atomic::Ordering) {
        self.store(value, order)
    }
}

/// Client: locks unless deleted. `false` when the word is 0 (the resource is gone) or the
/// lock count would overflow.
#[inline]
pub fn lock<W: AtomicWord + ?Sized>(w: &W) -> bool {
    let mut cur = w.load_word(Relaxed);
    loop {
        if cur == DELETED || cur == u32::MAX {
            return false;
        }
        match w.cas_word(cur, cur + 1, Acquire, Relaxed) {
            Ok(_) => return true,
            Err(seen) => cur = seen,
        }
    }
}

/// Service: drops one lock. Returns the new value, or `Err(seen)` when the word was not
/// locked (0 or 1: nothing to unlock).
#[inline]
pub fn unlock<W: AtomicWord + ?Sized>(w: &W) -> Result<u32, u32> {
    let mut cur = w.load_word(Relaxed);
    loop {
        if cur < LOCKED_ONCE {
            return Err(cur);
        }
        match w.cas_word(cur, cur - 1, Release, Relaxed) {
            Ok(_) => return Ok(cur - 1),
            Err(seen) => cur = seen,
        }
    }
}

/// Service: deletes an unlocked handle (1 → 0). `Err(seen)` when it was locked (the client
/// won the race) or already deleted.
#[inline]
pub fn delete<W: AtomicWord + ?Sized>(w: &W) -> Result<(), u32> {
    loop {
        match w.cas_word(UNLOCKED, DELETED, AcqRel, Acquire) {
            Ok(_) => return Ok(()),
            // A weak CAS may fail spuriously: retry only when the word still reads 1.
            Err(UNLOCKED) => continue,
            Err(seen) => return Err(seen),
        }
    }
}

/// Service: deletes whatever the state (shutdown, context loss, the client's own delete).
#[inline]
pub fn force_delete<W: AtomicWord + ?Sized>(w: &W) {
    w.store_word(DELETED, Release)
}
