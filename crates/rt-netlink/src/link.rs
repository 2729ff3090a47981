//! Network links by name over rtnetlink: find one (its index and kind) and delete it.
//! Used to remove kube-proxy IPVS mode's `kube-ipvs0` dummy link, exactly as upstream
//! does: only a link of that name **and** kind `dummy` is deleted.
//!
//! Requests are built and replies parsed with `netlink-packet-route` (pure, byte-tested
//! in `tests.rs`); the socket is `nl-core`'s.

use crate::{socket, RtError};
use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_route::link::{LinkAttribute, LinkInfo, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;
use nl_core::{Control, OnLoss, ReadError, ReadOpts, NLM_F_ACK, NLM_F_REQUEST};
use std::time::Duration;

/// A link as rtnetlink reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// `IFLA_INFO_KIND` (`dummy`, `veth`, `bridge`, ...); `None` for links without one
    /// (loopback, physical devices).
    pub kind: Option<String>,
}

/// What [`delete_link_of_kind`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkRemoval {
    /// No link of that name.
    Absent,
    /// Deleted (the link had the expected kind).
    Deleted(Link),
    /// A link of that name but of another kind: left alone.
    OtherKind(Link),
}

fn serialize(seq: u32, flags: u16, payload: RouteNetlinkMessage) -> Vec<u8> {
    let mut hdr = NetlinkHeader::default();
    hdr.flags = flags;
    hdr.sequence_number = seq;
    let mut msg = NetlinkMessage::new(hdr, NetlinkPayload::from(payload));
    msg.finalize();
    let mut buf = vec![0; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

/// RTM_GETLINK for the link named `name` (one answer: RTM_NEWLINK, or ENODEV).
pub fn get_link_request(seq: u32, name: &str) -> Vec<u8> {
    let mut m = LinkMessage::default();
    m.attributes.push(LinkAttribute::IfName(name.to_string()));
    serialize(seq, NLM_F_REQUEST, RouteNetlinkMessage::GetLink(m))
}

/// RTM_DELLINK for the link with this index, asking for an ACK.
pub fn del_link_request(seq: u32, index: u32) -> Vec<u8> {
    let mut m = LinkMessage::default();
    m.header.index = index;
    serialize(
        seq,
        NLM_F_REQUEST | NLM_F_ACK,
        RouteNetlinkMessage::DelLink(m),
    )
}

/// Parse one whole netlink message (header included): an RTM_NEWLINK gives the link;
/// anything else, or anything malformed, gives `None`. Never panics.
pub fn parse_link_message(bytes: &[u8]) -> Option<Link> {
    let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(bytes).ok()?;
    let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l)) = msg.payload else {
        return None;
    };
    let mut name = None;
    let mut kind = None;
    for a in &l.attributes {
        match a {
            LinkAttribute::IfName(n) => name = Some(n.clone()),
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    if let LinkInfo::Kind(k) = i {
                        kind = Some(k.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    Some(Link {
        index: l.header.index,
        name: name?,
        kind,
    })
}

const OPTS: ReadOpts = ReadOpts {
    on_loss: OnLoss::Fail,
    limit: Some(Duration::from_secs(10)),
};

/// The link named `name` in the calling thread's network namespace, if there is one.
pub fn link_by_name(name: &str) -> Result<Option<Link>, RtError> {
    let mut sock = socket(Vec::new(), false)?;
    let mut found = None;
    let r = sock.request(
        &OPTS,
        |w, seq| w.buf.extend_from_slice(&get_link_request(seq, name)),
        |m| {
            found = parse_link_message(m.bytes);
            Control::Stop
        },
    );
    match r {
        Ok(_) => Ok(found.filter(|l| l.name == name)),
        Err(ReadError::Kernel(e)) if e == ENODEV => Ok(None),
        Err(source) => Err(RtError::Read {
            op: "link lookup",
            source,
        }),
    }
}

/// Delete the link named `name` if it exists and its kind is `kind` (e.g. `dummy`).
pub fn delete_link_of_kind(name: &str, kind: &str) -> Result<LinkRemoval, RtError> {
    let Some(link) = link_by_name(name)? else {
        return Ok(LinkRemoval::Absent);
    };
    if link.kind.as_deref() != Some(kind) {
        return Ok(LinkRemoval::OtherKind(link));
    }
    let mut sock = socket(Vec::new(), false)?;
    let index = link.index;
    match sock.request(
        &OPTS,
        |w, seq| w.buf.extend_from_slice(&del_link_request(seq, index)),
        |_| Control::Continue,
    ) {
        Ok(_) => Ok(LinkRemoval::Deleted(link)),
        // gone in between
        Err(ReadError::Kernel(e)) if e == ENODEV => Ok(LinkRemoval::Absent),
        Err(source) => Err(RtError::Read {
            op: "link delete",
            source,
        }),
    }
}

/// `ENODEV` (linux/errno.h).
const ENODEV: i32 = 19;

#[cfg(test)]
mod tests {
    use super::*;
    use nl_core::{NlaWriter, NLMSG_HDRLEN};

    const RTM_NEWLINK: u16 = 16;
    const RTM_DELLINK: u16 = 17;
    const RTM_GETLINK: u16 = 18;
    const IFLA_IFNAME: u16 = 3;
    const IFLA_LINKINFO: u16 = 18;
    const IFLA_INFO_KIND: u16 = 1;

    /// ifinfomsg: family, pad, type, index, flags, change.
    fn ifinfomsg(w: &mut NlaWriter, index: u32) {
        w.buf.extend_from_slice(&[0, 0]);
        w.buf.extend_from_slice(&0u16.to_ne_bytes()); // ARPHRD_NETROM (0): requests leave it unset
        w.buf.extend_from_slice(&index.to_ne_bytes());
        w.buf.extend_from_slice(&0u32.to_ne_bytes());
        w.buf.extend_from_slice(&0u32.to_ne_bytes());
    }

    /// A link message as the kernel sends it, written with nl-core's writer.
    fn newlink(index: u32, name: &str, kind: Option<&str>) -> Vec<u8> {
        let mut w = NlaWriter::new();
        let s = w.begin_msg(RTM_NEWLINK, 0, 4);
        ifinfomsg(&mut w, index);
        w.str(IFLA_IFNAME, name);
        if let Some(k) = kind {
            let n = w.begin(IFLA_LINKINFO);
            w.str(IFLA_INFO_KIND, k);
            w.end(n);
        }
        w.end_msg(s);
        w.buf
    }

    #[test]
    fn link_messages_parse_with_their_kind() {
        assert_eq!(
            parse_link_message(&newlink(7, "kube-ipvs0", Some("dummy"))),
            Some(Link {
                index: 7,
                name: "kube-ipvs0".into(),
                kind: Some("dummy".into())
            })
        );
        let veth = parse_link_message(&newlink(8, "kube-ipvs0", Some("veth"))).unwrap();
        assert_eq!(veth.kind.as_deref(), Some("veth"));
        let lo = parse_link_message(&newlink(1, "lo", None)).unwrap();
        assert_eq!(lo.kind, None);
        // truncated or foreign messages: None, no panic
        let b = newlink(7, "kube-ipvs0", Some("dummy"));
        for cut in 0..b.len() {
            let _ = parse_link_message(&b[..cut]);
        }
        assert_eq!(parse_link_message(&b[..NLMSG_HDRLEN]), None);
    }

    #[test]
    fn requests_are_as_the_kernel_expects_them() {
        let mut w = NlaWriter::new();
        let s = w.begin_msg(RTM_GETLINK, NLM_F_REQUEST, 5);
        ifinfomsg(&mut w, 0);
        w.str(IFLA_IFNAME, "kube-ipvs0");
        w.end_msg(s);
        assert_eq!(get_link_request(5, "kube-ipvs0"), w.buf);

        let mut w = NlaWriter::new();
        let s = w.begin_msg(RTM_DELLINK, NLM_F_REQUEST | NLM_F_ACK, 6);
        ifinfomsg(&mut w, 42);
        w.end_msg(s);
        assert_eq!(del_link_request(6, 42), w.buf);
    }
}
