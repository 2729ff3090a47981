//! Conntrack cleanup under faults, on the fake kernel and clock: no target is ever lost.
//! Unfinished targets (capped, incomplete, failed, a whole call failing with ENOBUFS)
//! stay pending and recorded in our table and are retried with a backoff until done; a
//! restart resumes what a crash left; a backlog is worked through in bounded slices
//! without delaying rule syncs; without ctnetlink rules are still programmed and the
//! targets wait until it can be opened.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use nft_model::{DataType, Element, Set, Value};
use sync_engine::pending::{SET_DST, SET_ENDPOINT};
use sync_engine::targets::Target;
use sync_engine::*;

/// A UDP service gets a ready endpoint: four targets (three destinations, one NodePort).
fn four_targets(w: &World) -> Engine<FakeNft, FakeCt, FakeClock> {
    let mut e = w.engine(true);
    e.handle(Event::ServiceApplied(udp_lb()));
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    listed(&mut e);
    e
}

fn unfinished_targets_are_retried_until_done(reply: CtReply) {
    let w = World::new();
    let mut e = four_targets(&w);
    w.ct_replies(&[reply, reply]);
    let t0 = w.clock.now();
    let r = e.sync().unwrap();
    assert_eq!(r.conntrack_targets, 4);
    assert_eq!(r.conntrack_pending, 4, "{reply:?}: nothing finished yet");
    assert_eq!(e.pending_targets().len(), 4);
    assert_eq!(w.recorded().len(), 4, "{reply:?}: recorded in our table");
    let st = e.status().snapshot();
    assert_eq!(
        (st.cleanup_pending, st.cleanup_oldest_pending),
        (4, Some(t0))
    );

    drive(&mut e, &w, t0 + Duration::from_secs(30), vec![]);
    let calls = w.take();
    assert_eq!(deletes(&calls), four_deletes(), "{reply:?}: {calls:?}");
    assert!(e.pending_targets().is_empty(), "{reply:?}");
    assert_eq!(w.recorded(), vec![], "{reply:?}: removed from our table");
    let st = e.status().snapshot();
    assert_eq!((st.cleanup_pending, st.cleanup_oldest_pending), (0, None));

    // Three calls: two unfinished, the third done; a capped target is due again at
    // once, the others after the backoff (retry_initial, then doubled).
    let calls = w.ct_calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 3, "{reply:?}: {calls:?}");
    let gaps: Vec<Duration> = calls.windows(2).map(|c| c[1].0 - c[0].0).collect();
    let want = match reply {
        CtReply::Each(CleanupOutcome::Capped) => vec![Duration::ZERO, Duration::ZERO],
        _ => vec![Duration::from_millis(500), Duration::from_secs(1)],
    };
    assert_eq!(gaps, want, "{reply:?}");
}

#[test]
fn capped_targets_are_retried_until_done() {
    unfinished_targets_are_retried_until_done(CtReply::Each(CleanupOutcome::Capped));
}

#[test]
fn incomplete_targets_are_retried_until_done() {
    unfinished_targets_are_retried_until_done(CtReply::Each(CleanupOutcome::Incomplete));
}

#[test]
fn failed_targets_are_retried_until_done() {
    unfinished_targets_are_retried_until_done(CtReply::Each(CleanupOutcome::Failed));
}

#[test]
fn targets_of_a_call_failing_with_enobufs_are_retried_until_done() {
    unfinished_targets_are_retried_until_done(CtReply::Enobufs);
}

/// Of one call, the finished targets leave (and leave our table); the others stay.
#[test]
fn a_partly_finished_call_keeps_exactly_the_unfinished_targets() {
    let w = World::new();
    let mut e = four_targets(&w);
    w.ct_replies(&[CtReply::FirstDone(1, CleanupOutcome::Incomplete)]);
    e.sync().unwrap();
    assert_eq!(deletes(&w.take()).len(), 1);
    assert_eq!(e.pending_targets().len(), 3);
    assert_eq!(w.recorded(), {
        let mut v = e.pending_targets();
        v.sort();
        v
    });
    let t = e.pending_targets()[0];
    let entry = e.pending().get(&t).unwrap();
    assert_eq!(
        (entry.attempts, entry.last),
        (1, Some(CleanupOutcome::Incomplete))
    );
}

