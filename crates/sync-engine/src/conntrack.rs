//! The engine's side of the conntrack cleanup ([`crate::cleaner`]): it is told of every
//! commit (before it is sent, and its outcome with what it changed) and, when it runs on
//! the engine's thread, does its work right after the commit and between syncs.

use std::collections::BTreeSet;
use std::time::Instant;

use kube_model::IpFamily;
use proxy_status::CleanupReport;
use ruleset::{NodePortAddrs, UdpDest};

use crate::cleaner::{Cleaner, ToCleaner};
use crate::engine::{BesideTx, CtLink, Engine};
use crate::kernel::{Clock, ConntrackKernel, NftKernel};
use crate::stale::{Delta, Frontend, NodePortScope};

/// What the cleanup did right after a commit (on the engine's thread), for the sync's
/// report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// Destinations whose flows are judged again, and flows judged stale.
    pub targets: usize,
    /// Conntrack entries deleted.
    pub deleted: u64,
    pub took: std::time::Duration,
    pub filters: Vec<proxy_status::FilterWork>,
}

/// At most this many cleanup jobs right after a commit on the engine's thread (the
/// listing of what it changed, then one batch of deletes); the rest between syncs.
const JOBS_AFTER_COMMIT: usize = 2;

impl<N: NftKernel, C: ConntrackKernel + 'static, K: Clock> Engine<N, C, K> {
    /// A commit is about to be sent: the cleanup judges nothing until its outcome.
    pub(crate) fn ct_begin(&mut self) {
        if !self.cfg.conntrack_cleanup {
            return;
        }
        match self.ct.as_mut() {
            Some(CtLink::Here(c)) => c.begin(),
            Some(CtLink::Beside(tx)) => tx.send(ToCleaner::Begin),
            None => {}
        }
    }

    /// The commit was refused: nothing changed.
    pub(crate) fn ct_aborted(&mut self) {
        if !self.cfg.conntrack_cleanup {
            return;
        }
        let now = self.clock.now();
        match self.ct.as_mut() {
            Some(CtLink::Here(c)) => {
                c.aborted(now);
            }
            Some(CtLink::Beside(tx)) => tx.send(ToCleaner::Aborted),
            None => {}
        }
    }

    /// The commit's outcome is unknown (its answer was lost): the cleanup keeps holding
    /// what it learns, and the next successful commit tells it the whole state.
    pub(crate) fn ct_unknown(&mut self) {
        self.judge_full = true;
    }

    /// The commit succeeded: tell the cleanup what changed (`served`: destinations the
    /// tables read back did not serve, on a commit planned from them); on the engine's
    /// thread, do its work now.
    pub(crate) fn ct_committed(&mut self, served: BTreeSet<UdpDest>) -> Cleaned {
        self.udp_touched.extend(served);
        let delta = self.delta();
        let targets = delta.dests.len();
        if !self.cfg.conntrack_cleanup {
            return Cleaned {
                targets,
                ..Cleaned::default()
            };
        }
        let now = self.clock.now();
        match self.ct.as_mut() {
            Some(CtLink::Here(c)) => {
                let t0 = Instant::now();
                let j = c.committed(delta, now);
                let reports = c.work(now, JOBS_AFTER_COMMIT);
                let mut out = Cleaned {
                    targets: targets + j.stale,
                    took: t0.elapsed(),
                    ..Cleaned::default()
                };
                for r in reports {
                    out.deleted += r.deleted;
                    out.filters.extend(r.filters);
                }
                out
            }
            Some(CtLink::Beside(tx)) => {
                tx.send(ToCleaner::Committed(delta));
                Cleaned {
                    targets,
                    ..Cleaned::default()
                }
            }
            None => Cleaned::default(),
        }
    }

    /// What the last commit changed for the cleanup: the touched destinations with
    /// their serving endpoints now, and where NodePorts are served; everything when the
    /// cleanup must judge everything again.
    fn delta(&mut self) -> Delta {
        let touched = std::mem::take(&mut self.udp_touched);
        let released = std::mem::take(&mut self.udp_released);
        let full = std::mem::take(&mut self.judge_full);
        let Some(c) = self.compiler.as_ref() else {
            return Delta::default();
        };
        // (a full replacement names every frontend, and those deleted since our last
        // commit: their flows are judged once, as upstream judges deleted ports)
        let dests: BTreeSet<UdpDest> = if full {
            let mut all = c.udp_dests();
            all.extend(touched);
            all
        } else {
            touched
        };
        let local = &self.cfg.ruleset.local_addresses;
        let scope = |fam: IpFamily| match c.nodeport_addrs(fam) {
            None => NodePortScope::None,
            Some(NodePortAddrs::Addrs(a)) => NodePortScope::Addrs(a.into_iter().collect()),
            Some(NodePortAddrs::AllLocal) => {
                let mine: BTreeSet<_> = local
                    .iter()
                    .filter(|a| IpFamily::of(a) == fam)
                    .copied()
                    .collect();
                if mine.is_empty() {
                    NodePortScope::Any
                } else {
                    NodePortScope::Addrs(mine)
                }
            }
        };
        Delta {
            full,
            dests: dests
                .into_iter()
                .map(|d| {
                    let f = match c.udp_serving(&d) {
                        Some(s) => Frontend::Serving(s),
                        // deleted since our last commit, and not back since (a
                        // service deleted and created again is no deletion)
                        None if released
                            .get(&d)
                            .is_some_and(|p| !c.is_udp_port(p, d.family())) =>
                        {
                            Frontend::Deleted
                        }
                        None => Frontend::Released,
                    };
                    (d, f)
                })
                .collect(),
            nodeports: [Some(scope(IpFamily::V4)), Some(scope(IpFamily::V6))],
        }
    }

    /// When cleanup work on the engine's thread is due.
    pub(crate) fn cleanup_due(&self) -> Option<Instant> {
        if !self.cfg.conntrack_cleanup {
            return None;
        }
        match self.ct.as_ref() {
            Some(CtLink::Here(c)) => c.next_due(),
            _ => None,
        }
    }

    /// One cleanup job between syncs, on the engine's thread; reported to the observer.
    pub(crate) fn cleanup_turn(&mut self) -> usize {
        let now = self.clock.now();
        let reports = match self.ct.as_mut() {
            Some(CtLink::Here(c)) => c.work(now, 1),
            _ => Vec::new(),
        };
        let n = reports.len();
        for r in reports {
            self.cleaned(r);
        }
        n
    }

    /// A cleanup job's report (on this thread, or from beside): logged, to the observer.
    pub fn cleaned(&mut self, r: CleanupReport) {
        if r.targets == 0 {
            return;
        }
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

    /// Move the cleanup beside the engine: the caller runs it (`cleaner::beside`) and
    /// hands its channel to [`Engine::clean_beside`]. None: it already runs beside.
    pub fn take_cleaner(&mut self) -> Option<Cleaner<C>> {
        match self.ct.take() {
            Some(CtLink::Here(c)) => Some(*c),
            other => {
                self.ct = other;
                None
            }
        }
    }

    /// The cleanup runs beside the engine from now on, told of commits on `tx`.
    pub fn clean_beside(&mut self, tx: flume::Sender<ToCleaner>) {
        self.ct = Some(CtLink::Beside(BesideTx(tx)));
    }

    /// Put a cleaner back on the engine's thread (its thread could not start).
    pub fn clean_here(&mut self, c: Cleaner<C>) {
        self.ct = Some(CtLink::Here(Box::new(c)));
    }
}
