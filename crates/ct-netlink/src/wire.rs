//! ctnetlink requests and replies.
//!
//! Constants come from `linux/netfilter/nfnetlink_conntrack.h` and
//! `linux/netfilter/nfnetlink.h`, except the CTA_FILTER flag bits, which the kernel
//! keeps internal (see docs/conntrack.md).

use netlink_packet_core::{DefaultNla, NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_netfilter::conntrack::{
    ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Protocol, Tuple,
};
use netlink_packet_netfilter::{NetfilterHeader, NetfilterMessage, NetfilterProtoFamily};
use nl_core::{NlaIter, NlaWriter};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub(crate) const NFNL_SUBSYS_CTNETLINK: u16 = 1;
pub(crate) const IPCTNL_MSG_CT_NEW: u16 = 0;
pub(crate) const IPCTNL_MSG_CT_GET: u16 = 1;
pub(crate) const IPCTNL_MSG_CT_DELETE: u16 = 2;
pub(crate) const MSG_CT_NEW: u16 = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW;
pub(crate) const MSG_CT_GET: u16 = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET;
pub(crate) const MSG_CT_DELETE: u16 = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE;

pub(crate) const CTA_TUPLE_ORIG: u16 = 1;
pub(crate) const CTA_TUPLE_REPLY: u16 = 2;
pub(crate) const CTA_ID: u16 = 12;
pub(crate) const CTA_ZONE: u16 = 18;
pub(crate) const CTA_FILTER: u16 = 25;

pub(crate) const CTA_TUPLE_IP: u16 = 1;
pub(crate) const CTA_TUPLE_PROTO: u16 = 2;
/// A direction's zone inside a tuple (entries whose zone applies to one direction).
pub(crate) const CTA_TUPLE_ZONE: u16 = 3;

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
    /// CTA_TUPLE_ZONE: a zone of this direction only.
    pub(crate) zone: Option<u16>,
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
        CTA_IP_V4_SRC => t.src = t.src.or(v4(p)),
        CTA_IP_V4_DST => t.dst = t.dst.or(v4(p)),
        CTA_IP_V6_SRC => t.src = t.src.or(v6(p)),
        CTA_IP_V6_DST => t.dst = t.dst.or(v6(p)),
        _ => {} // unknown: skipped
    }
}

/// Parse a CTA_TUPLE_* payload. Unknown or malformed attributes are skipped; of
/// repeated ones the first well-formed wins (what the event socket's BPF filter reads
/// at its fixed offsets is what the parser reads).
pub(crate) fn parse_tuple(payload: &[u8]) -> TupleView {
    let mut t = TupleView::default();
    for a in NlaIter::new(payload) {
        match a.kind {
            CTA_TUPLE_IP => {
                for ip in a.nested() {
                    parse_ip(ip.kind, ip.data, &mut t);
                }
            }
            CTA_TUPLE_PROTO => {
                for p in a.nested() {
                    match p.kind {
                        CTA_PROTO_NUM => {
                            if let ([n], None) = (p.data, t.proto) {
                                t.proto = Some(*n);
                            }
                        }
                        CTA_PROTO_SRC_PORT => t.sport = t.sport.or(p.be16()),
                        CTA_PROTO_DST_PORT => t.dport = t.dport.or(p.be16()),
                        _ => {}
                    }
                }
            }
            CTA_TUPLE_ZONE => t.zone = t.zone.or(a.be16()),
            _ => {}
        }
    }
    t
}

/// Parse the payload (after the netlink header) of a conntrack message from a dump.
/// Returns None when even the nfgenmsg header is missing or the original tuple
/// cannot be found; unknown and malformed attributes are skipped.
pub(crate) fn parse_entry(payload: &[u8]) -> Option<EntryView<'_>> {
    let (family, _, attrs) = nl_core::split_nfgen(payload)?;
    let mut e = EntryView {
        family,
        ..Default::default()
    };
    let mut seen_reply = false;
    for a in NlaIter::new(attrs) {
        match a.kind {
            CTA_TUPLE_ORIG if e.orig_raw.is_none() => {
                e.orig = parse_tuple(a.data);
                e.orig_raw = Some(a.data);
            }
            CTA_TUPLE_REPLY if !seen_reply => {
                seen_reply = true;
                e.reply = parse_tuple(a.data);
            }
            CTA_ID => e.id = e.id.or(a.be32_exact()),
            CTA_ZONE => e.zone = e.zone.or(a.be16()),
            _ => {}
        }
    }
    e.orig_raw?;
    Some(e)
}

