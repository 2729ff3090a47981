//! The metrics read by real tools, as kube-proxy's are: `promtool check metrics` on a
//! live scrape, and a real Prometheus server scraping the daemon (against the API-server
//! double, in a network namespace of its own) answers the kubernetes-mixin "Proxy"
//! dashboard's queries (`dashboards/proxy.libsonnet`) with non-empty results.
//!
//! Everything runs in one namespace: the API-server double on 127.0.0.1, the daemon
//! (real kernel) with its metrics on 198.18.9.1:10249, Prometheus on 198.18.9.1:9090
//! with its configuration and storage in a temporary directory, scraping every second.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use integration::{daemon_binary, node, service, slice, ApiDaemon, ApiServer, TempDir};
use netns_tests::{require_root, wait_until, Netns};

const WAIT: Duration = Duration::from_secs(30);
const ADDR: &str = "198.18.9.1";

struct Running(Child);
impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A tool of Debian's `prometheus` package; its absence fails in CI (.ci/run installs
/// it), and skips elsewhere.
fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{name} is not installed (apt-get install prometheus)"
        );
        eprintln!("SKIPPED: {name} is not installed");
    }
    found
}

/// GET from inside `ns` (HTTP/1.0, the whole body): (status, body).
fn get(ns: &Netns, port: u16, path: &str) -> Option<(u16, String)> {
    let path = path.to_string();
    ns.run(move || {
        let mut s = TcpStream::connect((ADDR, port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {ADDR}\r\n\r\n").as_bytes())
            .ok()?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).ok()?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n")?;
        Some((
            head.split_whitespace().nth(1)?.parse().ok()?,
            body.to_string(),
        ))
    })
}

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An EndpointSlice whose last change happened just now (the controller's annotation).
fn fresh_slice(addrs: &[&str]) -> serde_json::Value {
    let mut s = slice("demo", "web", "web-1", addrs, 8080, "node-a");
    s["metadata"]["annotations"] = serde_json::json!({
        "endpoints.kubernetes.io/last-change-trigger-time":
            humantime::format_rfc3339_nanos(SystemTime::now() - Duration::from_millis(300)).to_string()
    });
    s
}

/// The kubernetes-mixin Proxy dashboard's queries, with `cluster="test"`,
/// `job="kube-proxy"` (its kubeProxySelector) and every instance; whether each must be
/// above zero.
fn dashboard_queries() -> Vec<(&'static str, String, bool)> {
    let sel = r#"cluster="test", job="kube-proxy", instance=~".*""#;
    vec![
        ("Up", r#"sum(up{cluster="test", job="kube-proxy"})"#.to_string(), true),
        (
            "Rules Sync Rate",
            format!("sum(rate(kubeproxy_sync_proxy_rules_duration_seconds_count{{{sel}}}[5m]))"),
            true,
        ),
        (
            "Rule Sync Latency 99th Quantile",
            format!("histogram_quantile(0.99,rate(kubeproxy_sync_proxy_rules_duration_seconds_bucket{{{sel}}}[5m]))"),
            true,
        ),
        (
            "Network Programming Rate",
            format!("sum(rate(kubeproxy_network_programming_duration_seconds_count{{{sel}}}[5m]))"),
            true,
        ),
        (
            "Network Programming Latency 99th Quantile",
            format!("histogram_quantile(0.99, sum(rate(kubeproxy_network_programming_duration_seconds_bucket{{{sel}}}[5m])) by (instance, le))"),
            true,
        ),
        (
            "Kube API Request Rate 2xx",
            format!(r#"sum(rate(rest_client_requests_total{{{sel},code=~"2.."}}[5m]))"#),
            true,
        ),
        // the node's Starting event is the one POST, at start: its series exists
        (
            "Post Request Latency 99th Quantile",
            format!(r#"histogram_quantile(0.99, sum(rate(rest_client_request_duration_seconds_bucket{{{sel},verb="POST"}}[5m])) by (verb, url, le))"#),
            false,
        ),
        (
            "Get Request Latency 99th Quantile",
            format!(r#"histogram_quantile(0.99, sum(rate(rest_client_request_duration_seconds_bucket{{{sel}, verb="GET"}}[5m])) by (verb, url, le))"#),
            true,
        ),
        ("Memory", format!("process_resident_memory_bytes{{{sel}}}"), true),
        ("CPU usage", format!("rate(process_cpu_seconds_total{{{sel}}}[5m])"), false),
    ]
}

/// The values of an instant query's result (None: the query failed).
fn query(ns: &Netns, q: &str) -> Option<Vec<f64>> {
    let (code, body) = get(ns, 9090, &format!("/api/v1/query?query={}", encode(q)))?;
    if code != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    Some(
        v["data"]["result"]
            .as_array()?
            .iter()
            .filter_map(|r| r["value"][1].as_str()?.parse::<f64>().ok())
            .collect(),
    )
}

fn start_prometheus(ns: &Netns, dir: &Path, prometheus: &Path) -> Running {
    let cfg = dir.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: kube-proxy\n    static_configs:\n      - targets: ['{ADDR}:10249']\n        labels: {{cluster: test}}\n"
        ),
    )
    .unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", ns.name()])
        .arg(prometheus)
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={ADDR}:9090"))
        .arg("--storage.tsdb.retention.time=1h")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
        .spawn()
        .expect("start prometheus");
    Running(child)
}

#[test]
fn promtool_and_prometheus_read_the_metrics_as_kube_proxys() {
    require_root!();
    let (Some(promtool), Some(prometheus)) = (tool("promtool"), tool("prometheus")) else {
        return;
    };
    let ns = Netns::new("prom");
    ns.ip(&["addr", "add", &format!("{ADDR}/32"), "dev", "lo"]);
    let scratch = TempDir::new("prom");
    let dir = scratch.0.clone();

    let api = ns.run(ApiServer::start);
    api.apply(node("node-a", ADDR));
    api.apply(service("demo", "web", "198.18.100.1", 80));
    api.apply(slice(
        "demo",
        "web",
        "web-1",
        &["198.18.64.11"],
        8080,
        "node-a",
    ));
    let daemon = ApiDaemon::new(&api, "node-a")
        .kernel()
        .serving_on(
            format!("{ADDR}:10256").parse().unwrap(),
            format!("{ADDR}:10249").parse().unwrap(),
        )
        .args(&["--iptables-sync-period", "2s"])
        .start_wrapped(
            daemon_binary!(),
            &["ip", "netns", "exec", ns.name()],
            &scratch,
        );
    let logs = || daemon.log_text();
    assert!(
        wait_until(WAIT, || get(&ns, 10249, "/metrics").is_some_and(
            |(c, b)| c == 200
                && b.contains(
                    "kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 1"
                )
        )),
        "no sync in the metrics:\n{}",
        logs()
    );

    // promtool on a live scrape (text format 0.0.4)
    let (_, scrape) = get(&ns, 10249, "/metrics").unwrap();
    let mut child = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(scrape.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("promtool check metrics ({:?}): {report}", out.status.code());
    // The only finding allowed is one kube-proxy itself has: upstream names a gauge
    // kubeproxy_sync_proxy_rules_no_local_endpoints_total.
    let findings: Vec<&str> = report
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| !l.starts_with("kubeproxy_sync_proxy_rules_no_local_endpoints_total "))
        .collect();
    assert!(
        findings.is_empty() && matches!(out.status.code(), Some(0) | Some(3)),
        "promtool check metrics: {:?}\n{report}\n--- scrape ---\n{scrape}",
        out.status
    );

    let _prom = start_prometheus(&ns, &dir, &prometheus);
    // Prometheus applies new targets every 5 s: wait for its first scrapes
    assert!(
        wait_until(WAIT, || query(&ns, "up").is_some_and(|v| v == [1.0])),
        "prometheus never scraped the daemon:\n{}",
        std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
    );
    // endpoint changes with fresh trigger times while Prometheus scrapes
    let t0 = Instant::now();
    let mut n = 0;
    while t0.elapsed() < Duration::from_secs(6) {
        n += 1;
        let addrs = [
            "198.18.64.11".to_string(),
            format!("198.18.64.{}", 20 + n % 100),
        ];
        let addrs: Vec<&str> = addrs.iter().map(String::as_str).collect();
        api.apply(fresh_slice(&addrs));
        if n % 4 == 0 {
            // watches end (as they do on a server's timeout): new API requests
            api.drop_connections();
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut results = Vec::new();
    for (panel, q, positive) in dashboard_queries() {
        let mut last = None;
        let ok = wait_until(WAIT, || {
            last = query(&ns, &q);
            last.as_ref().is_some_and(|v| {
                !v.is_empty() && (!positive || v.iter().any(|x| x.is_finite() && *x > 0.0))
            })
        });
        results.push(format!("{panel}: {last:?}"));
        assert!(
            ok,
            "the dashboard's {panel:?} query has no result: {q}\ngot {last:?}\nall: {results:#?}\n--- prometheus ---\n{}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
    }
    eprintln!("Proxy dashboard answers: {results:#?}");
    drop(scratch);
}
