//! What to delete: [`Filter`]s, their kernel form (partial tuple + CTA_FILTER), their
//! user-space match, and the [`Matcher`] that matches many filters in one pass. Pure.

use crate::wire::*;
use crate::{Error, IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP};
use nl_core::NlaWriter;
use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;

/// Address family of a port-only filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub(crate) fn af(self) -> u8 {
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
    /// Original destination address and port, and NOT DNAT'ed: the reply comes from
    /// that same address and port (a service destination whose packets went nowhere
    /// before it had endpoints; flows DNAT'ed to a live endpoint are kept).
    Unnated { addr: IpAddr, port: u16, proto: u8 },
    /// Original destination port (any address of the family), and NOT DNAT'ed to
    /// another port: the reply comes from that same port (a NodePort).
    UnnatedPort {
        family: Family,
        port: u16,
        proto: u8,
    },
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
    /// UDP flows to `addr:port` that were not DNAT'ed (conntrack cleanup of a
    /// destination that starts being served: kubernetes PR #98305).
    pub fn udp_unnated(addr: IpAddr, port: u16) -> Filter {
        Filter::Unnated {
            addr,
            port,
            proto: IPPROTO_UDP,
        }
    }
    /// UDP flows to NodePort `port` (any address of the family) not DNAT'ed to another
    /// port.
    pub fn udp_unnated_nodeport(family: Family, port: u16) -> Filter {
        Filter::UnnatedPort {
            family,
            port,
            proto: IPPROTO_UDP,
        }
    }

    pub(crate) fn af(&self) -> u8 {
        match self {
            Filter::OrigDst { addr, .. }
            | Filter::ReplySrc { addr, .. }
            | Filter::Unnated { addr, .. } => family_of(addr),
            Filter::OrigDstPort { family, .. } | Filter::UnnatedPort { family, .. } => family.af(),
        }
    }

    pub(crate) fn proto(&self) -> u8 {
        match *self {
            Filter::OrigDst { proto, .. }
            | Filter::OrigDstPort { proto, .. }
            | Filter::ReplySrc { proto, .. }
            | Filter::Unnated { proto, .. }
            | Filter::UnnatedPort { proto, .. } => proto,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.proto() == 0 {
            return Err(Error::InvalidFilter {
                filter: self.to_string(),
                reason: "protocol number 0",
            });
        }
        Ok(())
    }

    pub(crate) fn has_addr(&self) -> bool {
        matches!(
            self,
            Filter::OrigDst { .. } | Filter::ReplySrc { .. } | Filter::Unnated { .. }
        )
    }

    /// The partial tuple and CTA_FILTER of this filter. Always writes a partial tuple:
    /// see the safety rule in the crate documentation. Without `with_addr` the address
    /// is left out (a wider kernel filter; callers then match the address in user space).
    pub(crate) fn put_kernel_filter(&self, m: &mut NlaWriter, with_addr: bool) {
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
            Filter::Unnated { addr, port, proto } => {
                // Both directions: original destination addr:port, reply source the same
                // addr:port (not DNAT'ed).
                let a = with_addr.then_some(addr);
                let (dst_flag, src_flag) = if with_addr {
                    (F_IP_DST, F_IP_SRC)
                } else {
                    (0, 0)
                };
                put_partial_tuple(m, CTA_TUPLE_ORIG, None, a, proto, None, Some(port));
                put_partial_tuple(m, CTA_TUPLE_REPLY, a, None, proto, Some(port), None);
                put_filter(
                    m,
                    dst_flag | F_PROTO_NUM | F_PROTO_DST_PORT,
                    src_flag | F_PROTO_NUM | F_PROTO_SRC_PORT,
                );
            }
            Filter::UnnatedPort { port, proto, .. } => {
                put_partial_tuple(m, CTA_TUPLE_ORIG, None, None, proto, None, Some(port));
                put_partial_tuple(m, CTA_TUPLE_REPLY, None, None, proto, Some(port), None);
                put_filter(
                    m,
                    F_PROTO_NUM | F_PROTO_DST_PORT,
                    F_PROTO_NUM | F_PROTO_SRC_PORT,
                );
            }
        }
    }

    pub(crate) fn matches(&self, e: &EntryView<'_>) -> bool {
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
            Filter::Unnated { addr, port, proto } => {
                e.orig.dst == Some(addr)
                    && e.orig.proto == Some(proto)
                    && e.orig.dport == Some(port)
                    && e.reply.src == Some(addr)
                    && e.reply.proto == Some(proto)
                    && e.reply.sport == Some(port)
            }
            Filter::UnnatedPort {
                family,
                port,
                proto,
            } => {
                e.family == family.af()
                    && e.orig.proto == Some(proto)
                    && e.orig.dport == Some(port)
                    && e.reply.proto == Some(proto)
                    && e.reply.sport == Some(port)
            }
        }
    }
}

