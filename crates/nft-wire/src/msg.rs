//! Netlink message framing for nftables: the shared core's reader ([`NlMsg`],
//! [`NlMsgIter`]), its message sizes ([`nfnl_len`]) and the nftables message writer.

use crate::consts::*;
pub use nl_core::consts::{NFGENMSG_LEN, NLMSG_HDRLEN};
pub use nl_core::msg::{nfnl_len, NlMsg, NlMsgIter};

/// Append one netfilter message (`nlmsghdr`, `nfgenmsg`, attributes) to `buf`.
pub fn push_message(
    buf: &mut Vec<u8>,
    kind: u16,
    flags: u16,
    seq: u32,
    family: u8,
    res_id: u16,
    attrs: &[u8],
) {
    nl_core::msg::push_nfnl(buf, kind, flags, seq, family, res_id, attrs);
}

/// The message type of an nftables object message.
pub fn nft_type(msg: u16) -> u16 {
    (NFNL_SUBSYS_NFTABLES << 8) | msg
}
