//! The metrics kube-proxy serves in nftables mode, with upstream's names, types, labels,
//! buckets and HELP texts (`pkg/proxy/metrics/metrics.go`, `[ALPHA] ` prefix from
//! component-base), `kubernetes_build_info`, client_golang's `process_*`, the API
//! client's `rest_client_*` ([`crate::restclient`]), and ours beyond upstream in the
//! same `kubeproxy_` style. Fed by the engine through [`crate::observer::MetricsObserver`],
//! by the sources (as their [`proxy_status::SourceObserver`]) and by the health
//! handlers.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use proxy_status::Status;

use crate::expo::{exponential_buckets, linear_buckets, Desc, Family, Format, Registry};
use crate::restclient::RestClient;

/// kube-proxy's sync latency buckets: 1 ms .. 16.384 s.
pub fn sync_buckets() -> Vec<f64> {
    exponential_buckets(0.001, 2.0, 15)
}

/// kube-proxy's network programming latency buckets (component-base's `MergeBuckets`,
/// which starts with a 0 bucket): 0, 0.25, 0.5, 1..59 s, 60..115 s by 5, 120..300 s by 30.
pub fn programming_buckets() -> Vec<f64> {
    let mut b = vec![0.0];
    b.extend(linear_buckets(0.25, 0.25, 2));
    b.extend(linear_buckets(1.0, 1.0, 59));
    b.extend(linear_buckets(60.0, 5.0, 12));
    b.extend(linear_buckets(120.0, 30.0, 7));
    b
}

/// Batch size buckets (operations, bytes): 1 .. 4^13.
fn size_buckets() -> Vec<f64> {
    exponential_buckets(1.0, 4.0, 14)
}

/// What `kubernetes_build_info` says about this binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    pub major: String,
    pub minor: String,
    pub git_version: String,
    pub git_commit: String,
    pub git_tree_state: String,
    pub build_date: String,
    pub go_version: String,
    pub compiler: String,
    pub platform: String,
}

impl BuildInfo {
    /// A build that implements Kubernetes `kubernetes_version` (`v1.38.0`): that is the
    /// `git_version`, `major` and `minor` (so that dashboards and kubernetes-mixin's
    /// `KubeVersionMismatch` read it as kube-proxy's), with our own version as semver
    /// build metadata (`v1.38.0+kube-nlproxy.0.1.0-g...`); `rustc` as the compiler, no Go
    /// version, the platform in Go's names.
    pub fn new(
        kubernetes_version: &str,
        own_version: &str,
        git_commit: &str,
        git_tree_state: &str,
        build_date: &str,
    ) -> BuildInfo {
        let k = kubernetes_version.trim_start_matches('v');
        let mut parts = k.split('.');
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            "powerpc64" => "ppc64le",
            a => a,
        };
        BuildInfo {
            major: parts.next().unwrap_or("0").to_string(),
            minor: parts.next().unwrap_or("0").to_string(),
            git_version: format!("v{k}+kube-nlproxy.{own_version}"),
            git_commit: git_commit.to_string(),
            git_tree_state: git_tree_state.to_string(),
            build_date: build_date.to_string(),
            go_version: String::new(),
            compiler: "rustc".into(),
            platform: format!("{}/{arch}", std::env::consts::OS),
        }
    }

    /// An unstamped build of this crate's version implementing Kubernetes 1.38, for
    /// tests (the daemon stamps its own: `kube-nlproxy`'s `identity`).
    pub fn ours() -> BuildInfo {
        BuildInfo::new(
            "v1.38.0",
            env!("CARGO_PKG_VERSION"),
            "",
            "",
            "1970-01-01T00:00:00Z",
        )
    }
}

/// One named counter of the localhost NodePort reject rules, as read from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedPackets {
    pub family: kube_model::IpFamily,
    /// `UDP`, `SCTP` or `TCP` (upstream's label values: the Service protocol).
    pub protocol: &'static str,
    pub packets: u64,
}

