//! A batch the kernel refuses does not stall the node (fake kernel): the service ports
//! the refused elements belong to are left out and every other change is committed in
//! the same sync; the skipped ports are named in an error and tried again between
//! syncs (a small batch of their own), with a backoff, until the kernel accepts them.
//! A refusal no service port explains replaces our tables in one batch.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use nft_model::Op;
use serde_json::json;
use sync_engine::*;

fn service(i: u32) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": format!("svc-{i}"), "namespace": "ns1"},
        "spec": {"clusterIP": format!("198.18.100.{}", 10 + i),
                 "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}
    }))
    .unwrap()
}

fn endpoints(i: u32, addr: &str) -> EndpointSlice {
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("svc-{i}-1"), "namespace": "ns1",
                     "labels": {"kubernetes.io/service-name": format!("svc-{i}")}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [addr], "conditions": {"ready": true}}],
        "ports": [{"name": "dns", "port": 5353, "protocol": "UDP"}]
    }))
    .unwrap()
}

const N: u32 = 40;

fn cluster(w: &World) -> Engine<FakeNft, FakeCt, FakeClock> {
    let mut cfg = w.config(true);
    cfg.retry_initial = Duration::from_secs(5);
    let mut e = w.engine_with(cfg);
    for i in 0..N {
        e.handle(Event::ServiceApplied(service(i)));
        e.handle(Event::SliceApplied(endpoints(
            i,
            &format!("198.18.2.{}", 10 + i),
        )));
    }
    listed(&mut e);
    e
}

/// Service `i`'s ClusterIP.
fn ip(i: u32) -> String {
    format!("198.18.100.{}", 10 + i)
}

/// Whether the kernel's tables program service `i` (elements keyed by its ClusterIP).
fn programmed(w: &World, i: u32) -> bool {
    w.tables.lock().unwrap()[0].sets.iter().any(|s| {
        s.elements
            .iter()
            .any(|e| key_starts_with_addr(&e.key, &ip(i)))
    })
}

#[test]
fn a_refused_service_port_is_skipped_and_every_other_service_stays_in_sync() {
    let w = World::new();
    let mut e = cluster(&w);
    *w.refuse_rules_in.lock().unwrap() = Some(ip(7));
    let r = e
        .sync()
        .expect("the sync succeeds without the refused port");
    assert!((0..N).filter(|i| *i != 7).all(|i| programmed(&w, i)));
    assert!(!programmed(&w, 7));
    let st = e.status().snapshot();
    assert_eq!(st.skipped_service_ports.len(), 1);
    let skipped = &st.skipped_service_ports[0];
    assert_eq!(
        (skipped.service.as_str(), skipped.port.as_str()),
        ("ns1/svc-7", "dns")
    );
    assert!(skipped.error.contains("EINVAL"), "{}", skipped.error);
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("service ns1/svc-7 port \"dns\": skipped")),
        "{:?}",
        r.errors
    );
    assert_eq!(st.consecutive_failures, 0);
    // one refused commit, then the commit without the port: no search
    let calls = w.take();
    assert_eq!(
        calls
            .iter()
            .filter(|c| matches!(c, Call::CommitFailed))
            .count(),
        1,
        "{calls:?}"
    );

    // Other services keep changing with plain syncs (the skipped port stays out and
    // is not retried before its time).
    e.handle(Event::SliceApplied(endpoints(3, "198.18.2.99")));
    w.clock.advance(Duration::from_millis(600));
    let at = e.next_sync_at().unwrap();
    w.clock.advance(at.saturating_duration_since(w.clock.now()));
    e.sync().unwrap();
    assert_eq!(
        w.take()
            .iter()
            .filter(|c| matches!(c, Call::CommitFailed))
            .count(),
        0
    );
    let has_new_endpoint = w.tables.lock().unwrap()[0].sets.iter().any(|s| {
        s.elements
            .iter()
            .any(|e| format!("{:?}", e.data).contains("198.18.2.99"))
    });
    assert!(has_new_endpoint);

    // While still refused, a retry at its time (between syncs) is refused and backs off
    // further.
    let retry_at = e.status().snapshot().skipped_service_ports[0]
        .retry_at
        .max(w.clock.now());
    let steps = drive(&mut e, &w, retry_at + Duration::from_millis(1), vec![]);
    assert!(steps.iter().any(|s| s.1 == Work::Check), "{steps:?}");
    assert!(!programmed(&w, 7));
    let later = e.status().snapshot().skipped_service_ports[0].retry_at;
    assert!(later - retry_at > Duration::from_secs(1), "backs off");

    // The kernel accepts it again: back at the next retry, nothing skipped.
    *w.refuse_rules_in.lock().unwrap() = None;
    drive(&mut e, &w, later + Duration::from_millis(1), vec![]);
    assert!(programmed(&w, 7));
    assert!(e.status().snapshot().skipped_service_ports.is_empty());
    assert!((0..N).all(|i| programmed(&w, i)));
}

