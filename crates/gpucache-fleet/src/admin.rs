//! Administration of a fleet for tools (`gpucache fleet push|pull|stats`): synchronous
//! calls that report errors instead of counting them.

use std::time::Duration;

use gpucache::Identity;

use crate::conn::{Conn, Link, Target, Unavailable};
use crate::entry;
use crate::error::{Error, Result};
use crate::key::KeyRing;
use crate::names::{self, key_hash, Names};
use crate::ops::{self, Encoded, Pulled};
use crate::tier::describe;
use crate::url::FleetUrl;

const CHUNK: usize = 128;

/// What a push did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PushReport {
    /// Entries sent.
    pub pushed: u64,
    /// Entries not sent because the fleet's index already names their key.
    pub already_held: u64,
    /// Value bytes sent, before compression.
    pub value_bytes: u64,
    /// Encoded bytes sent (compressed, with headers and MACs).
    pub wire_bytes: u64,
}

/// What a pull did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PullReport {
    /// Verified entries handed over.
    pub pulled: u64,
    /// Value bytes handed over.
    pub value_bytes: u64,
    /// Index members whose entry is gone (evicted).
    pub gone: u64,
    /// Entries rejected (MAC, identity, key or format).
    pub rejected: u64,
}

/// One identity the fleet holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IdentityInfo {
    /// Its namespace (32 hex digits).
    pub namespace: String,
    /// The identity in words, as the first pusher recorded it.
    pub identity: String,
    /// Members of its index (entries pushed and not found evicted by a pull).
    pub indexed: u64,
    /// Entries pushed, counting re-pushes.
    pub pushed_entries: u64,
    /// Encoded bytes pushed, counting re-pushes.
    pub pushed_bytes: u64,
}

/// Memory of one server, from `INFO memory`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeMemory {
    /// The server's address.
    pub node: String,
    /// `used_memory`.
    pub used_memory: u64,
    /// `maxmemory` (0: unbounded).
    pub maxmemory: u64,
    /// `maxmemory_policy`.
    pub policy: String,
}

/// Receives pulled entries: `(key, value)`; an error stops the pull.
pub type PullSink<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'a;

/// A connection to a fleet for tools.
pub struct FleetAdmin {
    url: FleetUrl,
    link: Link,
    keys: Option<KeyRing>,
    io_timeout: Duration,
}

