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
//! # Ok::<(), ct_netlink::Error>(())
//! ```
//!
//! Three strategies (see docs/conntrack.md):
//! - [`Strategy::FilteredFlush`]: one IPCTNL_MSG_CT_DELETE with CTA_FILTER per filter
//!   (Linux >= 6.12); the kernel deletes every match itself.
//! - [`Strategy::FilteredDump`]: a dump with CTA_FILTER per filter (Linux >= 5.8), then
//!   deletion of each returned entry by tuple (and CTA_ID).
//! - [`Strategy::FullDump`]: one unfiltered dump per address family, matched in user
//!   space against all filters at once, then deletion by tuple.
//!
//! Safety rule: every delete request that carries CTA_FILTER also carries a partial
//! tuple, so a kernel that does not know filtered flushes reads it as a (malformed)
//! delete-by-tuple and refuses it, instead of flushing the whole table.

mod nl;
mod sock;
pub mod testing;
mod wire;

use nl::{
    Msg, MsgBuf, Msgs, NLMSG_DONE, NLMSG_ERROR, NLMSG_OVERRUN, NLM_F_ACK, NLM_F_DUMP,
    NLM_F_DUMP_FILTERED, NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use sock::{is_enobufs, is_timeout, NlSock};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};
use wire::*;

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
}

/// Address family of a port-only filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    fn af(self) -> u8 {
        match self {
            Family::V4 => AF_INET,
            Family::V6 => AF_INET6,
        }
    }
}

/// What to delete. Every filter is restricted to one L4 protocol (`proto`, an
/// IPPROTO_* number; the `udp_*` constructors use UDP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Filter {
    /// Original destination address (ClusterIP, ExternalIP, LoadBalancer IP),
    /// optionally with the original destination port.
    OrigDst {
        addr: IpAddr,
        port: Option<u16>,
        proto: u8,
    },
    /// Original destination port alone, any destination address (a NodePort).
    OrigDstPort {
        family: Family,
        port: u16,
        proto: u8,
    },
    /// Reply source address and port: flows DNAT'ed to this endpoint.
    ReplySrc { addr: IpAddr, port: u16, proto: u8 },
}

impl Filter {
    pub fn udp_orig_dst(addr: IpAddr, port: Option<u16>) -> Filter {
        Filter::OrigDst {
            addr,
            port,
            proto: IPPROTO_UDP,
        }
    }
    pub fn udp_nodeport(family: Family, port: u16) -> Filter {
        Filter::OrigDstPort {
            family,
            port,
            proto: IPPROTO_UDP,
        }
    }
    pub fn udp_reply_src(addr: IpAddr, port: u16) -> Filter {
        Filter::ReplySrc {
            addr,
            port,
            proto: IPPROTO_UDP,
        }
    }

    fn af(&self) -> u8 {
        match self {
            Filter::OrigDst { addr, .. } | Filter::ReplySrc { addr, .. } => family_of(addr),
            Filter::OrigDstPort { family, .. } => family.af(),
        }
    }

    fn proto(&self) -> u8 {
        match *self {
            Filter::OrigDst { proto, .. }
            | Filter::OrigDstPort { proto, .. }
            | Filter::ReplySrc { proto, .. } => proto,
        }
    }

    fn validate(&self) -> Result<(), Error> {
        if self.proto() == 0 {
            return Err(Error::InvalidFilter {
                filter: self.to_string(),
                reason: "protocol number 0",
            });
        }
        Ok(())
    }

    fn has_addr(&self) -> bool {
        matches!(self, Filter::OrigDst { .. } | Filter::ReplySrc { .. })
    }

    /// The partial tuple and CTA_FILTER of this filter. Always writes a partial tuple:
    /// see the safety rule in the crate documentation. Without `with_addr` the address
    /// is left out (a wider kernel filter; callers then match the address in user space).
    fn put_kernel_filter(&self, m: &mut MsgBuf, with_addr: bool) {
        match *self {
            Filter::OrigDst { addr, port, proto } => {
                let (a, a_flag) = if with_addr {
                    (Some(addr), F_IP_DST)
                } else {
                    (None, 0)
                };
                put_partial_tuple(m, CTA_TUPLE_ORIG, None, a, proto, None, port);
                let port_flag = if port.is_some() { F_PROTO_DST_PORT } else { 0 };
                put_filter(m, a_flag | F_PROTO_NUM | port_flag, 0);
            }
            Filter::OrigDstPort { port, proto, .. } => {
                put_partial_tuple(m, CTA_TUPLE_ORIG, None, None, proto, None, Some(port));
                put_filter(m, F_PROTO_NUM | F_PROTO_DST_PORT, 0);
            }
            Filter::ReplySrc { addr, port, proto } => {
                let (a, a_flag) = if with_addr {
                    (Some(addr), F_IP_SRC)
                } else {
                    (None, 0)
                };
                put_partial_tuple(m, CTA_TUPLE_REPLY, a, None, proto, Some(port), None);
                put_filter(m, 0, a_flag | F_PROTO_NUM | F_PROTO_SRC_PORT);
            }
        }
    }

