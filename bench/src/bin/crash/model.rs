//! What the children do and what the checker expects: a stateless operation stream and
//! self-verifying values, both defined so that `bench/c/crash_egl_child.c` computes the same
//! bytes (keep the two in step), and the per-key model of what a read may return.

use std::collections::HashMap;

pub use gpucache_bench::selfcheck::{key, value_for, verify, Rng};

/// The kinds of child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The Rust API (`gpucache::Cache`): puts, removes, gets, flushes, compactions.
    Cache,
    /// The EGL blob cache through the C library (`gpucache_egl_set`/`get`/`flush`).
    Egl,
    /// D3D12-style disk sessions (`gpucache::session`): new-only stores, finds, flushes.
    Session,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Cache, Kind::Egl, Kind::Session];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Cache => "cache",
            Kind::Egl => "egl",
            Kind::Session => "session",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// Keys of the overwriting kinds (cache, egl); a twelfth of them are hot.
pub const KEYS: u32 = 600;
const HOT: u32 = KEYS / 12;
/// A child stops at this sequence number (session keys pack it in 20 bits).
pub const MAX_SEQ: u64 = (1 << 20) - 1;
/// The identity every child and checker opens its directory with.
pub const IDENTITY: &[u8] = b"gpucache crash harness";
/// The session identifier and version.
pub const SESSION_ID: [u8; 16] = *b"crash-harness-01";
pub const SESSION_VERSION: u64 = 7;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Put { id: u32, len: usize },
    Remove { id: u32 },
    Get { id: u32 },
    Flush,
    Compact,
}

/// Operation `seq` of the stream of `seed` for `kind`: a pure function, so the parent
/// replays what a child did from the child's seed.
pub fn op(kind: Kind, seed: u64, seq: u64) -> Op {
    let mut r = Rng::new(seed ^ seq.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    let roll = r.next_u64() % 100;
    let id = if r.next_u64().is_multiple_of(2) {
        (r.next_u64() % u64::from(HOT)) as u32
    } else {
        (r.next_u64() % u64::from(KEYS)) as u32
    };
    let len = if r.next_u64().is_multiple_of(20) {
        4000 + (r.next_u64() % 8000) as usize
    } else {
        32 + (r.next_u64() % 3000) as usize
    };
    match kind {
        Kind::Cache => match roll {
            0..65 => Op::Put { id, len },
            65..75 => Op::Remove { id },
            75..90 => Op::Get { id },
            90..95 => Op::Flush,
            _ => Op::Compact,
        },
        Kind::Egl => match roll {
            0..80 => Op::Put { id, len },
            80..94 => Op::Get { id },
            _ => Op::Flush,
        },
        // Every store is a new key: (epoch, seq) packed by `session_id`.
        Kind::Session => match roll {
            0..80 => Op::Put { id: u32::MAX, len },
            80..94 => Op::Get { id },
            _ => Op::Flush,
        },
    }
}

/// The key id of a session store.
pub fn session_id(epoch: u64, seq: u64) -> u32 {
    ((epoch as u32) << 20) | (seq as u32 & 0xF_FFFF)
}

/// The version of operation `seq` of child `epoch`: later operations have larger versions.
pub fn version(epoch: u64, seq: u64) -> u64 {
    (epoch << 32) | seq
}

/// What one key may read as.
#[derive(Clone, Copy, Debug, Default)]
struct KeyState {
    /// Reads must return a version at least this (older: stale, a flushed overwrite or
    /// removal undone).
    floor: u64,
    /// A flushed put not followed by any (even unflushed) removal: a miss loses it.
    must_exist: bool,
}

/// A child's run: its seed and the last operation it can have issued.
#[derive(Clone, Copy, Debug)]
struct Epoch {
    seed: u64,
    upper: u64,
}

/// The expected contents of one kind's directory across every child that wrote it.
pub struct Model {
    kind: Kind,
    keys: HashMap<u32, KeyState>,
    epochs: HashMap<u64, Epoch>,
}

/// How one read compared with the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Corrupt,
    Lost,
    Stale,
}

impl Model {
    pub fn new(kind: Kind) -> Model {
        Model {
            kind,
            keys: HashMap::new(),
            epochs: HashMap::new(),
        }
    }

    /// Folds in child `epoch`'s run: operations before `acked` (the sequence number of its
    /// last acknowledged flush, if any) are durable; those up to the next flush operation
    /// may have been issued (a child prints each acknowledgement before going on).
    /// Returns that upper bound.
    pub fn apply(&mut self, epoch: u64, seed: u64, acked: Option<u64>) -> u64 {
        let start = acked.map_or(0, |a| a + 1);
        let mut upper = start;
        while upper < MAX_SEQ && op(self.kind, seed, upper) != Op::Flush {
            upper += 1;
        }
        for seq in 0..=upper {
            let durable = acked.is_some_and(|a| seq < a);
            match op(self.kind, seed, seq) {
                Op::Put { id, .. } => {
                    let id = self.real_id(epoch, seq, id);
                    if durable {
                        let s = self.keys.entry(id).or_default();
                        s.floor = s.floor.max(version(epoch, seq));
                        s.must_exist = true;
                    }
                }
                Op::Remove { id } => {
                    let s = self.keys.entry(id).or_default();
                    if durable {
                        s.floor = s.floor.max(version(epoch, seq));
                    }
                    s.must_exist = false;
                }
                _ => {}
            }
        }
        self.epochs.insert(epoch, Epoch { seed, upper });
        upper
    }

