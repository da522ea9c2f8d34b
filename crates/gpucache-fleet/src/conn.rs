//! Connections to the fleet: one server or a cluster, every socket with timeouts, dropped
//! on any transport error and re-opened after an exponential backoff.

use std::time::{Duration, Instant};

use redis::cluster::{cluster_pipe, ClusterClient, ClusterClientBuilder, ClusterConnection};
use redis::{Client, Cmd, Connection, RedisError, RedisResult};

use crate::error::Result;
use crate::url::FleetUrl;

/// First wait after a failure; doubled after each failure up to [`MAX_BACKOFF`].
pub const MIN_BACKOFF: Duration = Duration::from_millis(50);
/// Longest wait between two connection attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What a link connects to (built once; connecting happens later, on the thread that needs it).
#[derive(Clone)]
pub(crate) enum Target {
    Single(Client),
    Cluster(ClusterClient),
}

impl Target {
    pub(crate) fn new(url: &FleetUrl, io_timeout: Duration) -> Result<Self> {
        if url.is_cluster() {
            let client = ClusterClientBuilder::new(url.nodes().to_vec())
                .connection_timeout(io_timeout)
                .response_timeout(io_timeout)
                // One retry: a MOVED after a failover is followed, a dead node is not
                // waited for (the link's own backoff paces reconnecting).
                .retries(1)
                .min_retry_wait(5)
                .max_retry_wait(50)
                .build()?;
            Ok(Target::Cluster(client))
        } else {
            Ok(Target::Single(Client::open(url.nodes()[0].as_str())?))
        }
    }

    fn connect(&self, io_timeout: Duration) -> RedisResult<Conn> {
        match self {
            Target::Single(client) => {
                let c = client.get_connection_with_timeout(io_timeout)?;
                c.set_read_timeout(Some(io_timeout))?;
                c.set_write_timeout(Some(io_timeout))?;
                Ok(Conn::Single(c))
            }
            Target::Cluster(client) => {
                let c = client.get_connection()?;
                c.set_read_timeout(Some(io_timeout))?;
                c.set_write_timeout(Some(io_timeout))?;
                Ok(Conn::Cluster(Box::new(c)))
            }
        }
    }
}

/// An open connection.
pub(crate) enum Conn {
    Single(Connection),
    Cluster(Box<ClusterConnection>),
}

impl Conn {
    /// One command.
    pub(crate) fn query<T: redis::FromRedisValue>(&mut self, cmd: &Cmd) -> RedisResult<T> {
        match self {
            Conn::Single(c) => cmd.query(c),
            Conn::Cluster(c) => cmd.query(&mut **c),
        }
    }

    /// Several single-key commands in one round trip per node; the replies in order. The
    /// first error fails the whole call.
    pub(crate) fn pipeline<T: redis::FromRedisValue>(&mut self, cmds: Vec<Cmd>) -> RedisResult<T> {
        match self {
            Conn::Single(c) => {
                let mut p = redis::pipe();
                for cmd in cmds {
                    p.add_command(cmd);
                }
                p.query(c)
            }
            Conn::Cluster(c) => {
                let mut p = cluster_pipe();
                for cmd in cmds {
                    p.add_command(cmd);
                }
                p.query(c)
            }
        }
    }

    /// The values of `keys` (`None` for absent keys and keys of another type).
    pub(crate) fn get_many(&mut self, keys: &[Vec<u8>]) -> RedisResult<Vec<Option<Vec<u8>>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        match self {
            // One MGET: a single slot is not needed on one server.
            Conn::Single(c) => redis::cmd("MGET").arg(keys).query(c),
            // Keys of one identity are spread over the slots: one GET each, pipelined per
            // node by the cluster pipeline.
            Conn::Cluster(_) => {
                let cmds = keys
                    .iter()
                    .map(|k| {
                        let mut c = redis::cmd("GET");
                        c.arg(k);
                        c
                    })
                    .collect();
                self.pipeline(cmds)
            }
        }
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }
}

/// Whether `e` leaves the connection usable: the server answered (with an error such as
/// `OOM` or `WRONGTYPE`), as opposed to a transport failure or a timeout.
pub(crate) fn server_answered(e: &RedisError) -> bool {
    !(e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
        || e.kind() == redis::ErrorKind::ClusterConnectionNotFound)
}

/// A connection that is re-opened when needed, not sooner than its backoff allows.
pub(crate) struct Link {
    target: Target,
    io_timeout: Duration,
    conn: Option<Conn>,
    retry_at: Option<Instant>,
    backoff: Duration,
}

/// Why no connection is available now.
#[derive(Debug)]
pub(crate) enum Unavailable {
    /// Still waiting out the backoff after a failure.
    BackingOff,
    /// Connecting failed now (and the backoff grew).
    Connect(RedisError),
}

impl Link {
    pub(crate) fn new(target: Target, io_timeout: Duration) -> Self {
        Self {
            target,
            io_timeout,
            conn: None,
            retry_at: None,
            backoff: MIN_BACKOFF,
        }
    }

    /// The open connection, connecting if the backoff allows.
    pub(crate) fn conn(&mut self) -> Result<&mut Conn, Unavailable> {
        if self.conn.is_none() {
            if self.retry_at.is_some_and(|t| Instant::now() < t) {
                return Err(Unavailable::BackingOff);
            }
            match self.target.connect(self.io_timeout) {
                Ok(c) => self.conn = Some(c),
                Err(e) => {
                    self.back_off();
                    return Err(Unavailable::Connect(e));
                }
            }
        }
        Ok(self.conn.as_mut().expect("connected above"))
    }

    /// Records a failed command: a transport failure closes the connection; any failure
    /// starts or grows the backoff (a full server stays full for a while, too).
    pub(crate) fn failed(&mut self, e: &RedisError) {
        if !server_answered(e) {
            self.conn = None;
        }
        self.back_off();
    }

    /// Records a command that worked: the backoff starts over.
    pub(crate) fn succeeded(&mut self) {
        self.retry_at = None;
        self.backoff = MIN_BACKOFF;
    }

    /// Whether a failure is being waited out now.
    pub(crate) fn backing_off(&self) -> Option<Instant> {
        self.retry_at.filter(|t| Instant::now() < *t)
    }

    fn back_off(&mut self) {
        self.retry_at = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// Closes the connection (the next use reconnects).
    pub(crate) fn reset(&mut self) {
        self.conn = None;
    }
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("connected", &self.conn.is_some())
            .field("backoff", &self.backoff)
            .finish_non_exhaustive()
    }
}