    fn matches(&self, e: &EntryView<'_>) -> bool {
        match *self {
            Filter::OrigDst { addr, port, proto } => {
                e.orig.dst == Some(addr)
                    && e.orig.proto == Some(proto)
                    && (port.is_none() || e.orig.dport == port)
            }
            Filter::OrigDstPort {
                family,
                port,
                proto,
            } => {
                e.family == family.af() && e.orig.proto == Some(proto) && e.orig.dport == Some(port)
            }
            Filter::ReplySrc { addr, port, proto } => {
                e.reply.src == Some(addr)
                    && e.reply.proto == Some(proto)
                    && e.reply.sport == Some(port)
            }
        }
    }
}

fn proto_name(p: u8) -> String {
    match p {
        IPPROTO_UDP => "udp".into(),
        IPPROTO_TCP => "tcp".into(),
        IPPROTO_SCTP => "sctp".into(),
        n => format!("proto {n}"),
    }
}

fn sockaddr(a: IpAddr, p: u16) -> String {
    match a {
        IpAddr::V4(v4) => format!("{v4}:{p}"),
        IpAddr::V6(v6) => format!("[{v6}]:{p}"),
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Filter::OrigDst {
                addr,
                port: Some(p),
                proto,
            } => {
                write!(f, "{} orig dst {}", proto_name(proto), sockaddr(addr, p))
            }
            Filter::OrigDst {
                addr,
                port: None,
                proto,
            } => write!(f, "{} orig dst {addr}", proto_name(proto)),
            Filter::OrigDstPort {
                family,
                port,
                proto,
            } => {
                let fam = if family == Family::V4 { "ipv4" } else { "ipv6" };
                write!(f, "{} {fam} orig dst port {port}", proto_name(proto))
            }
            Filter::ReplySrc { addr, port, proto } => {
                write!(
                    f,
                    "{} reply src {}",
                    proto_name(proto),
                    sockaddr(addr, port)
                )
            }
        }
    }
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
}

impl Strategy {
    pub const ALL: [Strategy; 3] = [
        Strategy::FilteredFlush,
        Strategy::FilteredDump,
        Strategy::FullDump,
    ];
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Strategy::FilteredFlush => "filtered-flush",
            Strategy::FilteredDump => "filtered-dump",
            Strategy::FullDump => "full-dump",
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
            _ => Err(format!(
                "unknown conntrack strategy {s:?} (filtered-flush, filtered-dump, full-dump)"
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
        }
    }
}

/// What happened to one filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterReport {
    pub filter: Filter,
    /// Entries deleted (ACKed deletes; for a filtered flush, the pre-counted matches,
    /// or `None` when `count_flushed` is off).
    pub deleted: Option<u64>,
    /// Deletes answered ENOENT: the entry was already gone (counted as success).
    pub already_gone: u64,
    /// Deletes the kernel refused with another error (logged).
    pub failed: u64,
}

/// The result of one [`Conntrack::delete`] call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteReport {
    pub strategy: Strategy,
    pub per_filter: Vec<FilterReport>,
    /// Sum of the known `deleted` counts.
    pub deleted: u64,
    /// False when some count is unknown (filtered flush without `count_flushed`).
    pub exact: bool,
    /// The work cap was hit: more matching entries may remain.
    pub capped: bool,
    /// A dump stayed interrupted after all retries: some matches may remain.
    pub incomplete: bool,
    /// Dump restarts (NLM_F_DUMP_INTR / ENOBUFS).
    pub dump_retries: u32,
    /// Entries examined in user space (dump strategies).
    pub scanned: u64,
}