/// A crash between the commit and the cleanup: the targets were recorded in our table
/// by the batch itself, so the restarted engine resumes them.
#[test]
fn a_restart_resumes_the_targets_a_crash_left() {
    let w = World::new();
    let mut first = four_targets(&w);
    *w.ct_fail.lock().unwrap() = true;
    first.sync().unwrap();
    assert_eq!(w.recorded().len(), 4);
    drop(first); // the process dies: its memory is gone
    w.take();

    *w.ct_fail.lock().unwrap() = false;
    let mut second = four_targets(&w);
    let r = second.sync().unwrap();
    assert_eq!(r.ops, 0, "the rules were in: nothing to commit");
    assert_eq!(r.conntrack_targets, 4, "resumed");
    let calls = w.take();
    assert_eq!(deletes(&calls), four_deletes(), "{calls:?}");
    assert_eq!(w.recorded(), vec![]);
}

/// A restart over a table of the previous run with many recorded targets (e.g. after
/// our table was deleted, every served destination is a target): the backlog is
/// worked through in slices between syncs, and a rule change arriving meanwhile is
/// committed within minSyncPeriod plus one slice; no target is dropped.
fn backlog(slice_targets: usize) -> Duration {
    const N: usize = 10_000;
    let w = World::new();
    let mut cfg = w.config(true);
    cfg.cleanup_slice_targets = slice_targets;
    // A previous run committed our table and recorded N targets.
    {
        let mut e = w.engine(true);
        e.handle(Event::ServiceApplied(udp_lb()));
        listed(&mut e);
        e.sync().unwrap();
    }
    {
        let mut t = w.tables.lock().unwrap();
        let mut dst = Set::set(SET_DST, vec![DataType::Ipv4Addr, DataType::InetService]);
        let mut ep = Set::set(
            SET_ENDPOINT,
            vec![DataType::Ipv4Addr, DataType::InetService],
        );
        for i in 0..N / 2 {
            let a = std::net::Ipv4Addr::new(198, 19, (i / 250) as u8, (i % 250) as u8 + 1);
            dst.elements
                .push(Element::key(vec![Value::Ipv4(a), Value::Port(53)]));
            ep.elements
                .push(Element::key(vec![Value::Ipv4(a), Value::Port(5353)]));
        }
        t[0].sets.push(dst);
        t[0].sets.push(ep);
    }
    // One walk per call and a little per target (the batched ct-netlink's shape).
    *w.ct_cost.lock().unwrap() = (Duration::from_millis(300), Duration::from_millis(1));
    let mut e = w.engine_with(cfg);
    e.handle(Event::ServiceApplied(udp_lb()));
    listed(&mut e);
    let t0 = w.clock.now();
    e.sync().unwrap();
    assert!(e.pending_targets().len() >= N - slice_targets.min(N));
    w.take_batches();

    // The endpoint appears 2 s into the backlog.
    let at = t0 + Duration::from_secs(2);
    let change = Event::SliceApplied(slice("dns-1", &[("198.18.2.2", true, true, false)]));
    let steps = drive(
        &mut e,
        &w,
        t0 + Duration::from_secs(120),
        vec![(at, change)],
    );
    // The first sync after the change (the sync committing the endpoint).
    let committed = steps
        .iter()
        .find(|(t, work)| *work == Work::Sync && *t >= at)
        .map(|(t, _)| *t)
        .expect("a sync after the change");
    let latency = committed - at;

    // The change's own targets go first, in the slice of the sync that committed it.
    let log = w.take();
    let cluster_ip = Call::Delete(ct_netlink::Filter::udp_unnated(ip(CLUSTER_IP), 53));
    let before = log
        .iter()
        .take_while(|c| **c != cluster_ip)
        .filter(|c| matches!(c, Call::Delete(_)))
        .count();
    // (the first sync's slice, then one per step before the change's sync)
    let slices_before = 1 + steps.iter().filter(|(t, _)| *t < committed).count();
    if slice_targets < N {
        assert!(before <= slices_before * slice_targets, "{before}");
    }
    // Nothing lost: every recorded target and the four new ones were cleaned, once.
    let deleted: BTreeSet<_> = deletes(&log).into_iter().map(|f| format!("{f}")).collect();
    assert_eq!(deleted.len(), N + 4);
    let calls = w.ct_calls.lock().unwrap().clone();
    assert_eq!(
        calls.iter().map(|c| c.1).sum::<usize>(),
        N + 4,
        "each target once"
    );
    assert!(calls.iter().all(|c| c.1 <= slice_targets));
    assert!(e.pending_targets().is_empty());
    assert_eq!(w.recorded(), Vec::<Target>::new());
    latency
}

