//! One sync, carried out: bring the compiler up to date, commit the planned batch (if
//! the kernel refuses it: planned again without the service ports it is to blame on),
//! then clear the conntrack state the commit contradicts. The order is
//! [`Engine::sync_once`]'s: commit, then clear.

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};

use nft_model::Op;

use crate::conntrack::Cleaned;
use crate::engine::Engine;
use crate::kernel::{Clock, CommitStats, ConntrackKernel, NftKernel};
use crate::ledger::View;
use crate::plan::{self, Base, Kernel, Plan, Why};
use crate::{compile, isolate, our_tables, EngineError, SyncReport};

/// How often one sync plans its batch again without the service ports a refusal is to
/// blame on, before it replaces our tables.
const MAX_EXCLUSIONS: usize = 4;

/// How often one commit is planned again after the generation moved under it: read
/// back (the generation moved for an unknown reason) ...
const MAX_READS: usize = 3;
/// ... and in all (the others only moved it for other programs' tables: planned again
/// from what we know, at no cost).
const MAX_TRIES: usize = 20;

/// Why a commit did not happen.
pub(crate) enum Failure {
    /// The kernel refused the batch (it changed nothing): the batch and the answer.
    Refused {
        error: EngineError,
        ops: Vec<Op>,
    },
    Other(EngineError),
}

/// What the schedule must do after a successful sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Followup {
    #[default]
    None,
    /// Someone committed right after us: verify with a full sync at once.
    Repair,
    /// The generation could not be read after our commit: the next sync is a full one.
    Verify,
}

/// A committed plan.
pub(crate) struct Committed {
    why: Why,
    ops: usize,
    stats: CommitStats,
    commit: Duration,
    committed_at: SystemTime,
    /// UDP destinations the tables read back did not serve (a commit planned from them).
    pub(crate) served: BTreeSet<ruleset::UdpDest>,
    followup: Followup,
}

