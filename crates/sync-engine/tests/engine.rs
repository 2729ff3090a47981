//! Deterministic engine tests with a recording fake kernel (`common`): every commit and
//! every conntrack delete is recorded in order, so the ordering rule is checked exactly.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;
use sync_engine::*;

/// Upstream's TestProxierDeleteNodePortStaleUDP, with the flows a node holds: packets
/// sent to the ClusterIP, the ExternalIP, the LoadBalancer IP and the NodePort while the
/// service had no endpoint went nowhere (not DNAT'ed). They are deleted after a commit,
/// never before one: as kube-proxy 1.38 judges them, a port without a serving endpoint
/// has no flow worth keeping (#139629), so the first commit already deletes them (the
/// seed's case, a ready endpoint appearing, finds nothing left); flows to other
/// addresses, to the NodePort number on another host, and TCP stay. When the entries
/// appear only after that (a client sending while the endpoint is not ready yet), the
/// ready endpoint's commit deletes them.
#[test]
fn delete_nodeport_stale_udp() {
    let w = World::new();
    w.flows(&four_stale());
    w.flows(&bystanders());
    let mut e = w.engine(true);
    e.handle(Event::NodeApplied(node()));
    e.handle(Event::ServiceApplied(udp_lb()));
    listed(&mut e);

    // No endpoints: the first commit lists every UDP flow once (a starting engine
    // judges everything): the four go, after the commit.
    let r = e.sync().unwrap();
    assert!(r.full);
    let calls = w.take();
    assert!(
        matches!(calls[..2], [Call::Commit { .. }, Call::List(_)]),
        "{calls:?}"
    );
    assert_eq!(deletes(&calls), four_stale(), "{calls:?}");
    assert_deletes_after_commit(&calls);
    assert_eq!(r.conntrack_deleted, 4);

    // A not-ready endpoint; meanwhile the client sends again (new entries, not DNAT'ed:
    // the port still has no serving endpoint, so they are stale again).
    w.flows(&four_stale());
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", false, false, false)],
    )));
    w.clock.advance(Duration::from_secs(2));
    e.sync().unwrap();
    let calls = w.take();
    assert_eq!(deletes(&calls), four_stale(), "{calls:?}");
    assert_deletes_after_commit(&calls);

    // A ready endpoint: the entries made before it are deleted after its commit.
    w.flows(&four_stale());
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    w.clock.advance(Duration::from_secs(2));
    let r = e.sync().unwrap();
    let calls = w.take();
    assert_eq!(deletes(&calls), four_stale(), "{calls:?}");
    assert!(matches!(calls[0], Call::Commit { .. }), "{calls:?}");
    assert_deletes_after_commit(&calls);
    assert_eq!(sorted(w.table()), sorted(bystanders()));
    assert_eq!(r.conntrack_targets, 4, "four frontends judged");
    assert_eq!(r.conntrack_deleted, 4);
    assert!(!r.full);

    // Nothing changed: no commit, no conntrack call.
    w.clock.advance(Duration::from_secs(2));
    e.sync().unwrap();
    assert_eq!(w.take(), vec![]);
}

/// A cold start creates our table from the compiler's elements as it keeps them,
/// packed (nothing unpacked to send them), and the kernel ends with the desired tables.
#[test]
fn a_cold_start_sends_the_compilers_elements_packed() {
    use nft_model::Op;
    let w = World::new();
    let mut e = w.engine(true);
    e.handle(Event::ServiceApplied(udp_lb()));
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    listed(&mut e);
    e.sync().unwrap();
    let batches = w.take_batches();
    let packed =
        |op: &Op| matches!(op, Op::AddPackedElements { set, .. } if set.starts_with("endpoints-"));
    assert!(batches[0].iter().any(packed), "{:?}", batches[0]);
    assert!(!batches[0]
        .iter()
        .any(|op| matches!(op, Op::AddElements { .. })));
    let canon = |t: &[nft_model::Table]| {
        t.iter()
            .map(nft_model::Table::canonical)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        canon(&w.tables.lock().unwrap()),
        canon(&e.committed().unwrap())
    );
}

/// The UDP service synced without endpoints, the four stale flows made meanwhile
/// (before a rule rejects them), and a ready endpoint arriving (not synced yet).
fn endpoint_after_stale_flows() -> (World, Engine<FakeNft, FakeCt, FakeClock>) {
    let w = World::new();
    let mut e = w.engine(true);
    e.handle(Event::NodeApplied(node()));
    e.handle(Event::ServiceApplied(udp_lb()));
    listed(&mut e);
    e.sync().unwrap();
    w.take();
    w.flows(&four_stale());
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    (w, e)
}