/// minSyncPeriod (1 s) + at most one slice (300 ms + 256 x 1 ms).
const BACKLOG_BOUND: Duration = Duration::from_millis(1000 + 300 + 256);

#[test]
fn a_cleanup_backlog_does_not_hold_back_rule_syncs() {
    let latency = backlog(256);
    eprintln!("rule change committed {latency:?} after it arrived, during a 10,000-target backlog");
    assert!(
        latency <= BACKLOG_BOUND,
        "committed {latency:?} after the change (bound {BACKLOG_BOUND:?})"
    );
}

/// The negative control of the test above: the whole backlog in one call (what the
/// engine did before slicing) holds the change back for most of that call.
#[test]
fn a_cleanup_backlog_in_one_call_holds_back_rule_syncs() {
    let latency = backlog(usize::MAX);
    assert!(latency > BACKLOG_BOUND * 4, "{latency:?}");
}

/// Without ctnetlink (the socket cannot be opened or the probe fails), rules are still
/// programmed; the cleanup is reported unavailable, the targets wait (recorded) and
/// the socket is opened again periodically; once it works the targets are cleared.
#[test]
fn without_conntrack_rules_are_programmed_and_targets_wait() {
    let w = World::new();
    let tries = Arc::new(AtomicU32::new(0));
    let (n, ct) = (tries.clone(), w.ct());
    let mut ct = Some(ct);
    let opener: ConntrackOpener<FakeCt> = Box::new(move || {
        if n.fetch_add(1, Ordering::SeqCst) < 2 {
            Err(EngineError::Other(
                "ctnetlink: protocol not supported".into(),
            ))
        } else {
            ct.take()
                .ok_or_else(|| EngineError::Other("opened twice".into()))
        }
    });
    let mut cfg = w.config(true);
    cfg.conntrack_reprobe = Duration::from_secs(10);
    let reprobe = cfg.conntrack_reprobe;
    let mut e = Engine::with_conntrack_opener(cfg, w.nft(), opener, w.clock.clone());
    assert!(!e.conntrack_available());
    let st = e.status().snapshot();
    assert!(st
        .cleanup_unavailable
        .as_deref()
        .is_some_and(|r| r.contains("not supported")));

    e.handle(Event::ServiceApplied(udp_lb()));
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    listed(&mut e);
    let t0 = w.clock.now();
    let r = e.sync().unwrap();
    assert!(r.ops > 0, "the rules are programmed");
    assert_eq!((r.conntrack_targets, r.conntrack_pending), (0, 4));
    assert_eq!(w.recorded().len(), 4, "the targets wait, recorded");
    assert_eq!(e.next_work(), Some((t0 + reprobe, Work::Reprobe)));

    let steps = drive(&mut e, &w, t0 + reprobe * 3, vec![]);
    let probes: Vec<_> = steps.iter().filter(|s| s.1 == Work::Reprobe).collect();
    assert_eq!(probes.len(), 2, "{steps:?}");
    assert_eq!(probes[1].0, t0 + reprobe * 2);
    assert_eq!(tries.load(Ordering::SeqCst), 3);
    assert!(e.conntrack_available());
    assert_eq!(e.status().snapshot().cleanup_unavailable, None);
    let calls = w.take();
    assert_eq!(deletes(&calls), four_deletes());
    assert_eq!(w.recorded(), vec![]);
    assert!(e.pending_targets().is_empty());
}

