//! The daemon in both encodings against the API-server double: protobuf as kube-proxy
//! speaks it (`clientConnection.contentType` defaults to
//! `application/vnd.kubernetes.protobuf`) and JSON when the configuration says
//! `application/json`. The double encodes protobuf with `k8s-pb` (no code of the
//! daemon's), so the same cluster rendering the same ruleset in both encodings is the
//! daemon's protobuf path judged against its JSON path and an independent encoder.
//!
//! The daemon runs unprivileged with `--render-to FILE` (the kernel replaced by a file
//! holding the committed ruleset), as in `apiserver.rs`.

use std::time::Duration;

use integration::scale::{cluster_ip, scale_service, scale_slice};
use integration::*;
use kube_model::manifest;
use serde_json::Value;

const NODE: &str = "node-a";
const WAIT: Duration = Duration::from_secs(60);
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const PROTOBUF_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";
const JSON: &str = "application/json";

/// The documented example cluster (its Node is `node-a`: NodePorts, LoadBalancers,
/// UDP, dual-stack, ETP Local) and 200 generated services of 3 endpoints (numbers
/// 1000.. of the synthetic cluster, whose addresses are not the example's).
fn load(api: &ApiServer) {
    let path = integration::testdata::workspace_root().join("docs/examples/cluster.yaml");
    let text = std::fs::read_to_string(path).expect("docs/examples/cluster.yaml");
    let docs = manifest::documents(&text).expect("cluster.yaml");
    for e in docs.entries().into_iter().flatten() {
        let v: Value = serde_json::from_str(e.raw).expect("json");
        api.apply(v);
    }
    for i in 1000..1200 {
        api.apply(scale_service(i));
        api.apply(scale_slice(i, 3));
    }
}

fn start(api: &ApiServer, dir: &TempDir, content_type: Option<&str>) -> Daemon {
    start_with(api, dir, content_type, &[])
}

fn start_with(
    api: &ApiServer,
    dir: &TempDir,
    content_type: Option<&str>,
    extra: &[&str],
) -> Daemon {
    let mut daemon =
        ApiDaemon::new(api, NODE).args(&["--kube-api-qps", "50", "--kube-api-burst", "100"]);
    if let Some(ct) = content_type {
        daemon = daemon.args(&["--kube-api-content-type", ct]);
    }
    daemon.args(extra).start(daemon_binary!(), dir)
}

fn rules(dir: &TempDir) -> String {
    read(&dir.path("ruleset.nft"))
}

/// The ruleset's lines, sorted, without the separators of set elements: a set's
/// elements are rendered in the order they were added, which depends on how the
/// events were batched into syncs, not on what the kernel holds.
fn content(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .map(|l| {
            let l = l.trim();
            let l = l.strip_suffix(" }").unwrap_or(l);
            l.strip_suffix(',').unwrap_or(l).to_string()
        })
        .collect();
    lines.sort();
    lines
}

/// Wait until both daemons' rulesets are equal and `cond` holds of them.
fn wait_equal(
    (pd, pdir): (&Daemon, &TempDir),
    (jd, jdir): (&Daemon, &TempDir),
    what: &str,
    cond: impl Fn(&str) -> bool,
) -> String {
    let ok = wait_for(WAIT, || {
        let (p, j) = (rules(pdir), rules(jdir));
        !p.is_empty() && content(&p) == content(&j) && cond(&p)
    });
    let (p, j) = (rules(pdir), rules(jdir));
    assert!(
        ok,
        "{what}: the rulesets differ or miss it\n--- protobuf ---\n{p}\n--- json ---\n{j}\n--- protobuf daemon log ---\n{}\n--- json daemon log ---\n{}",
        pd.log_text(),
        jd.log_text()
    );
    p
}