/// A failed commit deletes nothing, and nothing is deleted before a later commit puts
/// the rules in (the loop keeps running meanwhile); that commit's cleanup finds the
/// stale flows.
#[test]
fn failed_commit_deletes_nothing_until_a_commit_succeeds() {
    let (w, mut e) = endpoint_after_stale_flows();
    *w.fail_commits.lock().unwrap() = 1;
    w.clock.advance(Duration::from_secs(2));
    assert!(e.sync().is_err());
    let calls = w.take();
    assert_eq!(
        calls,
        vec![Call::CommitFailed],
        "no delete after a failed commit"
    );
    assert_eq!(e.status().snapshot().failures, 1);
    assert!(e.is_dirty());

    // Backoff: the retry is not due at once, but is due later; the loop runs until
    // then and deletes nothing before the retry's commit.
    let now = w.clock.now();
    let at = e.next_sync_at().unwrap();
    assert!(at > now);
    let steps = drive(&mut e, &w, at + Duration::from_millis(1), vec![]);
    assert_eq!(steps.last().map(|s| s.1), Some(Work::Sync), "{steps:?}");
    let calls = w.take();
    assert_eq!(deletes(&calls), four_stale(), "{calls:?}");
    assert_deletes_after_commit(&calls);
    assert_eq!(e.cleanup().unwrap().pending(), 0);
    let st = e.status().snapshot();
    assert_eq!(st.consecutive_failures, 0);
    assert!(
        st.last_report.unwrap().full,
        "a sync after a failure is a full one"
    );
}

/// A batch the kernel applied but whose answer was lost: the stale flows it made are
/// not lost. The next commit (planned from our tables read back, which already hold
/// the batch: nothing to change) tells the cleanup everything, and they are deleted.
/// (Negative control: without `ct_unknown` marking the next delta full, the read-back
/// commit touches nothing and the flows stay: `left: [], right: [four flows]`.)
#[test]
fn an_unknown_commit_outcome_loses_no_stale_flow() {
    let (w, mut e) = endpoint_after_stale_flows();
    *w.lose_answers.lock().unwrap() = 1;
    w.clock.advance(Duration::from_secs(2));
    assert!(e.sync().is_err());
    let calls = w.take();
    assert!(
        matches!(calls.as_slice(), [Call::Commit { .. }]),
        "{calls:?}"
    );
    let at = e.next_sync_at().unwrap();
    drive(&mut e, &w, at + Duration::from_millis(1), vec![]);
    let calls = w.take();
    assert!(
        !calls.iter().any(|c| matches!(c, Call::Commit { .. })),
        "the kernel already holds the batch: {calls:?}"
    );
    assert_eq!(deletes(&calls), four_stale(), "{calls:?}");
}

/// Flows DNAT'ed to an endpoint that stops serving are deleted, those to the one that
/// still serves stay; when the service is deleted, its remaining flows go too (as
/// kube-proxy 1.38, #141371), and flows to other addresses stay.
#[test]
fn endpoint_removed_deletes_its_flows_only() {
    let w = World::new();
    let to = |sport, dst: &str, dport, ep: &str| flow(sport, dst, dport, ep, 5353);
    let keep = vec![
        to(1, CLUSTER_IP, 53, "198.18.2.2"),
        to(2, LB_IP, 53, "198.18.2.2"),
        to(3, NODE_IP, NODE_PORT, "198.18.2.2"),
    ];
    let gone = vec![
        to(4, CLUSTER_IP, 53, "198.18.2.3"),
        to(5, EXTERNAL_IP, 53, "198.18.2.3"),
        to(6, NODE_IP, NODE_PORT, "198.18.2.3"),
    ];
    w.flows(&keep);
    w.flows(&gone);
    let mut e = w.engine(true);
    e.handle(Event::NodeApplied(node()));
    e.handle(Event::ServiceApplied(udp_lb()));
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[
            ("198.18.2.2", true, true, false),
            ("198.18.2.3", true, true, false),
        ],
    )));
    listed(&mut e);
    e.sync().unwrap();
    assert_eq!(deletes(&w.take()), vec![]);

    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    w.clock.advance(Duration::from_secs(2));
    e.sync().unwrap();
    let calls = w.take();
    assert_eq!(deletes(&calls), gone);
    assert_deletes_after_commit(&calls);

    w.flows(&bystanders());
    e.handle(Event::ServiceDeleted(udp_lb()));
    w.clock.advance(Duration::from_secs(2));
    e.sync().unwrap();
    let calls = w.take();
    assert_eq!(deletes(&calls), keep);
    assert_deletes_after_commit(&calls);
    assert_eq!(sorted(w.table()), sorted(bystanders()));
    assert!(e.cleanup().unwrap().judge().gone().is_empty());
}

