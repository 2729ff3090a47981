//! The conntrack cleanup after committed batches (the engine's side; the pending
//! targets and their record in our tables are [`crate::pending`]'s).
//!
//! Every target stays pending until the kernel proves it finished (deleted, or already
//! gone); capped, incomplete and failed targets are retried, failed and incomplete ones
//! with an exponential backoff. Work is done in bounded slices (at most
//! `cleanup_slice_targets` targets per kernel call). A slice runs on the engine's thread
//! right after the commit (`Engine::sync` called directly: tests, `--once`), or, under
//! [`crate::run`], on a worker thread of its own while the engine goes on syncing
//! ([`crate::slice`]): a kernel walk of a large conntrack table then never delays the
//! next sync, and a slice is still only ever taken after the commit that made its
//! targets. Finished targets leave our tables in an element-only batch. Without
//! ctnetlink the targets wait and the socket is opened again periodically.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::compile::families;
use crate::engine::Engine;
use crate::kernel::{CleanupOutcome, Clock, ConntrackKernel, FilterDetail, NftKernel};
use crate::pending::{family_of, recorded_ops};
use crate::slice::{Slice, SliceDone};
use crate::targets::Target;
use crate::{next_generation, CleanupReport};
use kube_model::IpFamily;
use proxy_status::FilterWork;

/// What one cleanup slice did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// Targets worked on.
    pub targets: usize,
    /// Targets finished.
    pub done: usize,
    /// Conntrack entries deleted (as far as the kernel says).
    pub deleted: u64,
    pub took: Duration,
    /// Each target worked on, and how (for the metrics).
    pub filters: Vec<FilterWork>,
}

/// A target's outcome and strategy for the metrics.
fn filter_work(t: &Target, d: FilterDetail) -> FilterWork {
    let v6 = match *t {
        Target::Dst { addr, .. } | Target::Endpoint { addr, .. } => addr.is_ipv6(),
        Target::NodePort { v6, .. } => v6,
    };
    FilterWork {
        family: if v6 { IpFamily::V6 } else { IpFamily::V4 },
        strategy: d.strategy.map(|s| match s {
            ct_netlink::Strategy::FilteredFlush => "filtered-flush",
            ct_netlink::Strategy::FilteredDump => "filtered-dump",
            ct_netlink::Strategy::FullDump => "full-dump",
            ct_netlink::Strategy::PortDump => "port-dump",
        }),
        outcome: match d.outcome {
            CleanupOutcome::Deleted { .. } => "deleted",
            CleanupOutcome::AlreadyGone => "already-gone",
            CleanupOutcome::Capped => "capped",
            CleanupOutcome::Incomplete => "incomplete",
            CleanupOutcome::Failed => "failed",
        },
        deleted: d.deleted,
    }
}

impl<N: NftKernel, C: ConntrackKernel, K: Clock> Engine<N, C, K> {
    /// Open the conntrack socket when it is unavailable and the re-probe is due.
    pub(crate) fn reprobe_conntrack(&mut self) {
        let now = self.clock.now();
        if self.ct.kernel.is_some()
            || self.ct.lent
            || self.ct.unavailable.as_ref().is_some_and(|u| u.1 > now)
        {
            return;
        }
        let Some(open) = self.ct.opener.as_mut() else {
            return;
        };
        match open() {
            Ok(c) => {
                if self.ct.unavailable.is_some() {
                    tracing::info!(
                        pending = self.pending.len(),
                        "conntrack cleanup available again"
                    );
                }
                self.ct.kernel = Some(c);
                self.ct.unavailable = None;
                self.status.update(|s| s.cleanup_unavailable = None);
            }
            Err(e) => {
                let reason = e.to_string();
                let again = now + self.cfg.conntrack_reprobe;
                if self.ct.unavailable.as_ref().map(|u| &u.0) != Some(&reason) {
                    tracing::error!(error = %reason, retry_s = self.cfg.conntrack_reprobe.as_secs(),
                        "conntrack cleanup unavailable (no ctnetlink); rules are still programmed, cleanup targets wait");
                }
                self.status
                    .update(|s| s.cleanup_unavailable = Some(reason.clone()));
                self.ct.unavailable = Some((reason, again));
            }
        }
    }

