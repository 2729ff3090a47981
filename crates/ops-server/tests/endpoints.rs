//! The operator endpoints over real HTTP: health JSON and status codes, metric names,
//! types and values, health-check node ports opening and closing.

use kube_model::ServiceKey;
use ops_server::hcport::HealthCheckPorts;
use ops_server::metrics::MetricsObserver;
use ops_server::{health_router, metrics_router, Metrics, StatusSource};
use proxy_status::{HealthCheck, NodeHealth, Observer, Status, SyncReport};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

#[derive(Clone, Default)]
struct Fake(Arc<Mutex<Status>>);

impl StatusSource for Fake {
    fn snapshot(&self) -> Status {
        self.0.lock().unwrap().clone()
    }
}

impl Fake {
    fn set(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.0.lock().unwrap())
    }
}

fn synced_now() -> Fake {
    let f = Fake::default();
    f.set(|s| {
        s.sync_period = Duration::from_secs(1);
        s.last_sync = Some(Instant::now());
        s.last_sync_wall = Some(SystemTime::now());
    });
    f
}

/// Serve `router` on 127.0.0.1 from a background runtime; returns the base URL.
fn serve(rt: &tokio::runtime::Runtime, router: axum::Router) -> String {
    let listener = rt.block_on(ops_server::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(ops_server::serve(listener, router));
    format!("http://{addr}")
}

/// GET returning (status, header value, body) without treating 503 as an error.
fn get(url: &str, header: &str) -> (u16, Option<String>, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut r = agent
        .get(url)
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let h = r
        .headers()
        .get(header)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (
        r.status().as_u16(),
        h,
        r.body_mut().read_to_string().unwrap(),
    )
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn healthz_and_livez_follow_upstream_fields_and_status_codes() {
    let rt = rt();
    let src = synced_now();
    let metrics = Metrics::new(&["IPv4", "IPv6"], "filtered-flush");
    let base = serve(
        &rt,
        health_router(src.clone(), vec!["IPv4", "IPv6"], Some(metrics.clone())),
    );

    let (code, _, body) = get(&format!("{base}/healthz"), "content-type");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    for field in [
        "lastUpdated",
        "currentTime",
        "nodeEligible",
        "healthy",
        "status",
    ] {
        assert!(v.get(field).is_some(), "field {field} missing: {body}");
    }
    assert_eq!(v["healthy"], true);
    assert_eq!(v["nodeEligible"], true);
    assert_eq!(v["status"]["IPv4"]["healthy"], true);
    assert!(v["status"]["IPv6"]["lastUpdated"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
    let (code, _, body) = get(&format!("{base}/livez"), "content-type");
    assert_eq!(code, 200);
    assert!(serde_json::from_str::<serde_json::Value>(&body)
        .unwrap()
        .get("nodeEligible")
        .is_none());

    // a change queued for more than 2 x syncPeriod and not applied: stalled
    src.set(|s| s.queued_since = Some(Instant::now() - Duration::from_secs(3)));
    assert_eq!(get(&format!("{base}/healthz"), "x").0, 503);
    assert_eq!(get(&format!("{base}/livez"), "x").0, 503);
    src.set(|s| s.queued_since = Some(Instant::now()));
    assert_eq!(
        get(&format!("{base}/healthz"), "x").0,
        200,
        "a fresh change is not a stall"
    );

    // node being deleted or marked by the autoscaler: /healthz 503, /livez still 200
    for n in [
        NodeHealth {
            name: "n".into(),
            deleting: true,
            to_be_deleted_taint: false,
        },
        NodeHealth {
            name: "n".into(),
            deleting: false,
            to_be_deleted_taint: true,
        },
    ] {
        src.set(|s| s.node = Some(n.clone()));
        let (code, _, body) = get(&format!("{base}/healthz"), "x");
        assert_eq!(code, 503, "{n:?}");
        assert!(body.contains("\"nodeEligible\":false"), "{body}");
        assert_eq!(get(&format!("{base}/livez"), "x").0, 200);
    }
    let text = metrics.encode();
    assert!(
        text.contains("kubeproxy_proxy_healthz_total{code=\"200\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("kubeproxy_proxy_healthz_total{code=\"503\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("kubeproxy_proxy_livez_total{code=\"503\"} 1"),
        "{text}"
    );
}

#[test]
fn metrics_have_upstream_names_types_and_move_after_syncs() {
    let rt = rt();
    let metrics = Metrics::new(&["IPv4"], "filtered-flush");
    let base = serve(&rt, metrics_router(metrics.clone()));
    let (code, ctype, before) = get(&format!("{base}/metrics"), "content-type");
    assert_eq!(code, 200);
    assert!(ctype.unwrap().starts_with("text/plain"));
    for (name, kind) in [
        ("kubeproxy_sync_proxy_rules_duration_seconds", "histogram"),
        (
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "histogram",
        ),
        (
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "histogram",
        ),
        ("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "gauge"),
        (
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
            "gauge",
        ),
        (
            "kubeproxy_network_programming_duration_seconds",
            "histogram",
        ),
        (
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
            "gauge",
        ),
        ("kubeproxy_sync_proxy_rules_endpoint_changes", "counter"),
        (
            "kubeproxy_sync_proxy_rules_service_changes_pending",
            "gauge",
        ),
        ("kubeproxy_sync_proxy_rules_service_changes", "counter"),
        (
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "gauge",
        ),
        ("kubeproxy_proxy_healthz", "counter"),
        ("kubeproxy_proxy_livez", "counter"),
        (
            "kubeproxy_sync_proxy_rules_nftables_sync_failures",
            "counter",
        ),
        (
            "kubeproxy_sync_proxy_rules_nftables_cleanup_failures",
            "counter",
        ),
        (
            "kubeproxy_conntrack_reconciler_sync_duration_seconds",
            "histogram",
        ),
        ("kubeproxy_conntrack_reconciler_deleted_entries", "counter"),
        ("kubenlproxy_sync_ops", "histogram"),
        ("kubenlproxy_sync_bytes", "histogram"),
        ("kubenlproxy_conntrack_deleted_entries", "counter"),
        (
            "kubenlproxy_conntrack_cleanup_duration_seconds",
            "histogram",
        ),
        ("kubenlproxy_tamper_repairs", "counter"),
    ] {
        assert!(
            before.contains(&format!("# TYPE {name} {kind}\n")),
            "{name} {kind} missing:\n{before}"
        );
    }
    assert!(before
        .contains("kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family=\"IPv4\"} 0"));
    assert!(before.contains("kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family=\"IPv4\",traffic_policy=\"external\"} 0"));

    metrics.service_change();
    metrics.endpoint_change();
    metrics.endpoint_change();
    let mid = get(&format!("{base}/metrics"), "x").2;
    assert!(
        mid.contains("kubeproxy_sync_proxy_rules_endpoint_changes_pending{ip_family=\"IPv4\"} 2"),
        "{mid}"
    );
    assert!(
        mid.contains("kubeproxy_sync_proxy_rules_service_changes_total{ip_family=\"IPv4\"} 1"),
        "{mid}"
    );

    let obs = MetricsObserver(metrics.clone());
    obs.synced(&SyncReport {
        full: true,
        ops: 12,
        bytes: 4096,
        conntrack_targets: 4,
        conntrack_deleted: 7,
        commit: Duration::from_millis(3),
        ..Default::default()
    });
    obs.cleaned(&proxy_status::CleanupReport {
        targets: 2,
        done: 1,
        deleted: 3,
        took: Duration::from_millis(2),
        pending: 5,
        filters: vec![],
    });
    obs.failed(&std::io::Error::other("test"));
    obs.repaired();
    obs.foreign_write(&proxy_status::ForeignWriter {
        pid: Some(7),
        process: Some("nft".into()),
    });
    let now = Instant::now();
    let status = Status {
        no_local_internal: 2,
        no_local_external: 1,
        cleanup_pending: 5,
        cleanup_oldest_pending: Some(now - Duration::from_secs(90)),
        cleanup_unavailable: Some("no ctnetlink".into()),
        skipped_service_ports: vec![proxy_status::SkippedPort {
            service: "ns1/svc-b".into(),
            port: "dns".into(),
            error: "EINVAL".into(),
            since: now,
            retry_at: now,
        }],
        ..Default::default()
    };
    metrics.update_from_status(&status);
    metrics.update_cleanup(&status, now);
    let after = get(&format!("{base}/metrics"), "x").2;
    for line in [
        "kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 1",
        "kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 0",
        "kubeproxy_sync_proxy_rules_endpoint_changes_pending{ip_family=\"IPv4\"} 0",
        "kubeproxy_network_programming_duration_seconds_count{ip_family=\"IPv4\"} 1",
        "kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=\"IPv4\"} 10",
        "kubenlproxy_conntrack_deleted_entries_total{strategy=\"filtered-flush\"} 10",
        "kubeproxy_conntrack_reconciler_sync_duration_seconds_count{ip_family=\"IPv4\"} 2",
        "kubeproxy_conntrack_cleanup_pending_targets 5",
        "kubeproxy_conntrack_cleanup_oldest_pending_seconds 90.0",
        "kubeproxy_conntrack_cleanup_available 0",
        "kubeproxy_sync_proxy_rules_skipped_service_ports 1",
        "kubeproxy_nftables_foreign_writes_total{process=\"nft\"} 1",
        "kubenlproxy_sync_ops_sum{ip_family=\"IPv4\"} 12.0",
        "kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family=\"IPv4\"} 1",
        "kubenlproxy_tamper_repairs_total 1",
        "kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family=\"IPv4\",traffic_policy=\"external\"} 1",
        "kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family=\"IPv4\",traffic_policy=\"internal\"} 2",
    ] {
        assert!(after.contains(line), "missing {line}:\n{after}");
    }
}

#[test]
fn health_check_node_ports_open_answer_and_close() {
    let rt = rt();
    let src = synced_now();
    // a free port
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let key = ServiceKey::new("web", "lb");
    src.set(|s| {
        s.health_checks.insert(
            key.clone(),
            HealthCheck {
                node_port: port,
                local_endpoints: 2,
            },
        );
    });
    let mut ports = HealthCheckPorts::new(src.clone(), vec!["127.0.0.1".parse().unwrap()]);
    rt.block_on(ports.reconcile());
    assert_eq!(ports.ports(), vec![port]);
    let url = format!("http://127.0.0.1:{port}/");
    let (code, weight, body) = get(&url, "x-load-balancing-endpoint-weight");
    assert_eq!((code, weight.as_deref()), (200, Some("2")), "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"service": {"namespace": "web", "name": "lb"}, "localEndpoints": 2, "serviceProxyHealthy": true})
    );

    src.set(|s| s.health_checks.get_mut(&key).unwrap().local_endpoints = 0);
    let (code, weight, _) = get(&url, "x-load-balancing-endpoint-weight");
    assert_eq!((code, weight.as_deref()), (503, Some("0")));

    // healthy endpoints but a stalled proxy: 503
    src.set(|s| {
        s.health_checks.get_mut(&key).unwrap().local_endpoints = 1;
        s.queued_since = Some(Instant::now() - Duration::from_secs(5));
    });
    let (code, _, body) = get(&url, "x");
    assert_eq!(code, 503);
    assert!(body.contains("\"serviceProxyHealthy\":false"));

    // the service goes away: the port closes
    src.set(|s| s.health_checks.clear());
    rt.block_on(ports.reconcile());
    assert!(ports.ports().is_empty());
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    assert!(agent.get(&url).call().is_err(), "the port must be closed");
}
