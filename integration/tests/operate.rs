//! The daemon's operator endpoints over real HTTP: /healthz and /livez JSON and status
//! codes (200 after a sync, 503 when syncs stall, /healthz 503 once the node is marked
//! for deletion), metric names, types and labels with values moving after syncs, and
//! the `explain` command. No root: the kernel is replaced by `--render-to`.

use std::path::Path;
use std::time::Duration;

use integration::*;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);

fn yaml(objs: &[Value]) -> String {
    objs.iter().map(|o| format!("---\n{o}\n")).collect()
}

fn tainted(mut n: Value) -> Value {
    n["spec"]["taints"] = json!([{"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule"}]);
    n
}

fn json_of(port: u16, path: &str) -> Option<(u16, Value)> {
    let (code, _, body) = http_get(port, path)?;
    Some((code, serde_json::from_str(&body).ok()?))
}

fn metric(text: &str, line_start: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn health_and_metrics_follow_syncs_stalls_and_node_state() {
    let dir = TempDir::new("operate");
    let mdir = dir.path("manifests");
    std::fs::create_dir_all(&mdir).unwrap();
    let objs = vec![
        node("node-a", "198.18.0.10"),
        service("demo", "web", "198.18.128.10", 80),
        slice("demo", "web", "web-1", &["198.18.64.5"], 8080, "node-a"),
    ];
    let file = mdir.join("all.yaml");
    std::fs::write(&file, yaml(&objs)).unwrap();
    let (hp, mp) = (free_port(), free_port());
    let (hz, mz) = (format!("127.0.0.1:{hp}"), format!("127.0.0.1:{mp}"));
    let out = dir.path("ruleset.nft");
    let d = Daemon::start(
        daemon_binary!(),
        &[
            "--manifests",
            mdir.to_str().unwrap(),
            "--hostname-override",
            "node-a",
            "--iptables-sync-period",
            "1s",
            "--iptables-min-sync-period",
            "100ms",
            "--manifests-poll",
            "100ms",
            "--healthz-bind-address",
            &hz,
            "--metrics-bind-address",
            &mz,
            "--render-to",
            out.to_str().unwrap(),
        ],
        dir.path("daemon.log"),
    );
    let log = || d.log_text();

    // 200 after the first sync, with upstream's fields
    assert!(
        // (before the first sync /healthz is 200 already, without per-family status,
        // as upstream's: wait for the sync itself)
        wait_for(WAIT, || json_of(hp, "/healthz")
            .is_some_and(|(c, v)| c == 200
                && v["lastUpdated"] != "0001-01-01T00:00:00Z"
                && v["status"]["IPv4"].is_object())),
        "healthz never became 200 after a sync:\n{}",
        log()
    );
    let (_, v) = json_of(hp, "/healthz").unwrap();
    for f in [
        "lastUpdated",
        "currentTime",
        "nodeEligible",
        "healthy",
        "status",
    ] {
        assert!(v.get(f).is_some(), "healthz lacks {f}: {v}");
    }
    assert_eq!(v["status"]["IPv4"]["healthy"], true, "{v}");
    assert_eq!(json_of(hp, "/livez").map(|x| x.0), Some(200));

    // metrics: upstream names, types and labels; values move after a sync
    let (code, head, text) = http_get(mp, "/metrics").expect("metrics answer");
    assert_eq!(code, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain"),
        "{head}"
    );
    for (name, kind) in [
        ("kubeproxy_sync_proxy_rules_duration_seconds", "histogram"),
        ("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "gauge"),
        (
            "kubeproxy_sync_proxy_rules_service_changes_total",
            "counter",
        ),
        (
            "kubeproxy_sync_proxy_rules_endpoint_changes_total",
            "counter",
        ),
        (
            "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
            "counter",
        ),
        (
            "kubeproxy_network_programming_duration_seconds",
            "histogram",
        ),
        ("kubeproxy_proxy_healthz_total", "counter"),
        (
            "kubeproxy_sync_proxy_rules_nftables_batch_operations",
            "histogram",
        ),
        ("process_resident_memory_bytes", "gauge"),
        ("kubernetes_build_info", "gauge"),
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} {kind}")),
            "{name} ({kind}) missing:\n{text}"
        );
    }
    // the Kubernetes version implemented, ours as build metadata
    let info = text
        .lines()
        .find(|l| l.starts_with("kubernetes_build_info{"))
        .unwrap_or_default();
    assert!(
        info.contains("git_version=\"v1.38.0+kube-nlproxy.")
            && info.contains("major=\"1\"")
            && info.contains("minor=\"38\""),
        "{info}"
    );
    let count = |t: &str| {
        metric(
            t,
            "kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"}",
        )
        .unwrap_or(0.0)
    };
    let before = count(&text);
    assert!(before >= 1.0, "no sync counted:\n{text}");
    assert!(
        metric(&text, "kubeproxy_sync_proxy_rules_service_changes_total").unwrap_or(0.0) >= 1.0
    );

    // a change: another endpoint; the sync count moves
    let mut objs2 = objs.clone();
    objs2[2] = slice(
        "demo",
        "web",
        "web-1",
        &["198.18.64.5", "198.18.64.6"],
        8080,
        "node-a",
    );
    std::fs::write(&file, yaml(&objs2)).unwrap();
    assert!(
        wait_for(WAIT, || http_get(mp, "/metrics")
            .is_some_and(|(_, _, t)| count(&t) > before)),
        "sync count did not move:\n{}",
        log()
    );
    assert!(
        metric(
            &http_get(mp, "/metrics").unwrap().2,
            "kubeproxy_sync_proxy_rules_endpoint_changes_total"
        )
        .unwrap_or(0.0)
            >= 2.0
    );

    // the node is marked for deletion by the autoscaler: /healthz 503, /livez 200
    objs2[0] = tainted(node("node-a", "198.18.0.10"));
    std::fs::write(&file, yaml(&objs2)).unwrap();
    assert!(
        wait_for(WAIT, || json_of(hp, "/healthz")
            .is_some_and(|(c, v)| c == 503 && v["nodeEligible"] == false)),
        "healthz did not turn 503 for a node marked for deletion:\n{}",
        log()
    );
    assert_eq!(json_of(hp, "/livez").map(|x| x.0), Some(200));
    assert!(
        metric(
            &http_get(mp, "/metrics").unwrap().2,
            "kubeproxy_proxy_healthz_total{code=\"503\"}"
        )
        .unwrap_or(0.0)
            >= 1.0
    );

    // syncs stall: the sink cannot be written, a change stays queued > 2 x syncPeriod
    std::fs::write(&file, yaml(&objs)).unwrap_or_default();
    std::fs::remove_file(&out).unwrap();
    std::fs::create_dir(&out).unwrap();
    objs2[0] = node("node-a", "198.18.0.10");
    objs2.push(service("demo", "other", "198.18.128.11", 80));
    std::fs::write(&file, yaml(&objs2)).unwrap();
    assert!(
        wait_for(WAIT, || json_of(hp, "/livez")
            .is_some_and(|(c, v)| c == 503 && v["healthy"] == false)),
        "livez did not report the stalled syncs:\n{}",
        log()
    );
    assert_eq!(json_of(hp, "/healthz").map(|x| x.0), Some(503));
    let t = http_get(mp, "/metrics").unwrap().2;
    assert!(
        metric(
            &t,
            "kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family=\"IPv4\"}"
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{t}"
    );
}