/// Every metric served on `/metrics`.
pub struct Metrics {
    registry: Registry,
    families: Vec<&'static str>,
    pub(crate) sync_duration: Arc<Family>,
    pub(crate) sync_full: Arc<Family>,
    pub(crate) sync_partial: Arc<Family>,
    pub(crate) last_timestamp: Arc<Family>,
    pub(crate) last_queued: Arc<Family>,
    pub(crate) programming: Arc<Family>,
    endpoint_pending: Arc<Family>,
    endpoint_total: Arc<Family>,
    service_pending: Arc<Family>,
    service_total: Arc<Family>,
    no_local: Arc<Family>,
    localhost_listeners: Arc<Family>,
    localhost_failures: Arc<Family>,
    healthz: Arc<Family>,
    livez: Arc<Family>,
    pub(crate) sync_failures: Arc<Family>,
    cleanup_failures: Arc<Family>,
    pub(crate) ct_duration: Arc<Family>,
    pub(crate) ct_deleted: Arc<Family>,
    // ours
    pub(crate) batch_ops: Arc<Family>,
    pub(crate) batch_bytes: Arc<Family>,
    pub(crate) ct_targets: Arc<Family>,
    pub(crate) ct_deleted_by_strategy: Arc<Family>,
    pub(crate) ct_seconds_by_strategy: Arc<Family>,
    ct_pending: Arc<Family>,
    ct_oldest_pending: Arc<Family>,
    ct_available: Arc<Family>,
    skipped_ports: Arc<Family>,
    pub(crate) foreign_writes: Arc<Family>,
    pub(crate) repairs: Arc<Family>,
    pub(crate) services: Arc<Family>,
    pub(crate) endpoints: Arc<Family>,
    pub(crate) invalid: Arc<Family>,
    rest: RestClient,
}

const FAMILY: &[&str] = &["ip_family"];

