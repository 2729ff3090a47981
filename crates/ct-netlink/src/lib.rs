//! Delete conntrack entries by filter, speaking ctnetlink directly (no process is
//! ever spawned).
//!
//! ```no_run
//! use ct_netlink::{Config, Conntrack, Filter};
//! let mut ct = Conntrack::open(Config::default())?; // probes the kernel once
//! let report = ct.delete(&[
//!     Filter::udp_orig_dst("198.18.0.10".parse().unwrap(), None), // a ClusterIP
//!     Filter::udp_nodeport(ct_netlink::Family::V4, 30053),        // a NodePort
//! ])?;
//! println!("{} entries deleted", report.deleted);
//! for r in &report.per_filter {
//!     if !r.is_done() {
//!         println!("{}: {:?}, try again later", r.filter, r.outcome());
//!     }
//! }
//! # Ok::<(), ct_netlink::Error>(())
//! ```
//!
//! Four strategies (see docs/conntrack.md):
//! - [`Strategy::FilteredFlush`]: one IPCTNL_MSG_CT_DELETE with CTA_FILTER per filter
//!   (Linux >= 6.12); the kernel deletes every match itself.
//! - [`Strategy::FilteredDump`]: a dump with CTA_FILTER per filter (Linux >= 5.8), then
//!   deletion of each returned entry by tuple (and CTA_ID).
//! - [`Strategy::FullDump`]: one unfiltered dump per address family, matched in user
//!   space against all filters at once, then deletion by tuple.
//! - [`Strategy::PortDump`]: one dump with CTA_FILTER per port the filters share
//!   (protocol and port, no address), matched in user space, then deletion by tuple.
//!
//! Unless the configuration forces one, each call chooses per family between the
//! probed per-filter kind (one kernel table walk per filter), one dump per shared port
//! (one walk per port) and one full dump (one walk whatever the number of filters) with
//! a measured cost model ([`plan`]). Every
//! filter gets an [`Outcome`]; only a complete match makes it done.
//!
//! For a cleanup that keeps the node's UDP entries in memory ([`FlowIndex`]): entries
//! as [`Flow`]s ([`Conntrack::list_proto`] to seed, [`Conntrack::list`] for the matches
//! of filters), exact deletes ([`Conntrack::delete_flows`]) and NEW/DESTROY events
//! ([`EventSocket`], UDP only by a BPF filter, losses reported).
//!
//! Safety rule: every delete request that carries CTA_FILTER also carries a partial
//! tuple, so a kernel that does not know filtered flushes reads it as a (malformed)
//! delete-by-tuple and refuses it, instead of flushing the whole table.

mod bpf;
mod delete;
mod events;
mod exec;
mod filter;
mod flow;
mod index;
mod list;
pub mod plan;
mod probe;
mod report;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod wire;

#[cfg(test)]
mod events_tests;
#[cfg(test)]
mod index_tests;
#[cfg(test)]
mod tests;

pub use events::{
    events_sysctl, parse_event, EventConfig, EventSocket, EventStats, EventsSysctl, FlowEvent,
    Received, NFNLGRP_CONNTRACK_DESTROY, NFNLGRP_CONNTRACK_NEW, NFNLGRP_CONNTRACK_UPDATE,
};
pub use filter::{Family, Filter};
pub use flow::{Flow, FlowOutcome};
pub use index::FlowIndex;
pub use list::{ListOutcome, ListReport};
pub use plan::{CostModel, TableSize};
pub use probe::PROBE_FILTER;
pub use report::{plans_text, DeleteReport, FamilyPlan, FilterReport, Outcome};
pub use wire::{SyntheticEntry, SyntheticFlow};

use nl_core::{NlSocket, ReadError, SockConfig, NETLINK_NETFILTER};
use std::fmt;
use std::io;
use std::time::Duration;

pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;
pub const IPPROTO_SCTP: u8 = 132;