/// Append the tuple attribute `ty` (CTA_TUPLE_ORIG or CTA_TUPLE_REPLY) with only the
/// given fields.
pub(crate) fn put_partial_tuple(
    m: &mut NlaWriter,
    ty: u16,
    src: Option<IpAddr>,
    dst: Option<IpAddr>,
    proto: u8,
    sport: Option<u16>,
    dport: Option<u16>,
) {
    let t = m.begin(ty);
    if src.is_some() || dst.is_some() {
        let ip = m.begin(CTA_TUPLE_IP);
        for (a, is_src) in [(src, true), (dst, false)] {
            match a {
                Some(IpAddr::V4(v4)) => m.bytes(
                    if is_src { CTA_IP_V4_SRC } else { CTA_IP_V4_DST },
                    &v4.octets(),
                ),
                Some(IpAddr::V6(v6)) => m.bytes(
                    if is_src { CTA_IP_V6_SRC } else { CTA_IP_V6_DST },
                    &v6.octets(),
                ),
                None => {}
            }
        }
        m.end(ip);
    }
    let p = m.begin(CTA_TUPLE_PROTO);
    m.u8(CTA_PROTO_NUM, proto);
    if let Some(sp) = sport {
        m.be16(CTA_PROTO_SRC_PORT, sp);
    }
    if let Some(dp) = dport {
        m.be16(CTA_PROTO_DST_PORT, dp);
    }
    m.end(p);
    m.end(t);
}

/// A dump filter for one L4 protocol: the partial tuple (protocol only) and CTA_FILTER
/// with PROTO_NUM. Used on dumps only (a kernel without CTA_FILTER returns every entry,
/// which user-space matching then sorts out).
pub(crate) fn put_proto_filter(m: &mut NlaWriter, proto: u8) {
    put_partial_tuple(m, CTA_TUPLE_ORIG, None, None, proto, None, None);
    put_filter(m, F_PROTO_NUM, 0);
}

/// Append CTA_FILTER { CTA_FILTER_ORIG_FLAGS / CTA_FILTER_REPLY_FLAGS } (host-endian).
pub(crate) fn put_filter(m: &mut NlaWriter, orig_flags: u32, reply_flags: u32) {
    let f = m.begin(CTA_FILTER);
    if orig_flags != 0 {
        m.ne32(CTA_FILTER_ORIG_FLAGS, orig_flags);
    }
    if reply_flags != 0 {
        m.ne32(CTA_FILTER_REPLY_FLAGS, reply_flags);
    }
    m.end(f);
}

/// An entry to delete by tuple: the original tuple's bytes as dumped (echoed back
/// verbatim, whatever the protocol), the zone and the id (so a recycled tuple is never
/// hit).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Target {
    pub(crate) family: u8,
    pub(crate) orig_raw: Vec<u8>,
    pub(crate) zone: Option<u16>,
    pub(crate) id: Option<u32>,
}

impl Target {
    pub(crate) fn of(e: &EntryView<'_>) -> Option<Target> {
        Some(Target {
            family: e.family,
            orig_raw: e.orig_raw?.to_vec(),
            zone: e.zone,
            id: e.id,
        })
    }

    /// Append IPCTNL_MSG_CT_DELETE for this entry, asking for an ACK.
    pub(crate) fn put_delete(&self, m: &mut NlaWriter, seq: u32) {
        let s = m.begin_nfnl(
            MSG_CT_DELETE,
            nl_core::NLM_F_REQUEST | nl_core::NLM_F_ACK,
            seq,
            self.family,
        );
        m.nested_raw(CTA_TUPLE_ORIG, &self.orig_raw);
        if let Some(z) = self.zone {
            m.be16(CTA_ZONE, z);
        }
        if let Some(id) = self.id {
            m.be32(CTA_ID, id);
        }
        m.end_msg(s);
    }
}

/// One flow to create with IPCTNL_MSG_CT_NEW (the IPv6 probe entry; tests and
/// benchmarks fill tables with it): the reply tuple is the inverse of the original one.
/// [`SyntheticFlow::dnat`] and [`SyntheticFlow::in_zone`] make a [`SyntheticEntry`]
/// with a rewritten reply source or a zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyntheticFlow {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
}