#[test]
fn terminating_fallback_counts_as_serving() {
    let w = World::new();
    w.flows(&four_stale());
    let mut e = w.engine(true);
    e.handle(Event::NodeApplied(node()));
    e.handle(Event::ServiceApplied(udp_lb()));
    listed(&mut e);
    e.sync().unwrap();
    w.take();
    // Not ready, but serving and terminating: the fallback traffic goes to. A flow
    // DNAT'ed to it stays; one to an endpoint that left goes.
    let to_it = flow(7, CLUSTER_IP, 53, "198.18.2.2", 5353);
    let to_old = flow(8, CLUSTER_IP, 53, "198.18.2.1", 5353);
    w.flows(&[to_it, to_old]);
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", false, true, true)],
    )));
    w.clock.advance(Duration::from_secs(2));
    e.sync().unwrap();
    assert_eq!(deletes(&w.take()), vec![to_old]);
}

#[test]
fn cleanup_switch_off_deletes_nothing() {
    let w = World::new();
    w.flows(&four_stale());
    let mut e = w.engine(false);
    e.handle(Event::NodeApplied(node()));
    e.handle(Event::ServiceApplied(udp_lb()));
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    listed(&mut e);
    e.sync().unwrap();
    let calls = w.take();
    assert!(
        !calls
            .iter()
            .any(|c| matches!(c, Call::List(_) | Call::Delete(_))),
        "{calls:?}"
    );
}

/// A failing conntrack call neither blocks later syncs nor loses stale flows: the
/// listing is retried with a backoff, and judged by the state of then.
#[test]
fn conntrack_failure_does_not_block_the_next_sync() {
    let w = World::new();
    w.flows(&four_stale());
    let old = flow(9, CLUSTER_IP, 53, "198.18.2.2", 5353);
    w.flows(&[old]);
    let mut e = w.engine(true);
    e.handle(Event::NodeApplied(node()));
    e.handle(Event::ServiceApplied(udp_lb()));
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    listed(&mut e);
    *w.ct_fail.lock().unwrap() = true;
    e.sync().unwrap();
    assert_eq!(e.status().snapshot().conntrack_failures, 1);
    assert!(e.cleanup().unwrap().pending() > 0, "kept for a retry");
    *w.ct_fail.lock().unwrap() = false;
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.3", true, true, false)],
    )));
    w.clock.advance(Duration::from_secs(2));
    e.sync().unwrap();
    let calls = w.take();
    assert!(matches!(calls[0], Call::Commit { .. }));
    let mut want = four_stale();
    want.push(old);
    assert_eq!(deletes(&calls), sorted(want), "the failed work is done now");
    assert_eq!(e.cleanup().unwrap().pending(), 0);
}

#[test]
fn no_sync_before_initial_lists() {
    let w = World::new();
    let mut e = w.engine(true);
    e.handle(Event::ServiceApplied(udp_lb()));
    assert_eq!(e.next_sync_at(), None);
    assert!(matches!(e.sync(), Err(EngineError::NotListed)));
    e.handle(Event::ServicesListed);
    assert_eq!(e.next_sync_at(), None);
    e.handle(Event::SlicesListed);
    assert_eq!(e.next_sync_at(), Some(w.clock.now()));
    assert!(w.take().is_empty());
}

#[test]
fn bounded_frequency() {
    let w = World::new();
    let mut e = w.engine(true);
    listed(&mut e);
    let t0 = w.clock.now();
    e.sync().unwrap();
    // Idle: next is the periodic full resync.
    assert_eq!(e.next_sync_at(), Some(t0 + e.config().sync_period));
    // A change: due minSyncPeriod after the last sync, not before.
    e.handle(Event::ServiceApplied(udp_lb()));
    assert_eq!(e.next_sync_at(), Some(t0 + e.config().min_sync_period));
    assert!(e.status().snapshot().queued_since.is_some());
    w.clock.advance(Duration::from_secs(1));
    let r = e.sync().unwrap();
    assert!(!r.full);
    assert!(e.status().snapshot().queued_since.is_none());
    // A no-op change is dropped: nothing queued.
    e.handle(Event::ServiceApplied(udp_lb()));
    assert!(!e.is_dirty());
    assert_eq!(e.next_sync_at(), Some(t0 + e.config().sync_period));
    // An explicit resync bypasses minSyncPeriod.
    e.handle(Event::Resync);
    assert_eq!(e.next_sync_at(), Some(w.clock.now()));
    assert!(e.sync().unwrap().full);
    // Periodic full sync after syncPeriod.
    w.clock.advance(e.config().sync_period);
    assert!(e.next_sync_at().unwrap() <= w.clock.now());
    assert!(e.sync().unwrap().full);
}