/// Errors. Messages are lowercase and name what failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("netlink socket {op} failed: {source}")]
    Socket { op: &'static str, source: io::Error },
    #[error("sending {op} for {filter} failed: {source}")]
    Send {
        op: &'static str,
        filter: String,
        source: io::Error,
    },
    #[error("receiving the reply to {op} for {filter} failed: {source}")]
    Recv {
        op: &'static str,
        filter: String,
        source: io::Error,
    },
    #[error("kernel refused {op} for {filter}: errno {errno} ({})", io::Error::from_raw_os_error(*errno))]
    Kernel {
        op: &'static str,
        filter: String,
        errno: i32,
    },
    #[error("no complete reply to {op} for {filter} within {timeout:?}")]
    Timeout {
        op: &'static str,
        filter: String,
        timeout: Duration,
    },
    #[error("invalid filter {filter}: {reason}")]
    InvalidFilter {
        filter: String,
        reason: &'static str,
    },
    #[error("probing ctnetlink failed: {0}")]
    Probe(Box<Error>),
    #[error("conntrack event socket: {op} failed: {source}")]
    Events { op: &'static str, source: io::Error },
}

/// How matching entries are found and deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// IPCTNL_MSG_CT_DELETE with CTA_FILTER (Linux >= 6.12), one request per filter.
    FilteredFlush,
    /// Dump with CTA_FILTER (Linux >= 5.8), then delete each entry by tuple.
    FilteredDump,
    /// Full dump per family, user-space matching of all filters, delete by tuple.
    FullDump,
    /// One dump with CTA_FILTER per port the filters share (Linux >= 5.8; protocol and
    /// port only, no address: the kernel copies only that port's entries), matched in
    /// user space against every filter naming the port, then delete by tuple. Chosen by
    /// the cost model when the filters share fewer ports than they are (a rolling
    /// update: every removed endpoint of a service has the same target port).
    PortDump,
}

impl Strategy {
    pub const ALL: [Strategy; 4] = [
        Strategy::FilteredFlush,
        Strategy::FilteredDump,
        Strategy::FullDump,
        Strategy::PortDump,
    ];
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Strategy::FilteredFlush => "filtered-flush",
            Strategy::FilteredDump => "filtered-dump",
            Strategy::FullDump => "full-dump",
            Strategy::PortDump => "port-dump",
        })
    }
}

impl std::str::FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "filtered-flush" => Ok(Strategy::FilteredFlush),
            "filtered-dump" => Ok(Strategy::FilteredDump),
            "full-dump" => Ok(Strategy::FullDump),
            "port-dump" => Ok(Strategy::PortDump),
            _ => Err(format!(
                "unknown conntrack strategy {s:?} (filtered-flush, filtered-dump, full-dump, port-dump)"
            )),
        }
    }
}

/// Settings. `Config::default()` probes the kernel and uses the best strategy.
#[derive(Debug, Clone)]
pub struct Config {
    /// Force a strategy instead of probing (tests, or a kernel known to misbehave).
    pub strategy: Option<Strategy>,
    /// At most this many deletes by tuple per `delete` call (dump strategies); the
    /// rest is left for the next call and the report says `capped`.
    pub max_deletes_per_call: usize,
    /// Filtered flush only: count matches with a filtered dump before flushing, so the
    /// report has exact per-filter numbers (costs one more kernel table walk). When
    /// false, flushed counts are `None`: the kernel does not say how many it deleted.
    pub count_flushed: bool,
    /// Delete-by-tuple requests per `sendmsg`.
    pub delete_batch: usize,
    /// Restarts of a dump that was interrupted (NLM_F_DUMP_INTR) or lost messages (ENOBUFS).
    pub max_dump_retries: u32,
    /// Socket receive timeout; a request whose reply does not come in time fails.
    pub recv_timeout: Duration,
    /// Whole-operation deadline for one dump.
    pub dump_timeout: Duration,
    /// Force whether IPv6 addresses may be given to the kernel's CTA_FILTER (None:
    /// probe it; see [`Probe::ipv6_addr_filter`]).
    pub ipv6_addr_filter: Option<bool>,
    /// Socket receive and send buffer sizes (forced with SO_*BUFFORCE when permitted).
    pub rcvbuf: usize,
    pub sndbuf: usize,
    /// The cost model that chooses, per call and family, between per-filter kernel
    /// requests and one full dump (unless `strategy` forces one).
    pub cost: CostModel,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            strategy: None,
            max_deletes_per_call: 100_000,
            count_flushed: false,
            delete_batch: 512,
            max_dump_retries: 3,
            recv_timeout: Duration::from_secs(5),
            dump_timeout: Duration::from_secs(120),
            ipv6_addr_filter: None,
            rcvbuf: 8 << 20,
            sndbuf: 4 << 20,
            cost: CostModel::default(),
        }
    }
}

