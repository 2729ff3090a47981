//! Numbers from the kernel's uapi headers (`linux/netlink.h`, `linux/netfilter/nfnetlink.h`,
//! `linux/netfilter/nf_tables.h`).

// Netlink framing numbers live in the shared core.
pub use nl_core::consts::{
    NETLINK_NETFILTER, NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP, NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE,
    NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_EXCL, NLM_F_MULTI, NLM_F_REQUEST,
};

pub const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
pub const NFNL_MSG_BATCH_END: u16 = 0x11;
pub const NFNL_BATCH_GENID: u16 = 1;
pub const NFNL_SUBSYS_NFTABLES: u16 = 10;

pub const NFT_MSG_NEWTABLE: u16 = 0;
pub const NFT_MSG_GETTABLE: u16 = 1;
pub const NFT_MSG_DELTABLE: u16 = 2;
pub const NFT_MSG_NEWCHAIN: u16 = 3;
pub const NFT_MSG_GETCHAIN: u16 = 4;
pub const NFT_MSG_DELCHAIN: u16 = 5;
pub const NFT_MSG_NEWRULE: u16 = 6;
pub const NFT_MSG_GETRULE: u16 = 7;
pub const NFT_MSG_DELRULE: u16 = 8;
pub const NFT_MSG_NEWSET: u16 = 9;
pub const NFT_MSG_GETSET: u16 = 10;
pub const NFT_MSG_DELSET: u16 = 11;
pub const NFT_MSG_NEWSETELEM: u16 = 12;
pub const NFT_MSG_GETSETELEM: u16 = 13;
pub const NFT_MSG_DELSETELEM: u16 = 14;
pub const NFT_MSG_NEWGEN: u16 = 15;
pub const NFT_MSG_GETGEN: u16 = 16;
pub const NFT_MSG_NEWOBJ: u16 = 18;
pub const NFT_MSG_GETOBJ: u16 = 19;
pub const NFT_MSG_DELOBJ: u16 = 20;

pub const NFTA_OBJ_TABLE: u16 = 1;
pub const NFTA_OBJ_NAME: u16 = 2;
pub const NFTA_OBJ_TYPE: u16 = 3;
pub const NFTA_OBJ_DATA: u16 = 4;
/// `NFT_OBJECT_COUNTER`
pub const NFT_OBJECT_COUNTER: u32 = 1;
pub const NFTA_COUNTER_BYTES: u16 = 1;
pub const NFTA_COUNTER_PACKETS: u16 = 2;

pub const NFTA_TABLE_NAME: u16 = 1;
pub const NFTA_TABLE_FLAGS: u16 = 2;
pub const NFTA_TABLE_USERDATA: u16 = 6;

pub const NFTA_CHAIN_TABLE: u16 = 1;
pub const NFTA_CHAIN_NAME: u16 = 3;
pub const NFTA_CHAIN_HOOK: u16 = 4;
pub const NFTA_CHAIN_POLICY: u16 = 5;
pub const NFTA_CHAIN_TYPE: u16 = 7;
pub const NFTA_CHAIN_USERDATA: u16 = 12;
pub const NFTA_HOOK_HOOKNUM: u16 = 1;
pub const NFTA_HOOK_PRIORITY: u16 = 2;

pub const NFTA_RULE_TABLE: u16 = 1;
pub const NFTA_RULE_CHAIN: u16 = 2;
pub const NFTA_RULE_HANDLE: u16 = 3;
pub const NFTA_RULE_EXPRESSIONS: u16 = 4;
pub const NFTA_RULE_USERDATA: u16 = 7;
pub const NFTA_LIST_ELEM: u16 = 1;
pub const NFTA_EXPR_NAME: u16 = 1;
pub const NFTA_EXPR_DATA: u16 = 2;

pub const NFTA_SET_TABLE: u16 = 1;
pub const NFTA_SET_NAME: u16 = 2;
pub const NFTA_SET_FLAGS: u16 = 3;
pub const NFTA_SET_KEY_TYPE: u16 = 4;
pub const NFTA_SET_KEY_LEN: u16 = 5;
pub const NFTA_SET_DATA_TYPE: u16 = 6;
pub const NFTA_SET_DATA_LEN: u16 = 7;
pub const NFTA_SET_DESC: u16 = 9;
pub const NFTA_SET_ID: u16 = 10;
pub const NFTA_SET_TIMEOUT: u16 = 11;
pub const NFTA_SET_USERDATA: u16 = 13;
pub const NFTA_SET_DESC_SIZE: u16 = 1;
pub const NFTA_SET_DESC_CONCAT: u16 = 2;
pub const NFTA_SET_FIELD_LEN: u16 = 1;

pub const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
pub const NFTA_SET_ELEM_LIST_SET: u16 = 2;
pub const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
pub const NFTA_SET_ELEM_KEY: u16 = 1;
pub const NFTA_SET_ELEM_DATA: u16 = 2;
pub const NFTA_SET_ELEM_FLAGS: u16 = 3;
pub const NFTA_SET_ELEM_TIMEOUT: u16 = 4;
pub const NFTA_SET_ELEM_USERDATA: u16 = 6;
pub const NFTA_SET_ELEM_KEY_END: u16 = 10;

pub const NFTA_DATA_VALUE: u16 = 1;
pub const NFTA_DATA_VERDICT: u16 = 2;
pub const NFTA_VERDICT_CODE: u16 = 1;
pub const NFTA_VERDICT_CHAIN: u16 = 2;
/// `NFT_DATA_VERDICT`: the data type of a verdict map.
pub const NFT_DATA_VERDICT: u32 = 0xffff_ff00;

pub const NFTA_GEN_ID: u16 = 1;

// libnftnl userdata TLV types
pub const UDATA_TABLE_COMMENT: u8 = 0;
pub const UDATA_CHAIN_COMMENT: u8 = 0;
pub const UDATA_RULE_COMMENT: u8 = 0;
pub const UDATA_SET_KEYBYTEORDER: u8 = 0;
pub const UDATA_SET_DATABYTEORDER: u8 = 1;
pub const UDATA_SET_KEY_TYPEOF: u8 = 3;
pub const UDATA_SET_DATA_TYPEOF: u8 = 4;
pub const UDATA_SET_DATA_INTERVAL: u8 = 6;
pub const UDATA_SET_COMMENT: u8 = 7;
pub const UDATA_SET_ELEM_COMMENT: u8 = 0;
/// nft's `enum byteorder`
pub const BYTEORDER_HOST: u32 = 1;
pub const BYTEORDER_BIG: u32 = 2;

// nft's expression type ids in typeof userdata, and the ids of the fields it loads
pub const TYPEOF_EXPR_VERDICT: u32 = 1;
pub const TYPEOF_EXPR_PAYLOAD: u32 = 7;
pub const TYPEOF_EXPR_META: u32 = 9;
pub const TYPEOF_EXPR_CONCAT: u32 = 13;
pub const TYPEOF_EXPR_NUMGEN: u32 = 23;
pub const PROTO_DESC_TH: u32 = 11;
pub const PROTO_DESC_IP: u32 = 12;
pub const PROTO_DESC_IP6: u32 = 13;
pub const IPHDR_SADDR: u32 = 11;
pub const IPHDR_DADDR: u32 = 12;
pub const IP6HDR_SADDR: u32 = 8;
pub const IP6HDR_DADDR: u32 = 9;
pub const THDR_DPORT: u32 = 2;
