//! What a lookup finds and how an insert treats what is there: the vocabulary that the
//! memory tier, every lower tier and every front end share.

use bytes::Bytes;

/// What a lookup found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The value stored for the key (verified, when it came from a lower tier).
    Hit(Bytes),
    /// No value for the key.
    Miss,
    /// Another key with the same hash is stored (D3D12's `HASH_COLLISION`). The other key's
    /// value is never returned: keys are compared in full.
    Collision,
}

impl Lookup {
    /// The value of a hit.
    #[inline]
    pub fn hit(self) -> Option<Bytes> {
        match self {
            Lookup::Hit(value) => Some(value),
            Lookup::Miss | Lookup::Collision => None,
        }
    }

    /// Whether this is a hit.
    #[inline]
    pub fn is_hit(&self) -> bool {
        matches!(self, Lookup::Hit(_))
    }
}

/// How an insert treats a key that is already stored and a cache that is full.
///
/// "Full" is the capacity of the bottom tier: for a memory-only cache, the memory budget;
/// for a cache with lower tiers, their limits (the memory tier over them always evicts,
/// since they keep what it evicts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InsertMode {
    refuse_existing: bool,
    refuse_when_full: bool,
    /// Room is made before the newcomer goes in, so that it is kept whatever the policy's
    /// admission says (crate-internal: the cache's stores no lower tier holds, and D3D12's).
    keep_newcomer: bool,
}

impl InsertMode {
    /// The newest value wins (a colliding key is displaced) and a full cache evicts: the
    /// EGL blob cache's `set`, and [`Cache::insert`](crate::Cache::insert).
    pub const REPLACE: Self = Self {
        refuse_existing: false,
        refuse_when_full: false,
        keep_newcomer: false,
    };

    /// An equal key is refused with [`Error::AlreadyExists`](crate::Error::AlreadyExists),
    /// an equal hash with [`Error::HashCollision`](crate::Error::HashCollision), and an entry
    /// that does not fit without evicting with [`Error::CacheFull`](crate::Error::CacheFull):
    /// D3D12's `StoreValue`.
    pub const NEW_ONLY: Self = Self {
        refuse_existing: true,
        refuse_when_full: true,
        keep_newcomer: false,
    };

    /// This mode with refusal of existing keys turned on or off.
    pub const fn refuse_existing(mut self, on: bool) -> Self {
        self.refuse_existing = on;
        self
    }

    /// This mode with refusal when full turned on or off.
    pub const fn refuse_when_full(mut self, on: bool) -> Self {
        self.refuse_when_full = on;
        self
    }

    /// Whether an existing key (or hash) is refused.
    pub const fn refuses_existing(self) -> bool {
        self.refuse_existing
    }

    /// Whether an entry that needs an eviction is refused.
    pub const fn refuses_when_full(self) -> bool {
        self.refuse_when_full
    }

    /// This mode with the newcomer kept whatever the policy's admission says, or not.
    pub(crate) const fn keep_newcomer(mut self, on: bool) -> Self {
        self.keep_newcomer = on;
        self
    }

    /// Whether room is made before the newcomer goes in (no admission at the door).
    pub(crate) const fn keeps_newcomer(self) -> bool {
        self.keep_newcomer
    }
}

impl Default for InsertMode {
    /// [`InsertMode::REPLACE`].
    fn default() -> Self {
        Self::REPLACE
    }
}
