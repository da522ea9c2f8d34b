//! The fleet operations the tier and the `gpucache fleet` command share: pushing a batch of
//! entries and pulling an identity's entries in bulk.

use redis::{Cmd, RedisResult};

use crate::conn::Conn;
use crate::entry::{self, Reject};
use crate::key::KeyRing;
use crate::names::{self, Names};

/// One entry ready to send.
pub(crate) struct Encoded {
    pub hash: [u8; 16],
    pub bytes: Vec<u8>,
}

/// Sends `batch`: the entries first (one round trip per node), then, once they are stored,
/// their index members and the identity's info, so the index never names an entry that was
/// not written.
pub(crate) fn push_batch(
    conn: &mut Conn,
    names: &Names,
    identity_text: &str,
    batch: &[Encoded],
) -> RedisResult<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let sets: Vec<Cmd> = batch
        .iter()
        .map(|e| {
            let mut c = redis::cmd("SET");
            c.arg(names.entry(&e.hash)).arg(&e.bytes[..]);
            c
        })
        .collect();
    let _: redis::Value = conn.pipeline(sets)?;
    let mut sadd = redis::cmd("SADD");
    sadd.arg(names.index());
    for e in batch {
        sadd.arg(&e.hash[..]);
    }
    let bytes: usize = batch.iter().map(|e| e.bytes.len()).sum();
    let mut info = redis::cmd("HSET");
    info.arg(names.info()).arg("identity").arg(identity_text);
    let mut n = redis::cmd("HINCRBY");
    n.arg(names.info()).arg("entries").arg(batch.len());
    let mut b = redis::cmd("HINCRBY");
    b.arg(names.info()).arg("bytes").arg(bytes);
    let mut reg = redis::cmd("SADD");
    reg.arg(names::IDENTITIES).arg(names.ns());
    let _: redis::Value = conn.pipeline(vec![sadd, info, n, b, reg])?;
    Ok(())
}

/// The index members of an identity (16-byte key hashes; anything else is skipped).
pub(crate) fn index_members(conn: &mut Conn, names: &Names) -> RedisResult<Vec<[u8; 16]>> {
    let members: Vec<Vec<u8>> = conn.query(redis::cmd("SMEMBERS").arg(names.index()))?;
    Ok(members
        .into_iter()
        .filter_map(|m| <[u8; 16]>::try_from(&m[..]).ok())
        .collect())
}

/// What one pulled entry turned out to be.
pub(crate) enum Pulled {
    /// Verified: key, value, encoded size.
    Entry(Vec<u8>, Vec<u8>, usize),
    /// Absent (evicted, or never written): the index member is stale.
    Gone,
    /// Refused.
    Rejected(Reject),
}

/// Fetches and verifies the entries named by `hashes` (one round trip per node).
pub(crate) fn fetch(
    conn: &mut Conn,
    names: &Names,
    keys: &KeyRing,
    identity: &[u8],
    max_value: usize,
    hashes: &[[u8; 16]],
) -> RedisResult<Vec<Pulled>> {
    let redis_keys: Vec<Vec<u8>> = hashes.iter().map(|h| names.entry(h)).collect();
    let values = conn.get_many(&redis_keys)?;
    Ok(hashes
        .iter()
        .zip(values)
        .map(|(h, v)| match v {
            None => Pulled::Gone,
            Some(bytes) => verify(keys, identity, max_value, h, &bytes),
        })
        .collect())
}

/// Fetches one entry by one (used after a batch failed on a cluster with a node down:
/// the entries on the live nodes still arrive). Failures are returned per entry; after a
/// timeout (a paused node would cost one per entry) or 32 failures the rest are not asked
/// for.
pub(crate) fn fetch_each(
    conn: &mut Conn,
    names: &Names,
    keys: &KeyRing,
    identity: &[u8],
    max_value: usize,
    hashes: &[[u8; 16]],
) -> Vec<RedisResult<Pulled>> {
    let mut failures = 0;
    let mut timed_out = false;
    hashes
        .iter()
        .map(|h| {
            if failures >= 32 || timed_out {
                return Err(redis::RedisError::from(std::io::Error::other(
                    "not asked: the fleet keeps failing",
                )));
            }
            let got: RedisResult<Option<Vec<u8>>> =
                conn.query(redis::cmd("GET").arg(names.entry(h)));
            match got {
                Ok(v) => Ok(match v {
                    None => Pulled::Gone,
                    Some(bytes) => verify(keys, identity, max_value, h, &bytes),
                }),
                Err(e) => {
                    failures += 1;
                    timed_out |= e.is_timeout();
                    Err(e)
                }
            }
        })
        .collect()
}

fn verify(keys: &KeyRing, identity: &[u8], max_value: usize, h: &[u8; 16], bytes: &[u8]) -> Pulled {
    let checked = entry::decode_any(keys, bytes, max_value, |id, key| {
        if id != identity {
            Err(Reject::Identity)
        } else if names::key_hash(key) != *h {
            Err(Reject::Key)
        } else {
            Ok(())
        }
    });
    match checked {
        Ok((key, value)) => Pulled::Entry(key, value, bytes.len()),
        Err(why) => Pulled::Rejected(why),
    }
}

/// Removes stale members (entries evicted or never written) from the index.
pub(crate) fn remove_members(
    conn: &mut Conn,
    names: &Names,
    stale: &[[u8; 16]],
) -> RedisResult<()> {
    if stale.is_empty() {
        return Ok(());
    }
    let mut c = redis::cmd("SREM");
    c.arg(names.index());
    for h in stale {
        c.arg(&h[..]);
    }
    conn.query(&c)
}
