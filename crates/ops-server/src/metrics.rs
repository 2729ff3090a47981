//! Prometheus metrics with kube-proxy's names and labels, plus kube-nlproxy's own
//! (`kubenlproxy_*`): ops and bytes per batch, conntrack deletions and time per strategy,
//! tamper repairs. Fed by the engine through [`proxy_status::Observer`] and by the
//! daemon's sources ([`Metrics::service_change`], [`Metrics::endpoint_change`]).

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::{text::encode, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use proxy_status::{CleanupReport, ForeignWriter, Observer, Status, SyncReport};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FamilyLabel {
    pub ip_family: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabel {
    pub ip_family: String,
    pub traffic_policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProcessLabel {
    pub process: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StrategyLabel {
    pub strategy: String,
}

type FGauge = Gauge<f64, AtomicU64>;
type Hist = Family<FamilyLabel, Histogram, fn() -> Histogram>;

fn seconds() -> Histogram {
    // 1 ms .. ~16 s, as kube-proxy's sync histograms span
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

fn sizes() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 4.0, 14))
}

/// Every metric we serve, registered in one registry.
pub struct Metrics {
    registry: Registry,
    families: Vec<String>,
    strategy: String,
    sync_duration: Hist,
    sync_full: Hist,
    sync_partial: Hist,
    last_timestamp: Family<FamilyLabel, FGauge>,
    last_queued: Family<FamilyLabel, FGauge>,
    programming: Hist,
    endpoint_pending: Family<FamilyLabel, Gauge>,
    endpoint_total: Family<FamilyLabel, Counter>,
    service_pending: Family<FamilyLabel, Gauge>,
    service_total: Family<FamilyLabel, Counter>,
    no_local: Family<PolicyLabel, Gauge>,
    healthz: Family<CodeLabel, Counter>,
    livez: Family<CodeLabel, Counter>,
    sync_failures: Family<FamilyLabel, Counter>,
    cleanup_failures: Family<FamilyLabel, Counter>,
    ct_duration: Hist,
    ct_deleted: Family<FamilyLabel, Counter>,
    ops: Hist,
    bytes: Hist,
    ct_deleted_by_strategy: Family<StrategyLabel, Counter>,
    ct_seconds_by_strategy: Family<StrategyLabel, Histogram, fn() -> Histogram>,
    repairs: Counter,
    services: Gauge,
    endpoints: Gauge,
    invalid: Gauge,
    ct_pending: Gauge,
    ct_oldest_pending: FGauge,
    ct_available: Gauge,
    skipped_ports: Gauge,
    foreign_writes: Family<ProcessLabel, Counter>,
    /// When the oldest change not yet synced arrived (for network programming latency).
    first_pending: Mutex<Option<Instant>>,
}

impl Metrics {
    /// `families`: the IP families served (`"IPv4"`, `"IPv6"`); `strategy`: the conntrack
    /// cleanup strategy in use (label of our conntrack metrics).
    pub fn new(families: &[&str], strategy: &str) -> Arc<Metrics> {
        let mut r = Registry::default();
        let hist = || Hist::new_with_constructor(seconds as fn() -> Histogram);
        let m = Metrics {
            families: families.iter().map(|f| f.to_string()).collect(),
            strategy: strategy.to_string(),
            sync_duration: hist(),
            sync_full: hist(),
            sync_partial: hist(),
            last_timestamp: Default::default(),
            last_queued: Default::default(),
            programming: hist(),
            endpoint_pending: Default::default(),
            endpoint_total: Default::default(),
            service_pending: Default::default(),
            service_total: Default::default(),
            no_local: Default::default(),
            healthz: Default::default(),
            livez: Default::default(),
            sync_failures: Default::default(),
            cleanup_failures: Default::default(),
            ct_duration: hist(),
            ct_deleted: Default::default(),
            ops: Hist::new_with_constructor(sizes as fn() -> Histogram),
            bytes: Hist::new_with_constructor(sizes as fn() -> Histogram),
            ct_deleted_by_strategy: Default::default(),
            ct_seconds_by_strategy: Family::new_with_constructor(seconds as fn() -> Histogram),
            repairs: Default::default(),
            services: Default::default(),
            endpoints: Default::default(),
            invalid: Default::default(),
            ct_pending: Default::default(),
            ct_oldest_pending: Default::default(),
            ct_available: Default::default(),
            skipped_ports: Default::default(),
            foreign_writes: Default::default(),
            first_pending: Mutex::new(None),
            registry: Registry::default(),
        };
        r.register(
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds",
            m.sync_duration.clone(),
        );
        r.register(
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for full resyncs",
            m.sync_full.clone(),
        );
        r.register(
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for partial resyncs",
            m.sync_partial.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "The last time proxy rules were successfully synced",
            m.last_timestamp.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
            "The last time a sync of proxy rules was queued",
            m.last_queued.clone(),
        );
        r.register(
            "kubeproxy_network_programming_duration_seconds",
            "In Cluster Network Programming Latency in seconds",
            m.programming.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
            "Pending proxy rules Endpoint changes",
            m.endpoint_pending.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes",
            "Cumulative proxy rules Endpoint changes",
            m.endpoint_total.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_service_changes_pending",
            "Pending proxy rules Service changes",
            m.service_pending.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_service_changes",
            "Cumulative proxy rules Service changes",
            m.service_total.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "Number of services with a Local traffic policy and no endpoints",
            m.no_local.clone(),
        );
        r.register(
            "kubeproxy_proxy_healthz",
            "Cumulative proxy healthz HTTP status",
            m.healthz.clone(),
        );
        r.register(
            "kubeproxy_proxy_livez",
            "Cumulative proxy livez HTTP status",
            m.livez.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_nftables_sync_failures",
            "SyncProxyRules nftables transaction failures",
            m.sync_failures.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_nftables_cleanup_failures",
            "SyncProxyRules nftables stale chain cleanup failures",
            m.cleanup_failures.clone(),
        );
        r.register(
            "kubeproxy_conntrack_reconciler_sync_duration_seconds",
            "Conntrack cleanup latency in seconds",
            m.ct_duration.clone(),
        );
        r.register(
            "kubeproxy_conntrack_reconciler_deleted_entries",
            "Cumulative conntrack flows deleted by the conntrack cleanup",
            m.ct_deleted.clone(),
        );
        r.register(
            "kubenlproxy_sync_ops",
            "Operations in each committed nftables batch",
            m.ops.clone(),
        );
        r.register(
            "kubenlproxy_sync_bytes",
            "Bytes of each committed nftables batch",
            m.bytes.clone(),
        );
        r.register(
            "kubenlproxy_conntrack_deleted_entries",
            "Conntrack entries deleted, by cleanup strategy",
            m.ct_deleted_by_strategy.clone(),
        );
        r.register(
            "kubenlproxy_conntrack_cleanup_duration_seconds",
            "Time spent deleting conntrack entries, by cleanup strategy",
            m.ct_seconds_by_strategy.clone(),
        );
        r.register(
            "kubenlproxy_tamper_repairs",
            "Repairs of our tables after another program changed them",
            m.repairs.clone(),
        );
        r.register(
            "kubenlproxy_services",
            "Service ports programmed by the last sync",
            m.services.clone(),
        );
        r.register(
            "kubenlproxy_endpoints",
            "Endpoints programmed by the last sync",
            m.endpoints.clone(),
        );
        r.register(
            "kubenlproxy_invalid_objects",
            "Invalid objects skipped by the last sync",
            m.invalid.clone(),
        );
        r.register(
            "kubeproxy_conntrack_cleanup_pending_targets",
            "Conntrack cleanup targets not finished yet (retried with a backoff)",
            m.ct_pending.clone(),
        );
        r.register(
            "kubeproxy_conntrack_cleanup_oldest_pending_seconds",
            "Age of the oldest conntrack cleanup target not finished yet",
            m.ct_oldest_pending.clone(),
        );
        r.register(
            "kubeproxy_conntrack_cleanup_available",
            "Whether the conntrack cleanup can run (1) or ctnetlink is unavailable (0)",
            m.ct_available.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_skipped_service_ports",
            "Service ports left out of the rules because the kernel refused them",
            m.skipped_ports.clone(),
        );
        r.register(
            "kubeproxy_nftables_foreign_writes",
            "Transactions of other programs that changed our nftables tables, by process name",
            m.foreign_writes.clone(),
        );
        let mut m = m;
        m.registry = r;
        // series that exist from the start, as in kube-proxy
        for f in &m.families {
            let l = FamilyLabel {
                ip_family: f.clone(),
            };
            let _ = m.sync_failures.get_or_create(&l);
            let _ = m.cleanup_failures.get_or_create(&l);
            let _ = m.ct_deleted.get_or_create(&l);
            let _ = m.endpoint_pending.get_or_create(&l);
            let _ = m.service_pending.get_or_create(&l);
            for h in [
                &m.sync_duration,
                &m.sync_full,
                &m.sync_partial,
                &m.programming,
                &m.ct_duration,
                &m.ops,
                &m.bytes,
            ] {
                let _ = h.get_or_create(&l);
            }
            let _ = m.last_timestamp.get_or_create(&l);
            let _ = m.last_queued.get_or_create(&l);
            let _ = m.endpoint_total.get_or_create(&l);
            let _ = m.service_total.get_or_create(&l);
            for p in ["internal", "external"] {
                let _ = m.no_local.get_or_create(&PolicyLabel {
                    ip_family: f.clone(),
                    traffic_policy: p.into(),
                });
            }
        }
        for code in ["200", "503"] {
            let _ = m.healthz.get_or_create(&CodeLabel { code: code.into() });
            let _ = m.livez.get_or_create(&CodeLabel { code: code.into() });
        }
        let s = StrategyLabel {
            strategy: m.strategy.clone(),
        };
        let _ = m.ct_deleted_by_strategy.get_or_create(&s);
        let _ = m.ct_seconds_by_strategy.get_or_create(&s);
        Arc::new(m)
    }

    fn each(&self, mut f: impl FnMut(&FamilyLabel)) {
        for fam in &self.families {
            f(&FamilyLabel {
                ip_family: fam.clone(),
            });
        }
    }

    fn queued(&self) {
        let mut p = self.first_pending.lock().unwrap_or_else(|e| e.into_inner());
        p.get_or_insert_with(Instant::now);
        let now = unix_now();
        self.each(|l| {
            self.last_queued.get_or_create(l).set(now);
        });
    }

    /// A Service change arrived from a source.
    pub fn service_change(&self) {
        self.each(|l| {
            self.service_total.get_or_create(l).inc();
            self.service_pending.get_or_create(l).inc();
        });
        self.queued();
    }

    /// An EndpointSlice change arrived from a source.
    pub fn endpoint_change(&self) {
        self.each(|l| {
            self.endpoint_total.get_or_create(l).inc();
            self.endpoint_pending.get_or_create(l).inc();
        });
        self.queued();
    }

    pub(crate) fn healthz(&self, code: u16) {
        self.healthz
            .get_or_create(&CodeLabel {
                code: code.to_string(),
            })
            .inc();
    }

    pub(crate) fn livez(&self, code: u16) {
        self.livez
            .get_or_create(&CodeLabel {
                code: code.to_string(),
            })
            .inc();
    }

    /// Gauges derived from the engine's status: services with a Local traffic policy,
    /// ready endpoints, and none on this node; pending conntrack cleanup targets;
    /// service ports the kernel refused.
    pub fn update_from_status(&self, s: &Status) {
        self.update_cleanup(s, Instant::now());
        self.skipped_ports.set(s.skipped_service_ports.len() as i64);
        self.each(|l| {
            for (policy, n) in [
                ("internal", s.no_local_internal),
                ("external", s.no_local_external),
            ] {
                self.no_local
                    .get_or_create(&PolicyLabel {
                        ip_family: l.ip_family.clone(),
                        traffic_policy: policy.into(),
                    })
                    .set(n as i64);
            }
        });
    }

    /// The conntrack cleanup gauges (`now`: the monotonic time the age is taken at).
    pub fn update_cleanup(&self, s: &Status, now: Instant) {
        self.ct_pending.set(s.cleanup_pending as i64);
        self.ct_oldest_pending.set(
            s.cleanup_oldest_pending
                .map_or(0.0, |t| now.saturating_duration_since(t).as_secs_f64()),
        );
        self.ct_available
            .set(i64::from(s.cleanup_unavailable.is_none()));
    }

    /// Conntrack deletions and their time (a sync's cleanup, or a slice between syncs).
    fn conntrack_work(&self, deleted: u64, took: std::time::Duration) {
        let took = took.as_secs_f64();
        self.each(|l| {
            self.ct_duration.get_or_create(l).observe(took);
        });
        // deletions are counted once, under the first family (one cleanup serves both)
        if let Some(f) = self.families.first() {
            self.ct_deleted
                .get_or_create(&FamilyLabel {
                    ip_family: f.clone(),
                })
                .inc_by(deleted);
        }
        let s = StrategyLabel {
            strategy: self.strategy.clone(),
        };
        self.ct_deleted_by_strategy
            .get_or_create(&s)
            .inc_by(deleted);
        self.ct_seconds_by_strategy.get_or_create(&s).observe(took);
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The engine's metrics hooks.
pub struct MetricsObserver(pub Arc<Metrics>);

impl Observer for MetricsObserver {
    fn synced(&self, r: &SyncReport) {
        let m = &self.0;
        let total = (r.compile + r.commit + r.conntrack).as_secs_f64();
        let pending = m
            .first_pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let now = unix_now();
        m.each(|l| {
            m.sync_duration.get_or_create(l).observe(total);
            if r.full {
                &m.sync_full
            } else {
                &m.sync_partial
            }
            .get_or_create(l)
            .observe(total);
            m.last_timestamp.get_or_create(l).set(now);
            if let Some(p) = pending {
                m.programming
                    .get_or_create(l)
                    .observe(p.elapsed().as_secs_f64());
            }
            m.endpoint_pending.get_or_create(l).set(0);
            m.service_pending.get_or_create(l).set(0);
            m.ops.get_or_create(l).observe(r.ops as f64);
            m.bytes.get_or_create(l).observe(r.bytes as f64);
        });
        if r.conntrack_targets > 0 {
            m.conntrack_work(r.conntrack_deleted, r.conntrack);
        }
        m.services.set(r.services as i64);
        m.endpoints.set(r.endpoints as i64);
        m.invalid.set(r.errors.len() as i64);
    }

    fn cleaned(&self, r: &CleanupReport) {
        self.0.conntrack_work(r.deleted, r.took);
    }

    fn failed(&self, _e: &(dyn std::error::Error + 'static)) {
        self.0.each(|l| {
            self.0.sync_failures.get_or_create(l).inc();
        });
    }

    fn repaired(&self) {
        self.0.repairs.inc();
    }

    fn foreign_write(&self, w: &ForeignWriter) {
        self.0
            .foreign_writes
            .get_or_create(&ProcessLabel {
                process: w.process.clone().unwrap_or_else(|| "unknown".into()),
            })
            .inc();
    }
}

/// The router serving `/metrics`.
pub fn metrics_router(m: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(serve_metrics))
        .with_state(m)
}

async fn serve_metrics(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        m.encode(),
    )
}
