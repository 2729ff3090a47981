//! Local-traffic detection from the API, as kube-proxy starts it
//! (`pkg/proxy/nodemanager`, `cmd/kube-proxy/app/server_linux.go`):
//! `--detect-local-mode NodeCIDR` on a node without podCIDRs waits for them (no sync
//! runs without local detection) and gives up with upstream's error after the bound
//! (5 minutes; `--pod-cidr-timeout` here); `ClusterCIDR` without `--cluster-cidr` runs
//! and says so.

use std::time::{Duration, Instant};

use integration::*;
use serde_json::json;

const NODE: &str = "node-a";
const WAIT: Duration = Duration::from_secs(30);
const POD_CIDR: &str = "198.18.64.0/24";

fn node_without_pod_cidrs() -> serde_json::Value {
    let mut n = node(NODE, "198.18.0.10");
    n["spec"] = json!({});
    n
}

fn seeded() -> ApiServer {
    let s = ApiServer::start();
    s.apply(node_without_pod_cidrs());
    s.apply(service("demo", "web", "198.18.100.1", 80));
    s.apply(slice("demo", "web", "web-1", &["198.18.64.11"], 8080, NODE));
    s
}

/// NodeCIDR on a node without podCIDRs: the daemon logs that it waits, programs nothing
/// meanwhile, and syncs with the node's podCIDR as soon as it is allocated.
///
/// Negative control (run 2026-12-06, no wait, as before): `a sync ran before the node
/// had podCIDRs` (the rules were programmed at once, without local detection).
#[test]
fn node_cidr_waits_for_the_nodes_pod_cidrs() {
    let server = seeded();
    let dir = TempDir::new("nodecidr-wait");
    let d = ApiDaemon::new(&server, NODE)
        .args(&["--detect-local-mode", "NodeCIDR", "--kube-api-qps=-1"])
        .start(daemon_binary!(), &dir);
    let out = dir.path("ruleset.nft");
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        read(&out).is_empty(),
        "a sync ran before the node had podCIDRs:\n{}\n--- log ---\n{}",
        read(&out),
        d.log_text()
    );
    assert!(
        d.log_text().contains("Waiting for the node's PodCIDRs"),
        "{}",
        d.log_text()
    );
    server.apply(node(NODE, "198.18.0.10"));
    assert!(
        wait_for(WAIT, || read(&out).contains(POD_CIDR)
            && read(&out).contains("198.18.100.1")),
        "the rules never showed the node's podCIDR:\n{}\n--- log ---\n{}",
        read(&out),
        d.log_text()
    );
}

/// NodeCIDR and the node never gets podCIDRs: exit 1 with upstream's error once the
/// bound has passed; nothing programmed.
///
/// Negative control (run 2026-12-06, no wait): `the daemon kept running without
/// podCIDRs`.
#[test]
fn node_cidr_without_pod_cidrs_in_time_fails_the_start() {
    let server = seeded();
    let dir = TempDir::new("nodecidr-timeout");
    let mut d = ApiDaemon::new(&server, NODE)
        .args(&[
            "--detect-local-mode",
            "NodeCIDR",
            "--pod-cidr-timeout",
            "3s",
            "--kube-api-qps=-1",
        ])
        .start(daemon_binary!(), &dir);
    let start = Instant::now();
    let exited = wait_for(WAIT, || !d.running());
    assert!(
        exited,
        "the daemon kept running without podCIDRs:\n{}",
        d.log_text()
    );
    assert!(
        start.elapsed() >= Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    let log = d.log_text();
    assert!(
        log.contains("timeout waiting for PodCIDR allocation on node \\\"node-a\\\""),
        "{log}"
    );
    assert!(read(&dir.path("ruleset.nft")).is_empty(), "{log}");
}

/// ClusterCIDR (the default) without `--cluster-cidr`: kube-proxy's line, and the
/// proxy runs (no traffic is local by its source).
///
/// Negative control (run 2026-12-06, before): the line was missing.
#[test]
fn cluster_cidr_without_a_cidr_says_so_and_runs() {
    let server = seeded();
    let dir = TempDir::new("clustercidr-none");
    let d = ApiDaemon::new(&server, NODE)
        .args(&["--kube-api-qps=-1"])
        .start(daemon_binary!(), &dir);
    assert!(
        wait_for(WAIT, || read(&dir.path("ruleset.nft"))
            .contains("198.18.100.1")),
        "{}",
        d.log_text()
    );
    assert!(
        d.log_text().contains(
            "Detect-local-mode set to ClusterCIDR, but no cluster CIDR specified for primary IP family"
        ),
        "{}",
        d.log_text()
    );
}