impl<N: NftKernel, C: ConntrackKernel + 'static, K: Clock> Engine<N, C, K> {
    /// Sync now: compile, commit one atomic batch, then (only on success) clear the
    /// conntrack targets. A failed sync changes nothing, keeps its targets pending and
    /// is retried with a backoff.
    pub fn sync(&mut self) -> Result<SyncReport, EngineError> {
        if !self.listed() {
            return Err(EngineError::NotListed);
        }
        let now = self.clock.now();
        self.schedule.attempt(now);
        // a periodic or forced full sync (its batch is still the compiler's when the
        // generation shows the kernel holds our last commit)
        let full = self.ledger.held().is_none() || self.schedule.full_due(now);
        match self.sync_once(full) {
            Ok((report, followup)) => {
                self.synced(now, &report, followup);
                Ok(report)
            }
            Err(e) => {
                self.sync_failed(&e);
                Err(e)
            }
        }
    }

    /// One sync: the compiler brought up to date, the batch committed, then the
    /// conntrack entries the new rules contradict deleted (never before the commit:
    /// kubernetes PR #98305).
    fn sync_once(&mut self, full: bool) -> Result<(SyncReport, Followup), EngineError> {
        let t0 = Instant::now();
        self.advance();
        let compile = t0.elapsed();
        let mut committed = self.commit_or_exclude()?;
        let cleaned = self.ct_committed(std::mem::take(&mut committed.served));
        Ok(self.report(committed, cleaned, compile, full))
    }

    /// Bring the compiler up to date with what changed (leaving the skipped service
    /// ports out), keeping the net change since the last commit.
    pub(crate) fn advance(&mut self) {
        let changes = std::mem::take(&mut self.changes);
        self.advance_with(changes);
    }

    /// [`Engine::advance`] with these changes (a skipped port's retry names only its
    /// service, leaving the others' changes to the next sync).
    pub(crate) fn advance_with(&mut self, changes: ruleset::Changes) {
        let built = self.compiler.is_none();
        let step = compile::advance(
            &mut self.compiler,
            &mut self.building,
            &self.cluster,
            &self.cfg.ruleset,
            &self.skips.excluded(),
            changes,
        );
        self.udp_touched.extend(step.udp_touched);
        // the owner as of our last commit is the first one heard of
        for (d, port) in step.udp_released {
            self.udp_released.entry(d).or_insert(port);
        }
        self.judge_full |= step.full;
        // the compiler's batch starts from our last commit only once one was made with
        // this compiler
        self.ledger.compiled(step.ops, built);
    }

    /// Commit; a refused batch is planned again without the service ports it is to
    /// blame on (skipped, checked later), and committed at once; a refusal no port
    /// explains replaces our tables in one batch (our idea of them may be wrong).
    fn commit_or_exclude(&mut self) -> Result<Committed, EngineError> {
        let mut unexplained = None;
        for _ in 0..MAX_EXCLUSIONS {
            let (error, ops) = match self.commit(false) {
                Ok(c) => return Ok(c),
                Err(Failure::Other(e)) => return Err(e),
                Err(Failure::Refused { error, ops }) => (error, ops),
            };
            let suspects = self
                .compiler
                .as_ref()
                .map(|c| isolate::suspects(c, &error, &ops))
                .unwrap_or_default();
            if suspects.is_empty() {
                unexplained = Some(error);
                break;
            }
            self.suspect(suspects);
            self.advance();
        }
        if let Some(e) = &unexplained {
            tracing::warn!(error = %e,
                "the kernel refused our batch and no service port explains it; replacing our tables from the desired state in one batch");
        }
        match self.commit(true) {
            Ok(c) => Ok(c),
            Err(Failure::Refused { error, .. } | Failure::Other(error)) => {
                if unexplained.is_some() {
                    tracing::error!(error = %error, "the kernel refuses our tables even replaced; retrying later");
                }
                Err(error)
            }
        }
    }

    /// Service ports a refusal is to blame on: left out from now on, each checked soon.
    fn suspect(&mut self, suspects: std::collections::BTreeMap<ruleset::names::PortId, String>) {
        for (p, error) in &suspects {
            tracing::warn!(service = %p.service, port = %p.port_name, error = %error,
                "the kernel refused a batch with this service port's rules; leaving it out, every other change is committed now");
        }
        let now = self.clock.now();
        let (initial, max) = self.skip_backoff();
        self.skips.suspect(suspects, now, initial, max);
        self.publish_skipped();
    }

    /// Plan and commit one batch, guarded by the generation it was planned against
    /// (re-planned when the generation moved meanwhile, up to three times).
    pub(crate) fn commit(&mut self, replace: bool) -> Result<Committed, Failure> {
        let (mut tries, mut reads) = (0, 0);
        loop {
            tries += 1;
            let kernel = self.read_kernel().map_err(Failure::Other)?;
            reads += usize::from(matches!(kernel, Kernel::Read { .. }));
            if let (Kernel::Read { tables, .. }, Some(c)) = (&kernel, self.compiler.as_mut()) {
                // the set sizes our tables hold, where still enough: a diff from them
                // declares no set again for its size alone
                c.adopt_sizes(plan::known_tables(tables));
            }
            let plan = self.plan(kernel, replace)?;
            let t = Instant::now();
            self.ct_begin();
            let result = if plan.ops.is_empty() {
                Ok(CommitStats::default())
            } else {
                self.commit_unheard(&plan.ops, plan.genid)
            };
            match result {
                Ok(stats) => return Ok(self.take_commit(plan, stats, t.elapsed())),
                Err(EngineError::Nft(nft_netlink::NftError::GenerationChanged { .. }))
                    if reads < MAX_READS && tries < MAX_TRIES =>
                {
                    self.ct_aborted();
                    // another program's commit to its own tables leaves ours as planned
                    let now = self.nft.generation().map_err(Failure::Other)?;
                    if !self.others_only(plan.genid, now) {
                        tracing::debug!("ruleset changed under us; re-reading and retrying");
                        self.ledger.lost();
                    } else {
                        self.ledger.moved_on(plan.genid, now);
                    }
                }
                Err(e) if e.is_rejection() => {
                    self.ct_aborted();
                    return Err(Failure::Refused {
                        error: e,
                        ops: plan.ops,
                    });
                }
                Err(e) => {
                    if outcome_unknown(&e) {
                        self.ct_unknown();
                    } else {
                        self.ct_aborted();
                    }
                    self.ledger.lost();
                    return Err(Failure::Other(e));
                }
            }
        }
    }

    /// What we know of the kernel: it holds our last commit (its generation is the one
    /// that commit produced, and the compiler's batch starts from it), or our tables
    /// as read back.
    fn read_kernel(&mut self) -> Result<Kernel, EngineError> {
        let genid = self.nft.generation()?;
        if let Some(ours) = self.ledger.held().filter(|g| *g != genid) {
            if self.ledger.incremental() && self.others_only(ours, genid) {
                self.ledger.moved_on(ours, genid);
            }
        }
        let since_ours = match self.ledger.view(genid) {
            View::Trusted { genid, ops } => return Ok(Kernel::Trusted { genid, ops }),
            View::Unknown { since_ours } => since_ours,
        };
        // a dump the generation moved under is good when only other tables changed
        let heard = self.heard.clone();
        let ledger = &self.ledger;
        let mut others_only = |a: u32, b: u32| {
            heard.as_ref().is_some_and(|h| {
                h.others_only(a, b, &|g| ledger.is_ours(g), crate::engine::HEARD_WAIT)
            })
        };
        let mut tables = Vec::new();
        for t in our_tables() {
            let b = match self.nft.dump_table(&t, &mut others_only) {
                Ok(tab) => Base::Known(tab),
                Err(EngineError::Nft(e @ nft_netlink::NftError::Decode { .. })) => {
                    tracing::warn!(family = t.family.nft_name(), table = %t.name, error = %e,
                        "our table cannot be read back; replacing it");
                    Base::Unreadable
                }
                Err(e) => return Err(e),
            };
            tables.push((t, b));
        }
        Ok(Kernel::Read {
            genid,
            tables,
            since_ours,
        })
    }

    fn plan(&self, kernel: Kernel, replace: bool) -> Result<Plan, Failure> {
        let Some(compiler) = self.compiler.as_ref() else {
            return Err(Failure::Other(EngineError::Other(
                "no compiler after compiling".into(),
            )));
        };
        let want = plan::Desired { compiler, replace };
        Ok(plan::plan(kernel, &want))
    }

    /// Commit; a large batch with the watcher's subscription dropped (see
    /// [`crate::kernel::Listening`]), taken again before anything else reads the kernel. If it cannot be taken again, the watcher
    /// is deaf from then on: logged, and the periodic resyncs are what remains.
    fn commit_unheard(&mut self, ops: &[Op], genid: u32) -> Result<CommitStats, EngineError> {
        // the kernel builds a notification per element: a cold start's few packed
        // element lists hold the whole ruleset
        let weight: usize = ops.iter().map(|o| o.element_count().max(1)).sum();
        let quiet = (self.listening.as_ref()).filter(|_| weight > self.cfg.quiet_above_ops);
        let dropped = match quiet.map(|l| l.set(false)) {
            Some(Ok(())) => true,
            Some(Err(e)) => {
                tracing::debug!(error = %e, "cannot drop the nftables watcher's subscription; committing heard");
                false
            }
            None => false,
        };
        let result = self.nft.commit(ops, Some(genid));
        if dropped {
            if let Some(Err(e)) = self.listening.as_ref().map(|l| l.set(true)) {
                tracing::error!(error = %e,
                    "cannot listen to nftables notifications again after our commit; relying on periodic resyncs");
                self.listening = None;
            }
        }
        result
    }

    /// The kernel holds the plan's batch now: trust it, take its cleanup targets.
    fn take_commit(&mut self, plan: Plan, stats: CommitStats, commit: Duration) -> Committed {
        let mut followup = Followup::None;
        let expected = self.ledger.committed(plan.genid, plan.ops.is_empty());
        if !plan.ops.is_empty() {
            match self.nft.generation() {
                Ok(g) if g == expected => {}
                // others committed right after us, to their own tables only
                Ok(g) if self.others_only(expected, g) => self.ledger.moved_on(expected, g),
                // Someone committed right after us: verify on the next sync.
                Ok(_) => followup = Followup::Repair,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the generation after a commit");
                    followup = Followup::Verify;
                }
            }
        }
        if let Some(c) = self.compiler.as_mut() {
            c.confirm();
        }
        for p in self.skips.committed() {
            tracing::info!(service = %p.service, port = %p.port_name,
                "service port accepted by the kernel again; no longer skipped");
        }
        self.publish_skipped();
        Committed {
            why: plan.why,
            ops: plan.ops.len(),
            stats,
            commit,
            committed_at: SystemTime::now(),
            served: plan.became_served,
            followup,
        }
    }

    fn report(
        &mut self,
        c: Committed,
        cleaned: Cleaned,
        compile: Duration,
        full: bool,
    ) -> (SyncReport, Followup) {
        if let Some(comp) = self.compiler.as_ref() {
            let conflicts = comp.errors();
            self.note_conflicts(&conflicts);
        }
        let since_event = self
            .schedule
            .queued_since()
            .map(|q| self.clock.now().saturating_duration_since(q));
        if c.why == Why::Repair && c.ops > 0 {
            tracing::warn!("our nftables tables were changed by another program; repaired");
        }
        let report = SyncReport {
            full: full || c.why != Why::Incremental,
            kind: c.why.name(),
            repaired: c.why == Why::Repair && c.ops > 0,
            services: self.cluster.services.len(),
            endpoints: self.endpoints,
            ops: c.ops,
            bytes: c.stats.bytes,
            compile,
            commit: c.commit,
            conntrack: cleaned.took,
            conntrack_deleted: cleaned.deleted,
            conntrack_targets: cleaned.targets,
            conntrack_pending: self.status.read(|s| s.cleanup_pending),
            errors: self.problems(),
            committed_at: Some(c.committed_at),
            since_event,
            trigger_times: std::mem::take(&mut self.trigger_times),
            conntrack_filters: cleaned.filters,
        };
        (report, c.followup)
    }

    /// The problems to report: invalid objects, slices of unknown services, the
    /// compiler's (bad ports, conflicts) and the skipped ports. Work proportional to the
    /// problems.
    fn problems(&self) -> Vec<String> {
        let mut errors: Vec<String> = self.model_errors.values().flatten().cloned().collect();
        errors.extend(self.orphans.values().flatten().cloned());
        if let Some(c) = &self.compiler {
            errors.extend(c.errors().iter().map(ToString::to_string));
        }
        errors.extend(self.skips.messages());
        errors
    }
}

/// Whether a failed commit may still have been applied (its answer was lost): the
/// kernel refused it, or the generation guard stopped it, or it was never encoded, are
/// known to have changed nothing.
fn outcome_unknown(e: &EngineError) -> bool {
    use nft_netlink::NftError as E;
    !matches!(
        e,
        EngineError::Nft(
            E::Rejected(_) | E::BatchFailed(_) | E::GenerationChanged { .. } | E::Encode(_)
        )
    )
}
