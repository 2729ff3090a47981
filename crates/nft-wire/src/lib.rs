//! The nftables wire layer: the `nft-model` objects as netlink bytes and back.
//!
//! Pure code: it builds and parses byte buffers and never opens a socket. Messages
//! follow `linux/netfilter/nf_tables.h`; userdata follows the TLV conventions `nft`
//! uses, so that `nft list` prints what we program with comments and readable keys.

pub mod consts;
pub mod decode;
mod elements;
pub mod encode;
pub mod events;
pub mod expr;
pub mod msg;
pub mod nla;
mod set_udata;

pub use decode::{decode_elements, decode_genid, decode_object, scan_rule, ForeignRule, Object};
pub use encode::{encode_batch, encode_check_batch, EncodedBatch};

/// Errors of the wire layer; each names the object or attribute involved.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("{what}: missing attribute {attr}")]
    Missing {
        what: &'static str,
        attr: &'static str,
    },
    #[error("{what}: {detail}")]
    Invalid { what: &'static str, detail: String },
    #[error("unknown expression {0:?}")]
    UnknownExpr(String),
    #[error("rule {handle} in chain {chain}: {source}")]
    InRule {
        chain: String,
        handle: u64,
        source: Box<WireError>,
    },
    #[error("{what} is {len} bytes, more than a netlink attribute can hold")]
    TooLarge { what: String, len: usize },
}
