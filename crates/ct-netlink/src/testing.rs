//! Helpers for tests and benchmarks, compiled only with the `testing` feature (or in
//! this crate's unit tests): fast insertion of synthetic entries (IPCTNL_MSG_CT_NEW,
//! many per `sendmsg`), raw dumps for capturing test vectors, a pause hook between
//! collecting and deleting, fault injection into the socket's reads, and a mark-only
//! flush for ct-bench's kernel-walk experiment. The proxy never uses them.

use crate::wire::{push_new_entry, MSG_CT_DELETE, MSG_CT_GET, MSG_CT_NEW};
use crate::{Conntrack, Error};
use nl_core::{AckWait, Control, OnLoss, ReadOpts, RecvFault};
use nl_core::{NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST};
use std::collections::HashMap;
use std::time::Duration;

pub use crate::wire::{SyntheticEntry, SyntheticFlow};

/// Result of [`Conntrack::insert`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InsertReport {
    /// Requests sent.
    pub sent: u64,
    /// Errors by errno (EEXIST = already there, ENOMEM = table full, ...).
    pub errors: HashMap<i32, u64>,
    /// Batches whose sentinel ACK never came (errors may be undercounted).
    pub lost_batches: u64,
}

impl InsertReport {
    pub fn failed(&self) -> u64 {
        self.errors.values().sum()
    }
}

impl Conntrack {
    /// Insert `flows` (for tests and benchmarks): `batch` requests per `sendmsg`, no
    /// ACK asked for (errors are still reported), then a sentinel ACK per batch.
    /// [`SyntheticFlow`]s or [`SyntheticEntry`]s (DNAT'ed, zoned).
    pub fn insert<F: Copy + Into<SyntheticEntry>>(
        &mut self,
        flows: &[F],
        timeout_secs: u32,
        batch: usize,
    ) -> Result<InsertReport, Error> {
        let mut rep = InsertReport::default();
        let mut buf: Vec<u8> = Vec::with_capacity(batch.max(1) * 160);
        let timeout = self.cfg.recv_timeout;
        for chunk in flows.chunks(batch.max(1)) {
            buf.clear();
            let base = self.sock.reserve_seqs(chunk.len() as u32 + 1);
            for (k, f) in chunk.iter().enumerate() {
                push_new_entry(
                    &mut buf,
                    &(*f).into(),
                    timeout_secs,
                    base + k as u32,
                    NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL,
                );
            }
            let sentinel = base + chunk.len() as u32;
            nl_core::msg::push_sentinel(&mut buf, sentinel);
            let err = |source| Error::Send {
                op: "insert",
                filter: "synthetic flows".into(),
                source,
            };
            self.sock.send(&buf).map_err(err)?;
            rep.sent += chunk.len() as u64;
            let round = self
                .sock
                .collect_acks(
                    AckWait {
                        base,
                        n: chunk.len(),
                        sentinel,
                        sentinel_sent: true,
                        expect_all: false,
                        limit: timeout,
                    },
                    |_, errno| {
                        if let Some(e) = errno.filter(|&e| e != 0) {
                            *rep.errors.entry(e).or_default() += 1;
                        }
                    },
                )
                .map_err(|e| crate::read_error("insert", "synthetic flows".into(), &self.cfg, e))?;
            if !round.saw_sentinel {
                rep.lost_batches += 1;
            }
        }
        Ok(rep)
    }

    /// How long [`Conntrack::insert`] waits for one batch.
    pub fn recv_timeout(&self) -> Duration {
        self.cfg.recv_timeout
    }

    /// The raw netlink messages of an unfiltered dump of one family (`libc::AF_INET` or
    /// `libc::AF_INET6`), for capturing test vectors.
    pub fn raw_dump(&mut self, af: u8) -> Result<Vec<Vec<u8>>, Error> {
        let mut out = Vec::new();
        let opts = ReadOpts {
            on_loss: OnLoss::Drain,
            limit: Some(self.cfg.dump_timeout),
        };
        self.sock
            .request(
                &opts,
                |w, seq| {
                    let s = w.begin_nfnl(MSG_CT_GET, NLM_F_REQUEST | NLM_F_DUMP, seq, af);
                    w.end_msg(s);
                },
                |m| {
                    if m.kind == MSG_CT_NEW {
                        out.push(m.bytes.to_vec());
                    }
                    Control::Continue
                },
            )
            .map_err(|e| crate::read_error("raw dump", "all entries".into(), &self.cfg, e))?;
        Ok(out)
    }

    /// Test hook: [`Conntrack::delete_with`], but `between(n)` runs after the `n`
    /// entries to delete by tuple were collected (by a dump) and before the deletes
    /// are sent, so a test can remove some of them out of band and make the kernel
    /// answer ENOENT. Filters that a filtered flush hands to the kernel have no such
    /// window (`between` is then called only for the filters routed through a dump,
    /// or not at all).
    pub fn delete_with_pause(
        &mut self,
        strategy: crate::Strategy,
        filters: &[crate::Filter],
        between: &mut dyn FnMut(usize),
    ) -> Result<crate::DeleteReport, Error> {
        self.delete_inner(crate::delete::Mode::Forced(strategy), filters, between)
    }

    /// Fault injection: `fault` runs after every following read of this socket (see
    /// [`nl_core::RecvFault`]): it may set NLM_F_DUMP_INTR, corrupt bytes, or replace
    /// the read by an error such as ENOBUFS. `None` removes it.
    pub fn inject_recv_fault(&mut self, fault: Option<RecvFault>) {
        self.sock.inject_recv_fault(fault);
    }

    /// Benchmark hook (ct-bench's walk experiment): an IPCTNL_MSG_CT_DELETE carrying
    /// only CTA_MARK/CTA_MARK_MASK (no tuple, no CTA_FILTER), i.e. a flush restricted
    /// to entries with `ct->mark & mask == mark`, for family `af`. Returns the errno of
    /// the ACK. **Not safe in general**: a kernel that ignored the mark would flush the
    /// whole table of the namespace (Linux has honoured it since 2.6.x); ct-bench uses
    /// it only in its own namespace, with a mark no entry carries, to time the
    /// kernel's flush walk without any tuple comparison.
    pub fn mark_flush(&mut self, af: u8, mark: u32, mask: u32) -> Result<i32, Error> {
        /// CTA_MARK and CTA_MARK_MASK (uapi `nfnetlink_conntrack.h`).
        const CTA_MARK: u16 = 8;
        const CTA_MARK_MASK: u16 = 21;
        self.request_ack(&crate::PROBE_FILTER, "mark flush", |m, _, seq| {
            let s = m.begin_nfnl(MSG_CT_DELETE, NLM_F_REQUEST | NLM_F_ACK, seq, af);
            m.be32(CTA_MARK, mark);
            m.be32(CTA_MARK_MASK, mask);
            m.end_msg(s);
        })
    }
}

impl crate::EventSocket {
    /// Test hook: an event socket **without** the BPF filter (every NEW and DESTROY
    /// event of every protocol is queued; user space still keeps only UDP), to show
    /// what the filter spares.
    pub fn open_unfiltered(cfg: crate::EventConfig) -> Result<crate::EventSocket, Error> {
        crate::EventSocket::open_inner(cfg, false)
    }

    /// Test hook: the next datagram as the kernel sent it (waiting up to `timeout`),
    /// for capturing test vectors; `None` when nothing came.
    pub fn recv_raw(&mut self, timeout: Duration) -> Option<Vec<u8>> {
        self.recv_raw_inner(timeout)
    }
}
