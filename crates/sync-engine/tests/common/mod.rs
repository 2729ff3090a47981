//! The recording fake kernel and fake clock of the engine tests: every commit and every
//! conntrack delete is recorded in order, so the ordering rule is checked exactly.
#![allow(dead_code)]

use std::collections::VecDeque;
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
    /// The next commits fail (a transport failure, not a refusal of their content).
    pub fail_commits: Arc<Mutex<u32>>,
    pub dumps: Arc<Mutex<u32>>,
    /// Another program commits right after our next commit.
    pub foreign_after_commit: Arc<Mutex<bool>>,
    /// Every committed batch, in order.
    pub batches: Arc<Mutex<Vec<Vec<Op>>>>,
    /// The kernel refuses (EINVAL) any batch adding a rule to a chain whose name
    /// contains this (e.g. `services`), or, when this is an address (a service's
    /// ClusterIP), any batch adding an element whose key starts with it.
    pub refuse_rules_in: Arc<Mutex<Option<String>>>,
    /// The kernel refuses the next batches (commits only), whatever they hold.
    pub refuse_next: Arc<Mutex<u32>>,
    /// Every commit call and generation read, in order, with the watcher's subscription
    /// changes ([`FakeListening`]).
    pub kernel_log: Arc<Mutex<Vec<&'static str>>>,
}

/// Whether an element key starts with the address `addr` (text; false if not one).
pub fn key_starts_with_addr(key: &[nft_model::Value], addr: &str) -> bool {
    let Ok(a) = addr.parse::<std::net::IpAddr>() else {
        return false;
    };
    match (key.first(), a) {
        (Some(nft_model::Value::Ipv4(k)), std::net::IpAddr::V4(a)) => *k == a,
        (Some(nft_model::Value::Ipv6(k)), std::net::IpAddr::V6(a)) => *k == a,
        _ => false,
    }
}

impl FakeNft {
    /// The kernel's answer to `ops` on top of the tables: the new tables, or the refusal.
    fn process(&self, ops: &[Op], genid: Option<u32>) -> Result<Vec<Table>, EngineError> {
        let g = *self.gen.lock().unwrap();
        if let Some(want) = genid {
            if want != g {
                return Err(EngineError::Nft(nft_netlink::NftError::GenerationChanged {
                    expected: want,
                }));
            }
        }
        if let Some(bad) = self.refuse_rules_in.lock().unwrap().as_deref() {
            // packed elements are refused as the same elements unpacked
            let unpacked: Vec<std::borrow::Cow<'_, Op>> = ops.iter().map(Op::unpacked).collect();
            let refused: Vec<nft_netlink::OpError> = unpacked
                .iter()
                .map(|op| &**op)
                .enumerate()
                .filter(|(_, op)| match op {
                    Op::AddRule { chain, .. } => chain.contains(bad),
                    Op::AddElements { elements, .. } => {
                        elements.iter().any(|e| key_starts_with_addr(&e.key, bad))
                    }
                    _ => false,
                })
                .map(|(i, op)| nft_netlink::OpError {
                    errno: libc::EINVAL,
                    op_index: i,
                    element: match op {
                        Op::AddElements { elements, .. } => elements
                            .iter()
                            .position(|e| key_starts_with_addr(&e.key, bad)),
                        _ => None,
                    },
                    op_text: nft_model::render::op_with(&ops[i], |_| false),
                })
                .collect();
            if !refused.is_empty() {
                return Err(EngineError::Nft(nft_netlink::NftError::Rejected(refused)));
            }
        }
        let mut next = self.tables.lock().unwrap().clone();
        ruleset::apply(&mut next, ops).map_err(|e| EngineError::Other(e.to_string()))?;
        Ok(next)
    }
}