impl DeleteReport {
    /// Nothing deleted yet, one zeroed line per filter.
    fn empty(strategy: Strategy, filters: &[Filter]) -> DeleteReport {
        DeleteReport {
            strategy,
            per_filter: filters
                .iter()
                .map(|&filter| FilterReport {
                    filter,
                    deleted: Some(0),
                    already_gone: 0,
                    failed: 0,
                })
                .collect(),
            deleted: 0,
            exact: true,
            capped: false,
            incomplete: false,
            dump_retries: 0,
            scanned: 0,
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

/// An entry to delete by tuple.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Target {
    family: u8,
    orig_raw: Vec<u8>,
    zone: Option<u16>,
    id: Option<u32>,
}

impl Target {
    fn of(e: &EntryView<'_>) -> Option<Target> {
        Some(Target {
            family: e.family,
            orig_raw: e.orig_raw?.to_vec(),
            zone: e.zone,
            id: e.id,
        })
    }
}

#[derive(Debug, Default)]
struct DumpOutcome {
    interrupted: bool,
    lost: bool,
    entries: u64,
    malformed: u64,
    filtered_flag_seen: bool,
}

/// A ctnetlink socket in the namespace of the thread that opened it, and the strategy.
pub struct Conntrack {
    sock: NlSock,
    cfg: Config,
    probe: Probe,
}

/// The probe's filter: UDP to 0.0.0.0 port 0. No real flow has that original
/// destination (a packet to 0.0.0.0 leaves with a rewritten destination, and port 0 is
/// reserved), so even a kernel that honours it deletes nothing; a kernel that does not
/// know filtered flushes refuses the request because its tuple is partial.
pub const PROBE_FILTER: Filter = Filter::OrigDst {
    addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    port: Some(0),
    proto: IPPROTO_UDP,
};

impl Conntrack {
    /// Open the socket in the calling thread's network namespace and choose the strategy
    /// (probing the kernel unless `cfg.strategy` forces one). Logs the choice.
    pub fn open(cfg: Config) -> Result<Conntrack, Error> {
        let sock = NlSock::open(cfg.rcvbuf, cfg.sndbuf, cfg.recv_timeout)?;
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

    fn run_probe(&mut self) -> Result<Probe, Error> {
        // 1. Filtered flush that can match nothing (see PROBE_FILTER).
        let flush_errno =
            self.request_ack(&PROBE_FILTER, "probe filtered flush", |m, f, seq| {
                let s = m.begin_msg(MSG_CT_DELETE, NLM_F_REQUEST | NLM_F_ACK, seq, f.af());
                f.put_kernel_filter(m, true);
                m.end_msg(s);
            })?;
        if flush_errno == 0 {
            return Ok(Probe {
                strategy: Strategy::FilteredFlush,
                forced: false,
                flush_errno: Some(0),
                ipv6_addr_filter: false,
                reason: "kernel accepted a filtered flush (Linux >= 6.12)".into(),
            });
        }
        // 2. Filtered dump with the same filter: it returns nothing on a kernel that
        // honours CTA_FILTER; an older kernel ignores the attribute and returns entries
        // without NLM_F_DUMP_FILTERED.
        let mut unfiltered = false;
        let out = self.dump_once(
            PROBE_FILTER.af(),
            Some((&PROBE_FILTER, true)),
            "probe filtered dump",
            &mut |e, flags| {
                if flags & NLM_F_DUMP_FILTERED == 0 || !PROBE_FILTER.matches(e) {
                    unfiltered = true;
                }
            },
        )?;
        let (strategy, reason) = if unfiltered {
            (
                Strategy::FullDump,
                format!("filtered flush refused (errno {flush_errno}), dump ignored CTA_FILTER"),
            )
        } else if out.filtered_flag_seen || out.entries > 0 {
            (
                Strategy::FilteredDump,
                format!("filtered flush refused (errno {flush_errno}), dump honoured CTA_FILTER"),
            )
        } else {
            // Nothing came back, as from any kernel whose IPv4 table is empty or which
            // filters: decide on the release (>= 5.8 has CTA_FILTER). Entries from a
            // filtered dump are re-checked in user space, so a wrong guess costs time,
            // never correctness.
            match kernel_release() {
                Some(v) if v >= (5, 8) => (
                    Strategy::FilteredDump,
                    format!(
                        "filtered flush refused (errno {flush_errno}), kernel {}.{} >= 5.8",
                        v.0, v.1
                    ),
                ),
                _ => (
                    Strategy::FullDump,
                    format!("filtered flush refused (errno {flush_errno}), kernel older than 5.8"),
                ),
            }
        };
        Ok(Probe {
            strategy,
            forced: false,
            flush_errno: Some(flush_errno),
            ipv6_addr_filter: false,
            reason,
        })
    }

    /// Does the kernel match IPv6 addresses in CTA_FILTER correctly? Insert an entry of
    /// our own (UDP 100::1:9 -> 100::2:9, from the discard-only prefix 100::/64, 2 s
    /// timeout), run a filtered dump for exactly its addresses, and delete it again.
    /// Any doubt answers false, which is the safe side (user-space address matching).
    fn probe_ipv6_addr_filter(&mut self) -> Result<bool, Error> {
        let src: IpAddr = IpAddr::V6(std::net::Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 1));
        let dst: IpAddr = IpAddr::V6(std::net::Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 2));
        let flow = testing::SyntheticFlow {
            src,
            dst,
            proto: IPPROTO_UDP,
            sport: 9,
            dport: 9,
        };
        let probe = Filter::OrigDst {
            addr: dst,
            port: Some(9),
            proto: IPPROTO_UDP,
        };
        let errno = self.request_ack(&probe, "probe ipv6 entry", |m, _, seq| {
            testing::emit_new(
                &mut m.buf,
                &flow,
                2,
                seq,
                NLM_F_REQUEST | NLM_F_ACK | nl::NLM_F_CREATE,
            );
        })?;
        if errno != 0 && errno != libc::EEXIST {
            tracing::warn!(
                errno,
                "could not insert the IPv6 probe entry; matching IPv6 addresses in user space"
            );
            return Ok(false);
        }
        // Our entry, by a dump filtered in the kernel (`kernel` true) or by a plain
        // dump matched in user space.
        let find =
            |this: &mut Self, kernel: bool, op: &'static str| -> Result<Option<Target>, Error> {
                let mut t = None;
                this.dump_once(AF_INET6, Some((&probe, kernel)), op, &mut |e, _| {
                    if e.orig.src == Some(src) && probe.matches(e) {
                        t = Target::of(e);
                    }
                })?;
                Ok(t)
            };
        let found = find(self, true, "probe ipv6 filtered dump")?;
        // Remove the probe entry; when the kernel filter missed it, find it in user space.
        let target = match found.clone() {
            Some(t) => Some(t),
            None => find(self, false, "probe ipv6 cleanup dump")?,
        };
        if let Some(t) = target {
            let mut rep = DeleteReport::empty(self.probe.strategy, &[probe]);
            self.delete_targets(&[(t, 0)], &[probe], &mut rep)?;
        }
        Ok(found.is_some())
    }