#[test]
fn explain_shows_path_verdict_and_reason() {
    let dir = TempDir::new("explain");
    let file = dir.path("all.yaml");
    std::fs::write(
        &file,
        yaml(&[
            node("node-a", "198.18.0.10"),
            service("demo", "web", "198.18.128.10", 80),
            slice("demo", "web", "web-1", &["198.18.64.5"], 8080, "node-a"),
        ]),
    )
    .unwrap();
    let run = |dst: &str| {
        let out = std::process::Command::new(daemon_binary!())
            .args([
                "explain",
                "--manifests",
                file.to_str().unwrap(),
                "--hostname-override",
                "node-a",
                "--dry-run",
            ])
            .args(["--src", "198.18.66.9:1234", "--dst", dst, "--iif", "eth0"])
            .output()
            .expect("run explain");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let ok = run("198.18.128.10:80/tcp");
    assert!(
        ok.starts_with("packet: 198.18.66.9:1234 -> 198.18.128.10:80 tcp in eth0\n"),
        "{ok}"
    );
    assert!(
        ok.contains("verdict: DNAT to 1 endpoint (198.18.64.5:8080)"),
        "{ok}"
    );
    assert!(
        ok.contains("path: ") && ok.contains("=> dnat 198.18.64.5:8080"),
        "{ok}"
    );
    let wrong = run("198.18.128.10:81/udp");
    assert!(
        wrong.contains("rejected: ClusterIP on a port that no service uses"),
        "{wrong}"
    );
    let bad = std::process::Command::new(daemon_binary!())
        .args([
            "explain",
            "--manifests",
            file.to_str().unwrap(),
            "--dry-run",
            "--src",
            "198.18.66.9",
            "--dst",
            "nonsense",
        ])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--dst"));
}

/// `--version` and `--version=raw` as component-base's verflag prints them (kube-proxy's
/// `Kubernetes v1.38.0` and Go's `%#v` of `version.Info`), for the Kubernetes version
/// implemented, with ours as semver build metadata; a value that is neither a boolean nor
/// `raw` is pflag's error.
///
/// Negative control (run 2026-12-06, before): `kube-nlproxy 0.1.0` for `--version`, and
/// `--version=raw` refused (`unexpected value 'raw' for '--version' found`).
#[test]
fn version_as_upstream_prints_it() {
    let run = |arg: &str| {
        let out = std::process::Command::new(daemon_binary!())
            .arg(arg)
            .output()
            .expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = run("--version");
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("Kubernetes v1.38.0+kube-nlproxy."), "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");
    let (code, raw, err) = run("--version=raw");
    assert_eq!(code, Some(0), "{err}");
    let git_version = out.trim().strip_prefix("Kubernetes ").unwrap();
    assert!(
        raw.starts_with("version.Info{Major:\"1\", Minor:\"38\", EmulationMajor:\"\", ")
            && raw.contains(&format!("GitVersion:\"{git_version}\", GitCommit:\""))
            && raw.trim_end().ends_with('}'),
        "{raw}"
    );
    // built in a git checkout: the commit read from git's files (build.rs runs no git)
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .any(|d| d.join(".git").exists());
    if checkout && std::env::var_os("KUBE_NLPROXY_GIT_COMMIT").is_none() {
        let commit = raw
            .split("GitCommit:\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or_default();
        assert!(
            commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()),
            "{raw}"
        );
        assert!(
            git_version.ends_with(&format!("-g{}", &commit[..12])),
            "{raw}"
        );
    }
    let (code, out, _) = run("--version=false");
    assert_ne!(code, Some(0), "--version=false runs the daemon: {out}");
    let (code, _, err) = run("--version=bogus");
    assert_eq!(code, Some(1));
    assert!(
        err.contains("invalid argument \"bogus\" for \"--version\" flag"),
        "{err}"
    );
}

/// An HTTP request of `method` with `body` to 127.0.0.1:`port`: (status, body).
fn http_do(port: u16, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n")?;
    Some((
        head.split_whitespace().nth(1)?.parse().ok()?,
        rest.to_string(),
    ))
}

/// With `--profiling`, as kube-proxy with `enableProfiling`: `/debug/flags/v` changes `-v`
/// at run time (`PUT`), `/debug/pprof/` serves what a Rust process can (the command
/// line, memory, threads) and says what it cannot (a CPU profile: 501); without it,
/// none of these paths exists.
///
/// Negative control (run 2026-12-06, before): `/debug/flags/v` answered 404 (and
/// `--profiling` was logged as without effect).
#[test]
fn profiling_serves_debug_flags_v_and_pprof() {
    let dir = TempDir::new("profiling");
    let file = dir.path("all.yaml");
    std::fs::write(
        &file,
        yaml(&[
            node("node-a", "198.18.0.10"),
            service("demo", "web", "198.18.128.10", 80),
        ]),
    )
    .unwrap();
    let mp = free_port();
    let mz = format!("127.0.0.1:{mp}");
    let out = dir.path("ruleset.nft");
    let start = |profiling: bool| {
        let mut args = vec![
            "--manifests",
            file.to_str().unwrap(),
            "--hostname-override",
            "node-a",
            "--iptables-sync-period",
            "1s",
            "--metrics-bind-address",
            &mz,
            "--render-to",
            out.to_str().unwrap(),
            "--v=0",
        ];
        if profiling {
            args.push("--profiling");
        }
        Daemon::start(daemon_binary!(), &args, dir.path("daemon.log"))
    };
    let d = start(true);
    assert!(
        wait_for(WAIT, || http_get(mp, "/healthz").is_some()),
        "{}",
        d.log_text()
    );
    // -v 0: no sync lines; PUT 2: the periodic syncs log theirs
    std::thread::sleep(Duration::from_secs(2));
    assert!(!d.log_text().contains("\"synced\""), "{}", d.log_text());
    assert_eq!(
        http_do(mp, "GET", "/debug/flags/v", ""),
        Some((406, "unsupported http method\n".into()))
    );
    let (code, body) = http_do(mp, "PUT", "/debug/flags/v", "x").unwrap();
    assert_eq!(code, 400, "{body}");
    assert!(
        body.starts_with("failed set klog.logging.verbosity x: "),
        "{body}"
    );
    assert_eq!(
        http_do(mp, "PUT", "/debug/flags/v", "2"),
        Some((200, "successfully set klog.logging.verbosity to 2\n".into()))
    );
    assert!(
        wait_for(WAIT, || d.log_text().contains("\"synced\"")),
        "no sync logged at -v 2:\n{}",
        d.log_text()
    );
    // pprof: what can be served
    let (code, _, cmdline) = http_get(mp, "/debug/pprof/cmdline").unwrap();
    assert_eq!(code, 200);
    assert!(cmdline.contains("--profiling\0"), "{cmdline:?}");
    let (code, _, threads) = http_get(mp, "/debug/pprof/goroutine").unwrap();
    assert_eq!(code, 200);
    assert!(threads.starts_with("threads: "), "{threads}");
    let (code, _, heap) = http_get(mp, "/debug/pprof/heap").unwrap();
    assert_eq!(code, 200);
    assert!(
        heap.contains("VmRSS:") && heap.contains("jemalloc"),
        "{heap}"
    );
    let (code, _, index) = http_get(mp, "/debug/pprof/").unwrap();
    assert_eq!(code, 200);
    assert!(
        index.contains("cmdline") && index.contains("perf record"),
        "{index}"
    );
    assert_eq!(http_get(mp, "/debug/pprof/profile").map(|x| x.0), Some(501));
    assert!(
        !d.log_text().contains("Flag has no effect"),
        "{}",
        d.log_text()
    );
    drop(d);
    // without --profiling: not there
    let d = start(false);
    assert!(
        wait_for(WAIT, || http_get(mp, "/healthz").is_some()),
        "{}",
        d.log_text()
    );
    for p in ["/debug/flags/v", "/debug/pprof/", "/debug/pprof/cmdline"] {
        assert_eq!(http_get(mp, p).map(|x| x.0), Some(404), "{p}");
    }
}