#[test]
fn backoff_grows_and_is_bounded() {
    let w = World::new();
    let mut e = w.engine(true);
    listed(&mut e);
    *w.fail_commits.lock().unwrap() = 100;
    let mut last = Duration::ZERO;
    for _ in 0..12 {
        assert!(e.sync().is_err());
        let d = e.next_sync_at().unwrap() - w.clock.now();
        assert!(d >= last && d >= e.config().min_sync_period);
        assert!(d <= e.config().retry_max);
        last = d;
        w.clock.advance(d);
    }
    assert_eq!(last, e.config().retry_max);
    // healthy per 2 x syncPeriod: a change has been queued for long.
    e.handle(Event::ServiceApplied(udp_lb()));
    let st = e.status().snapshot();
    assert!(st.healthy(w.clock.now()));
    assert!(!st.healthy(w.clock.now() + e.config().sync_period * 3));
}

#[test]
fn full_resync_trusts_memory_unless_generation_moved() {
    let w = World::new();
    let mut e = w.engine(true);
    e.handle(Event::ServiceApplied(udp_lb()));
    listed(&mut e);
    e.sync().unwrap();
    let dumps = *w.dumps.lock().unwrap();
    assert_eq!(dumps, 2, "the first sync reads our tables (restart safety)");
    w.take();
    // Full resync, nobody else wrote: no dump, no commit.
    e.handle(Event::Resync);
    assert!(e.sync().unwrap().full);
    assert_eq!(*w.dumps.lock().unwrap(), 2);
    assert!(w.take().is_empty());
    // Another program flushes our table's chains: the generation moved, we dump and repair.
    {
        let mut t = w.tables.lock().unwrap();
        for c in &mut t[0].chains {
            c.rules.clear();
        }
        let mut g = w.gen.lock().unwrap();
        *g = next_generation(*g);
    }
    e.request_repair();
    let r = e.sync().unwrap();
    assert!(r.ops > 0);
    assert_eq!(*w.dumps.lock().unwrap(), 4);
    assert_eq!(e.status().snapshot().repairs, 1);
    assert_eq!(*w.tables.lock().unwrap(), e.committed().unwrap());
}

/// Another program committing right after our commit (the generation read back is not
/// the one our commit produced) is verified by a full sync at once.
#[test]
fn a_commit_right_after_ours_is_verified_at_once() {
    let w = World::new();
    let mut e = w.engine(true);
    e.handle(Event::ServiceApplied(udp_lb()));
    listed(&mut e);
    e.sync().unwrap();
    *w.foreign_after_commit.lock().unwrap() = true;
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    w.clock.advance(Duration::from_secs(2));
    assert!(!e.sync().unwrap().full);
    assert_eq!(
        e.next_sync_at(),
        Some(w.clock.now()),
        "due at once, not at the periodic resync"
    );
    let dumps = *w.dumps.lock().unwrap();
    assert!(e.sync().unwrap().full);
    assert_eq!(
        *w.dumps.lock().unwrap(),
        dumps + 2,
        "our tables were read back"
    );
}

#[test]
fn restart_replaces_the_old_table_in_one_batch_without_flushing_conntrack() {
    let w = World::new();
    let mut first = w.engine(true);
    first.handle(Event::ServiceApplied(udp_lb()));
    first.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    listed(&mut first);
    first.sync().unwrap();
    drop(first);
    w.take();

    // The same state: the restarted engine commits nothing and deletes nothing.
    let mut second = w.engine(true);
    second.handle(Event::ServiceApplied(udp_lb()));
    second.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    listed(&mut second);
    let r = second.sync().unwrap();
    assert_eq!(r.ops, 0);
    let calls = w.take();
    assert!(deletes(&calls).is_empty(), "{calls:?}");
    drop(second);

    // The endpoint changed while we were down: one batch, then only the flows of the
    // endpoint that left are deleted (the starting engine judges every flow once).
    w.flows(&[
        flow(1, CLUSTER_IP, 53, "198.18.2.2", 5353),
        flow(2, CLUSTER_IP, 53, "198.18.2.9", 5353),
    ]);
    let mut third = w.engine(true);
    third.handle(Event::ServiceApplied(udp_lb()));
    third.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.9", true, true, false)],
    )));
    listed(&mut third);
    w.take_batches();
    third.sync().unwrap();
    let calls = w.take();
    assert!(matches!(calls[0], Call::Commit { .. }));
    assert_eq!(w.take_batches().len(), 1, "one batch");
    assert_eq!(
        deletes(&calls),
        vec![flow(1, CLUSTER_IP, 53, "198.18.2.2", 5353)]
    );
    // The batch never deletes the table (no moment without rules).
    assert_eq!(
        w.tables.lock().unwrap().as_slice(),
        &third.committed().unwrap()[..]
    );
}

