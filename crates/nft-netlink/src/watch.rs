//! Watching nftables for changes made by other programs: a socket subscribed to
//! `NFNLGRP_NFTABLES` (the shared core's socket), parsed by [`nft_wire::events`]. A
//! transaction that touched one of our tables and whose generation is not one our own
//! commits produced is foreign: the engine repairs its tables.

use std::collections::VecDeque;

use nft_model::TableRef;
pub use nft_wire::events::{
    EventParser, Poll, Touch, NFNLGRP_NFTABLES, NFTA_GEN_PROC_NAME, NFTA_GEN_PROC_PID,
};
use nl_core::{NlSocket, SockConfig, NETLINK_NETFILTER};

/// A socket subscribed to nftables notifications, in the calling thread's namespace.
pub struct Watcher {
    sock: NlSocket,
    parser: EventParser,
    /// Generations our own commits produced (most recent last).
    ours: VecDeque<u32>,
}

impl Watcher {
    pub fn open(tables: Vec<TableRef>) -> std::io::Result<Watcher> {
        let sock = NlSocket::open(
            NETLINK_NETFILTER,
            &SockConfig {
                groups: vec![NFNLGRP_NFTABLES],
                nonblocking: true,
                connect: false,
                rcvbuf: Some(4 << 20),
                // Best effort: a smaller buffer only means an overflow (a repair) sooner.
                strict_buffers: false,
                recv_buf_len: 1 << 20,
                ..SockConfig::default()
            },
        )
        .map_err(|e| e.source)?;
        Ok(Watcher {
            sock,
            parser: EventParser::new(tables),
            ours: VecDeque::new(),
        })
    }

    /// Remember a generation produced by our own commit.
    pub fn ours(&mut self, genid: u32) {
        if self.ours.len() >= 64 {
            self.ours.pop_front();
        }
        self.ours.push_back(genid);
    }

    /// Read every pending notification (never blocks, bounded per call). Returns the
    /// transactions of other programs that touched our tables, and whether
    /// notifications were lost (then anything may have happened).
    pub fn poll(&mut self) -> Poll {
        let mut out = Poll::default();
        for _ in 0..1024 {
            match self.sock.recv() {
                Ok(0) => break,
                Ok(_) => self.parser.feed(self.sock.data(), &mut out),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if nl_core::is_enobufs(&e) => out.overflow = true,
                Err(e) => {
                    tracing::warn!(error = %e, "nftables event socket");
                    break;
                }
            }
        }
        out.touches.retain(|t| !self.ours.contains(&t.genid));
        out
    }
}
