//! Watching nftables for changes made by other programs.
//!
//! A netlink socket subscribed to `NFNLGRP_NFTABLES` receives, after every committed
//! transaction, one notification per changed object followed by `NFT_MSG_NEWGEN` with the
//! new generation id. A transaction that touched one of our tables and whose generation
//! is not one our own commits produced is foreign: the engine repairs its tables.

use std::collections::VecDeque;

use netlink_sys::Socket;
use nft_model::{Family, TableRef};
use nft_wire::consts::*;
use nft_wire::msg::NlMsgIter;
use nft_wire::nla::NlaIter;

/// `NFNLGRP_NFTABLES` (linux/netfilter/nfnetlink.h).
pub const NFNLGRP_NFTABLES: u32 = 7;
/// `NFTA_GEN_PROC_PID`.
pub const NFTA_GEN_PROC_PID: u16 = 2;
/// `NFTA_GEN_PROC_NAME`.
pub const NFTA_GEN_PROC_NAME: u16 = 3;

/// One finished transaction that touched a table we watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Touch {
    /// The generation the transaction produced.
    pub genid: u32,
    /// Pid and process name of the writer, when the kernel says.
    pub pid: Option<u32>,
    pub proc_name: Option<String>,
}

/// What a poll found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Poll {
    /// Transactions that touched our tables (from [`Watcher::poll`]: by other programs).
    pub touches: Vec<Touch>,
    /// Notifications were lost (socket overflow): anything may have happened.
    pub overflow: bool,
}

/// Parses a stream of nftables notifications (pure; fed by [`Watcher`] or by tests).
#[derive(Debug, Clone)]
pub struct EventParser {
    tables: Vec<TableRef>,
    touched: bool,
}

fn family_code(f: Family) -> u8 {
    f as u8
}

impl EventParser {
    pub fn new(tables: Vec<TableRef>) -> EventParser {
        EventParser {
            tables,
            touched: false,
        }
    }

    /// Feed one datagram.
    pub fn feed(&mut self, buf: &[u8], out: &mut Poll) {
        for m in NlMsgIter::new(buf) {
            if m.kind >> 8 != NFNL_SUBSYS_NFTABLES {
                continue;
            }
            let Some((family, _res, attrs)) = m.nfgen() else {
                continue;
            };
            let msg = m.kind & 0xff;
            if msg == NFT_MSG_NEWGEN {
                let mut genid = None;
                let mut pid = None;
                let mut proc_name = None;
                for a in NlaIter::new(attrs) {
                    match a.kind {
                        NFTA_GEN_ID => genid = a.be32(),
                        NFTA_GEN_PROC_PID => pid = a.be32(),
                        NFTA_GEN_PROC_NAME => proc_name = a.str().map(str::to_string),
                        _ => {}
                    }
                }
                if std::mem::take(&mut self.touched) {
                    out.touches.push(Touch {
                        genid: genid.unwrap_or(0),
                        pid,
                        proc_name,
                    });
                }
                continue;
            }
            // Every object notification names its table in attribute 1 (NFTA_TABLE_NAME,
            // NFTA_CHAIN_TABLE, NFTA_RULE_TABLE, NFTA_SET_TABLE, NFTA_SET_ELEM_LIST_TABLE, ...).
            let table = NlaIter::new(attrs)
                .find(|a| a.kind == 1)
                .and_then(|a| a.str());
            if let Some(name) = table {
                if self
                    .tables
                    .iter()
                    .any(|t| t.name == name && family_code(t.family) == family)
                {
                    self.touched = true;
                }
            }
        }
    }
}

/// A socket subscribed to nftables notifications, in the calling thread's namespace.
pub struct Watcher {
    sock: Socket,
    parser: EventParser,
    buf: Vec<u8>,
    /// Generations our own commits produced (most recent last).
    ours: VecDeque<u32>,
}

impl Watcher {
    pub fn open(tables: Vec<TableRef>) -> std::io::Result<Watcher> {
        let mut sock = Socket::new(NETLINK_NETFILTER)?;
        sock.bind_auto()?;
        sock.add_membership(NFNLGRP_NFTABLES)?;
        sock.set_non_blocking(true)?;
        let _ = sock.set_rx_buf_sz(4 << 20);
        Ok(Watcher {
            sock,
            parser: EventParser::new(tables),
            buf: Vec::with_capacity(1 << 20),
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
            self.buf.clear();
            match self.sock.recv(&mut self.buf, 0) {
                Ok(0) => break,
                Ok(n) => {
                    let n = n.min(self.buf.len());
                    let b = std::mem::take(&mut self.buf);
                    self.parser.feed(&b[..n], &mut out);
                    self.buf = b;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    out.overflow = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
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
