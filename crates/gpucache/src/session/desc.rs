//! The description a session is opened with (`D3D12_SHADER_CACHE_SESSION_DESC`).

/// Where a session's entries live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CacheMode {
    /// No backing files: every entry is gone once the last session of the cache closes.
    #[default]
    Memory,
    /// Backed by files that persist from run to run (see the module documentation).
    Disk,
}

bitflags::bitflags! {
    /// Modifiers of a session (`D3D12_SHADER_CACHE_FLAGS`, same bits).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct SessionFlags: u32 {
        /// No flags.
        const NONE = 0;
        /// The cache is versioned by the driver in use as well as by `version`; caches of
        /// different drivers live side by side.
        const DRIVER_VERSIONED = 0x1;
        /// A disk cache lives in the current working directory instead of the user's cache
        /// directory, and application-wide clears leave it alone.
        const USE_WORKING_DIR = 0x2;
    }
}

/// Describes the cache a session opens. Create with [`SessionDesc::new`] and the setters;
/// each setter states its default, which is the D3D12 default.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SessionDesc {
    /// Names the cache; sessions with equal identifiers in one process share one cache.
    pub identifier: [u8; 16],
    /// Memory or disk.
    pub mode: CacheMode,
    /// Modifiers.
    pub flags: SessionFlags,
    /// Byte budget of the in-memory cache, charging key + value + `ENTRY_OVERHEAD` (192 B) of
    /// bookkeeping per entry (what the entries really cost in memory).
    pub max_in_memory_bytes: u32,
    /// Entry budget of the in-memory cache.
    pub max_in_memory_entries: u32,
    /// Largest size of the value file of a disk cache.
    pub max_value_file_bytes: u32,
    /// Opening a cache with another version wipes it (when no other session has it open).
    pub version: u64,
}

impl SessionDesc {
    /// D3D12's default for `MaximumInMemoryCacheSizeBytes`.
    pub const DEFAULT_MAX_IN_MEMORY_BYTES: u32 = 1024;
    /// D3D12's default for `MaximumInMemoryCacheEntries`.
    pub const DEFAULT_MAX_IN_MEMORY_ENTRIES: u32 = 128;
    /// D3D12's default for `MaximumValueFileSizeBytes`.
    pub const DEFAULT_MAX_VALUE_FILE_BYTES: u32 = 128 << 20;

    /// A memory-mode description with every other field at its default.
    pub fn new(identifier: [u8; 16]) -> Self {
        Self {
            identifier,
            mode: CacheMode::Memory,
            flags: SessionFlags::NONE,
            max_in_memory_bytes: Self::DEFAULT_MAX_IN_MEMORY_BYTES,
            max_in_memory_entries: Self::DEFAULT_MAX_IN_MEMORY_ENTRIES,
            max_value_file_bytes: Self::DEFAULT_MAX_VALUE_FILE_BYTES,
            version: 0,
        }
    }

    /// Memory or disk. Default [`CacheMode::Memory`].
    pub fn mode(mut self, mode: CacheMode) -> Self {
        self.mode = mode;
        self
    }

    /// Modifiers. Default [`SessionFlags::NONE`].
    pub fn flags(mut self, flags: SessionFlags) -> Self {
        self.flags = flags;
        self
    }

    /// In-memory byte budget. Default 1024 (D3D12's); 0 also means the default.
    pub fn max_in_memory_bytes(mut self, bytes: u32) -> Self {
        self.max_in_memory_bytes = bytes;
        self
    }

    /// In-memory entry budget. Default 128 (D3D12's); 0 also means the default.
    pub fn max_in_memory_entries(mut self, entries: u32) -> Self {
        self.max_in_memory_entries = entries;
        self
    }

    /// Value-file size limit of a disk cache. Default 128 MiB; 0 also means the default.
    pub fn max_value_file_bytes(mut self, bytes: u32) -> Self {
        self.max_value_file_bytes = bytes;
        self
    }

    /// Cache version. Default 0.
    pub fn version(mut self, version: u64) -> Self {
        self.version = version;
        self
    }

    /// The description with zero limits replaced by their defaults, as D3D12 does.
    pub(crate) fn resolved(mut self) -> Self {
        if self.max_in_memory_bytes == 0 {
            self.max_in_memory_bytes = Self::DEFAULT_MAX_IN_MEMORY_BYTES;
        }
        if self.max_in_memory_entries == 0 {
            self.max_in_memory_entries = Self::DEFAULT_MAX_IN_MEMORY_ENTRIES;
        }
        if self.max_value_file_bytes == 0 {
            self.max_value_file_bytes = Self::DEFAULT_MAX_VALUE_FILE_BYTES;
        }
        self
    }
}
