//! A counting global allocator: forwards to [`System`] and tracks live heap bytes, so the benchmark can measure what the disk index costs per entry.
//!
//! The binary declares it with `#[global_allocator] static ALLOC: CountingAlloc =
//! CountingAlloc::new();` and passes `&ALLOC` to the measurements.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// [`System`] plus a counter of bytes allocated and not yet freed.
#[derive(Debug, Default)]
pub struct CountingAlloc {
    live: AtomicUsize,
}

impl CountingAlloc {
    /// A fresh allocator with zeroed counters (usable in a `static`).
    pub const fn new() -> Self {
        Self {
            live: AtomicUsize::new(0),
        }
    }

    /// Heap bytes allocated and not yet freed.
    pub fn live(&self) -> usize {
        self.live.load(Relaxed)
    }

    fn grew(&self, bytes: usize) {
        self.live.fetch_add(bytes, Relaxed);
    }

    fn shrank(&self, bytes: usize) {
        self.live.fetch_sub(bytes, Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract is `System`'s; the counters only observe sizes and never touch the
// memory, and updating them does not allocate.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract (non-zero size), passed on as is.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            self.grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            self.grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller guarantees `ptr` came from this allocator (hence from `System`)
        // with this `layout`.
        unsafe { System.dealloc(ptr, layout) };
        self.shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `ptr`/`layout` describe a live block of this
        // allocator (hence of `System`) and that `new_size` is valid for `layout.align()`.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            self.shrank(layout.size());
            self.grew(new_size);
        }
        new
    }
}