    /// Whether the kernel can be trusted with this filter's address.
    fn kernel_addr_ok(&self, f: &Filter) -> bool {
        f.af() == AF_INET || !f.has_addr() || self.probe.ipv6_addr_filter
    }

    /// Delete every entry matching any of `filters` with the chosen strategy.
    pub fn delete(&mut self, filters: &[Filter]) -> Result<DeleteReport, Error> {
        self.delete_with(self.probe.strategy, filters)
    }

    /// Delete with an explicit strategy (tests and benchmarks compare them).
    pub fn delete_with(
        &mut self,
        strategy: Strategy,
        filters: &[Filter],
    ) -> Result<DeleteReport, Error> {
        self.delete_inner(strategy, filters, &mut |_| {})
    }

    /// [`Conntrack::delete_with`], calling `before_delete(n)` once the `n` entries to
    /// delete by tuple are known and before they are deleted (the test hook
    /// `testing::delete_with_pause` uses this window to remove entries out of band).
    pub(crate) fn delete_inner(
        &mut self,
        strategy: Strategy,
        filters: &[Filter],
        before_delete: &mut dyn FnMut(usize),
    ) -> Result<DeleteReport, Error> {
        for f in filters {
            f.validate()?;
        }
        let mut rep = DeleteReport::empty(strategy, filters);
        match strategy {
            Strategy::FilteredFlush => self.filtered_flush(filters, &mut rep, before_delete)?,
            Strategy::FilteredDump => {
                let targets = self.collect_filtered(filters, &mut rep)?;
                before_delete(targets.len());
                self.delete_targets(&targets, filters, &mut rep)?;
            }
            Strategy::FullDump => {
                let targets = self.collect_full(filters, &mut rep)?;
                before_delete(targets.len());
                self.delete_targets(&targets, filters, &mut rep)?;
            }
        }
        rep.deleted = rep.per_filter.iter().filter_map(|r| r.deleted).sum();
        rep.exact = rep.per_filter.iter().all(|r| r.deleted.is_some());
        tracing::debug!(?rep, "conntrack delete done");
        Ok(rep)
    }

    /// The approach upstream kube-proxy takes, for benchmarks: full dump, match in user
    /// space, full dump again, delete the entries seen in the first pass.
    pub fn delete_upstream_style(&mut self, filters: &[Filter]) -> Result<DeleteReport, Error> {
        let mut rep = DeleteReport::empty(Strategy::FullDump, filters);
        let first = self.collect_full(filters, &mut rep)?;
        let wanted: HashSet<Vec<u8>> = first.into_iter().map(|(t, _)| t.orig_raw).collect();
        let mut second = Vec::new();
        for af in families(filters) {
            self.dump_retrying(af, None, "upstream second dump", &mut rep, &mut |e, _| {
                if let Some(raw) = e.orig_raw {
                    if wanted.contains(raw) {
                        if let (Some(t), Some(i)) =
                            (Target::of(e), filters.iter().position(|f| f.matches(e)))
                        {
                            second.push((t, i));
                        }
                    }
                }
            })?;
        }
        self.delete_targets(&second, filters, &mut rep)?;
        rep.deleted = rep.per_filter.iter().filter_map(|r| r.deleted).sum();
        Ok(rep)
    }

