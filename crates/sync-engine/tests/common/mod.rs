//! The recording fake kernel and fake clock of the engine tests: every commit and every
//! conntrack delete is recorded in order, so the ordering rule is checked exactly.
#![allow(dead_code)]

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
pub enum Call {
    Commit { ops: usize },
    CommitFailed,
    Delete(Filter),
}

pub type Log = Arc<Mutex<Vec<Call>>>;

pub struct FakeNft {
    pub log: Log,
    pub tables: Arc<Mutex<Vec<Table>>>,
    pub gen: Arc<Mutex<u32>>,
    pub fail_commits: Arc<Mutex<u32>>,
    pub dumps: Arc<Mutex<u32>>,
    /// Another program commits right after our next commit.
    pub foreign_after_commit: Arc<Mutex<bool>>,
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
        if std::mem::take(&mut *self.foreign_after_commit.lock().unwrap()) {
            *g = next_generation(*g);
        }
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

pub struct FakeCt {
    pub log: Log,
    pub fail: Arc<Mutex<bool>>,
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
pub struct FakeClock(Arc<Mutex<Instant>>);

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        *self.0.lock().unwrap()
    }
}

impl FakeClock {
    pub fn advance(&self, d: Duration) {
        *self.0.lock().unwrap() += d;
    }
}

pub struct World {
    pub log: Log,
    pub tables: Arc<Mutex<Vec<Table>>>,
    pub gen: Arc<Mutex<u32>>,
    pub fail_commits: Arc<Mutex<u32>>,
    pub dumps: Arc<Mutex<u32>>,
    pub ct_fail: Arc<Mutex<bool>>,
    pub foreign_after_commit: Arc<Mutex<bool>>,
    pub clock: FakeClock,
}

impl World {
    pub fn new() -> World {
        World {
            log: Arc::default(),
            tables: Arc::default(),
            gen: Arc::new(Mutex::new(7)),
            fail_commits: Arc::default(),
            dumps: Arc::default(),
            ct_fail: Arc::default(),
            foreign_after_commit: Arc::default(),
            clock: FakeClock(Arc::new(Mutex::new(Instant::now()))),
        }
    }
    pub fn engine(&self, cleanup: bool) -> Engine<FakeNft, FakeCt, FakeClock> {
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
                foreign_after_commit: self.foreign_after_commit.clone(),
            },
            FakeCt {
                log: self.log.clone(),
                fail: self.ct_fail.clone(),
            },
            self.clock.clone(),
        )
    }
    pub fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

pub const CLUSTER_IP: &str = "198.18.100.10";
pub const EXTERNAL_IP: &str = "198.18.101.1";
pub const LB_IP: &str = "198.18.102.1";
pub const NODE_PORT: u16 = 30053;

/// TestProxierDeleteNodePortStaleUDP's service: UDP LoadBalancer with a ClusterIP, an
/// ExternalIP, a LoadBalancer IP and a NodePort.
pub fn udp_lb() -> Service {
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

pub fn slice(name: &str, eps: &[(&str, bool, bool, bool)]) -> EndpointSlice {
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

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub fn listed(e: &mut Engine<FakeNft, FakeCt, FakeClock>) {
    e.handle(Event::ServicesListed);
    e.handle(Event::SlicesListed);
}

pub fn four_deletes() -> Vec<Filter> {
    let mut v = vec![
        Filter::udp_orig_dst(ip(CLUSTER_IP), Some(53)),
        Filter::udp_orig_dst(ip(EXTERNAL_IP), Some(53)),
        Filter::udp_orig_dst(ip(LB_IP), Some(53)),
        Filter::udp_nodeport(CtFamily::V4, NODE_PORT),
    ];
    v.sort_by_key(|f| format!("{f}"));
    v
}

pub fn deletes(calls: &[Call]) -> Vec<Filter> {
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
pub fn assert_deletes_after_commit(calls: &[Call]) {
    let first_delete = calls.iter().position(|c| matches!(c, Call::Delete(_)));
    if let Some(i) = first_delete {
        assert!(
            matches!(calls[..i].last(), Some(Call::Commit { .. })),
            "deletes must follow a successful commit: {calls:?}"
        );
    }
}
