//! The engine's metrics hooks: what one sync, one cleanup slice, one failure did, into
//! the metrics of [`Metrics`], as kube-proxy records them after each sync.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use proxy_status::{CleanupReport, FilterWork, ForeignWriter, Observer, SyncReport};

use crate::metrics::{unix, unix_now, Metrics};

/// The engine's metrics hooks.
pub struct MetricsObserver(pub Arc<Metrics>);

/// The source a cleanup job is reported under: the seed of the index, a listing from the
/// kernel, or the index; `unknown` when no line says.
fn call_strategy(filters: &[FilterWork]) -> &'static str {
    let has = |s: &str| filters.iter().any(|f| f.strategy == Some(s));
    ["seed", "kernel-filtered", "index"]
        .into_iter()
        .find(|s| has(s))
        .or_else(|| filters.iter().find_map(|f| f.strategy))
        .unwrap_or("unknown")
}

impl MetricsObserver {
    /// One conntrack cleanup job (a sync's, or one between syncs): kube-proxy's
    /// per-family reconcile time and deleted entries, and ours per strategy and outcome.
    fn conntrack(&self, filters: &[FilterWork], took: Duration, every_family: bool) {
        let m = &self.0;
        let took = took.as_secs_f64();
        let mut deleted: BTreeMap<&str, u64> = BTreeMap::new();
        for f in filters {
            *deleted.entry(f.family.k8s_name()).or_default() += f.deleted.unwrap_or(0);
        }
        for fam in m.families() {
            // kube-proxy reconciles after every sync, in each family
            if every_family || deleted.contains_key(fam) {
                m.ct_duration.observe(&[fam], took);
            }
            if let Some(n) = deleted.get(fam) {
                m.ct_deleted.add(&[fam], *n as f64);
            }
        }
        if filters.is_empty() {
            return;
        }
        let strategy = call_strategy(filters);
        m.ct_seconds_by_strategy.observe(&[strategy], took);
        for f in filters {
            let s = f.strategy.unwrap_or("unknown");
            m.ct_targets.inc(&[f.outcome, s]);
            m.ct_deleted_by_strategy
                .add(&[s], f.deleted.unwrap_or(0) as f64);
        }
    }
}

impl Observer for MetricsObserver {
    fn synced(&self, r: &SyncReport) {
        let m = &self.0;
        let total = (r.compile + r.commit + r.conntrack).as_secs_f64();
        let now = unix_now();
        for f in m.families() {
            m.sync_duration.observe(&[f], total);
            if r.full {
                &m.sync_full
            } else {
                &m.sync_partial
            }
            .observe(&[f], total);
            m.last_timestamp.set(&[f], now);
        }
        // from each applied EndpointSlice change's trigger time to the commit
        let committed = r.committed_at.map_or(now, unix);
        for (family, t) in &r.trigger_times {
            let f = family.k8s_name();
            if m.families().contains(&f) {
                m.programming.observe(&[f], committed - unix(*t));
            }
        }
        m.changes_applied();
        m.batch_ops.observe(&[], r.ops as f64);
        m.batch_bytes.observe(&[], r.bytes as f64);
        self.conntrack(&r.conntrack_filters, r.conntrack, true);
        m.services.set(&[], r.services as f64);
        m.endpoints.set(&[], r.endpoints as f64);
        m.invalid.set(&[], r.errors.len() as f64);
    }

    fn cleaned(&self, r: &CleanupReport) {
        self.conntrack(&r.filters, r.took, false);
    }

    fn failed(&self, _e: &(dyn std::error::Error + 'static)) {
        for f in self.0.families() {
            self.0.sync_failures.inc(&[f]);
        }
    }

    fn repaired(&self) {
        self.0.repairs.inc(&[]);
    }

    fn foreign_write(&self, w: &ForeignWriter) {
        self.0
            .foreign_writes
            .inc(&[w.process.as_deref().unwrap_or("unknown")]);
    }
}
