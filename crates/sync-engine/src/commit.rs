//! One sync's kernel side: read our tables back (or trust the in-memory copy), commit
//! the batch guarded by the generation it was computed against, then hand over to the
//! conntrack cleanup.

use std::collections::BTreeSet;
use std::time::Instant;

use ruleset::names::PortId;

use crate::cleanup::{self, Cleaned};
use crate::engine::Engine;
use crate::kernel::{Clock, CommitStats, ConntrackKernel, NftKernel};
use crate::plan::{self, Base, Bases};
use crate::targets::Target;
use crate::{next_generation, our_tables, EngineError, SyncReport};

/// How a sync's batch is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The minimal diff from what the kernel holds.
    Diff,
    /// Delete our tables and create them from the desired state, in the same batch (no
    /// moment without rules): after the kernel refused a diff.
    Replace,
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

/// What a successful sync did: the report, whether it repaired a change by another
/// program, and what the schedule must do next.
pub(crate) struct Synced {
    pub report: SyncReport,
    pub repaired: bool,
    pub followup: Followup,
}

/// Our tables as read (or trusted) and the generation they belong to.
pub(crate) struct BaseRead {
    pub base: Bases,
    pub genid: u32,
    /// Read back over netlink (false: the kernel holds what we committed last).
    pub dumped: bool,
}

impl<N: NftKernel, C: ConntrackKernel, K: Clock> Engine<N, C, K> {
    /// Read our tables back: trust what we committed last when the generation is still
    /// `trusted` (nobody committed since) and `may_trust`, else dump our tables over
    /// netlink.
    pub(crate) fn read_base(
        &mut self,
        trusted: Option<u32>,
        may_trust: bool,
    ) -> Result<BaseRead, EngineError> {
        let genid = self.nft.generation()?;
        if let (true, Some(g), Some(c)) = (may_trust, trusted, self.compiler.as_ref()) {
            if g == genid {
                return Ok(BaseRead {
                    base: plan::ours(&plan::families(c)),
                    genid,
                    dumped: false,
                });
            }
        }
        let mut base = Vec::new();
        for t in our_tables() {
            let b = match self.nft.dump_table(&t) {
                Ok(tab) => Base::Known(tab),
                Err(EngineError::Nft(e @ nft_netlink::NftError::Decode { .. })) => {
                    tracing::warn!(family = t.family.nft_name(), table = %t.name, error = %e,
                        "our table cannot be read back; replacing it");
                    Base::Unreadable
                }
                Err(e) => return Err(e),
            };
            base.push((t, b));
        }
        Ok(BaseRead {
            base,
            genid,
            dumped: true,
        })
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
        errors.extend(self.skip_messages());
        errors
    }