/// How the strategy was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub strategy: Strategy,
    pub forced: bool,
    /// Errno of the filtered-flush probe (0 = supported).
    pub flush_errno: Option<i32>,
    /// Whether the kernel matches IPv6 addresses in CTA_FILTER correctly. Kernels with
    /// CTA_FILTER so far invert the comparison (an IPv6 address filter selects every
    /// *other* entry), so this is probed with an entry of our own; when false, IPv6
    /// address filters go to the kernel without the address and are matched in user
    /// space, and are never flushed.
    pub ipv6_addr_filter: bool,
    pub reason: String,
}

/// A ctnetlink socket in the namespace of the thread that opened it, and the strategy.
pub struct Conntrack {
    sock: NlSocket,
    cfg: Config,
    probe: Probe,
}

impl Conntrack {
    /// Open the socket in the calling thread's network namespace and choose the strategy
    /// (probing the kernel unless `cfg.strategy` forces one). Logs the choice.
    pub fn open(cfg: Config) -> Result<Conntrack, Error> {
        let sock = NlSocket::open(
            NETLINK_NETFILTER,
            &SockConfig {
                rcvbuf: Some(cfg.rcvbuf),
                sndbuf: Some(cfg.sndbuf),
                recv_timeout: Some(cfg.recv_timeout),
                recv_buf_len: RECV_BUF_LEN,
                ..SockConfig::default()
            },
        )
        .map_err(|e| Error::Socket {
            op: e.op,
            source: e.source,
        })?;
        let mut ct = Conntrack {
            sock,
            cfg,
            probe: Probe {
                strategy: Strategy::FullDump,
                forced: false,
                flush_errno: None,
                ipv6_addr_filter: false,
                reason: String::new(),
            },
        };
        ct.probe = match ct.cfg.strategy {
            Some(s) => Probe {
                strategy: s,
                forced: true,
                flush_errno: None,
                ipv6_addr_filter: false,
                reason: "forced by configuration".into(),
            },
            None => ct.run_probe().map_err(|e| Error::Probe(Box::new(e)))?,
        };
        if ct.probe.strategy != Strategy::FullDump {
            ct.probe.ipv6_addr_filter = match ct.cfg.ipv6_addr_filter {
                Some(v) => v,
                None => ct
                    .probe_ipv6_addr_filter()
                    .map_err(|e| Error::Probe(Box::new(e)))?,
            };
        }
        tracing::info!(
            strategy = %ct.probe.strategy,
            forced = ct.probe.forced,
            ipv6_addr_filter = ct.probe.ipv6_addr_filter,
            reason = %ct.probe.reason,
            "conntrack cleanup strategy chosen"
        );
        Ok(ct)
    }

    pub fn strategy(&self) -> Strategy {
        self.probe.strategy
    }

    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }
}

/// The largest datagram read whole.
const RECV_BUF_LEN: usize = 256 * 1024;

/// What a failed read means for one operation (`op`) on one filter.
pub(crate) fn read_error(op: &'static str, filter: String, cfg: &Config, e: ReadError) -> Error {
    match e {
        ReadError::Kernel(errno) => Error::Kernel { op, filter, errno },
        ReadError::Timeout => Error::Timeout {
            op,
            filter,
            timeout: cfg.recv_timeout,
        },
        ReadError::Deadline => Error::Timeout {
            op,
            filter,
            timeout: cfg.dump_timeout,
        },
        ReadError::Send(source) => Error::Send { op, filter, source },
        ReadError::Io(source) => Error::Recv { op, filter, source },
        e @ (ReadError::Overrun | ReadError::Malformed) => Error::Recv {
            op,
            filter,
            source: io::Error::other(e.to_string()),
        },
    }
}
