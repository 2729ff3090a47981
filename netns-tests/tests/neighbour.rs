//! A node shared with another nftables writer (root only): a real `nft -i` committing to
//! a table of its own, 20 times a second as the issue saw it (Docker, firewalld, a CNI,
//! a host agent), while the engine (engine-runner, the engine on real sockets) holds
//! 400 services and takes changes; then a restart of the engine while the neighbour
//! commits as fast as it can, so that every read-back of our tables has the generation
//! move under it.
//!
//! Negative control (run 2026-12-06, `Engine::others_only` proving nothing and the
//! read-back's judge saying no, as before the engine heard every transaction): the
//! changes under the neighbour are synced as `kind=full` (our tables read back after
//! each commit of the neighbour's), and the restarted engine's first sync fails
//! ("dump of table ip kube-nlproxy kept changing under us after 8 tries").

use std::time::Duration;

use netns_tests::engine::{self, Family::*, *};
use netns_tests::neighbour::Neighbour;
use netns_tests::{bins, require_root, scaled, wait_until};

const SERVICES: u32 = 400;

fn cluster_ip(i: u32) -> String {
    format!("198.19.{}.{}", i / 200, i % 200 + 1)
}

fn docs(n: u32) -> Vec<String> {
    let mut d = vec![config_doc(V4), node_doc(V4)];
    for i in 0..n {
        d.push(format!(
            r#"{{"apiVersion": "v1", "kind": "Service", "metadata": {{"name": "s{i}", "namespace": "ns1"}},
                "spec": {{"clusterIP": "{}", "ports": [{{"name": "web", "port": 80, "protocol": "TCP"}}]}}}}"#,
            cluster_ip(i)
        ));
        let eps: Vec<String> = (0..3)
            .map(|k| {
                let a = 0xC612_4000u32 + (i * 3 + k) % 4000 + 1;
                format!(
                    r#"{{"addresses": ["{}"], "nodeName": "node-b", "conditions": {{"ready": true}}}}"#,
                    std::net::Ipv4Addr::from(a)
                )
            })
            .collect();
        d.push(format!(
            r#"{{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {{"name": "s{i}-1", "namespace": "ns1",
                              "labels": {{"kubernetes.io/service-name": "s{i}"}}}},
                "addressType": "IPv4", "endpoints": [{}],
                "ports": [{{"name": "web", "port": 8080, "protocol": "TCP"}}]}}"#,
            eps.join(", ")
        ));
    }
    d
}

fn problems(lines: &[String]) -> Vec<&String> {
    lines
        .iter()
        .filter(|l| l.starts_with("failed") || l.starts_with("repaired"))
        .collect()
}

#[test]
fn another_writer_committing_to_its_own_table_costs_no_read_back_repair_or_failed_sync() {
    require_root!();
    let l = engine::node();
    let m = Manifest::new(&docs(SERVICES));
    // (the periodic resync far away: every sync here is one a change asked for)
    let runner = Runner::start(bins!(), &l.router, &m, &["--sync-ms", "600000"]);
    runner
        .wait_settled(scaled(Duration::from_secs(60)))
        .expect("the first sync");

    // 1. Changes while the neighbour commits 20 times a second: each synced from what
    //    the engine knows (incremental), none read back, repaired or failed.
    let nb = Neighbour::start(&l.router, 20);
    std::thread::sleep(scaled(Duration::from_secs(1)));
    let from = runner.lines().len();
    for k in 0..8 {
        let syncs = |r: &Runner| r.lines().iter().filter(|l| l.starts_with("synced")).count();
        let before = syncs(&runner);
        m.write(&docs(SERVICES + k + 1));
        let ip = cluster_ip(SERVICES + k);
        assert!(
            wait_until(scaled(Duration::from_secs(20)), || syncs(&runner) > before
                && listing(&l.router).is_some_and(|t| t.contains(&ip))),
            "service {k} never programmed: {:?}",
            &runner.lines()[from..]
        );
        // past minSyncPeriod (500 ms): each change its own sync
        std::thread::sleep(scaled(Duration::from_millis(700)));
    }
    let lines = runner.lines()[from..].to_vec();
    let synced: Vec<&String> = lines.iter().filter(|l| l.starts_with("synced")).collect();
    assert!(synced.len() >= 8, "{lines:?}");
    assert!(
        synced.iter().all(|l| l.contains("kind=incremental")),
        "a sync read our tables back under the neighbour: {synced:?}"
    );
    assert!(problems(&lines).is_empty(), "{lines:?}");
    let sent = nb.sent();
    assert!(sent >= 100, "the neighbour committed {sent} times");
    eprintln!(
        "{} syncs, all incremental, while the neighbour committed {sent} times",
        synced.len()
    );
    drop(nb);

    // 2. A restart while the neighbour commits as fast as `nft -i` goes (asked for 5,000
    //    a second): the new engine reads our tables back, the generation moving under
    //    every dump (as it does under 20 a second at 20k services), and its first sync
    //    finds them as they should be.
    drop(runner);
    let nb = Neighbour::start(&l.router, 5_000);
    std::thread::sleep(scaled(Duration::from_millis(500)));
    let runner = Runner::start(bins!(), &l.router, &m, &["--sync-ms", "600000"]);
    let first = runner
        .wait_line(scaled(Duration::from_secs(60)), |l| {
            l.starts_with("synced") || l.starts_with("failed")
        })
        .unwrap_or_else(|| panic!("no sync after the restart: {:?}", runner.lines()));
    assert!(
        first.starts_with("synced") && field(&first, "ops") == Some(0),
        "the restarted engine's first sync under the neighbour: {first}\n{:?}",
        runner.lines()
    );
    assert!(problems(&runner.lines()).is_empty(), "{:?}", runner.lines());
    eprintln!(
        "restarted under a neighbour committing as fast as it can ({} sent): {first}",
        nb.sent()
    );
}
