//! ctnetlink requests and replies.
//!
//! Constants come from `linux/netfilter/nfnetlink_conntrack.h` and
//! `linux/netfilter/nfnetlink.h`, except the CTA_FILTER flag bits, which the kernel
//! keeps internal (see docs/conntrack.md).

use crate::nl::{be16, be32, Attrs, MsgBuf};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub(crate) const NFNL_SUBSYS_CTNETLINK: u16 = 1;
pub(crate) const IPCTNL_MSG_CT_NEW: u16 = 0;
pub(crate) const IPCTNL_MSG_CT_GET: u16 = 1;
pub(crate) const IPCTNL_MSG_CT_DELETE: u16 = 2;
pub(crate) const MSG_CT_NEW: u16 = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW;
pub(crate) const MSG_CT_GET: u16 = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET;
pub(crate) const MSG_CT_DELETE: u16 = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE;
/// NLMSG_NOOP: answered by an ACK when NLM_F_ACK is set; used as a sentinel.
pub(crate) const NLMSG_NOOP: u16 = 1;

pub(crate) const CTA_TUPLE_ORIG: u16 = 1;
pub(crate) const CTA_TUPLE_REPLY: u16 = 2;
pub(crate) const CTA_ID: u16 = 12;
pub(crate) const CTA_ZONE: u16 = 18;
pub(crate) const CTA_FILTER: u16 = 25;

pub(crate) const CTA_TUPLE_IP: u16 = 1;
pub(crate) const CTA_TUPLE_PROTO: u16 = 2;

pub(crate) const CTA_IP_V4_SRC: u16 = 1;
pub(crate) const CTA_IP_V4_DST: u16 = 2;
pub(crate) const CTA_IP_V6_SRC: u16 = 3;
pub(crate) const CTA_IP_V6_DST: u16 = 4;

pub(crate) const CTA_PROTO_NUM: u16 = 1;
pub(crate) const CTA_PROTO_SRC_PORT: u16 = 2;
pub(crate) const CTA_PROTO_DST_PORT: u16 = 3;

pub(crate) const CTA_FILTER_ORIG_FLAGS: u16 = 1;
pub(crate) const CTA_FILTER_REPLY_FLAGS: u16 = 2;

/// CTA_FILTER flag bits. Kernel-internal (not in the uapi headers), host-endian u32.
pub(crate) const F_IP_SRC: u32 = 1 << 0;
pub(crate) const F_IP_DST: u32 = 1 << 1;
pub(crate) const F_PROTO_NUM: u32 = 1 << 3;
pub(crate) const F_PROTO_SRC_PORT: u32 = 1 << 4;
pub(crate) const F_PROTO_DST_PORT: u32 = 1 << 5;

pub(crate) const AF_INET: u8 = libc::AF_INET as u8;
pub(crate) const AF_INET6: u8 = libc::AF_INET6 as u8;

pub(crate) fn family_of(a: &IpAddr) -> u8 {
    match a {
        IpAddr::V4(_) => AF_INET,
        IpAddr::V6(_) => AF_INET6,
    }
}

/// The fields of one direction's tuple that the filters look at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TupleView {
    pub(crate) src: Option<IpAddr>,
    pub(crate) dst: Option<IpAddr>,
    pub(crate) proto: Option<u8>,
    pub(crate) sport: Option<u16>,
    pub(crate) dport: Option<u16>,
}

/// One conntrack entry as read from a dump, borrowing the receive buffer.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct EntryView<'a> {
    pub(crate) family: u8,
    pub(crate) orig: TupleView,
    pub(crate) reply: TupleView,
    /// The payload of CTA_TUPLE_ORIG, echoed back verbatim to delete the entry.
    pub(crate) orig_raw: Option<&'a [u8]>,
    pub(crate) id: Option<u32>,
    pub(crate) zone: Option<u16>,
}

fn parse_ip(ty: u16, p: &[u8], t: &mut TupleView) {
    let v4 = |p: &[u8]| {
        <[u8; 4]>::try_from(p)
            .ok()
            .map(|o| IpAddr::V4(Ipv4Addr::from(o)))
    };
    let v6 = |p: &[u8]| {
        <[u8; 16]>::try_from(p)
            .ok()
            .map(|o| IpAddr::V6(Ipv6Addr::from(o)))
    };
    match ty {
        CTA_IP_V4_SRC => t.src = v4(p).or(t.src),
        CTA_IP_V4_DST => t.dst = v4(p).or(t.dst),
        CTA_IP_V6_SRC => t.src = v6(p).or(t.src),
        CTA_IP_V6_DST => t.dst = v6(p).or(t.dst),
        _ => {} // unknown: skipped
    }
}

