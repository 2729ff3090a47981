//! Deterministic engine tests with a recording fake kernel: every commit and every
//! conntrack delete is recorded in order, so the ordering rule is checked exactly.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ct_netlink::{Family as CtFamily, Filter};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use nft_model::{Op, Table, TableRef};
use serde_json::json;
use sync_engine::*;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    Commit { ops: usize },
    CommitFailed,
    Delete(Filter),
}

type Log = Arc<Mutex<Vec<Call>>>;

struct FakeNft {
    log: Log,
    tables: Arc<Mutex<Vec<Table>>>,
    gen: Arc<Mutex<u32>>,
    fail_commits: Arc<Mutex<u32>>,
    dumps: Arc<Mutex<u32>>,
}

impl NftKernel for FakeNft {
    fn generation(&mut self) -> Result<u32, EngineError> {
        Ok(*self.gen.lock().unwrap())
    }
    fn commit(&mut self, ops: &[Op], genid: Option<u32>) -> Result<CommitStats, EngineError> {
        let mut g = self.gen.lock().unwrap();
        if let Some(want) = genid {
            if want != *g {
                return Err(EngineError::Nft(nft_netlink::NftError::GenerationChanged {
                    expected: want,
                }));
            }
        }
        let mut fail = self.fail_commits.lock().unwrap();
        if *fail > 0 {
            *fail -= 1;
            self.log.lock().unwrap().push(Call::CommitFailed);
            return Err(EngineError::Other(
                "injected: the kernel rejected the batch".into(),
            ));
        }
        let mut t = self.tables.lock().unwrap();
        let mut next = t.clone();
        ruleset::apply(&mut next, ops).map_err(|e| EngineError::Other(e.to_string()))?;
        *t = next;
        *g = next_generation(*g);
        self.log
            .lock()
            .unwrap()
            .push(Call::Commit { ops: ops.len() });
        Ok(CommitStats {
            ops: ops.len(),
            bytes: ops.len() * 100,
        })
    }
    fn dump_table(&mut self, r: &TableRef) -> Result<Option<Table>, EngineError> {
        *self.dumps.lock().unwrap() += 1;
        Ok(self
            .tables
            .lock()
            .unwrap()
            .iter()
            .find(|t| t.family == r.family && t.name == r.name)
            .cloned())
    }
}

struct FakeCt {
    log: Log,
    fail: Arc<Mutex<bool>>,
}

impl ConntrackKernel for FakeCt {
    fn delete(&mut self, filters: &[Filter]) -> Result<u64, EngineError> {
        if *self.fail.lock().unwrap() {
            return Err(EngineError::Other("injected conntrack failure".into()));
        }
        let mut l = self.log.lock().unwrap();
        for f in filters {
            l.push(Call::Delete(*f));
        }
        Ok(filters.len() as u64)
    }
}

#[derive(Clone)]
struct FakeClock(Arc<Mutex<Instant>>);

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        *self.0.lock().unwrap()
    }
}

impl FakeClock {
    fn advance(&self, d: Duration) {
        *self.0.lock().unwrap() += d;
    }
}

struct World {
    log: Log,
    tables: Arc<Mutex<Vec<Table>>>,
    gen: Arc<Mutex<u32>>,
    fail_commits: Arc<Mutex<u32>>,
    dumps: Arc<Mutex<u32>>,
    ct_fail: Arc<Mutex<bool>>,
    clock: FakeClock,
}

impl World {
    fn new() -> World {
        World {
            log: Arc::default(),
            tables: Arc::default(),
            gen: Arc::new(Mutex::new(7)),
            fail_commits: Arc::default(),
            dumps: Arc::default(),
            ct_fail: Arc::default(),
            clock: FakeClock(Arc::new(Mutex::new(Instant::now()))),
        }
    }
    fn engine(&self, cleanup: bool) -> Engine<FakeNft, FakeCt, FakeClock> {
        let cfg = EngineConfig {
            ruleset: ruleset::Config {
                node_name: "node-a".into(),
                families: vec!["IPv4".into()],
                cluster_cidrs: vec!["198.18.0.0/20".into()],
                ..Default::default()
            },
            conntrack_cleanup: cleanup,
            watch_tamper: false,
            ..Default::default()
        };
        Engine::new(
            cfg,
            FakeNft {
                log: self.log.clone(),
                tables: self.tables.clone(),
                gen: self.gen.clone(),
                fail_commits: self.fail_commits.clone(),
                dumps: self.dumps.clone(),
            },
            FakeCt {
                log: self.log.clone(),
                fail: self.ct_fail.clone(),
            },
            self.clock.clone(),
        )
    }
    fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

const CLUSTER_IP: &str = "198.18.100.10";
const EXTERNAL_IP: &str = "198.18.101.1";
const LB_IP: &str = "198.18.102.1";
const NODE_PORT: u16 = 30053;

/// TestProxierDeleteNodePortStaleUDP's service: UDP LoadBalancer with a ClusterIP, an
/// ExternalIP, a LoadBalancer IP and a NodePort.
fn udp_lb() -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "dns", "namespace": "ns1"},
        "spec": {
            "type": "LoadBalancer",
            "clusterIP": CLUSTER_IP,
            "externalIPs": [EXTERNAL_IP],
            "ports": [{"name": "p", "port": 53, "protocol": "UDP", "nodePort": NODE_PORT}]
        },
        "status": {"loadBalancer": {"ingress": [{"ip": LB_IP}]}}
    }))
    .unwrap()
}

