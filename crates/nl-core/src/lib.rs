//! The netlink core shared by every netlink user of kube-nlproxy (nftables, conntrack,
//! the nftables event watcher, rtnetlink).
//!
//! Two parts:
//! - **Pure bytes** ([`consts`], [`msg`], [`nla`]): netlink message and attribute
//!   writers and bounds-checked, non-panicking iterators. No socket, no allocation
//!   while reading.
//! - **One socket** ([`sock`]): a `netlink-sys` socket in the calling thread's network
//!   namespace with forced buffers (`SO_RCVBUFFORCE`/`SO_SNDBUFFORCE`, falling back to
//!   the ordinary options), a receive timeout, sequence numbers, the acknowledgement
//!   sentinel, and the read loops: the answer to one request (dumps with
//!   `NLM_F_DUMP_INTR` and `ENOBUFS` handling, retried dumps) and the answers to many
//!   requests sent in one `sendmsg`.
//!
//! The core knows nothing of what the messages mean: protocol crates build and parse
//! their payloads.

pub mod consts;
pub mod msg;
pub mod nla;
pub mod sock;

pub use consts::*;
pub use msg::{split_nfgen, NlMsg, NlMsgIter};
pub use nla::{Nla, NlaIter, NlaWriter};
pub use sock::{
    is_enobufs, is_timeout, AckRound, AckWait, Answer, Control, DumpRun, NlSocket, OnLoss,
    ReadError, ReadOpts, RecvFault, SockConfig, SockError,
};
