//! The bench's own view of the kernel: an nftables monitor socket (`NETLINK_NETFILTER`,
//! group `NFNLGRP_NFTABLES`) opened inside the node's namespace, read on a thread of its
//! own that timestamps every datagram as it arrives. It decodes only what a latency
//! needs: set element additions and deletions (table, set, the key and data bytes of
//! each element) and the `NEWGEN` that closes each transaction. The kernel sends a
//! transaction's notifications at its commit, so "the kernel holds a change" is the
//! arrival of the `NEWGEN` closing the first transaction, after the change was sent,
//! whose elements carry the change's address. It shares nothing with the daemon's own
//! change listener (`nft-netlink::watch`) but the wire constants and readers.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use netns_tests::Netns;
use nft_wire::consts::{
    NFNL_SUBSYS_NFTABLES, NFTA_DATA_VALUE, NFTA_GEN_ID, NFTA_LIST_ELEM, NFTA_SET_ELEM_DATA,
    NFTA_SET_ELEM_KEY, NFTA_SET_ELEM_KEY_END, NFTA_SET_ELEM_LIST_ELEMENTS, NFTA_SET_ELEM_LIST_SET,
    NFTA_SET_ELEM_LIST_TABLE, NFT_MSG_DELSETELEM, NFT_MSG_NEWGEN, NFT_MSG_NEWSETELEM,
};
use nft_wire::consts::{NFTA_TABLE_NAME, NFT_MSG_GETTABLE, NFT_MSG_NEWTABLE};
use nft_wire::events::NFNLGRP_NFTABLES;
use nft_wire::msg::{nft_type, push_message, NlMsg, NlMsgIter};
use nft_wire::nla::NlaIter;
use nl_core::{
    Control, NlSocket, OnLoss, ReadOpts, SockConfig, NETLINK_NETFILTER, NLM_F_DUMP, NLM_F_REQUEST,
};

/// What one notification said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// `NEWSETELEM` (`add`) or `DELSETELEM`: every value (key, key end, data) of every
    /// element, as raw bytes.
    Elements {
        add: bool,
        table: String,
        set: String,
        values: Vec<Vec<u8>>,
    },
    /// `NEWGEN`: the transaction is complete.
    Gen(u32),
    /// Any other nftables object notification (a rule, a chain, a set...).
    Other(u16),
    /// The socket overflowed: notifications were lost.
    Lost,
}

/// Decode one datagram of nftables notifications (pure; malformed parts are skipped).
pub fn decode(buf: &[u8]) -> Vec<Note> {
    let mut out = Vec::new();
    for m in NlMsgIter::new(buf) {
        if m.kind >> 8 != NFNL_SUBSYS_NFTABLES {
            continue;
        }
        let Some((_family, _res, attrs)) = m.nfgen() else {
            continue;
        };
        let msg = m.kind & 0xff;
        match msg {
            NFT_MSG_NEWGEN => {
                let id = NlaIter::new(attrs)
                    .find(|a| a.kind == NFTA_GEN_ID)
                    .and_then(|a| a.be32())
                    .unwrap_or(0);
                out.push(Note::Gen(id));
            }
            NFT_MSG_NEWSETELEM | NFT_MSG_DELSETELEM => {
                let (mut table, mut set, mut values) = (String::new(), String::new(), vec![]);
                for a in NlaIter::new(attrs) {
                    match a.kind {
                        NFTA_SET_ELEM_LIST_TABLE => table = a.str().unwrap_or("").into(),
                        NFTA_SET_ELEM_LIST_SET => set = a.str().unwrap_or("").into(),
                        NFTA_SET_ELEM_LIST_ELEMENTS => {
                            for e in a.nested().filter(|e| e.kind == NFTA_LIST_ELEM) {
                                for f in e.nested() {
                                    if matches!(
                                        f.kind,
                                        NFTA_SET_ELEM_KEY
                                            | NFTA_SET_ELEM_KEY_END
                                            | NFTA_SET_ELEM_DATA
                                    ) {
                                        values.extend(
                                            f.nested()
                                                .filter(|v| v.kind == NFTA_DATA_VALUE)
                                                .map(|v| v.data.to_vec()),
                                        );
                                    }
                                }
                            }
                        }
                        _ => {}
                    }
                }
                out.push(Note::Elements {
                    add: msg == NFT_MSG_NEWSETELEM,
                    table,
                    set,
                    values,
                });
            }
            other => out.push(Note::Other(other)),
        }
    }
    out
}

/// The bytes of an address as the kernel holds them in a key or data value.
pub fn addr_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    }
}

