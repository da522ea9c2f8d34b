//! Shared memory: a memfd mapped read-write, addressed as 32-bit words.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;

use rustix::fs::{self, MemfdFlags, SealFlags};
use rustix::mm::{self, MapFlags, ProtFlags};

use crate::Error;

/// Bytes in one handle's word.
pub const WORD_SIZE: u32 = 4;

/// The largest pool accepted from an fd (a hostile size would only waste address space).
pub const MAX_POOL_SIZE: u64 = 1 << 30;

/// The system's page size.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// A memfd and its shared read-write mapping. The mapping lives as long as this value; the
/// words in it are only ever accessed as [`AtomicU32`], so other processes mapping the same
/// memfd may write them at any time.
#[derive(Debug)]
pub struct SharedMemory {
    fd: OwnedFd,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; every access goes through
// `AtomicU32`, which is `Sync`, so sharing and sending the owner between threads is sound.
unsafe impl Send for SharedMemory {}
// SAFETY: as above: only atomic accesses, never `&mut` into the mapping.
unsafe impl Sync for SharedMemory {}

impl SharedMemory {
    /// Creates a memfd of `len` bytes (rounded up to whole pages, at least one), zeroed, and
    /// maps it. With `inheritable`, the fd survives `exec` (for a child process that maps it).
    pub fn create(len: usize, inheritable: bool) -> Result<Self, Error> {
        let page = page_size();
        let len = len.max(1).div_ceil(page).saturating_mul(page);
        if len as u64 > MAX_POOL_SIZE {
            return Err(Error::PoolSize(len as u64));
        }
        let flags = if inheritable {
            MemfdFlags::ALLOW_SEALING
        } else {
            MemfdFlags::ALLOW_SEALING | MemfdFlags::CLOEXEC
        };
        let fd = fs::memfd_create("gpucache-discardable", flags).map_err(io::Error::from)?;
        fs::ftruncate(&fd, len as u64).map_err(io::Error::from)?;
        // Sealed against shrinking, so that no process can cut the mapping short under
        // another (an access past the end of a shrunk file would be SIGBUS).
        fs::fcntl_add_seals(&fd, SealFlags::SHRINK).map_err(io::Error::from)?;
        Self::map(fd, len)
    }

    /// Maps a memfd received from a client (its size from `fstat`). Refuses an empty fd, a
    /// size that is not whole words, or one over [`MAX_POOL_SIZE`], and a file that can
    /// shrink: it must be a memfd sealed against shrinking (sealed here when it allows it), so
    /// that a client cannot cut the mapping short under the service.
    pub fn from_fd(fd: OwnedFd) -> Result<Self, Error> {
        let sealed = fs::fcntl_get_seals(&fd).is_ok_and(|s| s.contains(SealFlags::SHRINK))
            || fs::fcntl_add_seals(&fd, SealFlags::SHRINK).is_ok();
        if !sealed {
            return Err(Error::NotSealed);
        }
        let st = fs::fstat(&fd).map_err(io::Error::from)?;
        let size = u64::try_from(st.st_size).unwrap_or(0);
        if size == 0 || size > MAX_POOL_SIZE || !size.is_multiple_of(u64::from(WORD_SIZE)) {
            return Err(Error::PoolSize(size));
        }
        Self::map(fd, size as usize)
    }

    fn map(fd: OwnedFd, len: usize) -> Result<Self, Error> {
        // SAFETY: a fresh shared mapping chosen by the kernel (null hint), so it overlaps no
        // Rust object; `len` is the fd's size; the pointer is kept until `munmap` in `drop`.
        let ptr = unsafe {
            mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                &fd,
                0,
            )
        }
        .map_err(io::Error::from)?;
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or(Error::PoolSize(len as u64))?;
        Ok(SharedMemory { fd, ptr, len })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped (never: a mapping has at least one word).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of words.
    pub fn words(&self) -> u32 {
        (self.len / WORD_SIZE as usize) as u32
    }

    /// The memfd (to pass to another process).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The word at byte `offset`: `None` unless `offset` is a multiple of 4 inside the mapping.
    pub fn word(&self, offset: u32) -> Option<&AtomicU32> {
        let off = offset as usize;
        if !offset.is_multiple_of(WORD_SIZE) || off.checked_add(WORD_SIZE as usize)? > self.len {
            return None;
        }
        // SAFETY: `off + 4 <= len`, so the 4 bytes lie in the live mapping; mmap returns a
        // page-aligned pointer and `off` is a multiple of 4, so the word is aligned for
        // `AtomicU32`; the mapping outlives `&self`; every access to it is atomic (another
        // process writing it concurrently is an atomic access too).
        Some(unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU32>() })
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are the mapping made in `map`, unmapped once, here; no
        // reference into it outlives `self` (`word` borrows `self`).
        let _ = unsafe { mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
