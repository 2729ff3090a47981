//! The generic netlink controller: a family's id from its name
//! (`CTRL_CMD_GETFAMILY`), with `netlink-packet-generic`'s messages.

use crate::{socket, Error, OPTS};
use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_generic::ctrl::nlas::GenlCtrlAttrs;
use netlink_packet_generic::ctrl::{GenlCtrl, GenlCtrlCmd};
use netlink_packet_generic::GenlMessage;
use nl_core::{Control, NlSocket, ReadError, NETLINK_GENERIC, NLM_F_REQUEST};

/// `ENOENT`: the controller knows no family of that name (its module is not loaded).
const ENOENT: i32 = 2;

/// The GETFAMILY request for `name`.
pub fn family_request(seq: u32, name: &str) -> Vec<u8> {
    let mut hdr = NetlinkHeader::default();
    hdr.flags = NLM_F_REQUEST;
    hdr.sequence_number = seq;
    let payload = GenlMessage::from_payload(GenlCtrl {
        cmd: GenlCtrlCmd::GetFamily,
        nlas: vec![GenlCtrlAttrs::FamilyName(name.to_string())],
    });
    let mut msg = NetlinkMessage::new(hdr, NetlinkPayload::from(payload));
    msg.finalize();
    let mut buf = vec![0; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

/// The family id in the controller's answer (a whole netlink message), if it is one
/// for `name`. Never panics.
pub fn parse_family_reply(bytes: &[u8], name: &str) -> Option<u16> {
    let msg = NetlinkMessage::<GenlMessage<GenlCtrl>>::deserialize(bytes).ok()?;
    let NetlinkPayload::InnerMessage(m) = msg.payload else {
        return None;
    };
    let mut id = None;
    let mut named = false;
    for a in &m.payload.nlas {
        match a {
            GenlCtrlAttrs::FamilyId(i) => id = Some(*i),
            GenlCtrlAttrs::FamilyName(n) => named = n == name,
            _ => {}
        }
    }
    id.filter(|_| named)
}

/// Open a generic netlink socket and resolve `name`: `None` when the kernel has no
/// such family (for IPVS: `ip_vs` is not loaded, so no virtual service can exist).
pub fn open_family(name: &str) -> Result<Option<(NlSocket, u16)>, Error> {
    let mut sock = socket("generic netlink", NETLINK_GENERIC)?;
    let mut id = None;
    let mut seen = false;
    let r = sock.request(
        &OPTS,
        |w, seq| w.buf.extend_from_slice(&family_request(seq, name)),
        |m| {
            seen = true;
            id = parse_family_reply(m.bytes, name);
            Control::Stop
        },
    );
    match r {
        Ok(_) if seen => id
            .map(|id| Some((sock, id)))
            .ok_or_else(|| Error::Malformed {
                op: format!("generic netlink family {name}"),
            }),
        Ok(_) => Ok(None),
        Err(ReadError::Kernel(ENOENT)) => Ok(None),
        Err(source) => Err(Error::Read {
            op: format!("generic netlink family {name}"),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nl_core::NlaWriter;

    const GENL_ID_CTRL: u16 = 0x10;
    const CTRL_CMD_NEWFAMILY: u8 = 1;
    const CTRL_CMD_GETFAMILY: u8 = 3;
    const CTRL_ATTR_FAMILY_ID: u16 = 1;
    const CTRL_ATTR_FAMILY_NAME: u16 = 2;

    #[test]
    fn request_is_getfamily_by_name() {
        let mut w = NlaWriter::new();
        let s = w.begin_msg(GENL_ID_CTRL, NLM_F_REQUEST, 3);
        w.buf.extend_from_slice(&[CTRL_CMD_GETFAMILY, 2, 0, 0]);
        w.str(CTRL_ATTR_FAMILY_NAME, "IPVS");
        w.end_msg(s);
        assert_eq!(family_request(3, "IPVS"), w.buf);
    }

    fn reply(name: &str, id: u16) -> Vec<u8> {
        let mut w = NlaWriter::new();
        let s = w.begin_msg(GENL_ID_CTRL, 0, 3);
        w.buf.extend_from_slice(&[CTRL_CMD_NEWFAMILY, 2, 0, 0]);
        w.str(CTRL_ATTR_FAMILY_NAME, name);
        w.bytes(CTRL_ATTR_FAMILY_ID, &id.to_ne_bytes());
        w.end_msg(s);
        w.buf
    }

    #[test]
    fn reply_gives_the_id_of_the_named_family_only() {
        assert_eq!(parse_family_reply(&reply("IPVS", 0x23), "IPVS"), Some(0x23));
        assert_eq!(parse_family_reply(&reply("TASKSTATS", 0x23), "IPVS"), None);
        let b = reply("IPVS", 0x23);
        for cut in 0..b.len() {
            let _ = parse_family_reply(&b[..cut], "IPVS");
        }
    }
}
