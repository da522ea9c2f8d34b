//! Fleet URLs: `redis://`, `rediss://`, and `redis+cluster://` / `rediss+cluster://` with a
//! comma-separated list of seed nodes.

use crate::error::{Error, Result};

/// Where the fleet lives, parsed from a URL.
///
/// - `redis://[user:password@]host[:port][/db]`: one server (port 6379 by default).
/// - `rediss://...`: the same over TLS (needs the `tls-rustls` feature).
/// - `redis+cluster://[user:password@]host1:port1,host2:port2,...` (or `rediss+cluster://`):
///   a Redis Cluster, reached through any of the seed nodes listed; the credentials apply
///   to every node.
#[derive(Clone, PartialEq, Eq)]
pub struct FleetUrl {
    /// Per node: a `redis://` or `rediss://` URL the `redis` crate understands.
    nodes: Vec<String>,
    cluster: bool,
    tls: bool,
}

impl FleetUrl {
    /// Parses `url`.
    pub fn parse(url: &str) -> Result<Self> {
        let bad = |why: &str| Error::BadUrl {
            url: redact(url),
            why: why.to_string(),
        };
        let url = url.trim();
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            bad("expected redis://, rediss://, redis+cluster:// or rediss+cluster://")
        })?;
        let (cluster, tls) = match scheme {
            "redis" => (false, false),
            "rediss" => (false, true),
            "redis+cluster" => (true, false),
            "rediss+cluster" => (true, true),
            _ => return Err(bad("unknown scheme")),
        };
        if tls && !cfg!(feature = "tls-rustls") {
            return Err(Error::TlsNotBuilt);
        }
        let node_scheme = if tls { "rediss" } else { "redis" };
        let (auth, hosts) = match rest.rsplit_once('@') {
            Some((auth, hosts)) => (Some(auth), hosts),
            None => (None, rest),
        };
        let (hosts, path) = match hosts.split_once('/') {
            Some((h, p)) => (h, Some(p)),
            None => (hosts, None),
        };
        if cluster && path.is_some_and(|p| !p.is_empty() && p != "0") {
            return Err(bad("a cluster has database 0 only"));
        }
        let hosts: Vec<&str> = hosts.split(',').map(str::trim).collect();
        if hosts.iter().any(|h| h.is_empty()) {
            return Err(bad("empty host"));
        }
        if !cluster && hosts.len() > 1 {
            return Err(bad("several hosts need redis+cluster://"));
        }
        let nodes = hosts
            .iter()
            .map(|host| {
                let mut node = format!("{node_scheme}://");
                if let Some(auth) = auth {
                    node.push_str(auth);
                    node.push('@');
                }
                node.push_str(host);
                if let Some(p) = path.filter(|p| !p.is_empty()) {
                    node.push('/');
                    node.push_str(p);
                }
                node
            })
            .collect();
        Ok(Self {
            nodes,
            cluster,
            tls,
        })
    }

    /// The seed nodes, each as a `redis://` or `rediss://` URL.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// Whether connections use TLS.
    pub fn is_tls(&self) -> bool {
        self.tls
    }
}

impl std::fmt::Debug for FleetUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<String> = self.nodes.iter().map(|n| redact(n)).collect();
        f.debug_struct("FleetUrl")
            .field("nodes", &nodes)
            .field("cluster", &self.cluster)
            .finish()
    }
}

/// `url` with the password, if any, replaced by `***` (for messages and logs).
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.rsplit_once('@') {
        Some((auth, hosts)) => match auth.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{hosts}"),
            None => format!("{scheme}://***@{hosts}"),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes() {
        let u = FleetUrl::parse("redis://127.0.0.1:7000").unwrap();
        assert_eq!(u.nodes(), ["redis://127.0.0.1:7000"]);
        assert!(!u.is_cluster());
        let u = FleetUrl::parse("redis+cluster://:pw@h1:1,h2:2, h3:3").unwrap();
        assert_eq!(
            u.nodes(),
            ["redis://:pw@h1:1", "redis://:pw@h2:2", "redis://:pw@h3:3"]
        );
        assert!(u.is_cluster());
        assert!(format!("{u:?}").contains("***"));
        assert!(!format!("{u:?}").contains("pw"));
        assert!(FleetUrl::parse("redis://a:1,b:2").is_err());
        assert!(FleetUrl::parse("http://a").is_err());
        assert!(FleetUrl::parse("redis+cluster://a:1,,b:2").is_err());
        assert!(FleetUrl::parse("a:1").is_err());
        if !cfg!(feature = "tls-rustls") {
            assert!(matches!(
                FleetUrl::parse("rediss://a:1"),
                Err(Error::TlsNotBuilt)
            ));
        }
        assert_eq!(redact("redis://u:secret@h:1"), "redis://u:***@h:1");
    }
}