    /// Count the entries matching `filter` with a filtered dump (nothing is deleted).
    pub fn count_matching(&mut self, filter: &Filter) -> Result<u64, Error> {
        let mut n = 0u64;
        let mut rep = self.scratch_report();
        let with_addr = self.kernel_addr_ok(filter);
        self.dump_retrying(
            filter.af(),
            Some((filter, with_addr)),
            "count dump",
            &mut rep,
            &mut |e, _| {
                if filter.matches(e) {
                    n += 1;
                }
            },
        )?;
        Ok(n)
    }

    fn scratch_report(&self) -> DeleteReport {
        DeleteReport::empty(self.probe.strategy, &[])
    }

    fn filtered_flush(
        &mut self,
        filters: &[Filter],
        rep: &mut DeleteReport,
        before_delete: &mut dyn FnMut(usize),
    ) -> Result<(), Error> {
        // Filters the kernel cannot be trusted with (IPv6 addresses on kernels that
        // invert them) are never flushed: they go the filtered-dump way.
        let (flushable, other): (Vec<usize>, Vec<usize>) =
            (0..filters.len()).partition(|&i| self.kernel_addr_ok(&filters[i]));
        if !other.is_empty() {
            let sub: Vec<Filter> = other.iter().map(|&i| filters[i]).collect();
            let mut sub_rep = self.scratch_report();
            sub_rep.per_filter = sub
                .iter()
                .map(|&filter| FilterReport {
                    filter,
                    deleted: Some(0),
                    already_gone: 0,
                    failed: 0,
                })
                .collect();
            let targets = self.collect_filtered(&sub, &mut sub_rep)?;
            before_delete(targets.len());
            self.delete_targets(&targets, &sub, &mut sub_rep)?;
            for (k, &i) in other.iter().enumerate() {
                rep.per_filter[i] = sub_rep.per_filter[k].clone();
            }
            rep.capped |= sub_rep.capped;
            rep.incomplete |= sub_rep.incomplete;
            rep.dump_retries += sub_rep.dump_retries;
            rep.scanned += sub_rep.scanned;
        }
        for i in flushable {
            let f = &filters[i];
            let counted = if self.cfg.count_flushed {
                Some(self.count_matching(f)?)
            } else {
                None
            };
            let errno = self.request_ack(f, "filtered flush", |m, f, seq| {
                let s = m.begin_msg(MSG_CT_DELETE, NLM_F_REQUEST | NLM_F_ACK, seq, f.af());
                f.put_kernel_filter(m, true);
                m.end_msg(s);
            })?;
            if errno != 0 {
                return Err(Error::Kernel {
                    op: "filtered flush",
                    filter: f.to_string(),
                    errno,
                });
            }
            rep.per_filter[i].deleted = counted;
        }
        Ok(())
    }

    fn collect_filtered(
        &mut self,
        filters: &[Filter],
        rep: &mut DeleteReport,
    ) -> Result<Vec<(Target, usize)>, Error> {
        let cap = self.cfg.max_deletes_per_call;
        let mut seen: HashSet<Target> = HashSet::new();
        let mut out = Vec::new();
        let mut capped = false;
        for (i, f) in filters.iter().enumerate() {
            let mut scanned = 0u64;
            let with_addr = self.kernel_addr_ok(f);
            self.dump_retrying(
                f.af(),
                Some((f, with_addr)),
                "filtered dump",
                rep,
                &mut |e, _| {
                    scanned += 1;
                    // Re-checked in user space: a kernel that ignored part of the filter
                    // can cost time but never delete the wrong entry.
                    if !f.matches(e) {
                        return;
                    }
                    if let Some(t) = Target::of(e) {
                        if seen.contains(&t) {
                            return;
                        }
                        if out.len() >= cap {
                            capped = true;
                            return;
                        }
                        seen.insert(t.clone());
                        out.push((t, i));
                    }
                },
            )?;
            rep.scanned += scanned;
        }
        rep.capped |= capped;
        Ok(out)
    }