impl SyntheticFlow {
    /// This flow as if DNAT'ed: its reply comes from `addr:port` (to the original
    /// source), e.g. orig 198.18.0.5:40000 -> 198.18.0.10:53, reply 198.18.1.7:5353 ->
    /// 198.18.0.5:40000.
    pub fn dnat(self, addr: IpAddr, port: u16) -> SyntheticEntry {
        SyntheticEntry::from(self).dnat(addr, port)
    }

    /// This flow in conntrack zone `zone` (CTA_ZONE; 0 is the default zone).
    pub fn in_zone(self, zone: u16) -> SyntheticEntry {
        SyntheticEntry::from(self).in_zone(zone)
    }
}

/// A [`SyntheticFlow`] with an optional reply source (a DNAT'ed entry) and a zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyntheticEntry {
    pub flow: SyntheticFlow,
    /// The reply direction's source address and port; `None`: the original
    /// destination (not DNAT'ed).
    pub reply_src: Option<(IpAddr, u16)>,
    /// CTA_ZONE; 0 = the default zone (no attribute sent).
    pub zone: u16,
}

impl From<SyntheticFlow> for SyntheticEntry {
    fn from(flow: SyntheticFlow) -> SyntheticEntry {
        SyntheticEntry {
            flow,
            reply_src: None,
            zone: 0,
        }
    }
}

impl SyntheticEntry {
    pub fn dnat(self, addr: IpAddr, port: u16) -> SyntheticEntry {
        SyntheticEntry {
            reply_src: Some((addr, port)),
            ..self
        }
    }

    pub fn in_zone(self, zone: u16) -> SyntheticEntry {
        SyntheticEntry { zone, ..self }
    }

    /// The reply direction's source address and port.
    pub fn reply(&self) -> (IpAddr, u16) {
        self.reply_src.unwrap_or((self.flow.dst, self.flow.dport))
    }
}

fn tuple(src: IpAddr, dst: IpAddr, proto: u8, sport: u16, dport: u16) -> Vec<Tuple> {
    vec![
        Tuple::Ip(vec![
            IPTuple::SourceAddress(src),
            IPTuple::DestinationAddress(dst),
        ]),
        Tuple::Proto(vec![
            ProtoTuple::Protocol(Protocol::from(proto)),
            ProtoTuple::SourcePort(sport),
            ProtoTuple::DestinationPort(dport),
        ]),
    ]
}

/// Append an IPCTNL_MSG_CT_NEW for `e` to `buf`, built with `netlink-packet-netfilter`'s
/// typed conntrack attributes (see docs/decisions/0003); the zone, which it does not
/// type, as a raw attribute.
pub(crate) fn push_new_entry(
    buf: &mut Vec<u8>,
    e: &SyntheticEntry,
    timeout_secs: u32,
    seq: u32,
    flags: u16,
) {
    let f = &e.flow;
    let family = if f.src.is_ipv4() {
        NetfilterProtoFamily::IPv4
    } else {
        NetfilterProtoFamily::IPv6
    };
    let (rsrc, rsport) = e.reply();
    let mut attrs = vec![
        ConntrackAttribute::CtaTupleOrig(tuple(f.src, f.dst, f.proto, f.sport, f.dport)),
        ConntrackAttribute::CtaTupleReply(tuple(rsrc, f.src, f.proto, rsport, f.sport)),
        ConntrackAttribute::CtaTimeout(timeout_secs),
        // No CTA_STATUS: asking for SEEN_REPLY|ASSURED on creation is refused with
        // EBUSY on Linux 6.18. Benchmarks size nf_conntrack_max so nothing is dropped.
    ];
    if e.zone != 0 {
        attrs.push(ConntrackAttribute::Other(DefaultNla::new(
            CTA_ZONE,
            e.zone.to_be_bytes().to_vec(),
        )));
    }
    let mut hdr = NetlinkHeader::default();
    hdr.flags = flags;
    hdr.sequence_number = seq;
    let mut msg = NetlinkMessage::new(
        hdr,
        NetlinkPayload::from(NetfilterMessage::new(
            NetfilterHeader::new(family, 0, 0),
            ConntrackMessage::New(attrs),
        )),
    );
    msg.finalize();
    let start = buf.len();
    buf.resize(start + msg.buffer_len(), 0);
    msg.serialize(&mut buf[start..]);
}