impl Metrics {
    /// `families`: the IP families served (`"IPv4"`, `"IPv6"`).
    pub fn new(families: &[&'static str], build: &BuildInfo) -> Arc<Metrics> {
        let r = Registry::default();
        let hist = |name, help, buckets| r.register(Desc::histogram(name, help, FAMILY, buckets));
        let m = Metrics {
            families: families.to_vec(),
            sync_duration: hist(
                "kubeproxy_sync_proxy_rules_duration_seconds",
                "SyncProxyRules latency in seconds",
                sync_buckets(),
            ),
            sync_full: hist(
                "kubeproxy_sync_full_proxy_rules_duration_seconds",
                "SyncProxyRules latency in seconds for full resyncs",
                sync_buckets(),
            ),
            sync_partial: hist(
                "kubeproxy_sync_partial_proxy_rules_duration_seconds",
                "SyncProxyRules latency in seconds for partial resyncs",
                sync_buckets(),
            ),
            last_timestamp: r.register(Desc::gauge(
                "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
                "The last time proxy rules were successfully synced",
                FAMILY,
            )),
            last_queued: r.register(Desc::gauge(
                "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
                "The last time a sync of proxy rules was queued",
                FAMILY,
            )),
            programming: hist(
                "kubeproxy_network_programming_duration_seconds",
                "In Cluster Network Programming Latency in seconds",
                programming_buckets(),
            ),
            endpoint_pending: r.register(Desc::gauge(
                "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
                "Pending proxy rules Endpoint changes",
                &[],
            )),
            endpoint_total: r.register(Desc::counter(
                "kubeproxy_sync_proxy_rules_endpoint_changes_total",
                "Cumulative proxy rules Endpoint changes",
                &[],
            )),
            service_pending: r.register(Desc::gauge(
                "kubeproxy_sync_proxy_rules_service_changes_pending",
                "Pending proxy rules Service changes",
                &[],
            )),
            service_total: r.register(Desc::counter(
                "kubeproxy_sync_proxy_rules_service_changes_total",
                "Cumulative proxy rules Service changes",
                &[],
            )),
            no_local: r.register(Desc::gauge(
                "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
                "Number of services with a Local traffic policy and no endpoints",
                &["ip_family", "traffic_policy"],
            )),
            localhost_listeners: r.register(Desc::gauge(
                "kubeproxy_nftables_localhost_nodeport_listeners",
                "Number of active localhost NodePort userspace proxy listeners.",
                FAMILY,
            )),
            localhost_failures: r.register(Desc::counter(
                "kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total",
                "Number of localhost NodePort userspace proxy listener creation failures.",
                FAMILY,
            )),
            healthz: r.register(Desc::counter(
                "kubeproxy_proxy_healthz_total",
                "Cumulative proxy healthz HTTP status",
                &["code"],
            )),
            livez: r.register(Desc::counter(
                "kubeproxy_proxy_livez_total",
                "Cumulative proxy livez HTTP status",
                &["code"],
            )),
            sync_failures: r.register(Desc::counter(
                "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
                "Cumulative proxy nftables sync failures",
                FAMILY,
            )),
            cleanup_failures: r.register(Desc::counter(
                "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total",
                "Cumulative proxy nftables cleanup failures",
                FAMILY,
            )),
            ct_duration: hist(
                "kubeproxy_conntrack_reconciler_sync_duration_seconds",
                "ReconcileConntrackFlowsLatency latency in seconds",
                sync_buckets(),
            ),
            ct_deleted: r.register(Desc::counter(
                "kubeproxy_conntrack_reconciler_deleted_entries_total",
                "Cumulative conntrack flows deleted by conntrack reconciler",
                FAMILY,
            )),
            batch_ops: r.register(Desc::histogram(
                "kubeproxy_sync_proxy_rules_nftables_batch_operations",
                "Operations (netlink messages) in each committed nftables batch; one batch programs both IP families",
                &[],
                size_buckets(),
            )),
            batch_bytes: r.register(Desc::histogram(
                "kubeproxy_sync_proxy_rules_nftables_batch_bytes",
                "Bytes of each committed nftables batch; one batch programs both IP families",
                &[],
                size_buckets(),
            )),
            ct_targets: r.register(Desc::counter(
                "kubeproxy_conntrack_cleanup_targets_total",
                "Conntrack cleanup work, by outcome (listed, incomplete: a listing of UDP flows; deleted, already-gone, failed: deletes of flows judged stale) and by where the flows came from (seed: the index's listing of every UDP flow; index: the index fed by conntrack events; kernel-filtered: a listing with kernel-side filters on UDP destination address and port; unknown when the call failed as a whole)",
                &["outcome", "strategy"],
            )),
            ct_deleted_by_strategy: r.register(Desc::counter(
                "kubeproxy_conntrack_cleanup_deleted_entries_total",
                "Conntrack entries deleted by the cleanup (each acknowledged by the kernel), by where they were found (index, kernel-filtered)",
                &["strategy"],
            )),
            ct_seconds_by_strategy: r.register(Desc::histogram(
                "kubeproxy_conntrack_cleanup_duration_seconds",
                "Duration of each conntrack cleanup job in seconds, by its source (seed, kernel-filtered, index)",
                &["strategy"],
                sync_buckets(),
            )),
            ct_pending: r.register(Desc::gauge(
                "kubeproxy_conntrack_cleanup_pending_targets",
                "Conntrack cleanup work not finished yet: frontends to list and flows to delete (retried with a backoff)",
                &[],
            )),
            ct_oldest_pending: r.register(Desc::gauge(
                "kubeproxy_conntrack_cleanup_oldest_pending_seconds",
                "Age of the oldest conntrack cleanup work not finished yet",
                &[],
            )),
            ct_available: r.register(Desc::gauge(
                "kubeproxy_conntrack_cleanup_available",
                "Whether the conntrack cleanup can run (1) or ctnetlink is unavailable (0)",
                &[],
            )),
            skipped_ports: r.register(Desc::gauge(
                "kubeproxy_sync_proxy_rules_skipped_service_ports",
                "Service ports left out of the rules because the kernel refused them",
                &[],
            )),
            foreign_writes: r.register(Desc::counter(
                "kubeproxy_nftables_foreign_writes_total",
                "Transactions of other programs that changed our nftables tables, by process name",
                &["process"],
            )),
            repairs: r.register(Desc::counter(
                "kubeproxy_nftables_repairs_total",
                "Repairs of our nftables tables after another program changed them",
                &[],
            )),
            services: r.register(Desc::gauge(
                "kubeproxy_sync_proxy_rules_services",
                "Services programmed by the last successful sync",
                &[],
            )),
            endpoints: r.register(Desc::gauge(
                "kubeproxy_sync_proxy_rules_endpoints",
                "Endpoints programmed by the last successful sync",
                &[],
            )),
            invalid: r.register(Desc::gauge(
                "kubeproxy_sync_proxy_rules_invalid_objects",
                "Objects skipped or partly skipped as invalid by the last successful sync",
                &[],
            )),
            rest: RestClient::register(&r),
            registry: r,
        };
        let info = m.registry.register(Desc::gauge(
            "kubernetes_build_info",
            "A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.",
            &[
                "build_date",
                "compiler",
                "git_commit",
                "git_tree_state",
                "git_version",
                "go_version",
                "major",
                "minor",
                "platform",
            ],
        ));
        info.set(
            &[
                &build.build_date,
                &build.compiler,
                &build.git_commit,
                &build.git_tree_state,
                &build.git_version,
                &build.go_version,
                &build.major,
                &build.minor,
                &build.platform,
            ],
            1.0,
        );
        m.registry
            .collector(|| crate::process::snapshots(&crate::process::read_self()));
        m.registry
            .collector(|| crate::go_runtime::snapshots(&crate::go_runtime::read_self()));
        m.registry.register_meta_metrics();
        // series that exist from the start (so that rates and dashboards have a zero)
        for f in &m.families {
            for fam in [
                &m.sync_duration,
                &m.sync_full,
                &m.sync_partial,
                &m.programming,
                &m.ct_duration,
                &m.ct_deleted,
                &m.sync_failures,
                &m.cleanup_failures,
            ] {
                fam.touch(&[f]);
            }
            for p in ["internal", "external"] {
                m.no_local.touch(&[f, p]);
            }
        }
        for fam in [
            &m.endpoint_pending,
            &m.endpoint_total,
            &m.service_pending,
            &m.service_total,
            &m.repairs,
            &m.batch_ops,
            &m.batch_bytes,
            &m.skipped_ports,
            &m.ct_pending,
            &m.ct_oldest_pending,
            &m.ct_available,
        ] {
            fam.touch(&[]);
        }
        for code in ["200", "503"] {
            m.healthz.touch(&[code]);
            m.livez.touch(&[code]);
        }
        m.ct_available.set(&[], 1.0);
        Arc::new(m)
    }

    /// component-base's `kubernetes_feature_enabled{name,stage}` (BETA): one series per
    /// gate kube-proxy knows, 1 when enabled; stage as upstream prints it (`ALPHA`,
    /// `BETA`, empty for GA, `DEPRECATED`). Called once at start.
    pub fn record_feature_gates<'a>(
        &self,
        gates: impl IntoIterator<Item = (&'a str, &'a str, bool)>,
    ) {
        let fam = self.registry.register(
            Desc::gauge(
                "kubernetes_feature_enabled",
                "This metric records the data about the stage and enablement of a k8s feature.",
                &["name", "stage"],
            )
            .stability(crate::expo::Stability::Beta),
        );
        for (name, stage, on) in gates {
            fam.set(&[name, stage], if on { 1.0 } else { 0.0 });
        }
    }