    fn collect_full(
        &mut self,
        filters: &[Filter],
        rep: &mut DeleteReport,
    ) -> Result<Vec<(Target, usize)>, Error> {
        let cap = self.cfg.max_deletes_per_call;
        let matcher = Matcher::new(filters);
        let mut seen: HashSet<Target> = HashSet::new();
        let mut out = Vec::new();
        let mut capped = false;
        for af in families(filters) {
            let mut scanned = 0u64;
            self.dump_retrying(af, None, "full dump", rep, &mut |e, _| {
                scanned += 1;
                if let Some(i) = matcher.find(e) {
                    if let Some(t) = Target::of(e) {
                        if seen.contains(&t) {
                            return;
                        }
                        if out.len() >= cap {
                            capped = true;
                            return;
                        }
                        seen.insert(t.clone());
                        out.push((t, i));
                    }
                }
            })?;
            rep.scanned += scanned;
        }
        rep.capped |= capped;
        Ok(out)
    }

    /// Send one request built by `build` and wait for its ACK; returns the errno (0 = ok).
    fn request_ack(
        &mut self,
        f: &Filter,
        op: &'static str,
        build: impl FnOnce(&mut MsgBuf, &Filter, u32),
    ) -> Result<i32, Error> {
        let seq = self.sock.next_seq();
        let mut m = MsgBuf::with_capacity(128);
        build(&mut m, f, seq);
        self.sock.send(&m.buf).map_err(|source| Error::Send {
            op,
            filter: f.to_string(),
            source,
        })?;
        let deadline = Instant::now() + self.cfg.recv_timeout;
        let mut rounds = 0u32;
        loop {
            rounds += 1;
            if Instant::now() > deadline || rounds > 10_000 {
                return Err(Error::Timeout {
                    op,
                    filter: f.to_string(),
                    timeout: self.cfg.recv_timeout,
                });
            }
            match self.sock.recv() {
                Ok(_) => {}
                Err(e) if is_enobufs(&e) => continue, // our ACK is small and comes last; keep reading
                Err(e) if is_timeout(&e) => {
                    return Err(Error::Timeout {
                        op,
                        filter: f.to_string(),
                        timeout: self.cfg.recv_timeout,
                    })
                }
                Err(source) => {
                    return Err(Error::Recv {
                        op,
                        filter: f.to_string(),
                        source,
                    })
                }
            }
            for msg in Msgs::new(&self.sock.rbuf) {
                if msg.seq == seq && msg.ty == NLMSG_ERROR {
                    return msg.error_code().ok_or_else(|| Error::Recv {
                        op,
                        filter: f.to_string(),
                        source: io::Error::other("truncated ack"),
                    });
                }
            }
        }
    }

