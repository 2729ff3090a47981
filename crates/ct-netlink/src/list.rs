//! Listing entries as [`Flow`]s (every entry of a protocol, to seed an index; the
//! entries matching filters, judged in user space) and deleting exactly given flows.
//! The dumps and the delete-by-tuple loop are the ones `delete` uses (`exec.rs`,
//! `delete.rs`).

use crate::delete::{family_of_af, Mode};
use crate::exec::{validated, DelAnswer, KernelFilter};
use crate::filter::families;
use crate::plan::TableSize;
use crate::report::FamilyPlan;
use crate::{Conntrack, DeleteReport, Error, Family, Filter, Flow, FlowOutcome, Strategy};

/// How complete one listing is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListOutcome {
    /// Every matching entry of the table (at the time of the dump) was listed.
    Complete,
    /// The dump stayed interrupted (`NLM_F_DUMP_INTR`) or lossy (ENOBUFS, malformed
    /// replies) after its retries: some matching entries may be missing.
    Incomplete,
    /// The kernel or the socket refused the dump (or the filter is invalid: EINVAL).
    Failed(i32),
}

impl ListOutcome {
    pub fn is_complete(self) -> bool {
        self == ListOutcome::Complete
    }
}

/// The result of [`Conntrack::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListReport {
    /// Every entry matching some filter, once (in dump order, family by family).
    pub flows: Vec<Flow>,
    /// One outcome per filter, in the order given.
    pub per_filter: Vec<ListOutcome>,
    /// Kernel table walks made (one per dump).
    pub walks: usize,
    /// Per family: how its filters were served (per-filter dumps are
    /// [`Strategy::FilteredDump`], never a flush).
    pub plans: Vec<FamilyPlan>,
    /// Entries read from the kernel (all attempts), matching or not.
    pub scanned: u64,
    /// Dump restarts (NLM_F_DUMP_INTR / ENOBUFS).
    pub dump_retries: u32,
}

impl ListReport {
    /// Every filter's listing is complete.
    pub fn all_complete(&self) -> bool {
        self.per_filter.iter().all(|o| o.is_complete())
    }
}

impl Conntrack {
    /// Every entry of L4 protocol `proto` (e.g. [`crate::IPPROTO_UDP`]) in `family`,
    /// appended to `out`, from one dump: filtered on the protocol by the kernel
    /// (CTA_FILTER) unless the probe found a kernel that ignores dump filters, then
    /// filtered in user space. Entries without ports (or otherwise not a [`Flow`]) are
    /// skipped. When the dump had to be restarted, `out` holds the last attempt's
    /// entries only (one snapshot, no entries of an earlier attempt that are gone
    /// since). `Incomplete`: still interrupted or lossy after the retries. Errors (a
    /// refused dump, a socket failure) are returned; `out` may then hold part of it.
    pub fn list_proto(
        &mut self,
        family: Family,
        proto: u8,
        out: &mut Vec<Flow>,
    ) -> Result<ListOutcome, Error> {
        if proto == 0 {
            return Err(Error::InvalidFilter {
                filter: "all entries of protocol 0".into(),
                reason: "protocol number 0",
            });
        }
        let kernel = if self.probe.strategy == Strategy::FullDump {
            KernelFilter::All
        } else {
            KernelFilter::Proto(proto)
        };
        let start = out.len();
        let mut attempt = 0u32;
        let st = self.dump_attempts(
            family.af(),
            kernel,
            "protocol dump",
            self.cfg.max_dump_retries,
            &mut |e, _, a| {
                if a != attempt {
                    // A restarted dump: keep only this attempt's snapshot.
                    out.truncate(start);
                    attempt = a;
                }
                if let Some(f) = Flow::from_entry(e) {
                    if f.proto == proto && f.family() == family {
                        out.push(f);
                    }
                }
            },
        )?;
        tracing::debug!(
            ?family,
            proto,
            listed = out.len() - start,
            retries = st.retries,
            incomplete = st.incomplete,
            "conntrack protocol dump"
        );
        Ok(if st.incomplete {
            ListOutcome::Incomplete
        } else {
            ListOutcome::Complete
        })
    }

    /// The entries matching `filters` (each at most once), nothing deleted: per family
    /// the cost model chooses, as [`Conntrack::delete`] does, between one filtered dump
    /// per filter, one dump per port the filters share, and one full dump of the
    /// family (unless the configuration forces a strategy; a forced filtered flush lists
    /// with filtered dumps). Every entry is matched again in user space, so a kernel
    /// that ignores part of a filter costs time, never a wrong match; IPv6 addresses go
    /// to the kernel only when the probe found it matches them correctly. Failures are
    /// per filter ([`ListOutcome`]).
    pub fn list(&mut self, filters: &[Filter]) -> ListReport {
        let mode = if self.probe.forced {
            Mode::Forced(self.probe.strategy)
        } else {
            Mode::Auto
        };
        self.list_inner(mode, filters)
    }