/// Whether `hay` holds `needle` at a 4-byte boundary (values are registers of 4 bytes).
fn holds(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty()
        && hay.len() >= needle.len()
        && (0..=hay.len() - needle.len())
            .step_by(4)
            .any(|i| &hay[i..i + needle.len()] == needle)
}

/// What the kernel must be seen doing for a change: elements added (or deleted) that
/// carry `addr`.
#[derive(Debug, Clone)]
pub struct Expect {
    pub add: bool,
    pub addr: IpAddr,
}

/// When the kernel was seen holding a change.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seen {
    /// The first notification carrying the change's element.
    pub element: Instant,
    /// The `NEWGEN` closing that transaction: the kernel holds the change.
    pub committed: Instant,
    pub genid: u32,
    /// Element notifications in that transaction (its size).
    pub elements: usize,
}

/// Find, in notes received at or after `from`, the first transaction holding `want`
/// (pure: the notes with their arrival times).
pub fn find(notes: &[(Instant, Note)], from: Instant, want: &Expect) -> Option<Seen> {
    let needle = addr_bytes(want.addr);
    let (mut hit, mut count) = (None, 0usize);
    for (t, n) in notes.iter().filter(|(t, _)| *t >= from) {
        match n {
            Note::Elements { add, values, .. } => {
                count += 1;
                if hit.is_none() && *add == want.add && values.iter().any(|v| holds(v, &needle)) {
                    hit = Some(*t);
                }
            }
            Note::Gen(id) => {
                if let Some(element) = hit {
                    return Some(Seen {
                        element,
                        committed: *t,
                        genid: *id,
                        elements: count,
                    });
                }
                count = 0;
            }
            Note::Lost => {
                hit = None;
                count = 0;
            }
            Note::Other(_) => {}
        }
    }
    None
}

type Notes = Arc<(Mutex<Vec<(Instant, Note)>>, Condvar)>;