    /// nftables mode's `kubeproxy_nftables_localhost_nodeport_rejected_packets_total`
    /// {ip_family, protocol}: read at every scrape with `read` (the named counters of
    /// the localhost NodePort reject rules, which the kernel holds), as upstream's
    /// `nftCounterMetricCollector` lists them at scrape time; a counter that does not
    /// exist has no series. Called once at start, in nftables mode with the gate on.
    pub fn localhost_rejected(
        &self,
        read: impl Fn() -> Vec<RejectedPackets> + Send + Sync + 'static,
    ) {
        self.registry.collector(move || {
            let desc = Desc::counter(
                "kubeproxy_nftables_localhost_nodeport_rejected_packets_total",
                "Number of packets rejected on localhost NodePorts. UDP and SCTP are always \
                 rejected; TCP is rejected when the localhost NodePort proxy is not running",
                &["ip_family", "protocol"],
            );
            let series = read()
                .into_iter()
                .map(|r| {
                    (
                        vec![r.family.k8s_name().to_string(), r.protocol.to_string()],
                        crate::expo::Value::Counter(r.packets as f64),
                    )
                })
                .collect();
            vec![crate::expo::Snapshot { desc, series }]
        });
    }

    /// iptables mode's `kubeproxy_iptables_localhost_nodeports_accepted_packets_total`
    /// (no labels): read at every scrape with `read` (the named counter on the accepted
    /// localhost NodePort packets, upstream's nfacct counter `localhost_nps_accepted_pkts`);
    /// `None` (no counter) serves no series. Called once at start when IPv4 NodePorts
    /// are served on loopback.
    pub fn localhost_accepted(&self, read: impl Fn() -> Option<u64> + Send + Sync + 'static) {
        self.registry.collector(move || {
            let desc = Desc::counter(
                "kubeproxy_iptables_localhost_nodeports_accepted_packets_total",
                "Number of packets accepted on nodeports of loopback interface",
                &[],
            );
            let series = read()
                .map(|n| vec![(Vec::new(), crate::expo::Value::Counter(n as f64))])
                .unwrap_or_default();
            vec![crate::expo::Snapshot { desc, series }]
        });
    }