pub(crate) fn proto_name(p: u8) -> String {
    match p {
        IPPROTO_UDP => "udp".into(),
        IPPROTO_TCP => "tcp".into(),
        IPPROTO_SCTP => "sctp".into(),
        n => format!("proto {n}"),
    }
}

pub(crate) fn sockaddr(a: IpAddr, p: u16) -> String {
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
            Filter::Unnated { addr, port, proto } => write!(
                f,
                "{} orig dst {} not dnat'ed",
                proto_name(proto),
                sockaddr(addr, port)
            ),
            Filter::UnnatedPort {
                family,
                port,
                proto,
            } => {
                let fam = if family == Family::V4 { "ipv4" } else { "ipv6" };
                write!(
                    f,
                    "{} {fam} orig dst port {port} not dnat'ed",
                    proto_name(proto)
                )
            }
        }
    }
}

/// The port a group of filters shares, in the direction the kernel filters it: the
/// kernel form of [`Strategy::PortDump`](crate::Strategy::PortDump)'s one dump per port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum PortKey {
    /// Original destination port (a service or node port).
    Orig { af: u8, proto: u8, port: u16 },
    /// Reply source port (an endpoint's target port).
    Reply { af: u8, proto: u8, port: u16 },
}

impl PortKey {
    /// The filter the kernel is given for this port (its address left out).
    pub(crate) fn kernel_filter(&self) -> Filter {
        let family = |af: u8| {
            if af == AF_INET6 {
                Family::V6
            } else {
                Family::V4
            }
        };
        match *self {
            PortKey::Orig { af, proto, port } => Filter::OrigDstPort {
                family: family(af),
                port,
                proto,
            },
            PortKey::Reply { af, proto, port } => Filter::ReplySrc {
                addr: match family(af) {
                    Family::V4 => IpAddr::from([0u8; 4]),
                    Family::V6 => IpAddr::from([0u8; 16]),
                },
                port,
                proto,
            },
        }
    }
}

/// A port group: one kernel dump (`key`, or the filter's own kernel form when `key` is
/// None: a destination without a port) and the filters (indices into the caller's
/// slice) it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PortGroup {
    pub(crate) key: Option<PortKey>,
    pub(crate) filters: Vec<usize>,
}

/// The filters of `idx` grouped by the port they share, as few groups as the filters
/// allow: a reply source (an endpoint) is found by its reply source port, a
/// destination with a port or a node port by its original destination port; a
/// not-DNAT'ed destination (`Unnated*`: both ports equal) joins a reply group of its
/// port if there is one, else an original one, else opens a reply group; a destination
/// without a port is a group of its own. Pure; groups in a stable order.
pub(crate) fn port_groups(filters: &[Filter], idx: &[usize]) -> Vec<PortGroup> {
    use std::collections::BTreeMap;
    let mut groups: BTreeMap<PortKey, Vec<usize>> = BTreeMap::new();
    let mut own = Vec::new();
    let mut unnated = Vec::new();
    for &i in idx {
        let f = &filters[i];
        let (af, proto) = (f.af(), f.proto());
        match *f {
            Filter::OrigDst {
                port: Some(port), ..
            }
            | Filter::OrigDstPort { port, .. } => groups
                .entry(PortKey::Orig { af, proto, port })
                .or_default()
                .push(i),
            Filter::OrigDst { port: None, .. } => own.push(i),
            Filter::ReplySrc { port, .. } => groups
                .entry(PortKey::Reply { af, proto, port })
                .or_default()
                .push(i),
            Filter::Unnated { port, .. } | Filter::UnnatedPort { port, .. } => {
                unnated.push((i, af, proto, port))
            }
        }
    }
    for (i, af, proto, port) in unnated {
        let reply = PortKey::Reply { af, proto, port };
        let orig = PortKey::Orig { af, proto, port };
        let key = if groups.contains_key(&reply) || !groups.contains_key(&orig) {
            reply
        } else {
            orig
        };
        groups.entry(key).or_default().push(i);
    }
    let mut out: Vec<PortGroup> = groups
        .into_iter()
        .map(|(k, filters)| PortGroup {
            key: Some(k),
            filters,
        })
        .collect();
    out.extend(own.into_iter().map(|i| PortGroup {
        key: None,
        filters: vec![i],
    }));
    out
}

