//! What a sync's outcome changes outside the kernel: the schedule, the status the
//! servers read, the observer (metrics), the sync's log line, the conflicts logged once.

use std::collections::BTreeSet;
use std::time::{Instant, SystemTime};

use kube_model::ServiceKey;

use crate::engine::Engine;
use crate::kernel::{Clock, ConntrackKernel, NftKernel};
use crate::sync::Followup;
use crate::{EngineError, SyncReport};

impl<N: NftKernel, C: ConntrackKernel + 'static, K: Clock> Engine<N, C, K> {
    /// A sync that started at `now` succeeded.
    pub(crate) fn synced(&mut self, now: Instant, report: &SyncReport, followup: Followup) {
        log_sync(report);
        self.schedule.succeeded(now, report.full);
        match followup {
            Followup::None => {}
            Followup::Repair => {
                self.schedule.foreign_change(now);
            }
            Followup::Verify => self.schedule.verify_requested(),
        }
        // Only the services that changed are looked at again.
        let node = self.cfg.ruleset.node_name.clone();
        let families = &self.cfg.localhost_node_port_families;
        type Checks = (
            ServiceKey,
            Option<crate::HealthCheck>,
            Vec<crate::LocalhostNodePort>,
        );
        let checks: Vec<Checks> = std::mem::take(&mut self.status_dirty)
            .into_iter()
            .map(|k| {
                let hc = self.per_service.refresh(&self.cluster, &k, &node);
                let lnp =
                    crate::status::localhost_node_ports_of(&self.cluster, &k, &node, families);
                (k, hc, lnp)
            })
            .collect();
        let no_local_internal = self.per_service.no_local_internal;
        let no_local_external = self.per_service.no_local_external;
        let no_local = self.per_service.no_local_by_family();
        let wall = SystemTime::now();
        let r = report.clone();
        self.status.update(|s| {
            s.last_sync = Some(now);
            s.last_sync_wall = Some(wall);
            s.queued_since = None;
            s.queued_since_wall = None;
            s.consecutive_failures = 0;
            s.last_report = Some(r);
            for (k, hc, lnp) in checks {
                if lnp.is_empty() {
                    s.localhost_node_ports.remove(&k);
                } else {
                    s.localhost_node_ports.insert(k.clone(), lnp);
                }
                match hc {
                    Some(hc) => s.health_checks.insert(k, hc),
                    None => s.health_checks.remove(&k),
                };
            }
            s.no_local_internal = no_local_internal;
            s.no_local_external = no_local_external;
            s.no_local = no_local;
            if report.repaired {
                s.repairs += 1;
            }
        });
        if report.repaired {
            self.observer.repaired();
        }
        // KUBE-FORWARD first: the migration (the first sync's step) finds the chain in
        // place on takeover and keeps it
        self.ensure_forward();
        self.first_sync_step();
        self.observer.synced(report);
    }

    /// A sync failed: counted, retried with a backoff.
    pub(crate) fn sync_failed(&mut self, e: &EngineError) {
        tracing::warn!(error = %e, "sync failed; will retry with a full sync");
        self.schedule.failed();
        let n = self.schedule.consecutive_failures();
        self.status.update(|s| {
            s.failures += 1;
            s.consecutive_failures = n;
        });
        self.observer.failed(e);
    }

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

/// One DEBUG line per sync (kube-proxy logs its syncs at -v=2), key=value fields.
fn log_sync(r: &SyncReport) {
    let ms = |d: std::time::Duration| (d.as_secs_f64() * 1e6).round() / 1e3;
    tracing::debug!(
        kind = r.kind,
        services = r.services,
        endpoints = r.endpoints,
        ops = r.ops,
        bytes = r.bytes,
        compile_ms = ms(r.compile),
        commit_ms = ms(r.commit),
        conntrack_ms = ms(r.conntrack),
        conntrack_targets = r.conntrack_targets,
        conntrack_deleted = r.conntrack_deleted,
        conntrack_pending = r.conntrack_pending,
        invalid = r.errors.len(),
        event_to_ack_ms = %EventToAck(r.since_event),
        "synced"
    );
}

/// `event_to_ack_ms` of the sync line: milliseconds from the oldest change the sync
/// consumed to the kernel's ACK, `none` for a sync no change asked for.
struct EventToAck(Option<std::time::Duration>);

impl std::fmt::Display for EventToAck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(d) => write!(f, "{:.3}", d.as_secs_f64() * 1e3),
            None => f.write_str("none"),
        }
    }
}
