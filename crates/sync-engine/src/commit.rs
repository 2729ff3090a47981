//! One sync's kernel side: read our tables back (or trust the in-memory copy), commit
//! the batch guarded by the generation it was computed against, then hand over to the
//! conntrack cleanup.

use std::collections::BTreeSet;
use std::time::Instant;

use ruleset::names::PortId;

use crate::cleanup::{self, Cleaned};
use crate::engine::Engine;
use crate::isolate;
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

/// Our tables as read (or trusted), the generation they belong to, and whether another
/// program changed them since our last commit.
pub(crate) struct BaseRead {
    pub base: Bases,
    pub genid: u32,
    pub drift: bool,
}

impl<N: NftKernel, C: ConntrackKernel, K: Clock> Engine<N, C, K> {
    /// Read our tables back: trust the in-memory copy when the generation says nobody
    /// committed since our last commit, else dump our tables over netlink.
    pub(crate) fn read_base(&mut self) -> Result<BaseRead, EngineError> {
        let genid = self.nft.generation()?;
        if let (Some(c), Some(g)) = (&self.committed, self.committed_gen) {
            if g == genid {
                return Ok(BaseRead {
                    base: plan::known(c),
                    genid,
                    drift: false,
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
        let drift = self
            .committed
            .as_ref()
            .is_some_and(|c| plan::drifted(&base, c));
        if drift {
            tracing::warn!("our nftables tables were changed by another program; repairing");
        }
        Ok(BaseRead { base, genid, drift })
    }

    /// Compile (without the `exclude`d service ports), build the batch (`mode`), commit
    /// it (full: against what the kernel holds), then clear the conntrack targets.
    pub(crate) fn attempt(
        &mut self,
        parsed: &ruleset::ParsedConfig,
        exclude: &BTreeSet<PortId>,
        mode: Mode,
        mut full: bool,
    ) -> Result<Synced, EngineError> {
        let t0 = Instant::now();
        let mut desired = if exclude.is_empty() {
            plan::compile(&self.cluster, parsed)
        } else {
            plan::compile(&isolate::without(&self.cluster, exclude), parsed)
        };
        let mut errors: Vec<String> = self.model_errors.values().flatten().cloned().collect();
        errors.extend(desired.errors.iter().map(ToString::to_string));
        errors.extend(self.skip_messages());
        let compile = t0.elapsed();

        let mut tries = 0;
        let mut fresh = BTreeSet::new();
        loop {
            tries += 1;
            let read = if full {
                self.read_base()?
            } else {
                match (&self.committed, self.committed_gen) {
                    (Some(c), Some(g)) => BaseRead {
                        base: plan::known(c),
                        genid: g,
                        drift: false,
                    },
                    _ => {
                        full = true;
                        continue;
                    }
                }
            };
            // Targets implied by going from the kernel's rules to the desired ones; on
            // this process's first read, also those a previous run recorded and did not
            // finish. They are recorded in our tables by the very batch that makes them
            // targets.
            // They become pending (eligible for the cleanup) only once that batch is
            // committed; a failed attempt recomputes them from the kernel next time.
            let found = plan::targets(&read.base, &desired, self.applied_eps.as_ref());
            fresh.extend(found.iter().copied());
            let mut staged: BTreeSet<Target> = BTreeSet::new();
            let mut dropped = 0;
            if self.cfg.conntrack_cleanup {
                if self.committed.is_none() {
                    let resumed = cleanup::recorded_in(&plan::known_tables(&read.base));
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
            cleanup::record_in_tables(
                &mut desired.tables,
                self.pending.targets().chain(staged.iter()),
            );
            let ops = match mode {
                Mode::Diff => plan::batch(&read.base, &desired.tables),
                Mode::Replace => plan::replace(&read.base, &desired.tables),
            };

            let t1 = Instant::now();
            let stats = if ops.is_empty() {
                CommitStats::default()
            } else {
                match self.nft.commit(&ops, Some(read.genid)) {
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
            let mut followup = Followup::None;
            if !ops.is_empty() {
                let expected = next_generation(read.genid);
                self.our_gens.push(expected);
                self.committed_gen = Some(expected);
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
                self.committed_gen = Some(read.genid);
            }
            self.committed = Some(desired.tables);
            self.applied_eps = Some(desired.endpoints);
            self.note_conflicts(&desired.errors);
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
            let endpoints = self
                .cluster
                .slices()
                .values()
                .map(|s| s.endpoints.len())
                .sum();
            let report = SyncReport {
                full,
                services: self.cluster.services.len(),
                endpoints,
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
                trigger_times: std::mem::take(&mut self.trigger_times),
                conntrack_filters: cleaned.filters,
            };
            return Ok(Synced {
                report,
                repaired: read.drift && !ops.is_empty(),
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
