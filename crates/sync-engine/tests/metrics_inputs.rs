//! What the engine hands the metrics: the EndpointSlice trigger times of the changes a
//! sync applied (kube-proxy's network programming latency), and per conntrack target
//! its family, outcome and count.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_model::{IpFamily, ANNOTATION_LAST_CHANGE_TRIGGER_TIME};
use sync_engine::*;

fn rfc3339(t: SystemTime) -> String {
    // seconds and nanoseconds since the epoch as the controller writes them (UTC)
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap();
    let (days, secs) = (d.as_secs() / 86400, d.as_secs() % 86400);
    // civil date from days (Howard Hinnant's algorithm)
    let z = days as i64 + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d_ = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d_:02}T{:02}:{:02}:{:02}.{:09}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        d.subsec_nanos()
    )
}

fn with_trigger(mut s: EndpointSlice, t: SystemTime) -> EndpointSlice {
    s.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION_LAST_CHANGE_TRIGGER_TIME.into(), rfc3339(t));
    s
}

#[test]
fn trigger_times_of_applied_slice_changes_reach_the_report_once() {
    let w = World::new();
    let mut e = w.engine(true);
    let before_start = SystemTime::now() - Duration::from_secs(3600);
    e.handle(Event::ServiceApplied(udp_lb()));
    // the initial list: a trigger time from before the engine started is not counted
    e.handle(Event::SliceApplied(with_trigger(
        slice("dns-1", &[("198.18.2.2", true, true, false)]),
        before_start,
    )));
    listed(&mut e);
    let r = e.sync().unwrap();
    assert_eq!(r.trigger_times, vec![]);
    assert!(r.committed_at.is_some());

    // two changes before the next sync: both trigger times, with the slice's family
    let t1 = SystemTime::now();
    e.handle(Event::SliceApplied(with_trigger(
        slice("dns-1", &[("198.18.2.3", true, true, false)]),
        t1,
    )));
    let t2 = t1 + Duration::from_millis(5);
    e.handle(Event::SliceApplied(with_trigger(
        slice("dns-2", &[("198.18.2.4", true, true, false)]),
        t2,
    )));
    // an update that changes nothing in the model carries no trigger time
    e.handle(Event::SliceApplied(with_trigger(
        slice("dns-2", &[("198.18.2.4", true, true, false)]),
        t2 + Duration::from_millis(5),
    )));
    w.clock.advance(Duration::from_secs(2));
    let r = e.sync().unwrap();
    let mut got = r.trigger_times.clone();
    got.sort();
    assert_eq!(got, vec![(IpFamily::V4, t1), (IpFamily::V4, t2)]);

    // handed over once
    w.clock.advance(Duration::from_secs(2));
    assert_eq!(e.sync().unwrap().trigger_times, vec![]);
}

#[test]
fn trigger_times_survive_a_failed_sync() {
    let w = World::new();
    let mut e = w.engine(true);
    e.handle(Event::ServiceApplied(udp_lb()));
    listed(&mut e);
    e.sync().unwrap();
    let t = SystemTime::now();
    e.handle(Event::SliceApplied(with_trigger(
        slice("dns-1", &[("198.18.2.2", true, true, false)]),
        t,
    )));
    *w.fail_commits.lock().unwrap() = 1;
    w.clock.advance(Duration::from_secs(2));
    assert!(e.sync().is_err());
    w.clock.advance(Duration::from_secs(60));
    let r = e.sync().unwrap();
    assert_eq!(r.trigger_times, vec![(IpFamily::V4, t)]);
}

/// Each conntrack job of a sync is reported for the metrics: the listing of each
/// frontend judged again, then the deletes per family with their outcome and count.
#[test]
fn each_cleanup_job_is_reported_with_family_outcome_and_count() {
    let w = World::new();
    let mut e = w.engine(true);
    e.handle(Event::NodeApplied(node()));
    e.handle(Event::ServiceApplied(udp_lb()));
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.1", true, true, false)],
    )));
    listed(&mut e);
    e.sync().unwrap();
    w.flows(&[
        flow(1, CLUSTER_IP, 53, "198.18.2.1", 5353),
        flow(2, EXTERNAL_IP, 53, "198.18.2.1", 5353),
        flow(3, LB_IP, 53, "198.18.2.1", 5353),
        flow(4, NODE_IP, NODE_PORT, "198.18.2.1", 5353),
    ]);
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    w.ct_replies(&[CtReply::Ok, CtReply::FirstDone(3)]);
    w.clock.advance(Duration::from_secs(2));
    let r = e.sync().unwrap();
    let jobs: Vec<(&str, Option<u64>)> = r
        .conntrack_filters
        .iter()
        .map(|f| (f.outcome, f.deleted))
        .collect();
    assert_eq!(
        jobs,
        vec![
            ("listed", Some(0)),
            ("listed", Some(0)),
            ("listed", Some(0)),
            ("listed", Some(0)),
            ("failed", Some(3))
        ],
        "{r:?}"
    );
    assert!(r
        .conntrack_filters
        .iter()
        .all(|f| f.family == IpFamily::V4 && f.strategy == Some("unknown")));
    assert_eq!(r.conntrack_deleted, 3);
}

/// `no_local_endpoints_total` per family: a service counts only in the families of its
/// ClusterIPs, so the two families' series add up to the services, not twice as many.
#[test]
fn no_local_endpoints_per_family_count_each_service_once() {
    let w = World::new();
    let mut e = w.engine(true);
    let mut svc: serde_json::Value = serde_json::to_value(udp_lb()).unwrap();
    svc["spec"]["externalTrafficPolicy"] = serde_json::json!("Local");
    svc["spec"]["internalTrafficPolicy"] = serde_json::json!("Local");
    svc["spec"]["healthCheckNodePort"] = serde_json::json!(32000);
    e.handle(Event::ServiceApplied(serde_json::from_value(svc).unwrap()));
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    listed(&mut e);
    e.sync().unwrap();
    let s = e.status().snapshot();
    assert_eq!(s.no_local.get(&IpFamily::V4), Some(&(1, 1)));
    assert_eq!(s.no_local.get(&IpFamily::V6), Some(&(0, 0)));
    let total: usize = s.no_local.values().map(|v| v.0).sum();
    assert_eq!(total, s.no_local_internal);
}
