//! The metrics as data: every upstream kube-proxy metric that applies to an nftables
//! proxy with its exact HELP line (component-base's `[ALPHA] ` prefix), type, labels
//! and buckets, as `pkg/proxy/metrics/metrics.go`, client_golang and component-base's
//! restclient define them; and what the engine's reports do to them.

use std::time::{Duration, SystemTime};

use kube_model::IpFamily;
use ops_server::expo::Format;
use ops_server::observer::MetricsObserver;
use ops_server::{BuildInfo, Metrics};
use proxy_status::{
    CleanupReport, FilterWork, Observer, RestObserver, SourceObserver, Status, SyncReport,
};

/// (name, type, HELP text after the prefix, label names of a series; "" for none).
const UPSTREAM: &[(&str, &str, &str, &str)] = &[
    ("kubeproxy_sync_proxy_rules_duration_seconds", "histogram", "[ALPHA] SyncProxyRules latency in seconds", "ip_family"),
    ("kubeproxy_sync_full_proxy_rules_duration_seconds", "histogram", "[ALPHA] SyncProxyRules latency in seconds for full resyncs", "ip_family"),
    ("kubeproxy_sync_partial_proxy_rules_duration_seconds", "histogram", "[ALPHA] SyncProxyRules latency in seconds for partial resyncs", "ip_family"),
    ("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "gauge", "[ALPHA] The last time proxy rules were successfully synced", "ip_family"),
    ("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", "gauge", "[ALPHA] The last time a sync of proxy rules was queued", "ip_family"),
    ("kubeproxy_network_programming_duration_seconds", "histogram", "[ALPHA] In Cluster Network Programming Latency in seconds", "ip_family"),
    ("kubeproxy_sync_proxy_rules_endpoint_changes_pending", "gauge", "[ALPHA] Pending proxy rules Endpoint changes", ""),
    ("kubeproxy_sync_proxy_rules_endpoint_changes_total", "counter", "[ALPHA] Cumulative proxy rules Endpoint changes", ""),
    ("kubeproxy_sync_proxy_rules_service_changes_pending", "gauge", "[ALPHA] Pending proxy rules Service changes", ""),
    ("kubeproxy_sync_proxy_rules_service_changes_total", "counter", "[ALPHA] Cumulative proxy rules Service changes", ""),
    ("kubeproxy_sync_proxy_rules_no_local_endpoints_total", "gauge", "[ALPHA] Number of services with a Local traffic policy and no endpoints", "ip_family,traffic_policy"),
    ("kubeproxy_proxy_healthz_total", "counter", "[ALPHA] Cumulative proxy healthz HTTP status", "code"),
    ("kubeproxy_proxy_livez_total", "counter", "[ALPHA] Cumulative proxy livez HTTP status", "code"),
    ("kubeproxy_sync_proxy_rules_nftables_sync_failures_total", "counter", "[ALPHA] Cumulative proxy nftables sync failures", "ip_family"),
    ("kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total", "counter", "[ALPHA] Cumulative proxy nftables cleanup failures", "ip_family"),
    ("kubeproxy_conntrack_reconciler_sync_duration_seconds", "histogram", "[ALPHA] ReconcileConntrackFlowsLatency latency in seconds", "ip_family"),
    ("kubeproxy_conntrack_reconciler_deleted_entries_total", "counter", "[ALPHA] Cumulative conntrack flows deleted by conntrack reconciler", "ip_family"),
    ("kubernetes_build_info", "gauge", "[ALPHA] A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.", "build_date,compiler,git_commit,git_tree_state,git_version,go_version,major,minor,platform"),
    ("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", ""),
    ("process_max_fds", "gauge", "Maximum number of open file descriptors.", ""),
    ("process_open_fds", "gauge", "Number of open file descriptors.", ""),
    ("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", ""),
    ("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.", ""),
    ("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", ""),
    ("process_virtual_memory_max_bytes", "gauge", "Maximum amount of virtual memory available in bytes.", ""),
];

/// The rest client's families (series appear with the first request).
const REST_CLIENT: &[(&str, &str, &str, &str)] = &[
    (
        "rest_client_requests_total",
        "counter",
        "[ALPHA] Number of HTTP requests, partitioned by status code, method, and host.",
        "code,host,method",
    ),
    (
        "rest_client_request_duration_seconds",
        "histogram",
        "[ALPHA] Request latency in seconds. Broken down by verb, and host.",
        "host,verb",
    ),
    (
        "rest_client_request_size_bytes",
        "histogram",
        "[ALPHA] Request size in bytes. Broken down by verb and host.",
        "host,verb",
    ),
    (
        "rest_client_response_size_bytes",
        "histogram",
        "[ALPHA] Response size in bytes. Broken down by verb and host.",
        "host,verb",
    ),
];

fn metrics() -> std::sync::Arc<Metrics> {
    Metrics::new(&["IPv4", "IPv6"], &BuildInfo::ours())
}

/// The label names of the first sample line of `name` (buckets' `le` left out).
fn label_names(text: &str, name: &str) -> Option<String> {
    let line = text.lines().find(|l| {
        l.starts_with(name)
            && matches!(
                l.as_bytes().get(name.len()),
                Some(b'{') | Some(b' ') | Some(b'_')
            )
            && !l.starts_with('#')
    })?;
    let rest = &line[name.len()..];
    let rest = rest
        .strip_prefix("_bucket")
        .or_else(|| rest.strip_prefix("_sum"))
        .or_else(|| rest.strip_prefix("_count"))
        .unwrap_or(rest);
    let Some(inner) = rest.strip_prefix('{') else {
        return Some(String::new());
    };
    let inner = &inner[..inner.find('}')?];
    Some(
        inner
            .split("\",")
            .map(|kv| kv.split('=').next().unwrap_or(""))
            .filter(|k| *k != "le")
            .collect::<Vec<_>>()
            .join(","),
    )
}

fn check_families(text: &str, table: &[(&str, &str, &str, &str)]) {
    for (name, kind, help, labels) in table {
        assert!(
            text.contains(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n")),
            "{name}: HELP/TYPE differ from upstream:\n{text}"
        );
        assert_eq!(
            label_names(text, name).as_deref(),
            Some(*labels),
            "{name}: labels"
        );
    }
}

#[test]
fn upstream_metrics_have_upstream_names_types_help_and_labels() {
    let m = metrics();
    // the timestamps exist once a change was queued and a sync ran
    m.service_change();
    MetricsObserver(m.clone()).synced(&SyncReport::default());
    let text = m.encode(Format::Text);
    check_families(&text, UPSTREAM);
    // process metrics come from client_golang: no stability prefix
    assert!(!text.contains("# HELP process_cpu_seconds_total [ALPHA]"));
    // kube-nlproxy's own metrics keep the kubeproxy_ style
    assert!(!text.contains("kubenlproxy_"), "{text}");
    let rest = m.rest_client();
    rest.result(Some(200), "GET", "198.18.0.1:6443");
    rest.latency("GET", "198.18.0.1:6443", Duration::from_millis(30));
    rest.request_size("GET", "198.18.0.1:6443", 0);
    rest.response_size("GET", "198.18.0.1:6443", 2048);
    check_families(&m.encode(Format::Text), REST_CLIENT);
    let text = m.encode(Format::Text);
    assert!(text.contains(
        "rest_client_requests_total{code=\"200\",host=\"198.18.0.1:6443\",method=\"GET\"} 1\n"
    ));
    for le in [
        "0.005", "0.025", "0.1", "0.25", "0.5", "1", "2", "4", "8", "15", "30", "60", "+Inf",
    ] {
        assert!(
            text.contains(&format!("rest_client_request_duration_seconds_bucket{{host=\"198.18.0.1:6443\",verb=\"GET\",le=\"{le}\"}}")),
            "bucket {le}"
        );
    }
    rest.result(None, "GET", "198.18.0.1:6443");
    assert!(m.encode(Format::Text).contains(
        "rest_client_requests_total{code=\"<error>\",host=\"198.18.0.1:6443\",method=\"GET\"} 1\n"
    ));
}

fn buckets(text: &str, series: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{series}_bucket{{ip_family=\"IPv4\",le=")))
        .map(|l| {
            l.split("le=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[test]
fn buckets_are_upstreams() {
    let text = metrics().encode(Format::Text);
    let sync: Vec<String> = [
        "0.001", "0.002", "0.004", "0.008", "0.016", "0.032", "0.064", "0.128", "0.256", "0.512",
        "1.024", "2.048", "4.096", "8.192", "16.384", "+Inf",
    ]
    .map(String::from)
    .to_vec();
    for h in [
        "kubeproxy_sync_proxy_rules_duration_seconds",
        "kubeproxy_sync_full_proxy_rules_duration_seconds",
        "kubeproxy_sync_partial_proxy_rules_duration_seconds",
        "kubeproxy_conntrack_reconciler_sync_duration_seconds",
    ] {
        assert_eq!(buckets(&text, h), sync, "{h}");
    }
    // MergeBuckets(0.25..0.5, 1..59, 60..115 by 5, 120..300 by 30) with its leading 0
    let mut np = vec!["0".to_string(), "0.25".into(), "0.5".into()];
    np.extend((1..=59).map(|s| s.to_string()));
    np.extend((60..=115).step_by(5).map(|s| s.to_string()));
    np.extend((120..=300).step_by(30).map(|s| s.to_string()));
    np.push("+Inf".into());
    assert_eq!(
        buckets(&text, "kubeproxy_network_programming_duration_seconds"),
        np
    );
}

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

#[test]
fn changes_are_counted_once_without_a_family_label() {
    let m = metrics();
    m.service_change();
    m.endpoint_change();
    m.endpoint_change();
    let t = m.encode(Format::Text);
    assert_eq!(
        value(&t, "kubeproxy_sync_proxy_rules_endpoint_changes_total"),
        Some(2.0)
    );
    assert_eq!(
        value(&t, "kubeproxy_sync_proxy_rules_endpoint_changes_pending"),
        Some(2.0)
    );
    assert_eq!(
        value(&t, "kubeproxy_sync_proxy_rules_service_changes_total"),
        Some(1.0)
    );
    assert!(!t.contains("changes_total{"), "{t}");
    MetricsObserver(m.clone()).synced(&SyncReport::default());
    let t = m.encode(Format::Text);
    assert_eq!(
        value(&t, "kubeproxy_sync_proxy_rules_endpoint_changes_pending"),
        Some(0.0)
    );
    assert_eq!(
        value(&t, "kubeproxy_sync_proxy_rules_endpoint_changes_total"),
        Some(2.0)
    );
}

#[test]
fn network_programming_latency_runs_from_each_trigger_time_to_the_commit() {
    let m = metrics();
    let committed = SystemTime::now();
    MetricsObserver(m.clone()).synced(&SyncReport {
        full: false,
        committed_at: Some(committed),
        trigger_times: vec![
            (IpFamily::V4, committed - Duration::from_millis(1700)),
            (IpFamily::V4, committed - Duration::from_millis(200)),
            (IpFamily::V6, committed - Duration::from_secs(70)),
        ],
        ..Default::default()
    });
    let t = m.encode(Format::Text);
    let np = "kubeproxy_network_programming_duration_seconds";
    assert_eq!(
        value(&t, &format!("{np}_count{{ip_family=\"IPv4\"}}")),
        Some(2.0)
    );
    assert_eq!(
        value(
            &t,
            &format!("{np}_bucket{{ip_family=\"IPv4\",le=\"0.25\"}}")
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&t, &format!("{np}_bucket{{ip_family=\"IPv4\",le=\"2\"}}")),
        Some(2.0)
    );
    let sum = value(&t, &format!("{np}_sum{{ip_family=\"IPv4\"}}")).unwrap();
    assert!((sum - 1.9).abs() < 1e-6, "{sum}");
    assert_eq!(
        value(&t, &format!("{np}_bucket{{ip_family=\"IPv6\",le=\"65\"}}")),
        Some(0.0)
    );
    assert_eq!(
        value(&t, &format!("{np}_bucket{{ip_family=\"IPv6\",le=\"70\"}}")),
        Some(1.0)
    );
    // a sync with no trigger time observes nothing
    MetricsObserver(m.clone()).synced(&SyncReport::default());
    let t = m.encode(Format::Text);
    assert_eq!(
        value(&t, &format!("{np}_count{{ip_family=\"IPv4\"}}")),
        Some(2.0)
    );
    assert_eq!(
        value(
            &t,
            "kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family=\"IPv6\"}"
        ),
        Some(2.0)
    );
}

fn work(
    family: IpFamily,
    strategy: Option<&'static str>,
    outcome: &'static str,
    deleted: Option<u64>,
) -> FilterWork {
    FilterWork {
        family,
        strategy,
        outcome,
        deleted,
    }
}

#[test]
fn conntrack_metrics_carry_the_strategy_used_and_per_family_counts() {
    let m = metrics();
    let obs = MetricsObserver(m.clone());
    obs.synced(&SyncReport {
        conntrack: Duration::from_millis(3),
        conntrack_filters: vec![
            work(IpFamily::V4, Some("kernel-filtered"), "listed", Some(0)),
            work(IpFamily::V4, Some("kernel-filtered"), "deleted", Some(4)),
            work(IpFamily::V6, Some("kernel-filtered"), "failed", Some(2)),
        ],
        ..Default::default()
    });
    obs.cleaned(&CleanupReport {
        targets: 1,
        took: Duration::from_millis(9),
        filters: vec![work(IpFamily::V4, Some("index"), "deleted", Some(5))],
        ..Default::default()
    });
    let t = m.encode(Format::Text);
    for (series, v) in [
        ("kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=\"IPv4\"}", 9.0),
        ("kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=\"IPv6\"}", 2.0),
        // every sync reconciles both families; a slice between syncs only its own
        ("kubeproxy_conntrack_reconciler_sync_duration_seconds_count{ip_family=\"IPv4\"}", 2.0),
        ("kubeproxy_conntrack_reconciler_sync_duration_seconds_count{ip_family=\"IPv6\"}", 1.0),
        ("kubeproxy_conntrack_cleanup_deleted_entries_total{strategy=\"kernel-filtered\"}", 6.0),
        ("kubeproxy_conntrack_cleanup_deleted_entries_total{strategy=\"index\"}", 5.0),
        ("kubeproxy_conntrack_cleanup_targets_total{outcome=\"listed\",strategy=\"kernel-filtered\"}", 1.0),
        ("kubeproxy_conntrack_cleanup_targets_total{outcome=\"failed\",strategy=\"kernel-filtered\"}", 1.0),
        ("kubeproxy_conntrack_cleanup_duration_seconds_count{strategy=\"kernel-filtered\"}", 1.0),
        ("kubeproxy_conntrack_cleanup_duration_seconds_count{strategy=\"index\"}", 1.0),
    ] {
        assert_eq!(value(&t, series), Some(v), "{series}:\n{t}");
    }
    assert!(
        t.contains("each acknowledged by the kernel"),
        "the HELP says what is counted"
    );
}

#[test]
fn status_gauges_per_family_and_ours() {
    let m = metrics();
    let now = std::time::Instant::now();
    let status = Status {
        no_local: [(IpFamily::V4, (2, 1)), (IpFamily::V6, (0, 1))].into(),
        cleanup_pending: 5,
        cleanup_oldest_pending: Some(now - Duration::from_secs(90)),
        cleanup_unavailable: Some("no ctnetlink".into()),
        ..Default::default()
    };
    m.update_from_status(&status);
    m.update_cleanup(&status, now);
    let obs = MetricsObserver(m.clone());
    obs.failed(&std::io::Error::other("test"));
    obs.repaired();
    obs.foreign_write(&proxy_status::ForeignWriter {
        pid: Some(7),
        process: Some("nft".into()),
    });
    obs.synced(&SyncReport {
        ops: 12,
        bytes: 4096,
        services: 3,
        ..Default::default()
    });
    let t = m.encode(Format::Text);
    for (series, v) in [
        ("kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family=\"IPv4\",traffic_policy=\"internal\"}", 2.0),
        ("kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family=\"IPv6\",traffic_policy=\"external\"}", 1.0),
        ("kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family=\"IPv6\"}", 1.0),
        ("kubeproxy_conntrack_cleanup_pending_targets", 5.0),
        ("kubeproxy_conntrack_cleanup_oldest_pending_seconds", 90.0),
        ("kubeproxy_conntrack_cleanup_available", 0.0),
        ("kubeproxy_nftables_foreign_writes_total{process=\"nft\"}", 1.0),
        ("kubeproxy_nftables_repairs_total", 1.0),
        ("kubeproxy_sync_proxy_rules_nftables_batch_operations_sum", 12.0),
        ("kubeproxy_sync_proxy_rules_nftables_batch_bytes_count", 1.0),
        ("kubeproxy_sync_proxy_rules_services", 3.0),
    ] {
        assert_eq!(value(&t, series), Some(v), "{series}:\n{t}");
    }
    let info = t
        .lines()
        .find(|l| l.starts_with("kubernetes_build_info{"))
        .unwrap();
    assert!(
        info.contains(&format!(
            "git_version=\"v1.38.0+kube-nlproxy.{}\"",
            env!("CARGO_PKG_VERSION")
        )) && info.contains("major=\"1\"")
            && info.contains("minor=\"38\""),
        "{info}"
    );
    assert!(info.ends_with("} 1"), "{info}");
}

/// component-base's `kubernetes_feature_enabled` as upstream's
/// `TestFeatureGateMetrics` expects it (BETA, gauge, name and stage labels, GA's stage
/// empty).
#[test]
fn feature_gates_are_exposed_as_component_base() {
    let m = Metrics::new(&["IPv4"], &BuildInfo::ours());
    m.record_feature_gates([
        ("AllAlpha", "ALPHA", false),
        ("KubeProxyNFTablesLocalhostNodePorts", "BETA", true),
        ("TopologyAwareHints", "", true),
    ]);
    let text = m.encode(Format::Text);
    for line in [
        "# HELP kubernetes_feature_enabled [BETA] This metric records the data about the stage and enablement of a k8s feature.\n",
        "# TYPE kubernetes_feature_enabled gauge\n",
        "kubernetes_feature_enabled{name=\"AllAlpha\",stage=\"ALPHA\"} 0\n",
        "kubernetes_feature_enabled{name=\"KubeProxyNFTablesLocalhostNodePorts\",stage=\"BETA\"} 1\n",
        "kubernetes_feature_enabled{name=\"TopologyAwareHints\",stage=\"\"} 1\n",
    ] {
        assert!(text.contains(line), "missing {line:?}");
    }
}

/// nftables mode's localhost NodePort proxy (KEP-6032): the families of
/// `pkg/proxy/metrics`, their series appearing once a family's proxy runs.
const LOCALHOST: &[(&str, &str, &str, &str)] = &[
    (
        "kubeproxy_nftables_localhost_nodeport_listeners",
        "gauge",
        "[ALPHA] Number of active localhost NodePort userspace proxy listeners.",
        "ip_family",
    ),
    (
        "kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total",
        "counter",
        "[ALPHA] Number of localhost NodePort userspace proxy listener creation failures.",
        "ip_family",
    ),
];

#[test]
fn localhost_node_port_families_follow_the_proxy() {
    use proxy_status::LocalhostObserver;
    let m = metrics();
    let text = m.encode(Format::Text);
    assert!(
        !text.contains("kubeproxy_nftables_localhost_nodeport_listeners{"),
        "no series before a proxy runs"
    );
    m.listeners(IpFamily::V4, 0);
    m.listener_failed(IpFamily::V6);
    m.listeners(IpFamily::V4, 2);
    let text = m.encode(Format::Text);
    check_families(&text, LOCALHOST);
    assert_eq!(
        value(
            &text,
            "kubeproxy_nftables_localhost_nodeport_listeners{ip_family=\"IPv4\"}"
        ),
        Some(2.0)
    );
    assert_eq!(
        value(&text, "kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total{ip_family=\"IPv4\"}"),
        Some(0.0)
    );
    assert_eq!(
        value(&text, "kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total{ip_family=\"IPv6\"}"),
        Some(1.0)
    );
}

/// nftables mode's localhost NodePort rejects: upstream's family (the HELP text of its
/// `nftCounterMetricCollector` test), one series per named counter read at scrape time,
/// labelled by family and protocol; none before the counters exist. `promtool check
/// metrics` accepts the exposition.
#[test]
fn localhost_rejected_packets_are_read_at_scrape_time() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    const NAME: &str = "kubeproxy_nftables_localhost_nodeport_rejected_packets_total";
    let m = metrics();
    let packets = Arc::new(AtomicU64::new(u64::MAX));
    let p = packets.clone();
    m.localhost_rejected(move || {
        let n = p.load(Ordering::Relaxed);
        if n == u64::MAX {
            return Vec::new(); // no table yet
        }
        vec![
            ops_server::RejectedPackets {
                family: IpFamily::V4,
                protocol: "UDP",
                packets: n,
            },
            ops_server::RejectedPackets {
                family: IpFamily::V4,
                protocol: "SCTP",
                packets: 3,
            },
            ops_server::RejectedPackets {
                family: IpFamily::V6,
                protocol: "UDP",
                packets: 1,
            },
        ]
    });
    assert!(
        !m.encode(Format::Text).contains(NAME),
        "no counters, no family"
    );
    packets.store(7, Ordering::Relaxed);
    let text = m.encode(Format::Text);
    check_families(
        &text,
        &[(
            NAME,
            "counter",
            "[ALPHA] Number of packets rejected on localhost NodePorts. UDP and SCTP are always rejected; TCP is rejected when the localhost NodePort proxy is not running",
            "ip_family,protocol",
        )],
    );
    for (series, v) in [
        ("{ip_family=\"IPv4\",protocol=\"SCTP\"}", 3.0),
        ("{ip_family=\"IPv4\",protocol=\"UDP\"}", 7.0),
        ("{ip_family=\"IPv6\",protocol=\"UDP\"}", 1.0),
    ] {
        assert_eq!(value(&text, &format!("{NAME}{series}")), Some(v), "{text}");
    }
    // read again at the next scrape
    packets.store(9, Ordering::Relaxed);
    let text = m.encode(Format::Text);
    assert_eq!(
        value(
            &text,
            &format!("{NAME}{{ip_family=\"IPv4\",protocol=\"UDP\"}}")
        ),
        Some(9.0)
    );
    let Ok(mut child) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        assert!(std::env::var_os("CI").is_none(), "promtool is missing");
        eprintln!("SKIPPED promtool check: no promtool");
        return;
    };
    // this family alone (promtool's lint finds upstream's own gauge named `_total`,
    // `kubeproxy_sync_proxy_rules_no_local_endpoints_total`, in the whole exposition)
    let ours: String = text
        .lines()
        .filter(|l| l.contains(NAME))
        .map(|l| format!("{l}\n"))
        .collect();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(ours.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "promtool: {said}\n{ours}");
    assert!(said.trim().is_empty(), "promtool on {NAME}: {said}");
}

/// iptables mode's localhost NodePort accept counter: upstream's family (no labels,
/// HELP "Number of packets accepted on nodeports of loopback interface"), read at
/// scrape time; no series without the counter.
#[test]
fn localhost_accepted_packets_are_read_at_scrape_time() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    const NAME: &str = "kubeproxy_iptables_localhost_nodeports_accepted_packets_total";
    let m = metrics();
    let n = Arc::new(AtomicU64::new(u64::MAX));
    let r = n.clone();
    m.localhost_accepted(move || Some(r.load(Ordering::Relaxed)).filter(|v| *v != u64::MAX));
    assert!(!m.encode(Format::Text).contains(NAME));
    n.store(40, Ordering::Relaxed);
    let text = m.encode(Format::Text);
    check_families(
        &text,
        &[(
            NAME,
            "counter",
            "[ALPHA] Number of packets accepted on nodeports of loopback interface",
            "",
        )],
    );
    assert_eq!(value(&text, NAME), Some(40.0), "{text}");
}

/// component-base's meta metrics (`RegisterMetaMetrics`), as upstream's registry
/// serves them in kube-proxy: `registered_metrics_total` by stability level (the
/// families registered with one, counted at the scrape), `disabled_metrics_total`,
/// `hidden_metrics_total` (BETA, 0: none is disabled or hidden) and
/// `cardinality_enforcement_unexpected_categorizations_total` (ALPHA, 0).
///
/// Negative control (run 2026-12-06, before): `registered_metrics_total: HELP/TYPE
/// differ from upstream` (not served).
#[test]
fn component_base_meta_metrics() {
    let m = metrics();
    m.record_feature_gates([("X", "BETA", true)]);
    let t = m.encode(Format::Text);
    check_families(
        &t,
        &[
            (
                "registered_metrics_total",
                "counter",
                "[BETA] The count of registered metrics broken by stability level and deprecation version.",
                "deprecated_version,stability_level",
            ),
            ("disabled_metrics_total", "counter", "[BETA] The count of disabled metrics.", ""),
            ("hidden_metrics_total", "counter", "[BETA] The count of hidden metrics.", ""),
            (
                "cardinality_enforcement_unexpected_categorizations_total",
                "counter",
                "[ALPHA] The count of unexpected categorizations during cardinality enforcement.",
                "",
            ),
        ],
    );
    assert_eq!(value(&t, "disabled_metrics_total"), Some(0.0), "{t}");
    assert_eq!(value(&t, "hidden_metrics_total"), Some(0.0), "{t}");
    let beta = value(
        &t,
        "registered_metrics_total{deprecated_version=\"\",stability_level=\"BETA\"}",
    );
    // kubernetes_feature_enabled and the three BETA meta counters themselves
    assert_eq!(beta, Some(4.0), "{t}");
    let alpha = value(
        &t,
        "registered_metrics_total{deprecated_version=\"\",stability_level=\"ALPHA\"}",
    )
    .unwrap_or(0.0);
    let alpha_families = t
        .lines()
        .filter(|l| l.starts_with("# HELP ") && l.contains(" [ALPHA] "))
        .count() as f64;
    assert!(
        alpha >= alpha_families,
        "every ALPHA family served is registered: {alpha} < {alpha_families}\n{t}"
    );
}

/// The `go_*` families with an honest counterpart (threads for goroutines, the
/// kernel's resident memory), as client_golang's Go collector names them (no stability
/// prefix); the kubernetes-mixin "Proxy" dashboard plots `go_goroutines`.
///
/// Negative control (run 2026-12-06, before): `go_goroutines: HELP/TYPE differ from
/// upstream` (not served).
#[test]
fn go_runtime_families_with_honest_values() {
    let t = metrics().encode(Format::Text);
    check_families(
        &t,
        &[
            (
                "go_goroutines",
                "gauge",
                "Number of goroutines that currently exist.",
                "",
            ),
            ("go_threads", "gauge", "Number of OS threads created.", ""),
            (
                "go_info",
                "gauge",
                "Information about the Go environment.",
                "version",
            ),
            (
                "go_memstats_sys_bytes",
                "gauge",
                "Number of bytes obtained from system. Equals to /memory/classes/total:byte.",
                "",
            ),
        ],
    );
    assert!(value(&t, "go_goroutines").is_some_and(|n| n >= 1.0), "{t}");
    assert!(
        value(&t, "go_memstats_sys_bytes").is_some_and(|n| n > 0.0),
        "{t}"
    );
    assert!(
        !t.contains("go_gc_duration_seconds"),
        "no GC, no GC metrics"
    );
}
