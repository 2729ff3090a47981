//! kube-proxy IPVS mode's kernel state over netlink, without running a program
//! (no `ipvsadm`, no `ipset`, no `modprobe`):
//!
//! - [`ipvs`]: IPVS virtual services over generic netlink (family `IPVS`, its id
//!   resolved with the controller, [`genl`]): dump them, delete one;
//! - [`ipset`]: kube-proxy's ipsets over nfnetlink ipset (subsystem 6): which exist,
//!   destroy one; kube-proxy's exact set names ([`ipset::kube_proxy_sets`]).
//!
//! Generic netlink headers and the controller's messages come from
//! `netlink-packet-generic`; IPVS and ipset attributes are written and read with
//! `nl-core` (no crate expresses them: `docs/decisions/0005`). Every socket is
//! `nl-core`'s, in the calling thread's network namespace. The pure parts (requests,
//! reply parsing) are byte-tested and never panic on input.

pub mod genl;
pub mod ipset;
pub mod ipvs;

use nl_core::{NlSocket, ReadError, SockConfig};
use std::time::Duration;

/// Errors, naming the operation and the object.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what} socket: {source}")]
    Socket {
        what: &'static str,
        source: nl_core::SockError,
    },
    #[error("{op}: {source}")]
    Read { op: String, source: ReadError },
    #[error("{op}: malformed answer from the kernel")]
    Malformed { op: String },
    #[error("{op}: still interrupted after retries (the kernel's state kept changing)")]
    Incomplete { op: String },
}

fn socket(what: &'static str, protocol: isize) -> Result<NlSocket, Error> {
    NlSocket::open(
        protocol,
        &SockConfig {
            rcvbuf: Some(1 << 20),
            recv_timeout: Some(Duration::from_secs(5)),
            strict_buffers: false,
            recv_buf_len: 64 << 10,
            ..SockConfig::default()
        },
    )
    .map_err(|source| Error::Socket { what, source })
}

/// Reads fail on lost messages (the caller re-runs the whole operation) and end within
/// 10 s.
const OPTS: nl_core::ReadOpts = nl_core::ReadOpts {
    on_loss: nl_core::OnLoss::Fail,
    limit: Some(Duration::from_secs(10)),
};