impl std::fmt::Debug for FleetAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetAdmin")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl FleetAdmin {
    /// Connects to the fleet at `url`, signing and checking with `keys` (needed by
    /// [`push`](Self::push) and [`pull`](Self::pull), not by the counts).
    pub fn connect(url: &str, keys: Option<KeyRing>, io_timeout: Duration) -> Result<Self> {
        let url = FleetUrl::parse(url)?;
        let mut link = Link::new(Target::new(&url, io_timeout)?, io_timeout);
        conn(&mut link)?;
        Ok(Self {
            url,
            link,
            keys,
            io_timeout,
        })
    }

    /// How many entries the fleet's index names for `identity`.
    pub fn indexed(&mut self, identity: &Identity) -> Result<u64> {
        let names = Names::new(identity.namespace());
        let c = conn(&mut self.link)?;
        Ok(c.query(redis::cmd("SCARD").arg(names.index()))?)
    }

    /// Sends `entries` of `identity`, skipping keys the fleet's index already names;
    /// `progress(entries done)` after each batch.
    pub fn push(
        &mut self,
        identity: &Identity,
        entries: &[(Vec<u8>, Vec<u8>)],
        progress: &mut dyn FnMut(u64),
    ) -> Result<PushReport> {
        let names = Names::new(identity.namespace());
        let id_bytes = entry::identity_bytes(identity);
        let text = describe(identity);
        let signer = self.keys.as_ref().ok_or(Error::NoKey)?.current.clone();
        let c = conn(&mut self.link)?;
        let held: std::collections::HashSet<[u8; 16]> =
            ops::index_members(c, &names)?.into_iter().collect();
        let mut report = PushReport::default();
        let mut done = 0;
        for chunk in entries.chunks(CHUNK) {
            let mut batch = Vec::new();
            for (key, value) in chunk {
                let hash = key_hash(key);
                if held.contains(&hash) {
                    report.already_held += 1;
                    continue;
                }
                let bytes = entry::encode(&signer, &id_bytes, key, value);
                report.value_bytes += value.len() as u64;
                report.wire_bytes += bytes.len() as u64;
                batch.push(Encoded { hash, bytes });
            }
            ops::push_batch(conn(&mut self.link)?, &names, &text, &batch)?;
            report.pushed += batch.len() as u64;
            done += chunk.len() as u64;
            progress(done);
        }
        Ok(report)
    }

    /// Pulls every entry of `identity`, verified, into `sink`; `progress(done, total)`
    /// after each chunk.
    pub fn pull(
        &mut self,
        identity: &Identity,
        sink: &mut PullSink<'_>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<PullReport> {
        let names = Names::new(identity.namespace());
        let id_bytes = entry::identity_bytes(identity);
        let keys = self.keys.clone().ok_or(Error::NoKey)?;
        let hashes = ops::index_members(conn(&mut self.link)?, &names)?;
        let total = hashes.len() as u64;
        let mut report = PullReport::default();
        let mut done = 0;
        for chunk in hashes.chunks(CHUNK) {
            let c = conn(&mut self.link)?;
            let max = usize::MAX >> 1;
            for pulled in ops::fetch(c, &names, &keys, &id_bytes, max, chunk)? {
                match pulled {
                    Pulled::Entry(key, value, _) => {
                        report.pulled += 1;
                        report.value_bytes += value.len() as u64;
                        sink(&key, &value)?;
                    }
                    Pulled::Gone => report.gone += 1,
                    Pulled::Rejected(_) => report.rejected += 1,
                }
            }
            done += chunk.len() as u64;
            progress(done, total);
        }
        Ok(report)
    }

    /// Every identity the fleet holds, with its counts.
    pub fn identities(&mut self) -> Result<Vec<IdentityInfo>> {
        let c = conn(&mut self.link)?;
        let mut all: Vec<String> = c.query(redis::cmd("SMEMBERS").arg(names::IDENTITIES))?;
        all.sort();
        let mut out = Vec::new();
        for ns in all {
            let Ok(n) = u128::from_str_radix(&ns, 16) else {
                continue;
            };
            let names = Names::new(n);
            let info: std::collections::HashMap<String, String> =
                c.query(redis::cmd("HGETALL").arg(names.info()))?;
            let indexed: u64 = c.query(redis::cmd("SCARD").arg(names.index()))?;
            let num = |k: &str| info.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
            out.push(IdentityInfo {
                namespace: ns.clone(),
                identity: info.get("identity").cloned().unwrap_or_default(),
                indexed,
                pushed_entries: num("entries"),
                pushed_bytes: num("bytes"),
            });
        }
        Ok(out)
    }

    /// `INFO memory` of every server (every master of a cluster).
    pub fn memory(&mut self) -> Result<Vec<NodeMemory>> {
        let mut nodes: Vec<String> = Vec::new();
        if self.url.is_cluster() {
            let c = conn(&mut self.link)?;
            let text: String = c.query(redis::cmd("CLUSTER").arg("NODES"))?;
            for line in text.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() > 2 && f[2].contains("master") && !f[2].contains("fail") {
                    let addr = f[1].split('@').next().unwrap_or_default();
                    nodes.push(addr.to_string());
                }
            }
        } else {
            nodes.push(String::new());
        }
        let mut out = Vec::new();
        for node in nodes {
            let info: String = if node.is_empty() {
                conn(&mut self.link)?.query(redis::cmd("INFO").arg("memory"))?
            } else {
                let scheme = if self.url.is_tls() { "rediss" } else { "redis" };
                let auth = self.url.nodes()[0]
                    .split_once("://")
                    .and_then(|(_, r)| r.rsplit_once('@'))
                    .map(|(a, _)| format!("{a}@"))
                    .unwrap_or_default();
                let client = redis::Client::open(format!("{scheme}://{auth}{node}"))?;
                let mut c = client.get_connection_with_timeout(self.io_timeout)?;
                c.set_read_timeout(Some(self.io_timeout))?;
                redis::cmd("INFO").arg("memory").query(&mut c)?
            };
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
                    .map(|v| v.trim().to_string())
                    .unwrap_or_default()
            };
            out.push(NodeMemory {
                node: if node.is_empty() {
                    crate::url::redact(&self.url.nodes()[0])
                } else {
                    node
                },
                used_memory: field("used_memory").parse().unwrap_or(0),
                maxmemory: field("maxmemory").parse().unwrap_or(0),
                policy: field("maxmemory_policy"),
            });
        }
        Ok(out)
    }
}

fn conn(link: &mut Link) -> Result<&mut Conn> {
    link.conn().map_err(|e| match e {
        Unavailable::Connect(e) => Error::from(e),
        Unavailable::BackingOff => Error::Redis("server unreachable (retrying later)".into()),
    })
}