fn slice(name: &str, eps: &[(&str, bool, bool, bool)]) -> EndpointSlice {
    let endpoints: Vec<_> = eps
        .iter()
        .map(|(ip, ready, serving, terminating)| {
            json!({"addresses": [ip], "nodeName": "node-b",
                   "conditions": {"ready": ready, "serving": serving, "terminating": terminating}})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "ns1",
                     "labels": {"kubernetes.io/service-name": "dns"}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "p", "port": 5353, "protocol": "UDP"}]
    }))
    .unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn listed(e: &mut Engine<FakeNft, FakeCt, FakeClock>) {
    e.handle(Event::ServicesListed);
    e.handle(Event::SlicesListed);
}

fn four_deletes() -> Vec<Filter> {
    let mut v = vec![
        Filter::udp_orig_dst(ip(CLUSTER_IP), Some(53)),
        Filter::udp_orig_dst(ip(EXTERNAL_IP), Some(53)),
        Filter::udp_orig_dst(ip(LB_IP), Some(53)),
        Filter::udp_nodeport(CtFamily::V4, NODE_PORT),
    ];
    v.sort_by_key(|f| format!("{f}"));
    v
}

fn deletes(calls: &[Call]) -> Vec<Filter> {
    let mut v: Vec<Filter> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Delete(f) => Some(*f),
            _ => None,
        })
        .collect();
    v.sort_by_key(|f| format!("{f}"));
    v
}

/// Every delete is recorded after a successful commit (never before, never after a failure).
fn assert_deletes_after_commit(calls: &[Call]) {
    let first_delete = calls.iter().position(|c| matches!(c, Call::Delete(_)));
    if let Some(i) = first_delete {
        assert!(
            matches!(calls[..i].last(), Some(Call::Commit { .. })),
            "deletes must follow a successful commit: {calls:?}"
        );
    }
}

#[test]
fn delete_nodeport_stale_udp() {
    let w = World::new();
    let mut e = w.engine(true);
    e.handle(Event::ServiceApplied(udp_lb()));
    listed(&mut e);

    // No endpoints: no conntrack call.
    let r = e.sync().unwrap();
    assert!(r.full);
    let calls = w.take();
    assert!(
        matches!(calls.as_slice(), [Call::Commit { .. }]),
        "{calls:?}"
    );
    assert_eq!(r.conntrack_targets, 0);

    // A not-ready endpoint: still none.
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", false, false, false)],
    )));
    w.clock.advance(Duration::from_secs(2));
    e.sync().unwrap();
    let calls = w.take();
    assert!(deletes(&calls).is_empty(), "{calls:?}");

    // A ready endpoint: exactly four deletes, after the commit.
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    w.clock.advance(Duration::from_secs(2));
    let r = e.sync().unwrap();
    let calls = w.take();
    assert_eq!(deletes(&calls), four_deletes(), "{calls:?}");
    assert!(matches!(calls[0], Call::Commit { .. }), "{calls:?}");
    assert_eq!(calls.len(), 5);
    assert_deletes_after_commit(&calls);
    assert_eq!(r.conntrack_targets, 4);
    assert_eq!(r.conntrack_deleted, 4);
    assert!(!r.full);

    // Nothing changed: no commit, no delete.
    w.clock.advance(Duration::from_secs(2));
    e.sync().unwrap();
    assert_eq!(w.take(), vec![]);
}

#[test]
fn failed_commit_keeps_targets_for_the_next_commit() {
    let w = World::new();
    let mut e = w.engine(true);
    e.handle(Event::ServiceApplied(udp_lb()));
    listed(&mut e);
    e.sync().unwrap();
    w.take();

    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    *w.fail_commits.lock().unwrap() = 1;
    w.clock.advance(Duration::from_secs(2));
    assert!(e.sync().is_err());
    let calls = w.take();
    assert_eq!(
        calls,
        vec![Call::CommitFailed],
        "no delete after a failed commit"
    );
    assert_eq!(e.pending_targets().len(), 4);
    assert_eq!(e.status().snapshot().failures, 1);
    assert!(e.is_dirty());

    // Backoff: the retry is not due at once, but is due later.
    let now = w.clock.now();
    let at = e.next_sync_at().unwrap();
    assert!(at > now);
    w.clock.advance(at - now);
    let r = e.sync().unwrap();
    assert!(r.full, "a sync after a failure is a full one");
    let calls = w.take();
    assert_eq!(deletes(&calls), four_deletes(), "{calls:?}");
    assert_deletes_after_commit(&calls);
    assert!(e.pending_targets().is_empty());
    assert_eq!(e.status().snapshot().consecutive_failures, 0);
}