/// A change of the skipped Service is tried at the next sync, not after the backoff.
#[test]
fn a_change_of_a_skipped_service_is_retried_at_once() {
    let w = World::new();
    let mut e = cluster(&w);
    *w.refuse_rules_in.lock().unwrap() = Some(ip(7));
    e.sync().unwrap();
    assert!(!programmed(&w, 7));
    *w.refuse_rules_in.lock().unwrap() = None;
    let mut svc: serde_json::Value = serde_json::to_value(service(7)).unwrap();
    svc["metadata"]["labels"] = json!({"fixed": "yes"});
    svc["spec"]["ports"][0]["name"] = json!("dns");
    svc["spec"]["sessionAffinity"] = json!("ClientIP");
    e.handle(Event::ServiceApplied(serde_json::from_value(svc).unwrap()));
    let t = w.clock.now();
    let steps = drive(&mut e, &w, t + Duration::from_secs(2), vec![]);
    assert!(programmed(&w, 7), "{steps:?}");
    assert!(e.status().snapshot().skipped_service_ports.is_empty());
}

/// A refused diff is followed, in the same sync, by one batch that deletes our table
/// and creates it from the desired state (no moment without rules).
#[test]
fn a_refused_batch_is_followed_by_a_replacement_in_one_batch() {
    let w = World::new();
    let mut e = cluster(&w);
    e.sync().unwrap();
    w.take_batches();
    e.handle(Event::SliceApplied(endpoints(3, "198.18.2.99")));
    w.clock.advance(Duration::from_secs(2));
    *w.refuse_next.lock().unwrap() = 1;
    e.sync().expect("the replacement is accepted");
    let batches: Vec<Vec<Op>> = w.take_batches();
    assert_eq!(batches.len(), 1, "one committed batch for the rules");
    assert!(
        matches!(batches[0][0], Op::DeleteTable { .. }),
        "{:?}",
        &batches[0][..2]
    );
    assert!(batches[0]
        .iter()
        .any(|op| matches!(op, Op::AddTable { .. })));
    assert_eq!(*w.tables.lock().unwrap(), e.committed().unwrap());
    assert!(e.status().snapshot().skipped_service_ports.is_empty());
}

/// When no service port is to blame, nothing is skipped: after the replacement is
/// refused too, the sync fails, changes nothing and is retried with the backoff. Two
/// cases: the kernel names no op, then refuses the skeleton (a fixed chain) of the
/// replacement, or it names no op twice.
#[test]
fn a_refusal_no_service_port_explains_fails_the_sync() {
    for fixed_chain in [true, false] {
        let w = World::new();
        let mut e = cluster(&w);
        e.sync().unwrap();
        let before = w.tables.lock().unwrap().clone();
        e.handle(Event::SliceApplied(endpoints(3, "198.18.2.99")));
        w.clock.advance(Duration::from_secs(2));
        if fixed_chain {
            *w.refuse_rules_in.lock().unwrap() = Some("services".into());
            *w.refuse_next.lock().unwrap() = 1;
        } else {
            *w.refuse_next.lock().unwrap() = 2;
        }
        assert!(e.sync().is_err(), "fixed chain: {fixed_chain}");
        assert_eq!(*w.tables.lock().unwrap(), before);
        assert!(e.status().snapshot().skipped_service_ports.is_empty());
        assert_eq!(e.status().snapshot().consecutive_failures, 1);
    }
}
