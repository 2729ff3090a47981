//! Numbers from `linux/netlink.h` and `linux/netfilter/nfnetlink.h`.

/// Length of `struct nlmsghdr`.
pub const NLMSG_HDRLEN: usize = 16;
/// Length of `struct nfgenmsg`.
pub const NFGENMSG_LEN: usize = 4;
/// Length of `struct nlattr`.
pub const NLA_HDRLEN: usize = 4;

pub const NLMSG_NOOP: u16 = 1;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
pub const NLMSG_OVERRUN: u16 = 4;

/// In an `NLMSG_ERROR`: the original message is echoed without its payload
/// (`NETLINK_CAP_ACK`), and TLVs follow (`NETLINK_EXT_ACK`).
pub const NLM_F_CAPPED: u16 = 0x100;
pub const NLM_F_ACK_TLVS: u16 = 0x200;
/// Socket options (`SOL_NETLINK`): shorter error messages, extended acknowledgements.
pub const SOL_NETLINK: i32 = 270;
pub const NETLINK_CAP_ACK: i32 = 10;
pub const NETLINK_EXT_ACK: i32 = 11;
/// Extended acknowledgement TLVs: the error text, the offset of the bad attribute in
/// the original message (from its `nlmsghdr`).
pub const NLMSGERR_ATTR_MSG: u16 = 1;
pub const NLMSGERR_ATTR_OFFS: u16 = 2;

pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_MULTI: u16 = 0x2;
pub const NLM_F_ACK: u16 = 0x4;
pub const NLM_F_DUMP_INTR: u16 = 0x10;
pub const NLM_F_DUMP_FILTERED: u16 = 0x20;
pub const NLM_F_EXCL: u16 = 0x200;
pub const NLM_F_DUMP: u16 = 0x300;
pub const NLM_F_CREATE: u16 = 0x400;
pub const NLM_F_APPEND: u16 = 0x800;

/// `NLA_F_NESTED`
pub const NLA_F_NESTED: u16 = 0x8000;
/// `NLA_F_NET_BYTEORDER`
pub const NLA_F_NET_BYTEORDER: u16 = 0x4000;
/// The attribute type without the two flags.
pub const NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | NLA_F_NET_BYTEORDER);

/// Netlink protocols used by kube-nlproxy.
pub const NETLINK_ROUTE: isize = 0;
pub const NETLINK_NETFILTER: isize = 12;
pub const NETLINK_GENERIC: isize = 16;

/// Round up to the netlink alignment (4 bytes).
#[inline]
pub const fn align4(n: usize) -> usize {
    (n + 3) & !3
}
