//! nftables notifications (pure parsing).
//!
//! A netlink socket subscribed to `NFNLGRP_NFTABLES` receives, after every committed
//! transaction, one notification per changed object followed by `NFT_MSG_NEWGEN` with
//! the new generation id (and the writer's pid and name). [`EventParser`] turns that
//! stream into the transactions that touched the tables it watches.

use crate::consts::*;
use crate::msg::NlMsgIter;
use crate::nla::NlaIter;
use nft_model::TableRef;

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

/// One finished transaction heard, whatever it touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heard {
    /// The generation the transaction produced.
    pub genid: u32,
    /// It touched a table we watch, or may have (notifications of it were lost).
    pub ours: bool,
}

/// What a poll found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Poll {
    /// Transactions that touched our tables.
    pub touches: Vec<Touch>,
    /// Every transaction heard, in order (those in `touches` too).
    pub heard: Vec<Heard>,
    /// Notifications were lost (socket overflow): anything may have happened.
    pub overflow: bool,
}

/// Parses a stream of nftables notifications (fed by a socket or by tests).
#[derive(Debug, Clone)]
pub struct EventParser {
    tables: Vec<TableRef>,
    touched: bool,
    /// Notifications were lost since the last NEWGEN: the transaction under way may have
    /// touched our tables.
    tainted: bool,
}

impl EventParser {
    pub fn new(tables: Vec<TableRef>) -> EventParser {
        EventParser {
            tables,
            touched: false,
            tainted: false,
        }
    }

    /// Notifications were lost (the socket overflowed): the next transaction heard may
    /// have touched our tables (its objects' notifications may be among the lost).
    pub fn lost(&mut self) {
        self.tainted = true;
    }

    /// Feed one datagram. Malformed messages and attributes are skipped.
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
                let touched = std::mem::take(&mut self.touched);
                let tainted = std::mem::take(&mut self.tainted);
                if let Some(genid) = genid {
                    out.heard.push(Heard {
                        genid,
                        ours: touched || tainted,
                    });
                }
                if touched {
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
                    .any(|t| t.name == name && t.family as u8 == family)
                {
                    self.touched = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::push_message;
    use crate::nla::NlaWriter;
    use nft_model::Family;

    fn notification(kind: u16, family: u8, attrs: &NlaWriter) -> Vec<u8> {
        let mut b = Vec::new();
        push_message(
            &mut b,
            crate::msg::nft_type(kind),
            0,
            0,
            family,
            0,
            &attrs.buf,
        );
        b
    }

    fn newgen(genid: u32, pid: u32, name: &str) -> Vec<u8> {
        let mut a = NlaWriter::new();
        a.be32(NFTA_GEN_ID, genid);
        a.be32(NFTA_GEN_PROC_PID, pid);
        a.str(NFTA_GEN_PROC_NAME, name);
        notification(NFT_MSG_NEWGEN, 0, &a)
    }

    fn rule_in(table: &str, family: Family) -> Vec<u8> {
        let mut a = NlaWriter::new();
        a.str(NFTA_RULE_TABLE, table);
        a.str(NFTA_RULE_CHAIN, "c");
        notification(NFT_MSG_NEWRULE, family as u8, &a)
    }

    #[test]
    fn a_transaction_on_our_table_is_one_touch_with_its_writer() {
        let ours = TableRef::new(Family::Ip, "kube-nlproxy");
        let mut p = EventParser::new(vec![ours]);
        let mut out = Poll::default();
        // Someone else's table: no touch.
        let mut d = rule_in("filter", Family::Ip);
        d.extend(newgen(7, 100, "nft"));
        p.feed(&d, &mut out);
        assert!(out.touches.is_empty());
        // Same name, other family: no touch.
        let mut d = rule_in("kube-nlproxy", Family::Ip6);
        d.extend(newgen(8, 100, "nft"));
        p.feed(&d, &mut out);
        assert!(out.touches.is_empty());
        // Ours, across two datagrams (objects, then NEWGEN).
        p.feed(&rule_in("kube-nlproxy", Family::Ip), &mut out);
        p.feed(&newgen(9, 4242, "nft"), &mut out);
        assert_eq!(
            out.touches,
            vec![Touch {
                genid: 9,
                pid: Some(4242),
                proc_name: Some("nft".into())
            }]
        );
    }

    #[test]
    fn every_transaction_is_heard_with_whether_it_touched_ours() {
        let ours = TableRef::new(Family::Ip, "kube-nlproxy");
        let mut p = EventParser::new(vec![ours]);
        let mut out = Poll::default();
        let mut d = rule_in("filter", Family::Ip);
        d.extend(newgen(7, 100, "nft"));
        d.extend(rule_in("kube-nlproxy", Family::Ip));
        d.extend(newgen(8, 100, "nft"));
        // a transaction with no object notification (nothing but its generation)
        d.extend(newgen(9, 100, "nft"));
        p.feed(&d, &mut out);
        let heard = |g, ours| Heard { genid: g, ours };
        assert_eq!(
            out.heard,
            vec![heard(7, false), heard(8, true), heard(9, false)]
        );
        assert_eq!(out.touches.len(), 1);
        // lost notifications: the next transaction may have touched ours (not a touch:
        // the overflow is what the engine repairs for)
        let mut out = Poll::default();
        p.lost();
        p.feed(&newgen(10, 100, "nft"), &mut out);
        p.feed(&newgen(11, 100, "nft"), &mut out);
        assert_eq!(out.heard, vec![heard(10, true), heard(11, false)]);
        assert!(out.touches.is_empty());
    }

    #[test]
    fn malformed_notifications_are_skipped() {
        let mut p = EventParser::new(vec![TableRef::new(Family::Ip, "kube-nlproxy")]);
        let mut d = rule_in("kube-nlproxy", Family::Ip);
        d.extend(newgen(9, 1, "x"));
        for cut in 0..d.len() {
            let mut out = Poll::default();
            p.feed(&d[..cut], &mut out);
        }
    }
}