impl NftKernel for FakeNft {
    fn generation(&mut self) -> Result<u32, EngineError> {
        self.kernel_log.lock().unwrap().push("generation");
        Ok(*self.gen.lock().unwrap())
    }
    fn commit(&mut self, ops: &[Op], genid: Option<u32>) -> Result<CommitStats, EngineError> {
        self.kernel_log.lock().unwrap().push("commit");
        let next = match self.process(ops, genid) {
            Err(e @ EngineError::Nft(nft_netlink::NftError::GenerationChanged { .. })) => {
                return Err(e)
            }
            Err(e) => {
                self.log.lock().unwrap().push(Call::CommitFailed);
                return Err(e);
            }
            Ok(next) => next,
        };
        let mut refuse = self.refuse_next.lock().unwrap();
        if *refuse > 0 {
            *refuse -= 1;
            self.log.lock().unwrap().push(Call::CommitFailed);
            return Err(EngineError::Nft(nft_netlink::NftError::BatchFailed(
                libc::EINVAL,
            )));
        }
        let mut fail = self.fail_commits.lock().unwrap();
        if *fail > 0 {
            *fail -= 1;
            self.log.lock().unwrap().push(Call::CommitFailed);
            // (not a refusal of its content: e.g. the socket failed)
            return Err(EngineError::Other("injected: the commit failed".into()));
        }
        *self.tables.lock().unwrap() = next;
        self.batches.lock().unwrap().push(ops.to_vec());
        let mut g = self.gen.lock().unwrap();
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

/// What the fake conntrack answers to one delete call (scripted, in order; when the
/// script is empty every filter is done).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtReply {
    /// An error for the whole call: ENOBUFS while receiving (messages lost).
    Enobufs,
    /// This outcome for every filter.
    Each(CleanupOutcome),
    /// The first `n` filters deleted, the others this outcome.
    FirstDone(usize, CleanupOutcome),
}

pub struct FakeCt {
    pub log: Log,
    /// Every call fails (until reset).
    pub fail: Arc<Mutex<bool>>,
    pub script: Arc<Mutex<VecDeque<CtReply>>>,
    /// Cost of a call (fixed, per filter): advances the fake clock.
    pub cost: Arc<Mutex<(Duration, Duration)>>,
    /// When each call started and how many filters it had, in order.
    pub calls: Arc<Mutex<Vec<(Instant, usize)>>>,
    pub clock: FakeClock,
}

pub fn enobufs() -> EngineError {
    EngineError::Conntrack(ct_netlink::Error::Recv {
        op: "filtered dump",
        filter: "udp".into(),
        source: std::io::Error::from_raw_os_error(libc::ENOBUFS),
    })
}

impl ConntrackKernel for FakeCt {
    fn delete(&mut self, filters: &[Filter]) -> Result<Vec<CleanupOutcome>, EngineError> {
        let (per_call, per_filter) = *self.cost.lock().unwrap();
        self.calls
            .lock()
            .unwrap()
            .push((self.clock.now(), filters.len()));
        self.clock
            .advance(per_call + per_filter * filters.len() as u32);
        if *self.fail.lock().unwrap() {
            return Err(EngineError::Other("injected conntrack failure".into()));
        }
        let done = CleanupOutcome::Deleted { entries: Some(1) };
        let outcomes: Vec<CleanupOutcome> = match self.script.lock().unwrap().pop_front() {
            None => vec![done; filters.len()],
            Some(CtReply::Enobufs) => return Err(enobufs()),
            Some(CtReply::Each(o)) => vec![o; filters.len()],
            Some(CtReply::FirstDone(n, o)) => (0..filters.len())
                .map(|i| if i < n { done } else { o })
                .collect(),
        };
        let mut l = self.log.lock().unwrap();
        for (f, o) in filters.iter().zip(&outcomes) {
            if o.done() {
                l.push(Call::Delete(*f));
            }
        }
        Ok(outcomes)
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
    pub ct_script: Arc<Mutex<VecDeque<CtReply>>>,
    pub ct_cost: Arc<Mutex<(Duration, Duration)>>,
    pub ct_calls: Arc<Mutex<Vec<(Instant, usize)>>>,
    pub foreign_after_commit: Arc<Mutex<bool>>,
    pub batches: Arc<Mutex<Vec<Vec<Op>>>>,
    pub refuse_rules_in: Arc<Mutex<Option<String>>>,
    pub refuse_next: Arc<Mutex<u32>>,
    pub kernel_log: Arc<Mutex<Vec<&'static str>>>,
    /// The watcher's subscription cannot be taken again.
    pub listen_fails: Arc<Mutex<bool>>,
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
            ct_script: Arc::default(),
            ct_cost: Arc::default(),
            ct_calls: Arc::default(),
            foreign_after_commit: Arc::default(),
            batches: Arc::default(),
            refuse_rules_in: Arc::default(),
            refuse_next: Arc::default(),
            kernel_log: Arc::default(),
            listen_fails: Arc::default(),
            clock: FakeClock(Arc::new(Mutex::new(Instant::now()))),
        }
    }
    pub fn config(&self, cleanup: bool) -> EngineConfig {
        EngineConfig {
            ruleset: ruleset::Config {
                node_name: "node-a".into(),
                families: vec!["IPv4".into()],
                cluster_cidrs: vec!["198.18.0.0/20".into()],
                ..Default::default()
            }
            .parse()
            .expect("the test configuration parses"),
            conntrack_cleanup: cleanup,
            watch_tamper: false,
            ..Default::default()
        }
    }
    pub fn nft(&self) -> FakeNft {
        FakeNft {
            log: self.log.clone(),
            tables: self.tables.clone(),
            gen: self.gen.clone(),
            fail_commits: self.fail_commits.clone(),
            dumps: self.dumps.clone(),
            foreign_after_commit: self.foreign_after_commit.clone(),
            batches: self.batches.clone(),
            refuse_rules_in: self.refuse_rules_in.clone(),
            refuse_next: self.refuse_next.clone(),
            kernel_log: self.kernel_log.clone(),
        }
    }
    /// The watcher's subscription, recording into the kernel log.
    pub fn listening(&self) -> FakeListening {
        FakeListening {
            log: self.kernel_log.clone(),
            fails: self.listen_fails.clone(),
        }
    }
    pub fn ct(&self) -> FakeCt {
        FakeCt {
            log: self.log.clone(),
            fail: self.ct_fail.clone(),
            script: self.ct_script.clone(),
            cost: self.ct_cost.clone(),
            calls: self.ct_calls.clone(),
            clock: self.clock.clone(),
        }
    }
    pub fn engine(&self, cleanup: bool) -> Engine<FakeNft, FakeCt, FakeClock> {
        self.engine_with(self.config(cleanup))
    }
    pub fn engine_with(&self, cfg: EngineConfig) -> Engine<FakeNft, FakeCt, FakeClock> {
        Engine::new(cfg, self.nft(), self.ct(), self.clock.clone())
    }
    /// The cleanup targets recorded in the (fake) kernel's tables.
    pub fn recorded(&self) -> Vec<sync_engine::targets::Target> {
        let mut v = sync_engine::pending::recorded_in(self.tables.lock().unwrap().iter());
        v.sort();
        v
    }
    /// The batches committed since the last call.
    pub fn take_batches(&self) -> Vec<Vec<Op>> {
        std::mem::take(&mut *self.batches.lock().unwrap())
    }
    /// Script the next conntrack replies.
    pub fn ct_replies(&self, r: &[CtReply]) {
        self.ct_script.lock().unwrap().extend(r.iter().copied());
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
        Filter::udp_unnated(ip(CLUSTER_IP), 53),
        Filter::udp_unnated(ip(EXTERNAL_IP), 53),
        Filter::udp_unnated(ip(LB_IP), 53),
        Filter::udp_unnated_nodeport(CtFamily::V4, NODE_PORT),
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

/// Whether a batch touches only the cleanup sets (element-only bookkeeping).
pub fn only_cleanup_sets(ops: &[Op]) -> bool {
    ops.iter().all(|op| match op {
        Op::AddElements { set, .. }
        | Op::DeleteElements { set, .. }
        | Op::DeleteSet { set, .. } => set.starts_with("cleanup-"),
        Op::AddSet { set, .. } => set.name.starts_with("cleanup-"),
        _ => false,
    })
}

/// The cleanup-set elements a batch adds.
pub fn recorded_by(ops: &[Op]) -> usize {
    ops.iter()
        .map(|op| match op {
            Op::AddElements { set, elements, .. } if set.starts_with("cleanup-") => elements.len(),
            _ => 0,
        })
        .sum()
}

/// Run the loop the way `sync_engine::run` does, on the fake clock: deliver each event
/// at its time, do the work that is due, otherwise advance the clock to whatever comes
/// first. Returns the (time, work) of every step.
pub fn drive(
    e: &mut Engine<FakeNft, FakeCt, FakeClock>,
    w: &World,
    end: Instant,
    events: Vec<(Instant, Event)>,
) -> Vec<(Instant, Work)> {
    let mut events: VecDeque<(Instant, Event)> = events.into();
    let mut steps = Vec::new();
    for _ in 0..1_000_000 {
        let now = w.clock.now();
        while events.front().is_some_and(|(t, _)| *t <= now) {
            let (_, ev) = events.pop_front().unwrap();
            e.handle(ev);
        }
        if now >= end {
            return steps;
        }
        if let Some(work) = e.step() {
            steps.push((now, work));
            continue;
        }
        let next = [
            e.next_work().map(|(t, _)| t),
            events.front().map(|(t, _)| *t),
            Some(end),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap();
        assert!(next > now, "step did nothing although work was due");
        w.clock.advance(next - now);
    }
    panic!("the loop did not reach its end");
}

/// A watcher's subscription (`sync_engine::Listening`): `drop` and `listen` go into the
/// kernel log; taking it again fails while `fails` is set.
pub struct FakeListening {
    pub log: Arc<Mutex<Vec<&'static str>>>,
    pub fails: Arc<Mutex<bool>>,
}

impl Listening for FakeListening {
    fn set(&self, on: bool) -> std::io::Result<()> {
        if on && *self.fails.lock().unwrap() {
            return Err(std::io::Error::from_raw_os_error(libc::ENOMEM));
        }
        self.log
            .lock()
            .unwrap()
            .push(if on { "listen" } else { "drop" });
        Ok(())
    }
}