#[test]
fn observer_sees_syncs_and_failures() {
    #[derive(Default)]
    struct Obs(Arc<Mutex<(u32, u32, usize)>>);
    impl Observer for Obs {
        fn synced(&self, r: &SyncReport) {
            let mut g = self.0.lock().unwrap();
            g.0 += 1;
            g.2 += r.ops;
        }
        fn failed(&self, _e: &(dyn std::error::Error + 'static)) {
            self.0.lock().unwrap().1 += 1;
        }
    }
    let w = World::new();
    let mut e = w.engine(true);
    let counts = Arc::new(Mutex::new((0, 0, 0)));
    e.set_observer(Box::new(Obs(counts.clone())));
    e.handle(Event::ServiceApplied(udp_lb()));
    listed(&mut e);
    *w.fail_commits.lock().unwrap() = 1;
    assert!(e.sync().is_err());
    e.sync().unwrap();
    let c = *counts.lock().unwrap();
    assert_eq!((c.0, c.1), (1, 1));
    assert!(c.2 > 0);
}

/// kube-proxy's `no_local_endpoints_total`: services with a Local traffic policy that have
/// ready endpoints, none of them on this node (endpoints of `slice` are on node-b).
#[test]
fn status_counts_local_policy_services_without_local_endpoints() {
    let w = World::new();
    let mut e = w.engine(true);
    let mut svc: serde_json::Value = serde_json::to_value(udp_lb()).unwrap();
    svc["spec"]["externalTrafficPolicy"] = json!("Local");
    svc["spec"]["internalTrafficPolicy"] = json!("Local");
    svc["spec"]["healthCheckNodePort"] = json!(32000);
    e.handle(Event::ServiceApplied(serde_json::from_value(svc).unwrap()));
    listed(&mut e);
    e.sync().unwrap();
    let s = e.status().snapshot();
    assert_eq!(
        (s.no_local_internal, s.no_local_external),
        (0, 0),
        "no endpoints at all: not counted"
    );
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    e.sync().unwrap();
    let s = e.status().snapshot();
    assert_eq!(
        (s.no_local_internal, s.no_local_external),
        (1, 1),
        "ready endpoints, none local"
    );
    assert_eq!(
        s.health_checks
            .values()
            .map(|h| h.local_endpoints)
            .collect::<Vec<_>>(),
        vec![0]
    );
}

/// A dual-stack pod is one local endpoint for the health-check node port, as in
/// kube-proxy (which counts per family); a second local pod makes two.
#[test]
fn health_check_counts_a_dual_stack_pod_once() {
    let w = World::new();
    let mut e = w.engine(true);
    let mut svc: serde_json::Value = serde_json::to_value(udp_lb()).unwrap();
    svc["spec"]["externalTrafficPolicy"] = json!("Local");
    svc["spec"]["healthCheckNodePort"] = json!(32000);
    e.handle(Event::ServiceApplied(serde_json::from_value(svc).unwrap()));
    let local_slice = |name: &str, family: &str, addrs: &[&str]| -> EndpointSlice {
        let eps: Vec<_> = addrs
            .iter()
            .map(|a| json!({"addresses": [a], "nodeName": "node-a", "conditions": {"ready": true}}))
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "ns1", "labels": {"kubernetes.io/service-name": "dns"}},
            "addressType": family, "endpoints": eps,
            "ports": [{"name": "p", "port": 5353, "protocol": "UDP"}]
        }))
        .unwrap()
    };
    e.handle(Event::SliceApplied(local_slice(
        "dns-v4",
        "IPv4",
        &["198.18.1.5"],
    )));
    e.handle(Event::SliceApplied(local_slice(
        "dns-v6",
        "IPv6",
        &["2001:db8:1::5"],
    )));
    listed(&mut e);
    e.sync().unwrap();
    let count = |e: &Engine<FakeNft, FakeCt, FakeClock>| {
        e.status()
            .snapshot()
            .health_checks
            .values()
            .map(|h| h.local_endpoints)
            .collect::<Vec<_>>()
    };
    assert_eq!(count(&e), vec![1]);
    e.handle(Event::SliceApplied(local_slice(
        "dns-v4",
        "IPv4",
        &["198.18.1.5", "198.18.1.6"],
    )));
    e.sync().unwrap();
    assert_eq!(count(&e), vec![2]);
}