pub(crate) fn families(filters: &[Filter]) -> Vec<u8> {
    let mut v: Vec<u8> = Vec::new();
    for f in filters {
        if !v.contains(&f.af()) {
            v.push(f.af());
        }
    }
    v
}

/// Matches many filters in one pass over a full dump: filters are found by hash
/// lookups on what the entry's tuples name (original destination address, original
/// destination port, reply source), then checked exactly. O(1) per entry whatever the
/// number of filters.
pub(crate) struct Matcher {
    filters: Vec<Filter>,
    /// (original destination, protocol) -> filters naming that address
    orig_dst: HashMap<(IpAddr, u8), Vec<usize>>,
    /// (family, protocol, original destination port) -> filters naming only a port
    orig_dport: HashMap<(u8, u8, u16), Vec<usize>>,
    /// (reply source, protocol, port) -> filters by reply source
    reply_src: HashMap<(IpAddr, u8, u16), Vec<usize>>,
}

impl Matcher {
    pub(crate) fn new(filters: &[Filter]) -> Matcher {
        let mut m = Matcher {
            filters: filters.to_vec(),
            orig_dst: HashMap::new(),
            orig_dport: HashMap::new(),
            reply_src: HashMap::new(),
        };
        for (i, f) in filters.iter().enumerate() {
            match *f {
                Filter::OrigDst { addr, proto, .. } | Filter::Unnated { addr, proto, .. } => {
                    m.orig_dst.entry((addr, proto)).or_default().push(i)
                }
                Filter::OrigDstPort {
                    family,
                    port,
                    proto,
                }
                | Filter::UnnatedPort {
                    family,
                    port,
                    proto,
                } => m
                    .orig_dport
                    .entry((family.af(), proto, port))
                    .or_default()
                    .push(i),
                Filter::ReplySrc { addr, port, proto } => {
                    m.reply_src.entry((addr, proto, port)).or_default().push(i)
                }
            }
        }
        m
    }

    /// The candidate filters of an entry (each checked exactly by the caller).
    fn candidates<'a>(&'a self, e: &EntryView<'_>) -> impl Iterator<Item = usize> + 'a {
        let proto = e.orig.proto;
        let by_dst = match (e.orig.dst, proto) {
            (Some(d), Some(p)) => self.orig_dst.get(&(d, p)),
            _ => None,
        };
        let by_port = match (e.orig.dport, proto) {
            (Some(dp), Some(p)) => self.orig_dport.get(&(e.family, p, dp)),
            _ => None,
        };
        let by_reply = match (e.reply.src, e.reply.proto, e.reply.sport) {
            (Some(src), Some(rp), Some(sp)) => self.reply_src.get(&(src, rp, sp)),
            _ => None,
        };
        [by_dst, by_port, by_reply]
            .into_iter()
            .flatten()
            .flatten()
            .copied()
    }

    /// The first filter matching `e`.
    pub(crate) fn find(&self, e: &EntryView<'_>) -> Option<usize> {
        self.candidates(e).find(|&i| self.filters[i].matches(e))
    }

    /// Call `f` with every filter matching `e` (`find` stops at the first).
    pub(crate) fn for_each_match(&self, e: &EntryView<'_>, mut f: impl FnMut(usize)) {
        for i in self.candidates(e) {
            if self.filters[i].matches(e) {
                f(i);
            }
        }
    }
}