#[test]
fn the_same_cluster_renders_the_same_in_protobuf_and_in_json() {
    let (papi, japi) = (ApiServer::start(), ApiServer::start());
    load(&papi);
    load(&japi);
    let (pdir, jdir) = (TempDir::new("enc-pb"), TempDir::new("enc-json"));
    // protobuf by default, as kube-proxy; JSON when asked
    let pd = start(&papi, &pdir, None);
    let jd = start(&japi, &jdir, Some(JSON));
    let text = wait_equal((&pd, &pdir), (&jd, &jdir), "the initial cluster", |t| {
        t.contains(&cluster_ip(1199)) && t.contains("198.18.64.53")
    });
    assert!(text.contains("table ip kube-nlproxy"), "{text}");

    // the same changes to both: an endpoint replaced, a service deleted, a UDP one added
    for api in [&papi, &japi] {
        api.apply(scale_slice(1007, 1));
        api.delete("EndpointSlice", "ns-8", "svc-1008-abcde");
        api.delete("Service", "ns-8", "svc-1008");
        let mut udp = service("demo", "dns2", "198.18.100.153", 53);
        udp["spec"]["ports"][0]["protocol"] = "UDP".into();
        api.apply(udp);
        let mut s = slice("demo", "dns2", "dns2-1", &["198.18.66.53"], 5353, NODE);
        s["ports"][0]["protocol"] = "UDP".into();
        api.apply(s);
    }
    let text = wait_equal((&pd, &pdir), (&jd, &jdir), "the changes", |t| {
        t.contains("198.18.66.53") && !t.contains(&format!("{} ", cluster_ip(1008)))
    });
    assert!(text.contains("198.18.100.153"), "{text}");

    // the protobuf daemon read everything in protobuf, the JSON one in JSON
    let (p, j) = (papi.traffic(), japi.traffic());
    let of = |t: &Traffic, ct: &str| t.of_content_type(ct);
    // streamed lists (watches) of Services, EndpointSlices, the Node and ServiceCIDRs
    assert!(
        of(&p, PROTOBUF_WATCH).requests >= 4,
        "protobuf watches: {p:?}"
    );
    assert_eq!(
        of(&j, PROTOBUF).requests + of(&j, PROTOBUF_WATCH).requests,
        0,
        "{j:?}"
    );
    let pbytes = of(&p, PROTOBUF).body_bytes + of(&p, PROTOBUF_WATCH).body_bytes;
    let jbytes = of(&j, JSON).body_bytes;
    println!(
        "bytes read: protobuf {pbytes}, json {jbytes} ({:.2}x fewer in protobuf)",
        jbytes as f64 / pbytes.max(1) as f64
    );
    assert!(pbytes < jbytes, "protobuf {pbytes} >= json {jbytes}");
}

/// A server that answers JSON to a protobuf request (as one without protobuf for a
/// type does; client-go's `Accept` allows it) is read as JSON, and the daemon syncs.
#[test]
fn a_server_that_answers_json_is_read_as_json() {
    let api = ApiServer::start();
    api.set_json_only(true);
    load(&api);
    let dir = TempDir::new("enc-json-only");
    let d = start(&api, &dir, None);
    let ok = wait_for(WAIT, || {
        let t = rules(&dir);
        t.contains(&cluster_ip(1199)) && t.contains("198.18.64.53")
    });
    assert!(ok, "{}\n--- log ---\n{}", rules(&dir), d.log_text());
    api.apply(scale_slice(1007, 1));
    let one = integration::scale::endpoint_ip(1007);
    let ok = wait_for(WAIT, || rules(&dir).contains(&format!("{one} ")));
    assert!(ok, "{}\n--- log ---\n{}", rules(&dir), d.log_text());
    let t = api.traffic();
    assert_eq!(t.of_content_type(PROTOBUF).requests, 0, "{t:?}");
    assert!(t.of_content_type(JSON).requests >= 4, "{t:?}");
}

/// Streamed lists (client-go's `WatchListClient`, on by default since 1.35): the daemon
/// lists nothing, it watches with `sendInitialEvents=true` and syncs at the bookmark
/// that ends the initial events; a server that refuses them (no WatchList feature) is
/// listed and watched instead, and the daemon syncs the same. With the gate off
/// (`--feature-gates WatchListClient=false`: kube-proxy registers client-go's gates) it
/// lists.
#[test]
fn streamed_lists_when_the_server_has_them_and_lists_when_not() {
    for (refuse, gate) in [(false, None), (true, None), (false, Some("false"))] {
        let api = ApiServer::start();
        api.set_no_watch_list(refuse);
        load(&api);
        let dir = TempDir::new("enc-stream");
        let d = match gate {
            None => start(&api, &dir, None),
            Some(v) => start_with(
                &api,
                &dir,
                None,
                &["--feature-gates", &format!("WatchListClient={v}")],
            ),
        };
        let what = format!("refused {refuse}, gate {gate:?}");
        let ok = wait_for(WAIT, || {
            let t = rules(&dir);
            t.contains(&cluster_ip(1199)) && t.contains("198.18.64.53")
        });
        assert!(ok, "{what}: {}\n--- log ---\n{}", rules(&dir), d.log_text());
        api.apply(scale_slice(1007, 1));
        let one = integration::scale::endpoint_ip(1007);
        let ok = wait_for(WAIT, || rules(&dir).contains(&format!("{one} ")));
        assert!(ok, "{what}: {}\n--- log ---\n{}", rules(&dir), d.log_text());
        let reqs: Vec<String> = api
            .requests()
            .into_iter()
            .filter(|r| r.contains("/services?"))
            .collect();
        let streamed = reqs
            .iter()
            .filter(|r| r.contains("sendInitialEvents=true"))
            .count();
        let lists = reqs.iter().filter(|r| !r.contains("watch=true")).count();
        match (refuse, gate) {
            (false, None) => assert!(streamed >= 1 && lists == 0, "{what}: {reqs:#?}"),
            (true, None) => assert!(streamed >= 1 && lists >= 1, "{what}: {reqs:#?}"),
            _ => assert!(streamed == 0 && lists >= 1, "{what}: {reqs:#?}"),
        }
    }
}