/// Another program fights over our table (it flushes our chains every 100 ms for 10 s):
/// repairs slow down (250 ms after the first, doubled per repair), every foreign
/// transaction is counted with its writer, and once the writer stops the next repair
/// restores the desired table.
#[test]
fn repairs_back_off_while_another_program_fights_over_our_table() {
    use sync_engine::watch::Touch;
    #[derive(Default)]
    struct Writers(Arc<Mutex<Vec<ForeignWriter>>>);
    impl Observer for Writers {
        fn foreign_write(&self, w: &ForeignWriter) {
            self.0.lock().unwrap().push(w.clone());
        }
    }
    let w = World::new();
    let mut e = w.engine(true);
    let seen = Arc::new(Mutex::new(Vec::new()));
    e.set_observer(Box::new(Writers(seen.clone())));
    e.handle(Event::ServiceApplied(udp_lb()));
    listed(&mut e);
    e.sync().unwrap();
    let desired = e.committed().unwrap();
    let t0 = w.clock.now();
    let tamper = |w: &World| -> u32 {
        let mut t = w.tables.lock().unwrap();
        for c in &mut t[0].chains {
            c.rules.clear();
        }
        let mut g = w.gen.lock().unwrap();
        *g = next_generation(*g);
        *g
    };
    let mut writes = 0;
    while w.clock.now() < t0 + Duration::from_secs(10) {
        w.clock.advance(Duration::from_millis(100));
        let genid = tamper(&w);
        writes += 1;
        e.foreign_change(
            &[Touch {
                genid,
                pid: Some(4242),
                proc_name: Some("nft".into()),
            }],
            false,
        );
        while e.step().is_some() {}
    }
    let repairs = e.status().snapshot().repairs;
    // Repairs at 0.1, 0.35, 0.85, 1.85, 3.85, 7.85 s.
    assert_eq!(
        repairs, 6,
        "without the backoff: one repair per write ({writes})"
    );
    let st = e.status().snapshot();
    assert_eq!(st.foreign_writes, writes);
    assert_eq!(
        st.last_foreign_writer,
        Some(ForeignWriter {
            pid: Some(4242),
            process: Some("nft".into())
        })
    );
    assert_eq!(seen.lock().unwrap().len() as u64, writes);
    // The writer stopped: the table is repaired at the next due time.
    assert_ne!(*w.tables.lock().unwrap(), desired);
    drive(&mut e, &w, t0 + Duration::from_secs(30), vec![]);
    assert_eq!(*w.tables.lock().unwrap(), desired);
    assert_eq!(e.status().snapshot().repairs, 7);
}

#[test]
fn service_cidr_changes_reach_the_compile_config() {
    let w = World::new();
    let mut e = w.engine(true);
    listed(&mut e);
    e.sync().unwrap();
    let cidrs = vec![kube_model::parse_cidr_sloppy("198.18.128.0/17").unwrap()];
    e.handle(Event::ServiceCidrs(cidrs.clone()));
    assert_eq!(e.config().ruleset.service_cidrs, cidrs);
    assert!(e.is_dirty(), "a new service CIDR list is a change to sync");
    w.clock.advance(Duration::from_secs(1));
    e.sync().unwrap();
    e.handle(Event::ServiceCidrs(cidrs));
    assert!(!e.is_dirty(), "the same list again is no change");
}

/// A stalled source is reported stale once it made no progress for more than
/// 2 x syncPeriod (information only); upstream's queued-change rule (`healthy`, behind
/// `/healthz`, `/livez` and the health-check node ports) is not affected.
#[test]
fn a_stalled_source_is_stale_after_twice_the_sync_period() {
    let w = World::new();
    let mut e = w.engine(true);
    listed(&mut e);
    e.sync().unwrap();
    let since = w.clock.now();
    assert!(e.status().healthy(since));
    e.handle(Event::SourceStalled {
        source: "service".into(),
        since,
    });
    let period = e.config().sync_period;
    let st = e.status().snapshot();
    assert_eq!(st.stale_source(since + period * 2), None);
    let later = since + period * 2 + Duration::from_secs(1);
    assert_eq!(st.stale_source(later), Some("service"));
    assert!(
        st.healthy(later),
        "a stalled source queues nothing: healthz, livez and health-check node ports stay up"
    );
    e.handle(Event::SourceRecovered {
        source: "service".into(),
    });
    assert_eq!(e.status().snapshot().stale_source(since + period * 3), None);
}

