//! The kernel side of every strategy: one request and its ACK, dumps (retried when
//! interrupted or lossy), and deletes by tuple in batches with the ACK sentinel. All
//! socket work goes through `nl-core`.

use crate::filter::Filter;
use crate::wire::*;
use crate::{read_error, Conntrack, DeleteReport, Error, FilterReport};
use nl_core::{AckWait, Control, NlaWriter, OnLoss, ReadError, ReadOpts};
use nl_core::{NLM_F_DUMP, NLM_F_DUMP_FILTERED, NLM_F_REQUEST};
use std::collections::HashSet;

/// The filters that validate, by index, each refused one's error recorded in `rep`; and
/// those filters themselves (in the same order).
pub(crate) fn validated(filters: &[Filter], rep: &mut DeleteReport) -> (Vec<usize>, Vec<Filter>) {
    let mut valid = Vec::with_capacity(filters.len());
    for (i, f) in filters.iter().enumerate() {
        match f.validate() {
            Ok(()) => valid.push(i),
            Err(e) => record_error(&mut rep.per_filter[i], &e),
        }
    }
    let valid_filters = valid.iter().map(|&i| filters[i]).collect();
    (valid, valid_filters)
}

/// Record an error on the filter it concerns: a timeout leaves the outcome unknown
/// (incomplete), anything else is a failure with its errno.
pub(crate) fn record_error(r: &mut FilterReport, e: &Error) {
    tracing::warn!(filter = %r.filter, error = %e, "conntrack cleanup of a filter failed");
    match e {
        Error::Timeout { .. } => r.incomplete = true,
        Error::Kernel { errno, .. } => r.errno = Some(*errno),
        Error::Send { source, .. }
        | Error::Recv { source, .. }
        | Error::Socket { source, .. }
        | Error::Events { source, .. } => {
            r.errno = Some(source.raw_os_error().unwrap_or(libc::EIO))
        }
        Error::InvalidFilter { .. } => r.errno = Some(libc::EINVAL),
        Error::Probe(_) => r.errno = Some(libc::EIO),
    }
}

/// What a dump asks the kernel to filter.
#[derive(Debug, Clone, Copy)]
pub(crate) enum KernelFilter<'a> {
    /// Every entry of the family.
    All,
    /// Entries of one L4 protocol (CTA_FILTER with PROTO_NUM only): a full dump for
    /// filters that all name that protocol copies nothing else to user space.
    Proto(u8),
    /// A filter's partial tuple and CTA_FILTER, with its address or not.
    Filter(&'a Filter, bool),
}

impl KernelFilter<'_> {
    fn name(&self) -> String {
        match self {
            KernelFilter::All => "all entries".to_string(),
            KernelFilter::Proto(p) => format!("all entries of protocol {p}"),
            KernelFilter::Filter(f, _) => f.to_string(),
        }
    }
}

/// How one dump went.
#[derive(Debug, Default)]
pub(crate) struct DumpStats {
    /// Entries handed to the callback (all attempts).
    pub(crate) entries: u64,
    /// Messages or datagrams that could not be read.
    pub(crate) malformed: u64,
    /// Some entry carried NLM_F_DUMP_FILTERED.
    pub(crate) filtered_flag_seen: bool,
    pub(crate) retries: u32,
    /// Still interrupted or lossy after the last retry.
    pub(crate) incomplete: bool,
}

impl Conntrack {
    /// Send one request built by `build` and wait for its ACK; returns the errno (0 = ok).
    pub(crate) fn request_ack(
        &mut self,
        f: &Filter,
        op: &'static str,
        build: impl FnOnce(&mut NlaWriter, &Filter, u32),
    ) -> Result<i32, Error> {
        let opts = ReadOpts {
            // Our ACK is small and comes last: read past lost messages.
            on_loss: OnLoss::Drain,
            limit: Some(self.cfg.recv_timeout),
        };
        match self
            .sock
            .request(&opts, |w, seq| build(w, f, seq), |_| Control::Continue)
        {
            Ok(_) => Ok(0),
            Err(ReadError::Kernel(errno)) => Ok(errno),
            Err(ReadError::Deadline) => Err(Error::Timeout {
                op,
                filter: f.to_string(),
                timeout: self.cfg.recv_timeout,
            }),
            Err(e) => Err(read_error(op, f.to_string(), &self.cfg, e)),
        }
    }