#[test]
fn endpoint_removed_deletes_by_reply_source() {
    let w = World::new();
    let mut e = w.engine(true);
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
    assert_eq!(deletes(&w.take()), four_deletes());

    // One endpoint removed: flows DNAT'ed to it are deleted (reply source), nothing else.
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    w.clock.advance(Duration::from_secs(2));
    e.sync().unwrap();
    let calls = w.take();
    assert_eq!(
        deletes(&calls),
        vec![Filter::udp_reply_src(ip("198.18.2.3"), 5353)]
    );
    assert_deletes_after_commit(&calls);

    // Service deleted: the remaining endpoint's flows go.
    e.handle(Event::ServiceDeleted(udp_lb()));
    w.clock.advance(Duration::from_secs(2));
    e.sync().unwrap();
    let calls = w.take();
    assert_eq!(
        deletes(&calls),
        vec![Filter::udp_reply_src(ip("198.18.2.2"), 5353)]
    );
    assert_deletes_after_commit(&calls);
}

#[test]
fn terminating_fallback_counts_as_usable() {
    let w = World::new();
    let mut e = w.engine(true);
    e.handle(Event::ServiceApplied(udp_lb()));
    listed(&mut e);
    e.sync().unwrap();
    w.take();
    // Not ready, but serving and terminating: the fallback traffic goes to.
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", false, true, true)],
    )));
    w.clock.advance(Duration::from_secs(2));
    e.sync().unwrap();
    assert_eq!(deletes(&w.take()), four_deletes());
}

#[test]
fn cleanup_switch_off_deletes_nothing() {
    let w = World::new();
    let mut e = w.engine(false);
    e.handle(Event::ServiceApplied(udp_lb()));
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    listed(&mut e);
    let r = e.sync().unwrap();
    assert_eq!(r.conntrack_targets, 4);
    assert!(deletes(&w.take()).is_empty());
}

#[test]
fn conntrack_failure_does_not_block_the_next_sync() {
    let w = World::new();
    let mut e = w.engine(true);
    e.handle(Event::ServiceApplied(udp_lb()));
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.2", true, true, false)],
    )));
    listed(&mut e);
    *w.ct_fail.lock().unwrap() = true;
    e.sync().unwrap();
    assert_eq!(e.status().snapshot().conntrack_failures, 1);
    assert!(e.pending_targets().is_empty());
    *w.ct_fail.lock().unwrap() = false;
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.3", true, true, false)],
    )));
    w.clock.advance(Duration::from_secs(2));
    e.sync().unwrap();
    let calls = w.take();
    assert!(matches!(calls[0], Call::Commit { .. }));
    assert_eq!(
        deletes(&calls),
        vec![Filter::udp_reply_src(ip("198.18.2.2"), 5353)]
    );
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
    assert_eq!(w.tables.lock().unwrap().as_slice(), e.committed().unwrap());
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
    assert!(w.take().is_empty());
    drop(second);

    // The endpoint changed while we were down: one batch, then only the removed
    // endpoint's flows are deleted (no destination flush: the service was served before).
    let mut third = w.engine(true);
    third.handle(Event::ServiceApplied(udp_lb()));
    third.handle(Event::SliceApplied(slice(
        "dns-1",
        &[("198.18.2.9", true, true, false)],
    )));
    listed(&mut third);
    third.sync().unwrap();
    let calls = w.take();
    assert!(matches!(calls[0], Call::Commit { .. }));
    assert_eq!(
        calls
            .iter()
            .filter(|c| matches!(c, Call::Commit { .. }))
            .count(),
        1
    );
    assert_eq!(
        deletes(&calls),
        vec![Filter::udp_reply_src(ip("198.18.2.2"), 5353)]
    );
    // The batch never deletes the table (no moment without rules).
    assert_eq!(
        w.tables.lock().unwrap().as_slice(),
        third.committed().unwrap()
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
        fn failed(&self, _e: &EngineError) {
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

#[test]
fn service_cidr_changes_reach_the_compile_config() {
    let w = World::new();
    let mut e = w.engine(true);
    listed(&mut e);
    e.sync().unwrap();
    let cidrs = vec!["198.18.128.0/17".to_string()];
    e.handle(Event::ServiceCidrs(cidrs.clone()));
    assert_eq!(e.config().ruleset.service_cidrs, cidrs);
    assert!(e.is_dirty(), "a new service CIDR list is a change to sync");
    w.clock.advance(Duration::from_secs(1));
    e.sync().unwrap();
    e.handle(Event::ServiceCidrs(cidrs));
    assert!(!e.is_dirty(), "the same list again is no change");
}

#[test]
fn a_stalled_source_is_unhealthy_after_twice_the_sync_period() {
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
    assert!(e.status().healthy(since + period * 2));
    assert!(!e
        .status()
        .healthy(since + period * 2 + Duration::from_secs(1)));
    e.handle(Event::SourceRecovered {
        source: "service".into(),
    });
    assert!(e.status().healthy(since + period * 3));
}