/// iptables mode's `KUBE-FORWARD`, written by the engine after each sync in a batch of
/// its own, is a commit of ours: its generation neither ends the trust in our tables
/// (the next sync is incremental, no read-back) nor counts as another program's write
/// when the watcher reports it. The same transaction made by someone else is a foreign
/// change and makes the next sync read our tables back (the control).
#[test]
fn kube_forward_is_a_commit_of_ours() {
    for ours in [true, false] {
        let w = World::new();
        let mut cfg = w.config(true);
        if ours {
            cfg.forward = Some(nft_netlink::forward::ForwardConfig {
                mark: 0x4000,
                drop_invalid: true,
            });
        }
        let mut e = w.engine_with(cfg);
        e.handle(Event::ServiceApplied(udp_lb()));
        listed(&mut e);
        e.sync().unwrap();
        // the chain is missing: written after the next sync, in a batch of its own
        let base = *w.gen.lock().unwrap();
        if ours {
            *w.forward_missing.lock().unwrap() = 1;
        }
        e.handle(Event::SliceApplied(slice(
            "dns-1",
            &[("198.18.2.2", true, true, false)],
        )));
        w.clock.advance(Duration::from_secs(2));
        e.sync().unwrap();
        let side = *w.gen.lock().unwrap();
        if !ours {
            // the same transaction, by another program
            *w.gen.lock().unwrap() = next_generation(side);
        }
        let side = if ours { side } else { next_generation(side) };
        assert_eq!(side, next_generation(next_generation(base)));
        // the watcher's notification of that transaction
        e.foreign_change(
            &[sync_engine::watch::Touch {
                genid: side,
                pid: Some(1),
                proc_name: Some("kube-nlproxy".into()),
            }],
            false,
        );
        let dumps = *w.dumps.lock().unwrap();
        e.handle(Event::SliceApplied(slice(
            "dns-1",
            &[("198.18.2.3", true, true, false)],
        )));
        w.clock.advance(Duration::from_secs(2));
        let r = e.sync().unwrap();
        let st = e.status().snapshot();
        if ours {
            assert_eq!(*w.forward_calls.lock().unwrap(), 3, "after every sync");
            assert_eq!((st.foreign_writes, st.repairs), (0, 0));
            assert_eq!(r.kind, "incremental");
            assert_eq!(*w.dumps.lock().unwrap(), dumps, "no read-back");
        } else {
            assert_eq!(*w.forward_calls.lock().unwrap(), 0, "not configured");
            assert_eq!(st.foreign_writes, 1, "another program's transaction");
            assert_ne!(r.kind, "incremental");
        }
    }
}