    /// When the conntrack socket is to be opened again (None: it is open, or cannot be).
    pub(crate) fn reprobe_due(&self) -> Option<Instant> {
        if self.ct.lent {
            return None;
        }
        match (&self.ct.kernel, &self.ct.opener, &self.ct.unavailable) {
            (None, Some(_), Some((_, at))) => Some(*at),
            (None, Some(_), None) => Some(self.clock.now()),
            _ => None,
        }
    }

    /// When the next cleanup slice is due (None: nothing pending, or no conntrack).
    pub(crate) fn cleanup_due(&self) -> Option<Instant> {
        self.ct.kernel.as_ref()?;
        self.pending.next_due()
    }

    /// One bounded slice on this thread: delete the entries of the targets due now (at
    /// most `cleanup_slice_targets`, those of `first` before the others), record each
    /// outcome, then remove the finished targets from our tables. Only after a
    /// successful commit.
    pub(crate) fn cleanup_slice(&mut self, first: &BTreeSet<Target>) -> Cleaned {
        match self.take_slice(first) {
            Some(slice) => self.finish_slice(slice.run()),
            None => Cleaned::default(),
        }
    }

    /// Take the targets due now (at most `cleanup_slice_targets`, those of `first`
    /// before the others) and lend them the conntrack kernel. None: nothing due, or no
    /// kernel (unavailable, or lent to a slice still running).
    pub(crate) fn take_slice(&mut self, first: &BTreeSet<Target>) -> Option<Slice<C>> {
        self.ct.kernel.as_ref()?;
        let due = self.pending.due(
            self.clock.now(),
            self.cfg.cleanup_slice_targets.max(1),
            first,
        );
        if due.is_empty() {
            return None;
        }
        let kernel = self.ct.kernel.take()?;
        self.ct.lent = true;
        let targets = due
            .into_iter()
            .map(|t| {
                let renewed = self.pending.renewed(&t);
                (t, renewed)
            })
            .collect();
        Some(Slice { kernel, targets })
    }

    /// A slice that ran: the kernel back, each outcome recorded (a target renewed by a
    /// commit while the slice ran stays pending), the finished targets removed from our
    /// tables.
    pub(crate) fn finish_slice(&mut self, done: SliceDone<C>) -> Cleaned {
        self.ct.kernel = Some(done.kernel);
        self.ct.lent = false;
        let mut out = Cleaned {
            targets: done.targets.len(),
            took: done.took,
            ..Cleaned::default()
        };
        let outcomes = done.result.unwrap_or_else(|e| {
            tracing::warn!(error = %e, targets = done.targets.len(), "conntrack cleanup failed; retrying with a backoff");
            Vec::new()
        });
        let now = self.clock.now();
        let mut failed = 0usize;
        for (i, (t, renewed)) in done.targets.iter().enumerate() {
            let d = outcomes.get(i).copied().unwrap_or(FilterDetail {
                outcome: CleanupOutcome::Failed,
                strategy: None,
                deleted: Some(0),
            });
            out.filters.push(filter_work(t, d));
            let o = d.outcome;
            if let CleanupOutcome::Deleted { entries: Some(n) } = o {
                out.deleted += n;
            }
            if o == CleanupOutcome::Failed {
                failed += 1;
            }
            if self.pending.record(
                t,
                *renewed,
                o,
                now,
                self.cfg.retry_initial,
                self.cfg.retry_max,
            ) {
                out.done += 1;
            } else {
                tracing::trace!(target_filter = %t.filter(), outcome = %o, "conntrack cleanup target not finished; pending");
            }
        }
        if failed > 0 {
            self.status.update(|s| s.conntrack_failures += 1);
        }
        if out.done > 0 {
            self.forget_finished();
        }
        self.publish_pending();
        tracing::trace!(
            targets = out.targets,
            done = out.done,
            failed,
            deleted = out.deleted,
            pending = self.pending.len(),
            "conntrack cleanup slice"
        );
        out
    }