    /// A dump of family `af` (with the kernel filter of `filter`, its address included
    /// when the bool says so), restarted up to `retries` times when interrupted
    /// (NLM_F_DUMP_INTR) or lossy (ENOBUFS, malformed datagrams). Entries of every
    /// attempt go to `f` with their message flags; malformed ones are skipped.
    pub(crate) fn dump(
        &mut self,
        af: u8,
        filter: KernelFilter<'_>,
        op: &'static str,
        retries: u32,
        f: &mut dyn FnMut(&EntryView<'_>, u16),
    ) -> Result<DumpStats, Error> {
        self.dump_attempts(af, filter, op, retries, &mut |e, flags, _| f(e, flags))
    }

    /// [`Conntrack::dump`], telling `f` which attempt (0 = the first, then one per
    /// restart) each entry comes from: a caller that wants one consistent snapshot
    /// keeps only the last attempt's entries.
    pub(crate) fn dump_attempts(
        &mut self,
        af: u8,
        filter: KernelFilter<'_>,
        op: &'static str,
        retries: u32,
        f: &mut dyn FnMut(&EntryView<'_>, u16, u32),
    ) -> Result<DumpStats, Error> {
        let fname = || filter.name();
        let opts = ReadOpts {
            on_loss: OnLoss::Drain,
            limit: Some(self.cfg.dump_timeout),
        };
        let mut st = DumpStats::default();
        // Requests sent so far; the entries read belong to the last one.
        let sent = std::cell::Cell::new(0u32);
        let run = self
            .sock
            .dump(
                retries,
                &opts,
                |w, seq| {
                    sent.set(sent.get() + 1);
                    let s = w.begin_nfnl(MSG_CT_GET, NLM_F_REQUEST | NLM_F_DUMP, seq, af);
                    match filter {
                        KernelFilter::All => {}
                        KernelFilter::Proto(p) => put_proto_filter(w, p),
                        KernelFilter::Filter(fl, with_addr) => fl.put_kernel_filter(w, with_addr),
                    }
                    w.end_msg(s);
                },
                |m| {
                    if m.kind == MSG_CT_NEW {
                        match parse_entry(m.payload) {
                            Some(e) => {
                                st.entries += 1;
                                if m.flags & NLM_F_DUMP_FILTERED != 0 {
                                    st.filtered_flag_seen = true;
                                }
                                f(&e, m.flags, sent.get().saturating_sub(1));
                            }
                            None => st.malformed += 1,
                        }
                    }
                    Control::Continue
                },
            )
            .map_err(|e| read_error(op, fname(), &self.cfg, e))?;
        st.malformed += run.malformed;
        st.retries = run.retries;
        st.incomplete = run.incomplete;
        if st.malformed > 0 {
            tracing::warn!(
                op,
                malformed = st.malformed,
                "skipped malformed conntrack dump messages"
            );
        }
        if st.incomplete {
            tracing::warn!(op, filter = %fname(), "conntrack dump still interrupted after retries; some entries may remain");
        }
        Ok(st)
    }

    /// [`Conntrack::dump`] with the configured retries, counted in `rep` (callers mark
    /// the filters of an incomplete dump).
    pub(crate) fn dump_retrying(
        &mut self,
        af: u8,
        filter: KernelFilter<'_>,
        op: &'static str,
        rep: &mut DeleteReport,
        f: &mut dyn FnMut(&EntryView<'_>, u16),
    ) -> Result<DumpStats, Error> {
        let st = self.dump(af, filter, op, self.cfg.max_dump_retries, f)?;
        rep.dump_retries += st.retries;
        Ok(st)
    }

    /// Delete entries by tuple for `filters` (each target with the index of the filter
    /// that found it), accounting every answer on that filter: see
    /// [`Conntrack::delete_each`]. A socket error is recorded (once) on the filters of
    /// the requests it left unanswered; the next batch is still tried.
    pub(crate) fn delete_targets(
        &mut self,
        targets: &[(Target, usize)],
        filters: &[Filter],
        rep: &mut DeleteReport,
    ) {
        let name = |fi: usize| filters.get(fi).map(|f| f.to_string()).unwrap_or_default();
        let per_filter = &mut rep.per_filter;
        let mut failed: HashSet<usize> = HashSet::new();
        self.delete_each(
            targets.len(),
            &mut |i, m, seq| targets[i].0.put_delete(m, seq),
            &mut |i, answer| {
                let fi = targets[i].1;
                let r = &mut per_filter[fi];
                match answer {
                    DelAnswer::Acked(errno) => count_ack(errno, r, filters.get(fi)),
                    DelAnswer::Unacked => r.unacked += 1,
                    DelAnswer::SendFailed(e) => {
                        if failed.insert(fi) {
                            let source = e.raw_os_error().map_or_else(
                                || std::io::Error::other(e.to_string()),
                                std::io::Error::from_raw_os_error,
                            );
                            record_error(
                                r,
                                &Error::Send {
                                    op: DELETE_OP,
                                    filter: name(fi),
                                    source,
                                },
                            );
                        }
                    }
                    DelAnswer::RecvFailed(e) => {
                        if failed.insert(fi) {
                            record_error(
                                r,
                                &Error::Recv {
                                    op: DELETE_OP,
                                    filter: name(fi),
                                    source: std::io::Error::other(e.to_string()),
                                },
                            );
                        }
                    }
                }
            },
        );
    }

    /// The one delete-by-tuple loop (for filters' matches and for [`crate::Flow`]s):
    /// requests `0..n`, each written by `put(i, writer, seq)`, `delete_batch` per
    /// sendmsg, one ACK each. Requests whose answer was lost (ENOBUFS) or late are
    /// resent after the ACK sentinel (3 rounds); what stays unanswered is
    /// [`DelAnswer::Unacked`]. Every request gets exactly one `on(i, answer)`. A send or
    /// receive error ends its batch (its unanswered requests get the error); the next
    /// batch is still tried.
    pub(crate) fn delete_each(
        &mut self,
        n: usize,
        put: &mut dyn FnMut(usize, &mut NlaWriter, u32),
        on: &mut dyn FnMut(usize, DelAnswer<'_>),
    ) {
        let batch = self.cfg.delete_batch.max(1);
        let mut m = NlaWriter::with_capacity(batch.min(n.max(1)) * 96);
        let mut start = 0;
        while start < n {
            let end = start.saturating_add(batch).min(n);
            // Requests still waiting for an answer; resent after ENOBUFS.
            let mut pending: Vec<usize> = (start..end).collect();
            start = end;
            for round in 0..4 {
                if pending.is_empty() {
                    break;
                }
                if round == 3 {
                    for &i in &pending {
                        on(i, DelAnswer::Unacked);
                    }
                    tracing::warn!(
                        unacked = pending.len(),
                        "conntrack deletes left without ACK"
                    );
                    break;
                }
                let base = self.sock.reserve_seqs(pending.len() as u32 + 1);
                m.clear();
                for (k, &i) in pending.iter().enumerate() {
                    put(i, &mut m, base + k as u32);
                }
                if let Err(e) = self.sock.send(&m.buf) {
                    for &i in &pending {
                        on(i, DelAnswer::SendFailed(&e));
                    }
                    break;
                }
                let wait = AckWait {
                    base,
                    n: pending.len(),
                    sentinel: base + pending.len() as u32,
                    sentinel_sent: false,
                    expect_all: true,
                    limit: self.cfg.recv_timeout,
                };
                let mut answered = vec![false; pending.len()];
                let done = self.sock.collect_acks(wait, |k, errno| {
                    answered[k] = true;
                    on(pending[k], DelAnswer::Acked(errno));
                });
                if let Err(e) = done {
                    for (&i, _) in pending.iter().zip(&answered).filter(|(_, &a)| !a) {
                        on(i, DelAnswer::RecvFailed(&e));
                    }
                    break;
                }
                pending = pending
                    .iter()
                    .zip(&answered)
                    .filter(|(_, &a)| !a)
                    .map(|(&i, _)| i)
                    .collect();
                if !pending.is_empty() {
                    tracing::debug!(
                        unacked = pending.len(),
                        round,
                        "resending conntrack deletes"
                    );
                }
            }
        }
    }
}

const DELETE_OP: &str = "delete by tuple";

/// The answer to one delete by tuple of [`Conntrack::delete_each`].
#[derive(Debug)]
pub(crate) enum DelAnswer<'a> {
    /// The kernel answered: Some(0) = deleted, Some(errno), None = an answer too short
    /// to read.
    Acked(Option<i32>),
    /// No answer after all resends.
    Unacked,
    /// Sending its batch failed.
    SendFailed(&'a std::io::Error),
    /// Reading its batch's answers failed.
    RecvFailed(&'a ReadError),
}

/// Account one answer to a delete by tuple.
pub(crate) fn count_ack(errno: Option<i32>, r: &mut FilterReport, f: Option<&Filter>) {
    match errno {
        Some(0) => {
            if let Some(d) = r.deleted.as_mut() {
                *d += 1
            }
        }
        Some(e) if e == libc::ENOENT => r.already_gone += 1,
        Some(errno) => {
            r.failed += 1;
            r.errno = Some(errno);
            tracing::warn!(filter = %f.map(|f| f.to_string()).unwrap_or_default(), errno, "kernel refused a conntrack delete");
        }
        None => {
            r.failed += 1;
            r.errno = Some(libc::EPROTO);
        }
    }
}