/// A one-shot run (`--once`) works through the whole backlog due now before it exits.
#[test]
fn drain_cleanup_runs_every_slice_due_now() {
    let w = World::new();
    let mut cfg = w.config(true);
    cfg.cleanup_slice_targets = 1;
    let mut e = w.engine_with(cfg);
    e.handle(Event::ServiceApplied(udp_lb()));
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    listed(&mut e);
    let r = e.sync().unwrap();
    assert_eq!((r.conntrack_targets, r.conntrack_pending), (1, 3));
    assert_eq!(e.drain_cleanup(), 3);
    assert_eq!(deletes(&w.take()), four_deletes());
    assert_eq!(w.recorded(), vec![]);
    assert_eq!(e.drain_cleanup(), 0);
}

/// A service of `proto` with `affinity` or not, and its slice with these endpoints.
fn proto_service(
    name: &str,
    ip: &str,
    proto: &str,
    affinity: bool,
) -> k8s_openapi::api::core::v1::Service {
    let mut spec = serde_json::json!({
        "clusterIP": ip,
        "ports": [{"name": "p", "port": 7000, "protocol": proto}]
    });
    if affinity {
        spec["sessionAffinity"] = serde_json::json!("ClientIP");
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "ns1"}, "spec": spec
    }))
    .unwrap()
}

fn proto_slice(
    name: &str,
    proto: &str,
    eps: &[String],
) -> k8s_openapi::api::discovery::v1::EndpointSlice {
    let endpoints: Vec<_> = eps
        .iter()
        .map(|ip| serde_json::json!({"addresses": [ip], "conditions": {"ready": true}}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{name}-1"), "namespace": "ns1",
                     "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "p", "port": 8000, "protocol": proto}]
    }))
    .unwrap()
}

/// A restart after a rollout while no engine ran (issue 21 item 5): the endpoints that
/// vanished become cleanup targets only for UDP services (the endpoint maps' keys name
/// the destination's protocol; a session-affinity service's endpoints are in its
/// endpoint chains); TCP and SCTP endpoints are not (before, all 12 vanished endpoints
/// were UDP targets).
#[test]
fn a_restart_makes_udp_targets_of_vanished_udp_endpoints_only() {
    let w = World::new();
    let kinds = [
        ("tcp", "198.18.100.31", "TCP", false, 10u8),
        ("udp", "198.18.100.32", "UDP", false, 20),
        ("sctp", "198.18.100.33", "SCTP", false, 30),
        ("udp-aff", "198.18.100.34", "UDP", true, 40),
    ];
    let eps = |base: u8, gen: u8| -> Vec<String> {
        (0..3)
            .map(|i| format!("198.18.{gen}.{}", base + i))
            .collect()
    };
    let events = |gen: u8| {
        let mut v = Vec::new();
        for (name, ip, proto, aff, base) in kinds {
            v.push(Event::ServiceApplied(proto_service(name, ip, proto, aff)));
            v.push(Event::SliceApplied(proto_slice(
                name,
                proto,
                &eps(base, gen),
            )));
        }
        v
    };
    // the previous run: generation 2 of the endpoints
    {
        let mut e = w.engine(true);
        for ev in events(2) {
            e.handle(ev);
        }
        listed(&mut e);
        e.sync().unwrap();
    }
    w.take();
    // a rollout while down: every endpoint replaced (generation 3)
    let mut e = w.engine(true);
    for ev in events(3) {
        e.handle(ev);
    }
    listed(&mut e);
    e.sync().unwrap();
    let mut got: Vec<String> = deletes(&w.take())
        .into_iter()
        .map(|f| format!("{f}"))
        .filter(|f| f.contains("198.18.2."))
        .collect();
    got.sort();
    let mut want: Vec<String> = [20u8, 40]
        .iter()
        .flat_map(|b| {
            (0..3).map(move |i| {
                ct_netlink::Filter::udp_reply_src(ip(&format!("198.18.2.{}", b + i)), 8000)
            })
        })
        .map(|f| format!("{f}"))
        .collect();
    want.sort();
    assert_eq!(got, want);
}