    /// Remove finished targets from our tables (one element-only batch, guarded by our
    /// last generation). On failure they stay recorded: the next sync's batch removes
    /// them, or a restart cleans them once more (harmless).
    fn forget_finished(&mut self) {
        let (Some(gen), Some(c)) = (self.trust, self.compiler.as_ref()) else {
            return;
        };
        let families = families(c);
        let want: BTreeSet<Target> = self
            .pending
            .targets()
            .filter(|t| families.contains(&family_of(t)))
            .copied()
            .collect();
        let ops = recorded_ops(&families, &self.recorded, &want);
        if ops.is_empty() {
            return;
        }
        match self.nft.commit(&ops, Some(gen)) {
            Ok(_) => {
                let g = next_generation(gen);
                self.our_generation(g);
                self.trust = Some(g);
                self.recorded = want;
            }
            Err(e) => {
                tracing::debug!(error = %e, "removing finished cleanup targets from our tables; left for the next sync");
            }
        }
    }

    /// Pending count and age into the status.
    pub(crate) fn publish_pending(&self) {
        let (n, oldest) = (self.pending.len(), self.pending.oldest());
        self.status.update(|s| {
            s.cleanup_pending = n;
            s.cleanup_oldest_pending = oldest;
        });
    }

    /// A cleanup slice between syncs (when due): on the worker when there is one (the
    /// targets of the latest commits first; reported when it comes back,
    /// [`Engine::slice_done`]), otherwise here, reported to the observer.
    pub(crate) fn cleanup_turn(&mut self) {
        let Some(worker) = self.cleaner.clone() else {
            let c = self.cleanup_slice(&BTreeSet::new());
            self.report_slice(c);
            return;
        };
        let fresh = std::mem::take(&mut self.fresh);
        let Some(slice) = self.take_slice(&fresh) else {
            return;
        };
        if let Err(flume::SendError(slice)) = worker.send(slice) {
            tracing::warn!("the conntrack cleanup worker is gone; cleaning on the engine's thread");
            self.cleaner = None;
            let c = self.finish_slice(slice.run());
            self.report_slice(c);
        }
    }

    /// A slice the worker ran: its outcomes recorded, reported to the observer.
    pub fn slice_done(&mut self, done: SliceDone<C>) {
        let c = self.finish_slice(done);
        self.report_slice(c);
    }

    /// Slices run beside the engine from now on: sent to `worker`, which runs each
    /// ([`Slice::run`]) and hands it back to [`Engine::slice_done`]. Syncs no longer
    /// clean inline; their targets go to the next slice first.
    pub fn clean_beside(&mut self, worker: flume::Sender<Slice<C>>) {
        self.cleaner = Some(worker);
    }

    /// The cleanup thread ended (it panicked): slices run on this thread from now on; a
    /// kernel it held is lost, so the socket is opened again when the engine has an
    /// opener. The pending targets stay (recorded in our tables).
    pub fn cleaner_gone(&mut self) {
        self.cleaner = None;
        if self.ct.lent {
            self.ct.lent = false;
            tracing::error!(
                pending = self.pending.len(),
                "the conntrack cleanup thread ended; its socket is lost, opening a new one"
            );
        }
    }

    fn report_slice(&mut self, c: Cleaned) {
        let r = CleanupReport {
            targets: c.targets,
            done: c.done,
            deleted: c.deleted,
            took: c.took,
            pending: self.pending.len(),
            filters: c.filters,
        };
        if c.targets > 0 {
            tracing::debug!(
                targets = r.targets,
                done = r.done,
                deleted = r.deleted,
                pending = r.pending,
                took_ms = r.took.as_secs_f64() * 1e3,
                "conntrack cleanup between syncs"
            );
            self.observer.cleaned(&r);
        }
    }
}