    fn dump_retrying(
        &mut self,
        af: u8,
        filter: Option<(&Filter, bool)>,
        op: &'static str,
        rep: &mut DeleteReport,
        f: &mut dyn FnMut(&EntryView<'_>, u16),
    ) -> Result<(), Error> {
        let mut attempt = 0;
        loop {
            let out = self.dump_once(af, filter, op, f)?;
            if !out.interrupted && !out.lost {
                return Ok(());
            }
            if attempt >= self.cfg.max_dump_retries {
                tracing::warn!(op, filter = ?filter.map(|f| f.0.to_string()), "conntrack dump still interrupted after retries; some entries may remain");
                rep.incomplete = true;
                return Ok(());
            }
            attempt += 1;
            rep.dump_retries += 1;
            tracing::debug!(
                op,
                interrupted = out.interrupted,
                lost = out.lost,
                "restarting conntrack dump"
            );
        }
    }

    /// One dump. Entries are handed to `f` with their message flags; stale messages
    /// (other sequence numbers) and malformed ones are skipped.
    fn dump_once(
        &mut self,
        af: u8,
        filter: Option<(&Filter, bool)>,
        op: &'static str,
        f: &mut dyn FnMut(&EntryView<'_>, u16),
    ) -> Result<DumpOutcome, Error> {
        let fname = || filter.map_or_else(|| "all entries".to_string(), |f| f.0.to_string());
        let seq = self.sock.next_seq();
        let mut m = MsgBuf::with_capacity(128);
        let s = m.begin_msg(MSG_CT_GET, NLM_F_REQUEST | NLM_F_DUMP, seq, af);
        if let Some((fl, with_addr)) = filter {
            fl.put_kernel_filter(&mut m, with_addr);
        }
        m.end_msg(s);
        self.sock.send(&m.buf).map_err(|source| Error::Send {
            op,
            filter: fname(),
            source,
        })?;
        let deadline = Instant::now() + self.cfg.dump_timeout;
        let mut out = DumpOutcome::default();
        loop {
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    op,
                    filter: fname(),
                    timeout: self.cfg.dump_timeout,
                });
            }
            match self.sock.recv() {
                Ok(_) => {}
                Err(e) if is_enobufs(&e) => {
                    // Messages were dropped: finish reading this dump, then restart it.
                    out.lost = true;
                    continue;
                }
                Err(e) if is_timeout(&e) => {
                    return Err(Error::Timeout {
                        op,
                        filter: fname(),
                        timeout: self.cfg.recv_timeout,
                    })
                }
                Err(source) => {
                    return Err(Error::Recv {
                        op,
                        filter: fname(),
                        source,
                    })
                }
            }
            let mut done = None;
            let mut msgs = Msgs::new(&self.sock.rbuf);
            for msg in msgs.by_ref() {
                if msg.seq != seq {
                    continue;
                }
                if msg.flags & NLM_F_DUMP_INTR != 0 {
                    out.interrupted = true;
                }
                match msg.ty {
                    NLMSG_DONE => {
                        done = Some(0);
                        break;
                    }
                    NLMSG_ERROR => {
                        done = Some(msg.error_code().unwrap_or(libc::EPROTO));
                        break;
                    }
                    NLMSG_OVERRUN => out.lost = true,
                    MSG_CT_NEW => match wire::parse_entry(msg.payload) {
                        Some(e) => {
                            out.entries += 1;
                            if msg.flags & NLM_F_DUMP_FILTERED != 0 {
                                out.filtered_flag_seen = true;
                            }
                            f(&e, msg.flags);
                        }
                        None => out.malformed += 1,
                    },
                    _ => {}
                }
            }
            if msgs.malformed {
                out.malformed += 1;
                out.lost = true;
            }
            match done {
                Some(0) => break,
                Some(errno) => {
                    return Err(Error::Kernel {
                        op,
                        filter: fname(),
                        errno,
                    })
                }
                None => {}
            }
        }
        if out.malformed > 0 {
            tracing::warn!(
                op,
                malformed = out.malformed,
                "skipped malformed conntrack dump messages"
            );
        }
        Ok(out)
    }

    /// Delete entries by tuple, many requests per sendmsg, one ACK each.
    fn delete_targets(
        &mut self,
        targets: &[(Target, usize)],
        filters: &[Filter],
        rep: &mut DeleteReport,
    ) -> Result<(), Error> {
        const OP: &str = "delete by tuple";
        let batch = self.cfg.delete_batch.max(1);
        let mut m = MsgBuf::with_capacity(batch * 96);
        for chunk in targets.chunks(batch) {
            // Indices (into `chunk`) still waiting for an ACK; resent after ENOBUFS.
            let mut pending: Vec<usize> = (0..chunk.len()).collect();
            for round in 0..4 {
                if pending.is_empty() {
                    break;
                }
                if round == 3 {
                    for &i in &pending {
                        rep.per_filter[chunk[i].1].failed += 1;
                    }
                    tracing::warn!(
                        unacked = pending.len(),
                        "conntrack deletes left without ACK"
                    );
                    break;
                }
                let base = self.sock.reserve_seqs(pending.len() as u32 + 1);
                m.clear();
                for (k, &i) in pending.iter().enumerate() {
                    let t = &chunk[i].0;
                    let s = m.begin_msg(
                        MSG_CT_DELETE,
                        NLM_F_REQUEST | NLM_F_ACK,
                        base + k as u32,
                        t.family,
                    );
                    m.put_nested_raw(CTA_TUPLE_ORIG, &t.orig_raw);
                    if let Some(z) = t.zone {
                        m.put_be16(CTA_ZONE, z);
                    }
                    if let Some(id) = t.id {
                        m.put_be32(CTA_ID, id);
                    }
                    m.end_msg(s);
                }
                let sentinel = base + pending.len() as u32;
                let filter_name = || {
                    filters
                        .get(chunk[pending[0]].1)
                        .map(|f| f.to_string())
                        .unwrap_or_default()
                };
                self.sock.send(&m.buf).map_err(|source| Error::Send {
                    op: OP,
                    filter: filter_name(),
                    source,
                })?;
                let mut acked = vec![false; pending.len()];
                let mut remaining = pending.len();
                let mut sentinel_sent = false;
                let deadline = Instant::now() + self.cfg.recv_timeout;
                while remaining > 0 {
                    if Instant::now() > deadline {
                        break;
                    }
                    match self.sock.recv() {
                        Ok(_) => {}
                        Err(e) if is_enobufs(&e) || is_timeout(&e) => {
                            // ACKs were dropped (or never came): ask for a sentinel ACK,
                            // read up to it, and resend what is still unanswered.
                            if !sentinel_sent {
                                self.send_sentinel(sentinel).map_err(|source| Error::Send {
                                    op: "sentinel",
                                    filter: filter_name(),
                                    source,
                                })?;
                                sentinel_sent = true;
                                continue;
                            }
                            if is_timeout(&e) {
                                break;
                            }
                            continue;
                        }
                        Err(source) => {
                            return Err(Error::Recv {
                                op: OP,
                                filter: filter_name(),
                                source,
                            })
                        }
                    }
                    let mut saw_sentinel = false;
                    for msg in Msgs::new(&self.sock.rbuf) {
                        if msg.ty != NLMSG_ERROR {
                            continue;
                        }
                        if msg.seq == sentinel {
                            saw_sentinel = true;
                            continue;
                        }
                        let Some(k) = msg.seq.checked_sub(base).map(|k| k as usize) else {
                            continue;
                        };
                        if k >= acked.len() || acked[k] {
                            continue;
                        }
                        acked[k] = true;
                        remaining -= 1;
                        let fi = chunk[pending[k]].1;
                        count_ack(&msg, &mut rep.per_filter[fi], filters.get(fi));
                    }
                    if saw_sentinel {
                        break;
                    }
                }
                pending = pending
                    .iter()
                    .zip(&acked)
                    .filter(|(_, &a)| !a)
                    .map(|(&i, _)| i)
                    .collect();
                if !pending.is_empty() {
                    tracing::debug!(
                        unacked = pending.len(),
                        round,
                        "resending conntrack deletes"
                    );
                }
            }
        }
        Ok(())
    }

    fn send_sentinel(&mut self, seq: u32) -> io::Result<()> {
        let mut m = MsgBuf::with_capacity(32);
        let s = m.begin_msg(NLMSG_NOOP, NLM_F_REQUEST | NLM_F_ACK, seq, 0);
        m.end_msg(s);
        self.sock.send(&m.buf)
    }

    /// Raw access for the `testing` module.
    pub(crate) fn sock(&mut self) -> &mut NlSock {
        &mut self.sock
    }
}