    /// Bring the compiler up to date (leaving the `exclude`d service ports out), build
    /// the batch (`mode`), commit it (full: against what the kernel holds), then clear
    /// the conntrack targets. Until the batch is committed, what the kernel holds is
    /// unknown (the compiler is ahead of it): a failed attempt makes the next one read
    /// our tables back.
    pub(crate) fn attempt(
        &mut self,
        parsed: &ruleset::ParsedConfig,
        exclude: &BTreeSet<PortId>,
        mode: Mode,
        mut full: bool,
    ) -> Result<Synced, EngineError> {
        let t0 = Instant::now();
        let trusted = self.trust;
        let changes = std::mem::take(&mut self.changes);
        let step = plan::advance(&mut self.compiler, &self.cluster, parsed, exclude, changes);
        self.trust = None;
        self.serving.add(step.stopped, step.started);
        let Some(compiler) = self.compiler.as_ref() else {
            return Err(EngineError::Other("no compiler after compiling".into()));
        };
        let families = plan::families(compiler);
        let errors = self.problems();
        let compile = t0.elapsed();

        let mut tries = 0;
        let mut fresh = BTreeSet::new();
        loop {
            tries += 1;
            // The compiler's own batch applies when the kernel holds what we committed
            // last; otherwise the batch is a diff from the dump.
            let incremental = mode == Mode::Diff && step.ops.is_some() && trusted.is_some();
            let read = if incremental && !full {
                BaseRead {
                    base: plan::ours(&families),
                    genid: trusted.unwrap_or_default(),
                    dumped: false,
                }
            } else {
                self.read_base(trusted, step.ops.is_some())?
            };
            let Some(compiler) = self.compiler.as_ref() else {
                return Err(EngineError::Other("no compiler after compiling".into()));
            };
            let incremental = incremental && !read.dumped;
            // Targets implied by going from the kernel's rules to the desired ones; on
            // this process's first commit, also those a previous run recorded and did
            // not finish. They are recorded in our tables by the very batch that makes
            // them targets, and become pending (eligible for the cleanup) only once that
            // batch is committed; a failed attempt finds them again next time.
            let desired = (!incremental).then(|| compiler.tables());
            let mut found: BTreeSet<Target> = match &desired {
                None => step.became_served.clone(),
                Some(d) => plan::became_served(&read.base, d),
            };
            // Endpoints that stopped serving: on this process's first commit, those in
            // the endpoint maps of the tables the kernel holds and in none of the
            // desired ones; afterwards, the net change the compiler reported since the
            // last commit.
            if !self.applied {
                if let (true, Some(d)) = (read.dumped, &desired) {
                    found.extend(plan::gone_from_tables(&read.base, d));
                }
            } else {
                found.extend(
                    self.serving
                        .stopped()
                        .map(|&(addr, port)| Target::Endpoint { addr, port }),
                );
            }
            fresh.extend(found.iter().copied());
            let mut staged: BTreeSet<Target> = BTreeSet::new();
            let mut dropped = 0;
            if self.cfg.conntrack_cleanup {
                if !self.applied && read.dumped {
                    let resumed = cleanup::recorded_in(plan::known_tables(&read.base));
                    if !resumed.is_empty() {
                        tracing::info!(
                            targets = resumed.len(),
                            "resuming conntrack cleanup targets recorded by a previous run"
                        );
                    }
                    staged.extend(resumed);
                }
                staged.extend(found);
            } else {
                dropped = found.len();
            }
            let want: BTreeSet<Target> = self
                .pending
                .targets()
                .chain(staged.iter())
                .filter(|t| families.contains(&cleanup::family_of(t)))
                .copied()
                .collect();
            let mut repaired = false;
            let ops = match desired {
                None => {
                    let mut ops = step.ops.clone().unwrap_or_default();
                    ops.extend(cleanup::recorded_ops(&families, &self.recorded, &want));
                    ops
                }
                Some(mut d) => {
                    if let (Some(_), Some(ops), true) = (trusted, &step.ops, read.dumped) {
                        // We knew what the kernel held, but the generation moved: did
                        // another program change our tables?
                        let mut ours = ops.clone();
                        ours.extend(cleanup::recorded_ops(
                            &families,
                            &self.recorded,
                            &BTreeSet::new(),
                        ));
                        repaired = plan::drifted(&read.base, &ours, &d);
                        if repaired {
                            tracing::warn!(
                                "our nftables tables were changed by another program; repairing"
                            );
                        }
                    }
                    cleanup::record_in_tables(&mut d, want.iter());
                    match mode {
                        Mode::Diff => plan::batch(&read.base, d),
                        Mode::Replace => plan::replace(&read.base, d),
                    }
                }
            };
            // the dump is not needed any more: free it before the commit
            let genid = read.genid;
            drop(read);

            let t1 = Instant::now();
            let stats = if ops.is_empty() {
                CommitStats::default()
            } else {
                match self.nft.commit(&ops, Some(genid)) {
                    Ok(s) => s,
                    Err(EngineError::Nft(nft_netlink::NftError::GenerationChanged { .. }))
                        if tries < 3 =>
                    {
                        tracing::debug!("ruleset changed under us; re-reading and retrying");
                        full = true;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            };
            let commit = t1.elapsed();
            let committed_at = std::time::SystemTime::now();
            let since_event = self
                .schedule
                .queued_since()
                .map(|q| self.clock.now().saturating_duration_since(q));
            let mut followup = Followup::None;
            if !ops.is_empty() {
                let expected = next_generation(genid);
                self.our_gens.push(expected);
                self.trust = Some(expected);
                match self.nft.generation() {
                    Ok(g) if g == expected => {}
                    Ok(_) => {
                        // Someone committed right after us: verify on the next sync.
                        followup = Followup::Repair;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the generation after a commit");
                        followup = Followup::Verify;
                    }
                }
            } else {
                self.trust = Some(genid);
            }
            self.recorded = want;
            self.applied = true;
            self.serving.clear();
            let conflicts = compiler.errors();
            self.note_conflicts(&conflicts);
            let now = self.clock.now();
            for t in staged {
                self.pending.add(t, now);
            }

            // Only now, with the new rules in place: clear what contradicts them.
            let cleaned = if self.cfg.conntrack_cleanup {
                self.cleanup_slice(&fresh)
            } else {
                if dropped > 0 {
                    tracing::debug!(targets = dropped, "conntrack cleanup disabled; skipped");
                }
                Cleaned {
                    targets: dropped,
                    ..Cleaned::default()
                }
            };
            self.publish_pending();
            let report = SyncReport {
                full,
                services: self.cluster.services.len(),
                endpoints: self.endpoints,
                ops: ops.len(),
                bytes: stats.bytes,
                compile,
                commit,
                conntrack: cleaned.took,
                conntrack_deleted: cleaned.deleted,
                conntrack_targets: cleaned.targets,
                conntrack_pending: self.pending.len(),
                errors,
                committed_at: Some(committed_at),
                since_event,
                trigger_times: std::mem::take(&mut self.trigger_times),
                conntrack_filters: cleaned.filters,
            };
            return Ok(Synced {
                report,
                repaired: repaired && !ops.is_empty(),
                followup,
            });
        }
    }
}

impl<N: NftKernel, C: ConntrackKernel, K: Clock> Engine<N, C, K> {
    /// Log each conflict between services (two claiming one address and port) once, at
    /// WARN with both names, when it appears in the committed rules, and once at INFO
    /// when it is gone; not on every sync.
    pub(crate) fn note_conflicts(&mut self, errors: &[ruleset::RulesetError]) {
        let now: BTreeSet<String> = errors
            .iter()
            .filter(|e| {
                let new = !self.conflicts.contains(&e.to_string());
                if let (
                    true,
                    ruleset::RulesetError::Conflict {
                        service,
                        port,
                        other,
                        what,
                    },
                ) = (new, e)
                {
                    tracing::warn!(service = %service, port = %port, other = %other, what = %what,
                        "two services claim one address and port: the first keeps it, this service port is skipped there");
                }
                matches!(e, ruleset::RulesetError::Conflict { .. })
            })
            .map(ToString::to_string)
            .collect();
        for gone in self.conflicts.difference(&now) {
            tracing::info!(conflict = %gone, "conflict between services resolved");
        }
        self.conflicts = now;
    }
}