    /// [`Conntrack::list`] with an explicit strategy for every family (tests and
    /// benchmarks compare them; a filtered flush lists with filtered dumps).
    pub fn list_with(&mut self, strategy: Strategy, filters: &[Filter]) -> ListReport {
        self.list_inner(Mode::Forced(strategy), filters)
    }

    fn list_inner(&mut self, mode: Mode, filters: &[Filter]) -> ListReport {
        // The dump strategies' accounting (walks, retries, per-filter errors) is the
        // delete report's; nothing is capped.
        let mut rep = DeleteReport::empty(Strategy::FilteredDump, filters);
        let (valid, valid_filters) = validated(filters, &mut rep);
        let table = match mode {
            Mode::Auto => TableSize::read(),
            Mode::Forced(_) => None,
        };
        let mut flows = Vec::new();
        for af in families(&valid_filters) {
            let idx: Vec<usize> = valid
                .iter()
                .copied()
                .filter(|&i| filters[i].af() == af)
                .collect();
            let strategy = match self.choose(mode, table, filters, &idx, true) {
                Strategy::FilteredFlush => Strategy::FilteredDump,
                s => s,
            };
            rep.plans.push(FamilyPlan {
                family: family_of_af(af),
                strategy,
                filters: idx.len(),
            });
            let found: Vec<(Flow, usize)> = match strategy {
                Strategy::FullDump => self.collect_full(af, filters, &idx, usize::MAX, &mut rep),
                Strategy::PortDump => self.collect_by_port(af, filters, &idx, usize::MAX, &mut rep),
                Strategy::FilteredDump | Strategy::FilteredFlush => {
                    self.collect_filtered(filters, &idx, usize::MAX, &mut rep)
                }
            };
            flows.extend(found.into_iter().map(|(f, _)| f));
        }
        let per_filter = rep
            .per_filter
            .iter()
            .map(|r| match (r.errno, r.incomplete) {
                (Some(e), _) => ListOutcome::Failed(e),
                (None, true) => ListOutcome::Incomplete,
                (None, false) => ListOutcome::Complete,
            })
            .collect();
        let report = ListReport {
            flows,
            per_filter,
            walks: rep.walks as usize,
            plans: rep.plans,
            scanned: rep.scanned,
            dump_retries: rep.dump_retries,
        };
        tracing::debug!(
            flows = report.flows.len(),
            walks = report.walks,
            plans = %crate::plans_text(&report.plans),
            "conntrack list done"
        );
        report
    }

    /// Delete exactly these entries, by original tuple, CTA_ZONE (when not 0) and
    /// CTA_ID (when known: an entry with the same tuple but another id, i.e. a newer
    /// one, is kept and the answer is ENOENT): `delete_batch` requests per sendmsg, one
    /// ACK each, unanswered requests resent as [`Conntrack::delete`] does. One outcome
    /// per flow, in order. No work cap: the caller chooses how many to give.
    pub fn delete_flows(&mut self, flows: &[Flow]) -> Vec<FlowOutcome> {
        let mut out = vec![FlowOutcome::Unacked; flows.len()];
        self.delete_each(
            flows.len(),
            &mut |i, m, seq| flows[i].put_delete(m, seq),
            &mut |i, answer| {
                out[i] = match answer {
                    DelAnswer::Acked(Some(0)) => FlowOutcome::Deleted,
                    DelAnswer::Acked(Some(libc::ENOENT)) => FlowOutcome::AlreadyGone,
                    DelAnswer::Acked(Some(errno)) => FlowOutcome::Failed(errno),
                    DelAnswer::Acked(None) => FlowOutcome::Failed(libc::EPROTO),
                    DelAnswer::Unacked => FlowOutcome::Unacked,
                    DelAnswer::SendFailed(e) => {
                        FlowOutcome::Failed(e.raw_os_error().unwrap_or(libc::EIO))
                    }
                    DelAnswer::RecvFailed(_) => FlowOutcome::Failed(libc::EIO),
                }
            },
        );
        let count = |o: FlowOutcome| out.iter().filter(|&&x| x == o).count();
        let failed = out
            .iter()
            .filter(|o| matches!(o, FlowOutcome::Failed(_)))
            .count();
        if failed > 0 || count(FlowOutcome::Unacked) > 0 {
            tracing::warn!(
                flows = flows.len(),
                failed,
                unacked = count(FlowOutcome::Unacked),
                first_errno = out
                    .iter()
                    .find_map(|o| match o {
                        FlowOutcome::Failed(e) => Some(*e),
                        _ => None,
                    })
                    .unwrap_or(0),
                "conntrack deletes by flow not all answered"
            );
        }
        tracing::debug!(
            flows = flows.len(),
            deleted = count(FlowOutcome::Deleted),
            already_gone = count(FlowOutcome::AlreadyGone),
            "conntrack delete by flow done"
        );
        out
    }
}
