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

    pub(crate) fn af(&self) -> u8 {
        match self {
            Filter::OrigDst { addr, .. } | Filter::ReplySrc { addr, .. } => family_of(addr),
            Filter::OrigDstPort { family, .. } => family.af(),
        }
    }

    pub(crate) fn proto(&self) -> u8 {
        match *self {
            Filter::OrigDst { proto, .. }
            | Filter::OrigDstPort { proto, .. }
            | Filter::ReplySrc { proto, .. } => proto,
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
        matches!(self, Filter::OrigDst { .. } | Filter::ReplySrc { .. })
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

pub(crate) fn families(filters: &[Filter]) -> Vec<u8> {
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
pub(crate) struct Matcher {
    orig_dst: HashMap<(IpAddr, u8), Vec<PortAndFilter>>,
    orig_dport: HashMap<(u8, u8, u16), usize>,
    reply_src: HashMap<(IpAddr, u8, u16), usize>,
}

impl Matcher {
    pub(crate) fn new(filters: &[Filter]) -> Matcher {
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

    pub(crate) fn find(&self, e: &EntryView<'_>) -> Option<usize> {
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

    /// Call `f` with every filter matching `e` (`find` stops at the first).
    pub(crate) fn for_each_match(&self, e: &EntryView<'_>, mut f: impl FnMut(usize)) {
        let Some(proto) = e.orig.proto else {
            return;
        };
        if let Some(dst) = e.orig.dst {
            for &(p, i) in self.orig_dst.get(&(dst, proto)).into_iter().flatten() {
                if p.is_none() || p == e.orig.dport {
                    f(i);
                }
            }
        }
        if let Some(dp) = e.orig.dport {
            if let Some(&i) = self.orig_dport.get(&(e.family, proto, dp)) {
                f(i);
            }
        }
        if let (Some(src), Some(rp), Some(sp)) = (e.reply.src, e.reply.proto, e.reply.sport) {
            if let Some(&i) = self.reply_src.get(&(src, rp, sp)) {
                f(i);
            }
        }
    }
}