/// The monitor socket and its reader thread; stops on drop.
pub struct Observer {
    notes: Notes,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Observer {
    /// Open the socket inside `ns` and start reading.
    pub fn open(ns: &Netns) -> std::io::Result<Observer> {
        let mut sock = ns.run(|| {
            NlSocket::open(
                NETLINK_NETFILTER,
                &SockConfig {
                    groups: vec![NFNLGRP_NFTABLES],
                    rcvbuf: Some(32 << 20),
                    strict_buffers: false,
                    recv_buf_len: 1 << 20,
                    recv_timeout: Some(Duration::from_millis(100)),
                    ..SockConfig::default()
                },
            )
            .map_err(|e| e.source)
        })?;
        let notes: Notes = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (n, s) = (notes.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let got = match sock.recv() {
                    Ok(0) => continue,
                    Ok(_) => decode(sock.data()),
                    Err(e) if nl_core::is_enobufs(&e) => vec![Note::Lost],
                    Err(e) if nl_core::is_timeout(&e) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        eprintln!("   observer: {e}");
                        break;
                    }
                };
                let at = Instant::now();
                let (m, cv) = &*n;
                m.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(got.into_iter().map(|x| (at, x)));
                cv.notify_all();
            }
        });
        Ok(Observer {
            notes,
            stop,
            thread: Some(thread),
        })
    }

    /// Wait (up to `timeout`) for the first transaction after `from` holding `want`.
    pub fn wait(&self, from: Instant, want: &Expect, timeout: Duration) -> Option<Seen> {
        let deadline = Instant::now() + timeout;
        let (m, cv) = &*self.notes;
        let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(s) = find(&g, from, want) {
                return Some(s);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            g = cv
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Everything received so far, taken out (for attributing many changes at once).
    pub fn take(&self) -> Vec<(Instant, Note)> {
        std::mem::take(&mut *self.notes.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Forget what was received so far (the notes of changes already measured).
    pub fn clear(&self) {
        self.notes
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

/// Whether a namespace's kernel holds a table yet: a dump of its tables
/// (`NFT_MSG_GETTABLE`, every family) over a netlink socket of the bench's own, opened
/// in that namespace. How a cold start is seen from outside: a monitor socket
/// ([`Observer`]) open during the first commit would make the kernel build one
/// notification per element inside that commit, and a transaction is atomic, so the
/// table appears with everything the first sync wrote.
pub struct TableProbe {
    sock: NlSocket,
}

impl TableProbe {
    pub fn open(ns: &Netns) -> std::io::Result<TableProbe> {
        let sock = ns.run(|| {
            NlSocket::open(
                NETLINK_NETFILTER,
                &SockConfig {
                    recv_timeout: Some(Duration::from_secs(2)),
                    strict_buffers: false,
                    ..SockConfig::default()
                },
            )
            .map_err(|e| e.source)
        })?;
        Ok(TableProbe { sock })
    }

    /// Whether a table named `name` exists (in any family); `false` when the kernel
    /// could not be asked.
    pub fn holds(&mut self, name: &str) -> bool {
        let mut found = false;
        let asked = self.sock.request(
            &ReadOpts {
                on_loss: OnLoss::Drain,
                limit: Some(Duration::from_secs(2)),
            },
            |w, seq| {
                push_message(
                    &mut w.buf,
                    nft_type(NFT_MSG_GETTABLE),
                    NLM_F_REQUEST | NLM_F_DUMP,
                    seq,
                    0,
                    0,
                    &[],
                )
            },
            |m| {
                found |= table_named(m, name);
                Control::Continue
            },
        );
        asked.is_ok() && found
    }
}

/// Whether `m` is a table message naming `name` (pure).
fn table_named(m: &NlMsg<'_>, name: &str) -> bool {
    m.kind == nft_type(NFT_MSG_NEWTABLE)
        && m.nfgen().is_some_and(|(_, _, attrs)| {
            NlaIter::new(attrs).any(|a| a.kind == NFTA_TABLE_NAME && a.str() == Some(name))
        })
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nft_wire::msg::{nft_type, push_message};
    use nft_wire::nla::NlaWriter;

    fn elems(kind: u16, set: &str, key: &[u8], data: &[u8]) -> Vec<u8> {
        let mut v = NlaWriter::new();
        let mut list = NlaWriter::new();
        let mut e = NlaWriter::new();
        for (attr, bytes) in [(NFTA_SET_ELEM_KEY, key), (NFTA_SET_ELEM_DATA, data)] {
            let mut d = NlaWriter::new();
            d.bytes(NFTA_DATA_VALUE, bytes);
            e.nested_raw(attr, &d.buf);
        }
        list.nested_raw(NFTA_LIST_ELEM, &e.buf);
        v.str(NFTA_SET_ELEM_LIST_TABLE, "kube-nlproxy");
        v.str(NFTA_SET_ELEM_LIST_SET, set);
        v.nested_raw(NFTA_SET_ELEM_LIST_ELEMENTS, &list.buf);
        let mut b = Vec::new();
        push_message(&mut b, nft_type(kind), 0, 0, 2, 0, &v.buf);
        b
    }

    fn newgen(id: u32) -> Vec<u8> {
        let mut a = NlaWriter::new();
        a.be32(NFTA_GEN_ID, id);
        let mut b = Vec::new();
        push_message(&mut b, nft_type(NFT_MSG_NEWGEN), 0, 0, 0, 0, &a.buf);
        b
    }

    #[test]
    fn a_change_is_seen_at_the_newgen_closing_its_transaction() {
        let a: IpAddr = "198.19.240.7".parse().unwrap();
        let t0 = Instant::now();
        let t = |ms| t0 + Duration::from_millis(ms);
        // transaction 1: another address; transaction 2: ours (in the data, after a
        // 4-byte register), then its NEWGEN
        let mut notes = vec![];
        for (ms, bytes) in [
            (
                1,
                elems(NFT_MSG_NEWSETELEM, "m", &[0, 0, 0, 1], &[198, 19, 0, 1]),
            ),
            (2, newgen(10)),
            (
                3,
                elems(
                    NFT_MSG_NEWSETELEM,
                    "m",
                    &[0, 0, 0, 2],
                    &[0, 0, 0, 9, 198, 19, 240, 7],
                ),
            ),
            (
                4,
                elems(NFT_MSG_DELSETELEM, "m", &[0, 0, 0, 3], &[1, 2, 3, 4]),
            ),
            (5, newgen(11)),
        ] {
            notes.extend(decode(&bytes).into_iter().map(|n| (t(ms), n)));
        }
        let add = Expect { add: true, addr: a };
        let seen = find(&notes, t0, &add).expect("seen");
        assert_eq!(
            (seen.element, seen.committed, seen.genid, seen.elements),
            (t(3), t(5), 11, 2)
        );
        // a deletion of it is not an addition; nothing after the change was sent
        assert!(find(
            &notes,
            t0,
            &Expect {
                add: false,
                addr: a
            }
        )
        .is_none());
        assert!(find(&notes, t(4), &add).is_none());
        // the bytes must sit on a register boundary
        assert!(!holds(&[0, 198, 19, 240, 7, 0, 0, 0], &addr_bytes(a)));
    }

    #[test]
    fn malformed_datagrams_decode_without_panic() {
        let mut d = elems(NFT_MSG_NEWSETELEM, "m", &[1, 2, 3, 4], &[5, 6, 7, 8]);
        d.extend(newgen(3));
        for cut in 0..d.len() {
            let _ = decode(&d[..cut]);
        }
        assert_eq!(decode(&d).last(), Some(&Note::Gen(3)));
    }
}