fn count_ack(msg: &Msg<'_>, r: &mut FilterReport, f: Option<&Filter>) {
    match msg.error_code() {
        Some(0) => {
            if let Some(d) = r.deleted.as_mut() {
                *d += 1
            }
        }
        Some(e) if e == libc::ENOENT => r.already_gone += 1,
        Some(errno) => {
            r.failed += 1;
            tracing::warn!(filter = ?f.map(|f| f.to_string()), errno, "kernel refused a conntrack delete");
        }
        None => r.failed += 1,
    }
}

fn families(filters: &[Filter]) -> Vec<u8> {
    let mut v: Vec<u8> = Vec::new();
    for f in filters {
        if !v.contains(&f.af()) {
            v.push(f.af());
        }
    }
    v
}

/// An optional port and the index of the filter that wants it.
type PortAndFilter = (Option<u16>, usize);

/// Matches many filters in one pass over a full dump.
struct Matcher {
    orig_dst: HashMap<(IpAddr, u8), Vec<PortAndFilter>>,
    orig_dport: HashMap<(u8, u8, u16), usize>,
    reply_src: HashMap<(IpAddr, u8, u16), usize>,
}

impl Matcher {
    fn new(filters: &[Filter]) -> Matcher {
        let mut m = Matcher {
            orig_dst: HashMap::new(),
            orig_dport: HashMap::new(),
            reply_src: HashMap::new(),
        };
        for (i, f) in filters.iter().enumerate() {
            match *f {
                Filter::OrigDst { addr, port, proto } => {
                    m.orig_dst.entry((addr, proto)).or_default().push((port, i))
                }
                Filter::OrigDstPort {
                    family,
                    port,
                    proto,
                } => {
                    m.orig_dport.entry((family.af(), proto, port)).or_insert(i);
                }
                Filter::ReplySrc { addr, port, proto } => {
                    m.reply_src.entry((addr, proto, port)).or_insert(i);
                }
            }
        }
        m
    }

    fn find(&self, e: &EntryView<'_>) -> Option<usize> {
        let proto = e.orig.proto?;
        if let Some(dst) = e.orig.dst {
            if let Some(v) = self.orig_dst.get(&(dst, proto)) {
                if let Some(&(_, i)) = v.iter().find(|(p, _)| p.is_none() || *p == e.orig.dport) {
                    return Some(i);
                }
            }
        }
        if let Some(dp) = e.orig.dport {
            if let Some(&i) = self.orig_dport.get(&(e.family, proto, dp)) {
                return Some(i);
            }
        }
        if let (Some(src), Some(rp), Some(sp)) = (e.reply.src, e.reply.proto, e.reply.sport) {
            if let Some(&i) = self.reply_src.get(&(src, rp, sp)) {
                return Some(i);
            }
        }
        None
    }
}

/// (major, minor) of the running kernel, from uname(2).
fn kernel_release() -> Option<(u32, u32)> {
    // SAFETY: utsname is plain data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let rel: Vec<u8> = u
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let rel = String::from_utf8_lossy(&rel);
    let mut it = rel
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests;
