//! The operator endpoints over real HTTP: health JSON and status codes, the metrics
//! port's paths, health-check node ports opening, answering, closing and retrying.

use kube_model::ServiceKey;
use ops_server::hcport::HealthCheckPorts;
use ops_server::server::Limits;
use ops_server::{health_router, metrics_router, BuildInfo, Metrics, ProxyInfo, StatusSource};
use proxy_status::{HealthCheck, NodeHealth, Status};
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
        s.last_sync_wall = Some(SystemTime::now() - Duration::from_secs(30));
    });
    f
}

/// Serve `router` on 127.0.0.1 from a background runtime; returns the base URL.
fn serve(rt: &tokio::runtime::Runtime, router: axum::Router) -> String {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(ops_server::server::serve(
        listener,
        router,
        Limits::for_process(),
    ));
    format!("http://{addr}")
}

/// GET returning (status, header value, body) without treating 503 as an error.
fn get(url: &str, header: &str) -> (u16, Option<String>, String) {
    get_with(url, header, None)
}

fn get_with(url: &str, header: &str, accept: Option<&str>) -> (u16, Option<String>, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = agent.get(url);
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    let mut r = req.call().unwrap_or_else(|e| panic!("GET {url}: {e}"));
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

fn parse_time(s: &str) -> SystemTime {
    humantime::parse_rfc3339(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
fn healthz_and_livez_follow_upstream_fields_and_status_codes() {
    let rt = rt();
    let src = synced_now();
    let metrics = Metrics::new(&["IPv4", "IPv6"], &BuildInfo::ours());
    let base = serve(
        &rt,
        health_router(src.clone(), vec!["IPv4", "IPv6"], Some(metrics.clone())),
    );

    let (code, ctype, body) = get(&format!("{base}/healthz"), "content-type");
    assert_eq!(code, 200, "{body}");
    assert_eq!(ctype.as_deref(), Some("application/json"));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    // Go's field order
    let at = |f: &str| body.find(&format!("\"{f}\":")).unwrap_or(usize::MAX);
    let order = [
        "lastUpdated",
        "currentTime",
        "nodeEligible",
        "healthy",
        "status",
    ];
    assert!(order.windows(2).all(|w| at(w[0]) < at(w[1])), "{body}");
    assert_eq!(v["healthy"], true);
    assert_eq!(v["nodeEligible"], true);
    // healthy: lastUpdated is now (kube-proxy's compatibility rule); the family's
    // lastUpdated is its last sync (30 s ago)
    let now = SystemTime::now();
    let last = parse_time(v["lastUpdated"].as_str().unwrap());
    assert!(
        now.duration_since(last).unwrap() < Duration::from_secs(5),
        "{body}"
    );
    let fam = parse_time(v["status"]["IPv6"]["lastUpdated"].as_str().unwrap());
    assert!(
        now.duration_since(fam).unwrap() >= Duration::from_secs(29),
        "{body}"
    );
    assert_eq!(v["status"]["IPv4"]["healthy"], true);
    assert_eq!(
        get(&format!("{base}/metrics"), "x"),
        (404, None, "404 page not found\n".into()),
        "only /healthz and /livez, as Go's mux"
    );
    let (code, _, body) = get(&format!("{base}/livez"), "content-type");
    assert_eq!(code, 200);
    assert!(serde_json::from_str::<serde_json::Value>(&body)
        .unwrap()
        .get("nodeEligible")
        .is_none());

    // a change queued for more than 2 x syncPeriod and not applied: stalled, and
    // lastUpdated is the last sync
    src.set(|s| s.queued_since = Some(Instant::now() - Duration::from_secs(3)));
    let (code, _, body) = get(&format!("{base}/healthz"), "x");
    assert_eq!(code, 503);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"]["IPv4"]["healthy"], false);
    let last = parse_time(v["lastUpdated"].as_str().unwrap());
    assert!(
        now.duration_since(last).unwrap() >= Duration::from_secs(29),
        "{body}"
    );
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
    let text = metrics.encode(ops_server::expo::Format::Text);
    for line in [
        "kubeproxy_proxy_healthz_total{code=\"200\"} 2",
        "kubeproxy_proxy_healthz_total{code=\"503\"} 3",
        "kubeproxy_proxy_livez_total{code=\"503\"} 1",
    ] {
        assert!(text.contains(line), "{line}:\n{text}");
    }

    // before the first sync: no per-family status, the zero time when unhealthy
    let fresh = Fake::default();
    fresh.set(|s| s.sync_period = Duration::from_secs(1));
    let base = serve(&rt, health_router(fresh.clone(), vec!["IPv4"], None));
    let (code, _, body) = get(&format!("{base}/livez"), "x");
    assert_eq!(code, 200);
    assert!(!body.contains("\"status\""), "{body}");
    fresh.set(|s| s.queued_since = Some(Instant::now() - Duration::from_secs(3)));
    let (code, _, body) = get(&format!("{base}/livez"), "x");
    assert_eq!(code, 503);
    assert!(
        body.starts_with("{\"lastUpdated\":\"0001-01-01T00:00:00Z\""),
        "{body}"
    );
}

fn proxy_info() -> ProxyInfo {
    ProxyInfo {
        mode: "nftables".into(),
        config_json: "{\"mode\":\"nftables\"}".into(),
        ..Default::default()
    }
}

/// `/statusz` and `/flagz` as kube-proxy's metrics server serves them with their gates
/// on (text/plain, the Accept negotiation), and not at all with the gates off.
#[test]
fn statusz_and_flagz_follow_their_gates() {
    use ops_server::zpages::Statusz;
    let rt = rt();
    let metrics = Metrics::new(&["IPv4"], &BuildInfo::ours());
    let off = serve(&rt, metrics_router(metrics.clone(), proxy_info()));
    for path in ["/statusz", "/flagz"] {
        assert_eq!(
            get(&format!("{off}{path}"), "x"),
            (404, None, "404 page not found\n".into()),
            "{path} with its gate off"
        );
    }
    let info = ProxyInfo {
        statusz: Some(Statusz {
            component: "kube-proxy".into(),
            started: SystemTime::now() - Duration::from_secs(61),
            go_version: "n/a".into(),
            binary_version: "0.1.0".into(),
            emulation_version: Some("1.38".into()),
        }),
        flagz: Some(vec![("v".into(), "2".into())]),
        ..proxy_info()
    };
    let on = serve(&rt, metrics_router(metrics, info));
    let (code, ctype, body) = get(&format!("{on}/statusz"), "content-type");
    assert_eq!(code, 200);
    assert_eq!(ctype.as_deref(), Some("text/plain; charset=utf-8"));
    assert!(
        body.starts_with("\nkube-proxy statusz\nWarning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only.\n\nStarted"),
        "{body:?}"
    );
    assert!(body.contains(" 0 hr 01 min 0"), "{body:?}");
    assert!(
        body.contains("\nEmulation version") && body.ends_with(" 1.38\n\n"),
        "{body:?}"
    );
    let (code, _, body) = get(&format!("{on}/flagz"), "x");
    assert_eq!(code, 200);
    assert!(
        body.starts_with("\nkube-proxy flags\nWarning: "),
        "{body:?}"
    );
    let sep = body
        .rsplit("\nv")
        .next()
        .unwrap()
        .strip_suffix("2\n")
        .unwrap();
    assert!([":", ": ", "=", " "].contains(&sep), "{body:?}");
    for path in ["/statusz", "/flagz"] {
        assert_eq!(
            get_with(
                &format!("{on}{path}"),
                "content-type",
                Some("application/xml")
            ),
            (
                406,
                Some("text/plain; charset=utf-8".into()),
                "not acceptable\n".into()
            )
        );
    }
}

/// The structured z-pages (component-base 1.35+): with `Accept:
/// application/json;v=v1alpha1|v1beta1;g=config.k8s.io;as=Statusz|Flagz`, the versioned
/// JSON objects; `application/json` alone stays 406.
///
/// Negative control (2026-12-06): run against the router before this change (its
/// `zpage` with the text body only), `/statusz` with the structured Accept answered
/// `406 not acceptable` (`left: 406, right: 200`).
#[test]
fn statusz_and_flagz_in_their_structured_form() {
    use ops_server::zpages::Statusz;
    let rt = rt();
    let metrics = Metrics::new(&["IPv4"], &BuildInfo::ours());
    let info = ProxyInfo {
        statusz: Some(Statusz {
            component: "kube-proxy".into(),
            started: SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600),
            go_version: "n/a".into(),
            binary_version: "1.38.0+kube-nlproxy.0.1.0".into(),
            emulation_version: Some("1.38".into()),
        }),
        flagz: Some(vec![("v".into(), "2".into()), ("config".into(), "".into())]),
        ..proxy_info()
    };
    let on = serve(&rt, metrics_router(metrics, info));
    for v in ["v1alpha1", "v1beta1"] {
        let accept = format!("application/json;v={v};g=config.k8s.io;as=Statusz");
        let (code, ctype, body) = get_with(&format!("{on}/statusz"), "content-type", Some(&accept));
        assert_eq!(code, 200, "{body}");
        assert_eq!(ctype.as_deref(), Some(accept.as_str()));
        let j: serde_json::Value = serde_json::from_str(&body).expect(&body);
        assert_eq!(j["kind"], "Statusz");
        assert_eq!(j["apiVersion"], format!("config.k8s.io/{v}"));
        assert_eq!(j["metadata"]["name"], "kube-proxy");
        assert_eq!(j["startTime"], "2026-01-01T00:00:00Z");
        assert!(j["uptimeSeconds"].as_u64().is_some(), "{j}");
        assert_eq!(j["binaryVersion"], "1.38.0+kube-nlproxy.0.1.0");
        assert_eq!(j["emulationVersion"], "1.38");
        let accept = format!("application/json;v={v};g=config.k8s.io;as=Flagz");
        let (code, _, body) = get_with(&format!("{on}/flagz"), "x", Some(&accept));
        assert_eq!(code, 200, "{body}");
        let j: serde_json::Value = serde_json::from_str(&body).expect(&body);
        assert_eq!(j["kind"], "Flagz");
        assert_eq!(j["flags"]["v"], "2");
        assert_eq!(j["flags"]["config"], "");
    }
    let (code, _, _) = get_with(&format!("{on}/statusz"), "x", Some("application/json"));
    assert_eq!(code, 406);
}

#[test]
fn metrics_port_serves_kube_proxys_paths() {
    let rt = rt();
    let metrics = Metrics::new(&["IPv4"], &BuildInfo::ours());
    let base = serve(&rt, metrics_router(metrics, proxy_info()));

    let (code, ctype, body) = get(&format!("{base}/metrics"), "content-type");
    assert_eq!(code, 200);
    assert_eq!(
        ctype.as_deref(),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(!body.contains("# EOF"), "0.0.4 has no end marker");
    assert!(body.contains("# TYPE kubeproxy_sync_proxy_rules_endpoint_changes_total counter\n"));

    let (code, ctype, body) = get_with(
        &format!("{base}/metrics"),
        "content-type",
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    );
    assert_eq!(code, 200);
    assert_eq!(
        ctype.as_deref(),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    assert!(body.ends_with("# EOF\n"));
    assert!(body.contains("# TYPE kubeproxy_sync_proxy_rules_endpoint_changes counter\n"));
    assert!(body.contains("\nkubeproxy_sync_proxy_rules_endpoint_changes_total 0.0\n"));

    assert_eq!(
        get(&format!("{base}/healthz"), "content-type"),
        (200, Some("text/plain; charset=utf-8".into()), "ok".into())
    );
    assert_eq!(
        get(&format!("{base}/healthz?verbose"), "x").2,
        "[+]ping ok\nhealthz check passed\n"
    );
    assert_eq!(get(&format!("{base}/healthz/ping"), "x").2, "ok");
    assert_eq!(
        get(&format!("{base}/proxyMode"), "content-type"),
        (
            200,
            Some("text/plain; charset=utf-8".into()),
            "nftables".into()
        )
    );
    let (code, _, body) = get(&format!("{base}/configz"), "x");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["kubeproxy.config.k8s.io"]["mode"], "nftables");
    let (_, _, slis) = get(&format!("{base}/metrics/slis"), "x");
    assert!(
        slis.contains("# HELP kubernetes_healthcheck [STABLE] This metric records the result of a single healthcheck.\n"),
        "{slis}"
    );
    assert!(
        slis.contains(
            "kubernetes_healthchecks_total{name=\"ping\",status=\"success\",type=\"healthz\"} 2"
        ),
        "{slis}"
    );
    assert_eq!(
        get(&format!("{base}/nothing-here"), "x"),
        (404, None, "404 page not found\n".into())
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `key`'s health check on `port`, with `local_endpoints`.
fn set_check(src: &Fake, key: &ServiceKey, port: u16, local_endpoints: usize) {
    src.set(|s| {
        s.health_checks.insert(
            key.clone(),
            HealthCheck {
                node_port: port,
                local_endpoints,
            },
        );
    });
}

/// Health-check ports for `src`, on 127.0.0.1.
fn loopback_ports(src: &Fake) -> HealthCheckPorts<Fake> {
    HealthCheckPorts::on(
        src.clone(),
        vec!["127.0.0.1".parse().unwrap()],
        Limits::for_process(),
    )
}

#[test]
fn health_check_node_ports_open_answer_and_close() {
    let rt = rt();
    let src = synced_now();
    let port = free_port();
    let key = ServiceKey::new("web", "lb");
    set_check(&src, &key, port, 2);
    let mut ports = loopback_ports(&src);
    rt.block_on(ports.reconcile());
    assert_eq!(ports.ports(), vec![port]);
    let url = format!("http://127.0.0.1:{port}/");
    let (code, weight, body) = get(&url, "x-load-balancing-endpoint-weight");
    assert_eq!((code, weight.as_deref()), (200, Some("2")), "{body}");
    assert_eq!(body, ops_server::hcport::body(&key, 2, true));
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
    assert!(body.contains("\"serviceProxyHealthy\": false"), "{body}");

    // the service goes away: the port closes
    src.set(|s| s.health_checks.clear());
    rt.block_on(ports.reconcile());
    assert!(ports.ports().is_empty());
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the port must be closed"
    );
}

/// nodePortAddresses with CIDRs of IPv4 only: the health-check port listens on those
/// IPv4 addresses and on every IPv6 address (`[::]`, IPv6-only: it neither takes the
/// other IPv4 addresses nor collides with the IPv4 ones).
#[test]
fn an_ipv4_address_next_to_the_ipv6_wildcard_serves_ipv6_everywhere_and_that_ipv4() {
    let rt = rt();
    let src = synced_now();
    let port = free_port();
    let key = ServiceKey::new("web", "lb");
    set_check(&src, &key, port, 1);
    let mut ports = HealthCheckPorts::on(
        src.clone(),
        vec!["127.0.0.1".parse().unwrap(), "::".parse().unwrap()],
        Limits::for_process(),
    );
    rt.block_on(ports.reconcile());
    assert_eq!(ports.ports(), vec![port], "both addresses bound");
    for url in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://[::1]:{port}/"),
    ] {
        let (code, weight, body) = get(&url, "x-load-balancing-endpoint-weight");
        assert_eq!((code, weight.as_deref()), (200, Some("1")), "{url}: {body}");
    }
    assert!(
        std::net::TcpStream::connect(("127.0.0.2", port)).is_err(),
        "another IPv4 address is not served"
    );
}

/// A health-check port is closed when `reconcile` returns: it can be bound again at once
/// (by the next address set of the same port, or by anyone). Repeated, because an
/// abort alone closes the listener a moment later, on a worker thread.
#[test]
fn a_closed_health_check_port_can_be_bound_again_at_once() {
    const ROUNDS: usize = 5000;
    let rt = rt();
    let src = synced_now();
    let port = free_port();
    let key = ServiceKey::new("web", "lb");
    let mut ports = loopback_ports(&src);
    for round in 0..ROUNDS {
        set_check(&src, &key, port, 1);
        rt.block_on(ports.reconcile());
        assert_eq!(ports.ports(), vec![port], "round {round}");
        src.set(|s| s.health_checks.clear());
        rt.block_on(ports.reconcile());
        assert!(ports.ports().is_empty());
        if let Err(e) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            panic!("round {round}: port {port} still held after reconcile: {e}");
        }
    }
}

/// A health-check port that closes also closes its kept-alive connections (as Go's
/// `http.Server.Close` does for kube-proxy): a load balancer's open connection does not
/// keep getting answers for a service that is gone.
#[test]
fn closing_a_health_check_port_closes_its_kept_alive_connections() {
    use std::io::{Read, Write};
    let rt = rt();
    let src = synced_now();
    let port = free_port();
    let key = ServiceKey::new("web", "lb");
    set_check(&src, &key, port, 1);
    let mut ports = loopback_ports(&src);
    rt.block_on(ports.reconcile());
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = conn.read(&mut buf).unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );

    src.set(|s| s.health_checks.clear());
    rt.block_on(ports.reconcile());
    // The server closes the connection: end of stream (or a reset) at once, well before
    // its own 5 s wait for a next request's headers.
    conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let start = Instant::now();
    match conn.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!(
            "answered after the port closed: {}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!(
            "the kept-alive connection stayed open ({e}) after {:?}",
            start.elapsed()
        ),
    }
}

/// A port held by someone else does not hold back the others, and is opened once it is
/// free again (retried after 5 s, as kube-proxy's servers are).
#[test]
fn a_taken_health_check_port_is_retried_without_blocking_the_others() {
    let rt = rt();
    let src = synced_now();
    let (busy, free) = (free_port(), free_port());
    let holder = std::net::TcpListener::bind(("127.0.0.1", busy)).unwrap();
    src.set(|s| {
        for (name, port) in [("a", busy), ("b", free)] {
            s.health_checks.insert(
                ServiceKey::new("web", name),
                HealthCheck {
                    node_port: port,
                    local_endpoints: 1,
                },
            );
        }
    });
    let mut ports = loopback_ports(&src);
    rt.block_on(ports.reconcile());
    assert_eq!(ports.ports(), vec![free]);
    drop(holder);
    // not retried before 5 s
    rt.block_on(ports.reconcile());
    assert_eq!(ports.ports(), vec![free]);
    std::thread::sleep(Duration::from_millis(5100));
    rt.block_on(ports.reconcile());
    let mut want = vec![busy, free];
    want.sort();
    assert_eq!(ports.ports(), want);
    assert_eq!(get(&format!("http://127.0.0.1:{busy}/"), "x").0, 200);
}