    fn real_id(&self, epoch: u64, seq: u64, id: u32) -> u32 {
        if self.kind == Kind::Session {
            session_id(epoch, seq)
        } else {
            id
        }
    }

    /// The keys a checker reads: every key of the overwriting kinds; for sessions the
    /// stores of the last three children and a sample of older ones.
    pub fn keys_to_check(&self, rng: &mut Rng) -> Vec<u32> {
        if self.kind != Kind::Session {
            return (0..KEYS).collect();
        }
        let newest = self.epochs.keys().copied().max().unwrap_or(0);
        let mut ids: Vec<u32> = self
            .keys
            .keys()
            .copied()
            .filter(|id| u64::from(id >> 20) + 3 > newest || rng.next_u64().is_multiple_of(16))
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Whether a flush acknowledged a put or removal of key `id`, so a read of it checks
    /// durability.
    pub fn flushed(&self, id: u32) -> bool {
        self.keys.get(&id).is_some_and(|s| s.floor > 0)
    }

    /// Judges one read of key `id`.
    pub fn judge(&self, id: u32, read: Option<&[u8]>) -> (Verdict, String) {
        let state = self.keys.get(&id).copied().unwrap_or_default();
        let Some(bytes) = read else {
            return if state.must_exist {
                (
                    Verdict::Lost,
                    format!("key {id}: flushed v{:#x} missing", state.floor),
                )
            } else {
                (Verdict::Ok, String::new())
            };
        };
        let v = match verify(id, bytes) {
            Ok(v) => v,
            Err(e) => return (Verdict::Corrupt, e),
        };
        // A value that was written: its operation is a put of this key and length, issued.
        let (epoch, seq) = (v >> 32, v & 0xFFFF_FFFF);
        let issued = self.epochs.get(&epoch).is_some_and(|e| {
            seq <= e.upper
                && match op(self.kind, e.seed, seq) {
                    Op::Put { id: want, len } => {
                        self.real_id(epoch, seq, want) == id && len.max(28) == bytes.len()
                    }
                    _ => false,
                }
        });
        if !issued {
            return (
                Verdict::Corrupt,
                format!("key {id}: v{v:#x} was never written"),
            );
        }
        if v < state.floor {
            return (
                Verdict::Stale,
                format!("key {id}: v{v:#x} older than flushed v{:#x}", state.floor),
            );
        }
        (Verdict::Ok, String::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_verify_and_damage_does_not() {
        let v = value_for(3, version(2, 5), 100);
        assert_eq!(verify(3, &v), Ok(version(2, 5)));
        let mut bad = v.clone();
        bad[50] ^= 1;
        assert!(verify(3, &bad).is_err());
        assert!(verify(4, &v).is_err());
    }

    /// The first flush of a stream and the operations before it.
    fn first_flush(kind: Kind, seed: u64) -> u64 {
        (0..MAX_SEQ)
            .find(|&s| op(kind, seed, s) == Op::Flush)
            .unwrap()
    }

    #[test]
    fn the_model_tells_lost_stale_and_phantom_values_apart() {
        let seed = 42;
        let mut m = Model::new(Kind::Egl);
        let flush = first_flush(Kind::Egl, seed);
        // Nothing acknowledged: a miss is fine.
        let upper = m.apply(1, seed, None);
        assert_eq!(upper, flush);
        let (seq, id, len) = (0..flush)
            .find_map(|s| match op(Kind::Egl, seed, s) {
                Op::Put { id, len } => Some((s, id, len)),
                _ => None,
            })
            .expect("a put before the first flush");
        assert_eq!(m.judge(id, None).0, Verdict::Ok);
        let v = value_for(id, version(1, seq), len);
        assert_eq!(m.judge(id, Some(&v)).0, Verdict::Ok);
        // Acknowledged by the flush: a miss is lost.
        let mut m = Model::new(Kind::Egl);
        m.apply(1, seed, Some(flush));
        assert_eq!(m.judge(id, None).0, Verdict::Lost);
        // A value of the right shape that no operation wrote.
        let forged = value_for(id, version(1, seq + 1_000_000), len);
        assert_eq!(m.judge(id, Some(&forged)).0, Verdict::Corrupt);
        // An older child's value under a newer flushed one.
        let mut m = Model::new(Kind::Egl);
        m.apply(1, seed, None);
        m.apply(2, seed, Some(flush));
        let older = value_for(id, version(1, seq), len);
        assert_eq!(m.judge(id, Some(&older)).0, Verdict::Stale);
    }
}