/// nftables mode's localhost NodePorts: the engine publishes the TCP NodePorts with
/// their endpoints for the families it is told (cluster endpoints; with
/// externalTrafficPolicy Local the local ones, none: left out), never UDP ones, and
/// drops them when the NodePort goes.
#[test]
fn status_lists_tcp_node_ports_for_the_localhost_proxy() {
    let w = World::new();
    let mut cfg = w.config(true);
    cfg.localhost_node_port_families = vec![kube_model::IpFamily::V4];
    let mut e = w.engine_with(cfg);
    let tcp = |policy: &str, node_port: Option<u16>| -> k8s_openapi::api::core::v1::Service {
        let mut svc: serde_json::Value = serde_json::to_value(udp_lb()).unwrap();
        svc["spec"]["ports"] = json!([
            {"name": "p", "port": 53, "protocol": "UDP", "nodePort": 30053},
            {"name": "t", "port": 80, "protocol": "TCP", "nodePort": node_port}
        ]);
        svc["spec"]["externalTrafficPolicy"] = json!(policy);
        serde_json::from_value(svc).unwrap()
    };
    let both: EndpointSlice = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "dns-1", "namespace": "ns1", "labels": {"kubernetes.io/service-name": "dns"}},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["198.18.1.5"], "nodeName": "node-a", "conditions": {"ready": true}},
            {"addresses": ["198.18.2.5"], "nodeName": "node-b", "conditions": {"ready": true}}
        ],
        "ports": [{"name": "p", "port": 5353, "protocol": "UDP"}, {"name": "t", "port": 8080, "protocol": "TCP"}]
    }))
    .unwrap();
    e.handle(Event::ServiceApplied(tcp("Cluster", Some(30080))));
    e.handle(Event::SliceApplied(both));
    listed(&mut e);
    e.sync().unwrap();
    let listed_ports = |e: &Engine<FakeNft, FakeCt, FakeClock>| {
        e.status()
            .snapshot()
            .localhost_node_ports
            .values()
            .flatten()
            .map(|n| {
                (
                    n.node_port,
                    n.endpoints
                        .iter()
                        .map(|a| a.to_string())
                        .collect::<Vec<_>>(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        listed_ports(&e),
        vec![(
            30080,
            vec!["198.18.1.5:8080".to_string(), "198.18.2.5:8080".to_string()]
        )],
        "the TCP NodePort with the cluster endpoints; not the UDP one"
    );
    e.handle(Event::ServiceApplied(tcp("Local", Some(30080))));
    e.sync().unwrap();
    assert_eq!(
        listed_ports(&e),
        vec![(30080, vec!["198.18.1.5:8080".to_string()])],
        "externalTrafficPolicy Local: the local endpoint only"
    );
    let mut svc: serde_json::Value = serde_json::to_value(tcp("Cluster", None)).unwrap();
    svc["spec"]["type"] = json!("ClusterIP");
    svc["spec"]["ports"] = json!([{"name": "t", "port": 80, "protocol": "TCP"}]);
    e.handle(Event::ServiceApplied(serde_json::from_value(svc).unwrap()));
    e.sync().unwrap();
    assert!(listed_ports(&e).is_empty(), "the NodePort went");
}

/// A cold start whose compile begins while the lists still arrive
/// (`Engine::build_ahead` after each event, as the loop calls it when no event waits)
/// commits the same tables and deletes the same flows as one compiled at the first
/// sync: services before their slices, a slice changed and a service changed again
/// after being compiled, a service deleted, the host's addresses changing midway.
#[test]
fn a_compile_begun_while_the_lists_arrive_commits_the_same_first_batch() {
    let run = |ahead: bool| {
        let w = World::new();
        w.flows(&four_stale());
        w.flows(&bystanders());
        let mut e = w.engine(true);
        let mut other = udp_lb();
        other.metadata.name = Some("other".into());
        other.spec.as_mut().unwrap().cluster_ip = Some("198.18.100.11".into());
        other.spec.as_mut().unwrap().external_ips = None;
        let mut gone = other.clone();
        gone.metadata.name = Some("gone".into());
        gone.spec.as_mut().unwrap().cluster_ip = Some("198.18.100.12".into());
        let mut changed = udp_lb();
        changed.spec.as_mut().unwrap().session_affinity = Some("ClientIP".into());
        let events = vec![
            Event::NodeApplied(node()),
            Event::ServiceApplied(udp_lb()),
            Event::ServiceApplied(other),
            Event::ServiceApplied(gone.clone()),
            Event::SliceApplied(slice("dns-1", &[("198.18.2.2", true, true, false)])),
            Event::HostAddresses(vec![ip(NODE_IP)]),
            Event::SliceApplied(slice(
                "dns-1",
                &[
                    ("198.18.2.2", true, true, false),
                    ("198.18.2.3", true, true, false),
                ],
            )),
            Event::ServiceApplied(changed),
            Event::ServiceDeleted(gone),
            Event::SliceApplied(slice("dns-2", &[("198.18.2.4", false, true, true)])),
        ];
        let mut compiled_ahead = 0;
        for ev in events {
            e.handle(ev);
            if ahead && e.build_ahead() {
                compiled_ahead += 1;
            }
        }
        listed(&mut e);
        assert!(!e.build_ahead(), "nothing is built ahead once listed");
        let r = e.sync().unwrap();
        assert!(r.full);
        let tables: Vec<_> = w
            .tables
            .lock()
            .unwrap()
            .iter()
            .map(nft_model::Table::canonical)
            .collect();
        (tables, deletes(&w.take()), compiled_ahead)
    };
    let (ahead, ahead_deletes, n) = run(true);
    let (plain, plain_deletes, _) = run(false);
    assert!(n >= 3, "compiled ahead {n} times");
    assert_eq!(ahead, plain);
    assert_eq!(ahead_deletes, plain_deletes);
}

/// The step run once after the first successful sync (the daemon's removal of
/// kube-proxy's leftovers) commits a batch of its own; told to the engine, its
/// generation keeps the trust in our tables (the next sync is incremental, nothing is
/// read back). Untold (the control), the moved generation makes the next sync read our
/// tables back.
#[test]
fn the_first_sync_step_runs_once_and_its_commit_is_ours() {
    struct Step {
        gen: Arc<Mutex<u32>>,
        runs: Arc<Mutex<u32>>,
        tell: bool,
    }
    impl FirstSyncStep for Step {
        fn run(self: Box<Self>) -> Vec<u32> {
            *self.runs.lock().unwrap() += 1;
            let mut g = self.gen.lock().unwrap();
            let base = *g;
            *g = next_generation(base);
            if self.tell {
                vec![base]
            } else {
                Vec::new()
            }
        }
    }
    for tell in [true, false] {
        let w = World::new();
        let mut e = w.engine(true);
        let runs = Arc::new(Mutex::new(0));
        e.after_first_sync(Box::new(Step {
            gen: w.gen.clone(),
            runs: runs.clone(),
            tell,
        }));
        e.handle(Event::ServiceApplied(udp_lb()));
        listed(&mut e);
        e.sync().unwrap();
        assert_eq!(*runs.lock().unwrap(), 1);
        let dumps = *w.dumps.lock().unwrap();
        e.handle(Event::SliceApplied(slice(
            "dns-1",
            &[("198.18.2.2", true, true, false)],
        )));
        w.clock.advance(Duration::from_secs(2));
        let r = e.sync().unwrap();
        assert_eq!(*runs.lock().unwrap(), 1, "once");
        if tell {
            assert_eq!(r.kind, "incremental");
            assert_eq!(*w.dumps.lock().unwrap(), dumps, "no read-back");
        } else {
            assert!(*w.dumps.lock().unwrap() > dumps, "read back");
        }
    }
}