/// Parse a CTA_TUPLE_* payload. Unknown or malformed attributes are skipped.
pub(crate) fn parse_tuple(payload: &[u8]) -> TupleView {
    let mut t = TupleView::default();
    for (ty, p) in Attrs::new(payload) {
        match ty {
            CTA_TUPLE_IP => {
                for (ity, ip) in Attrs::new(p) {
                    parse_ip(ity, ip, &mut t);
                }
            }
            CTA_TUPLE_PROTO => {
                for (pty, pp) in Attrs::new(p) {
                    match pty {
                        CTA_PROTO_NUM => {
                            if let [n] = pp {
                                t.proto = Some(*n);
                            }
                        }
                        CTA_PROTO_SRC_PORT => t.sport = be16(pp).or(t.sport),
                        CTA_PROTO_DST_PORT => t.dport = be16(pp).or(t.dport),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    t
}

/// Parse the payload (after the netlink header) of a conntrack message from a dump.
/// Returns None when even the nfgenmsg header is missing or the original tuple
/// cannot be found; unknown and malformed attributes are skipped.
pub(crate) fn parse_entry(payload: &[u8]) -> Option<EntryView<'_>> {
    let family = *payload.first()?;
    let attrs = payload.get(crate::nl::NFGENMSG_LEN..)?;
    let mut e = EntryView {
        family,
        ..Default::default()
    };
    for (ty, p) in Attrs::new(attrs) {
        match ty {
            CTA_TUPLE_ORIG => {
                e.orig = parse_tuple(p);
                e.orig_raw = Some(p);
            }
            CTA_TUPLE_REPLY => e.reply = parse_tuple(p),
            CTA_ID => e.id = be32(p).or(e.id),
            CTA_ZONE => e.zone = be16(p).or(e.zone),
            _ => {}
        }
    }
    e.orig_raw?;
    Some(e)
}

/// Append the tuple attribute `ty` (CTA_TUPLE_ORIG or CTA_TUPLE_REPLY) with only the
/// given fields.
pub(crate) fn put_partial_tuple(
    m: &mut MsgBuf,
    ty: u16,
    src: Option<IpAddr>,
    dst: Option<IpAddr>,
    proto: u8,
    sport: Option<u16>,
    dport: Option<u16>,
) {
    let t = m.nest(ty);
    if src.is_some() || dst.is_some() {
        let ip = m.nest(CTA_TUPLE_IP);
        for (a, is_src) in [(src, true), (dst, false)] {
            match a {
                Some(IpAddr::V4(v4)) => m.put(
                    if is_src { CTA_IP_V4_SRC } else { CTA_IP_V4_DST },
                    &v4.octets(),
                ),
                Some(IpAddr::V6(v6)) => m.put(
                    if is_src { CTA_IP_V6_SRC } else { CTA_IP_V6_DST },
                    &v6.octets(),
                ),
                None => {}
            }
        }
        m.nest_end(ip);
    }
    let p = m.nest(CTA_TUPLE_PROTO);
    m.put_u8(CTA_PROTO_NUM, proto);
    if let Some(sp) = sport {
        m.put_be16(CTA_PROTO_SRC_PORT, sp);
    }
    if let Some(dp) = dport {
        m.put_be16(CTA_PROTO_DST_PORT, dp);
    }
    m.nest_end(p);
    m.nest_end(t);
}

/// Append CTA_FILTER { CTA_FILTER_ORIG_FLAGS / CTA_FILTER_REPLY_FLAGS } (host-endian).
pub(crate) fn put_filter(m: &mut MsgBuf, orig_flags: u32, reply_flags: u32) {
    let f = m.nest(CTA_FILTER);
    if orig_flags != 0 {
        m.put_ne32(CTA_FILTER_ORIG_FLAGS, orig_flags);
    }
    if reply_flags != 0 {
        m.put_ne32(CTA_FILTER_REPLY_FLAGS, reply_flags);
    }
    m.nest_end(f);
}