    /// The IP families served.
    pub fn families(&self) -> &[&'static str] {
        &self.families
    }

    /// The API client's metrics (for the client's tower layer).
    pub fn rest_client(&self) -> &RestClient {
        &self.rest
    }

    fn queued(&self) {
        let now = unix_now();
        for f in &self.families {
            self.last_queued.set(&[f], now);
        }
    }

    /// The changes were applied by a sync.
    pub(crate) fn changes_applied(&self) {
        self.endpoint_pending.set(&[], 0.0);
        self.service_pending.set(&[], 0.0);
    }

    pub(crate) fn healthz(&self, code: u16) {
        self.healthz.inc(&[&code.to_string()]);
    }

    pub(crate) fn livez(&self, code: u16) {
        self.livez.inc(&[&code.to_string()]);
    }

    /// Gauges derived from the engine's status: services with a Local traffic policy,
    /// ready endpoints and none on this node (per family); pending conntrack cleanup
    /// targets; service ports the kernel refused.
    pub fn update_from_status(&self, s: &Status) {
        self.update_cleanup(s, Instant::now());
        self.skipped_ports
            .set(&[], s.skipped_service_ports.len() as f64);
        for (family, (internal, external)) in &s.no_local {
            let f = family.k8s_name();
            if !self.families.contains(&f) {
                continue;
            }
            self.no_local.set(&[f, "internal"], *internal as f64);
            self.no_local.set(&[f, "external"], *external as f64);
        }
    }

    /// The conntrack cleanup gauges (`now`: the monotonic time the age is taken at).
    pub fn update_cleanup(&self, s: &Status, now: Instant) {
        self.ct_pending.set(&[], s.cleanup_pending as f64);
        self.ct_oldest_pending.set(
            &[],
            s.cleanup_oldest_pending
                .map_or(0.0, |t| now.saturating_duration_since(t).as_secs_f64()),
        );
        self.ct_available
            .set(&[], f64::from(u8::from(s.cleanup_unavailable.is_none())));
    }

    /// The exposition in `format`.
    pub fn encode(&self, format: Format) -> String {
        self.registry.encode(format)
    }
}

pub(crate) fn unix_now() -> f64 {
    unix(SystemTime::now())
}

pub(crate) fn unix(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// The localhost NodePort proxy's families (nftables mode): the series of a family
/// appear once its proxy runs, as upstream's proxy sets them at its first sync.
impl proxy_status::LocalhostObserver for Metrics {
    fn listeners(&self, family: kube_model::IpFamily, n: usize) {
        let f = family.k8s_name();
        self.localhost_failures.touch(&[f]);
        self.localhost_listeners.set(&[f], n as f64);
    }
    fn listener_failed(&self, family: kube_model::IpFamily) {
        self.localhost_failures.inc(&[family.k8s_name()]);
    }
}

impl proxy_status::SourceObserver for Metrics {
    fn service_change(&self) {
        self.service_total.inc(&[]);
        self.service_pending.inc(&[]);
        self.queued();
    }

    fn endpoint_change(&self) {
        self.endpoint_total.inc(&[]);
        self.endpoint_pending.inc(&[]);
        self.queued();
    }
}
