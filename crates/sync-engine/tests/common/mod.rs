//! The recording fake kernel and fake clock of the engine tests: every commit and every
//! conntrack delete is recorded in order, so the ordering rule is checked exactly.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ct_netlink::Flow;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use nft_model::{Op, Table, TableRef};
use serde_json::json;
use sync_engine::cleanup::{Removal, Scope};
use sync_engine::*;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Commit {
        ops: usize,
    },
    CommitFailed,
    /// A listing of these scopes.
    List(Vec<Scope>),
    /// A flow deleted.
    Delete(Flow),
}

pub type Log = Arc<Mutex<Vec<Call>>>;

pub struct FakeNft {
    pub log: Log,
    pub tables: Arc<Mutex<Vec<Table>>>,
    pub gen: Arc<Mutex<u32>>,
    /// The next commits fail (a transport failure, not a refusal of their content).
    pub fail_commits: Arc<Mutex<u32>>,
    /// The next commits are applied, but their answer is lost (`OutcomeUnknown`).
    pub lose_answers: Arc<Mutex<u32>>,
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
    pub neighbour: Neighbour,
    /// `KUBE-FORWARD` batches the next `ensure_forward` commits (each moves the
    /// generation), and the calls so far.
    pub forward_missing: Arc<Mutex<u32>>,
    pub forward_calls: Arc<Mutex<u32>>,
}

/// Another program committing to a table of its own (not ours): what the watcher hears
/// of it goes into `heard` (when `heard_too`).
#[derive(Clone, Default)]
pub struct Neighbour {
    pub heard: Arc<Heard>,
    /// Its commits are heard (false: the watcher missed them, e.g. not listening).
    pub heard_too: Arc<Mutex<bool>>,
    /// It commits right before each of our next commits (after we read the generation):
    /// our batch's generation guard fails.
    pub before_commit: Arc<Mutex<u32>>,
    /// It commits right after our next commits.
    pub after_commit: Arc<Mutex<u32>>,
    /// It commits during each of our next dumps.
    pub during_dump: Arc<Mutex<u32>>,
}

impl Neighbour {
    /// One commit of the neighbour's, on top of generation `gen`.
    pub fn commit(&self, gen: &Mutex<u32>) {
        let mut g = gen.lock().unwrap();
        *g = next_generation(*g);
        if *self.heard_too.lock().unwrap() {
            self.heard.record(&watch::Poll {
                heard: vec![watch::Heard {
                    genid: *g,
                    ours: false,
                }],
                ..Default::default()
            });
        }
    }
    fn take(n: &Mutex<u32>) -> bool {
        let mut n = n.lock().unwrap();
        let due = *n > 0;
        *n = n.saturating_sub(1);
        due
    }
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
        if Neighbour::take(&self.neighbour.before_commit) {
            self.neighbour.commit(&self.gen);
        }
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
        drop(g);
        if Neighbour::take(&self.neighbour.after_commit) {
            self.neighbour.commit(&self.gen);
        }
        self.log
            .lock()
            .unwrap()
            .push(Call::Commit { ops: ops.len() });
        let mut lose = self.lose_answers.lock().unwrap();
        if *lose > 0 {
            *lose -= 1;
            return Err(EngineError::Nft(nft_netlink::NftError::OutcomeUnknown));
        }
        Ok(CommitStats {
            ops: ops.len(),
            bytes: ops.len() * 100,
        })
    }
    /// As `nft_netlink::Nft::dump_table_judged`: a dump the neighbour committed during
    /// is taken when the judge says only other tables changed, else tried again (8 tries).
    fn dump_table(
        &mut self,
        r: &TableRef,
        others_only: &mut dyn FnMut(u32, u32) -> bool,
    ) -> Result<Option<Table>, EngineError> {
        for _ in 0..8 {
            *self.dumps.lock().unwrap() += 1;
            let before = *self.gen.lock().unwrap();
            if Neighbour::take(&self.neighbour.during_dump) {
                self.neighbour.commit(&self.gen);
            }
            let after = *self.gen.lock().unwrap();
            if before == after || others_only(before, after) {
                return Ok(self
                    .tables
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|t| t.family == r.family && t.name == r.name)
                    .cloned());
            }
        }
        Err(EngineError::Nft(nft_netlink::NftError::DumpUnstable {
            what: format!("table {}", r.name),
            tries: 8,
        }))
    }
    fn ensure_forward(
        &mut self,
        _families: &[nft_model::Family],
        _cfg: nft_netlink::forward::ForwardConfig,
    ) -> Result<Vec<u32>, EngineError> {
        *self.forward_calls.lock().unwrap() += 1;
        let n = std::mem::take(&mut *self.forward_missing.lock().unwrap());
        let mut g = self.gen.lock().unwrap();
        let mut guards = Vec::new();
        for _ in 0..n {
            guards.push(*g);
            *g = next_generation(*g);
        }
        Ok(guards)
    }
}

/// What the fake conntrack answers to one call (scripted, in order; when the script is
/// empty every call succeeds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtReply {
    /// The call succeeds.
    Ok,
    /// An error for the whole call: ENOBUFS while receiving (messages lost).
    Enobufs,
    /// Every delete of the call fails (EPERM); a listing is incomplete.
    Fail,
    /// The first `n` deletes of the call succeed, the others fail.
    FirstDone(usize),
}

/// The fake conntrack table: its flows, and what each call did.
pub struct FakeCt {
    pub log: Log,
    /// The kernel's conntrack table.
    pub table: Arc<Mutex<Vec<Flow>>>,
    /// Every call fails (until reset).
    pub fail: Arc<Mutex<bool>>,
    pub script: Arc<Mutex<VecDeque<CtReply>>>,
    /// Cost of a call (fixed, per flow or scope): advances the fake clock.
    pub cost: Arc<Mutex<(Duration, Duration)>>,
    /// When each call started and how many flows or scopes it had, in order.
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

fn in_scope(f: &Flow, s: &Scope) -> bool {
    match *s {
        Scope::Dest(ruleset::UdpDest::Addr { addr, port }) => f.dst == addr && f.dport == port,
        Scope::Dest(ruleset::UdpDest::NodePort { v6, port }) => {
            f.dport == port && f.dst.is_ipv6() == v6
        }
        Scope::All(fam) => (fam == kube_model::IpFamily::V6) == f.dst.is_ipv6(),
    }
}

/// What a kernel-filtered UDP listing returns: UDP flows only.
fn kernel_lists(f: &Flow, s: &Scope) -> bool {
    f.proto == 17 && in_scope(f, s)
}

impl FakeCt {
    /// The start of a call: its cost, its record, a scripted reply.
    fn call(&mut self, n: usize) -> Result<Option<CtReply>, EngineError> {
        let (per_call, per_item) = *self.cost.lock().unwrap();
        self.calls.lock().unwrap().push((self.clock.now(), n));
        self.clock.advance(per_call + per_item * n as u32);
        if *self.fail.lock().unwrap() {
            return Err(EngineError::Other("injected conntrack failure".into()));
        }
        match self.script.lock().unwrap().pop_front() {
            Some(CtReply::Enobufs) => Err(enobufs()),
            r => Ok(r),
        }
    }
}

impl ConntrackKernel for FakeCt {
    fn list_udp(
        &mut self,
        family: kube_model::IpFamily,
        out: &mut Vec<Flow>,
    ) -> Result<bool, EngineError> {
        let r = self.call(1)?;
        self.log
            .lock()
            .unwrap()
            .push(Call::List(vec![Scope::All(family)]));
        out.extend(
            self.table
                .lock()
                .unwrap()
                .iter()
                .filter(|f| kernel_lists(f, &Scope::All(family))),
        );
        Ok(r != Some(CtReply::Fail))
    }

    fn list(&mut self, scopes: &[Scope], out: &mut Vec<Flow>) -> Result<Vec<bool>, EngineError> {
        let r = self.call(scopes.len())?;
        self.log.lock().unwrap().push(Call::List(scopes.to_vec()));
        let t = self.table.lock().unwrap();
        out.extend(
            t.iter()
                .filter(|f| scopes.iter().any(|s| kernel_lists(f, s))),
        );
        Ok(vec![r != Some(CtReply::Fail); scopes.len()])
    }

    fn delete(&mut self, flows: &[Flow]) -> Result<Vec<Removal>, EngineError> {
        let r = self.call(flows.len())?;
        let ok = match r {
            Some(CtReply::Fail) => 0,
            Some(CtReply::FirstDone(n)) => n,
            _ => usize::MAX,
        };
        let mut t = self.table.lock().unwrap();
        let mut l = self.log.lock().unwrap();
        Ok(flows
            .iter()
            .enumerate()
            .map(|(i, f)| {
                if i >= ok {
                    return Removal::Failed;
                }
                match t.iter().position(|x| x == f) {
                    Some(k) => {
                        t.remove(k);
                        l.push(Call::Delete(*f));
                        Removal::Deleted
                    }
                    None => Removal::AlreadyGone,
                }
            })
            .collect())
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
    pub lose_answers: Arc<Mutex<u32>>,
    pub dumps: Arc<Mutex<u32>>,
    pub ct_table: Arc<Mutex<Vec<Flow>>>,
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
    pub neighbour: Neighbour,
    pub forward_missing: Arc<Mutex<u32>>,
    pub forward_calls: Arc<Mutex<u32>>,
    pub clock: FakeClock,
}

impl World {
    pub fn new() -> World {
        World {
            log: Arc::default(),
            tables: Arc::default(),
            gen: Arc::new(Mutex::new(7)),
            fail_commits: Arc::default(),
            lose_answers: Arc::default(),
            dumps: Arc::default(),
            ct_table: Arc::default(),
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
            neighbour: Neighbour::default(),
            forward_missing: Arc::default(),
            forward_calls: Arc::default(),
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
            lose_answers: self.lose_answers.clone(),
            dumps: self.dumps.clone(),
            foreign_after_commit: self.foreign_after_commit.clone(),
            batches: self.batches.clone(),
            refuse_rules_in: self.refuse_rules_in.clone(),
            refuse_next: self.refuse_next.clone(),
            kernel_log: self.kernel_log.clone(),
            neighbour: self.neighbour.clone(),
            forward_missing: self.forward_missing.clone(),
            forward_calls: self.forward_calls.clone(),
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
            table: self.ct_table.clone(),
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
    /// Put flows into the (fake) conntrack table.
    pub fn flows(&self, flows: &[Flow]) {
        self.ct_table.lock().unwrap().extend(flows.iter().copied());
    }
    /// The (fake) conntrack table now.
    pub fn table(&self) -> Vec<Flow> {
        self.ct_table.lock().unwrap().clone()
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

pub const NODE_IP: &str = "198.18.5.1";
pub const CLIENT: &str = "198.18.9.9";

/// A UDP flow from CLIENT (source port `sport`) to `dst`:`dport`, its reply from
/// `reply`:`rport` (DNAT'ed there, or not when it is the destination itself).
pub fn flow(sport: u16, dst: &str, dport: u16, reply: &str, rport: u16) -> Flow {
    Flow {
        proto: 17,
        src: ip(CLIENT),
        dst: ip(dst),
        sport,
        dport,
        reply_src: ip(reply),
        reply_sport: rport,
        zone: 0,
        id: Some(u32::from(sport)),
    }
}

/// A UDP flow to `dst`:`dport` that was not DNAT'ed.
pub fn unnated(sport: u16, dst: &str, dport: u16) -> Flow {
    flow(sport, dst, dport, dst, dport)
}

/// The node, with NODE_IP (NodePorts are served on the node's primary IP).
pub fn node() -> k8s_openapi::api::core::v1::Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-a"},
        "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP}]}
    }))
    .unwrap()
}

/// TestProxierDeleteNodePortStaleUDP's stale entries: packets to the ClusterIP, the
/// ExternalIP, the LoadBalancer IP and the NodePort (on the node's address) that went
/// nowhere while the service had no endpoint.
pub fn four_stale() -> Vec<Flow> {
    vec![
        unnated(1001, CLUSTER_IP, 53),
        unnated(1002, EXTERNAL_IP, 53),
        unnated(1003, LB_IP, 53),
        unnated(1004, NODE_IP, NODE_PORT),
    ]
}

/// Flows no cleanup may touch: to another address, to the NodePort number on another
/// host, and TCP to the ClusterIP.
pub fn bystanders() -> Vec<Flow> {
    let mut tcp = unnated(2003, CLUSTER_IP, 53);
    tcp.proto = 6;
    vec![
        unnated(2001, "198.18.100.99", 53),
        unnated(2002, "198.18.7.7", NODE_PORT),
        tcp,
    ]
}

pub fn deletes(calls: &[Call]) -> Vec<Flow> {
    let mut v: Vec<Flow> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Delete(f) => Some(*f),
            _ => None,
        })
        .collect();
    v.sort_by_key(|f| (f.sport, f.dport));
    v
}

pub fn sorted(mut v: Vec<Flow>) -> Vec<Flow> {
    v.sort_by_key(|f| (f.sport, f.dport));
    v
}

/// Every delete is recorded after a successful commit (never right after a failed one;
/// a sync with nothing to commit may delete what the state already makes stale).
pub fn assert_deletes_after_commit(calls: &[Call]) {
    for (i, c) in calls.iter().enumerate() {
        if !matches!(c, Call::Delete(_)) {
            continue;
        }
        let last = calls[..i]
            .iter()
            .rev()
            .find(|c| matches!(c, Call::Commit { .. } | Call::CommitFailed));
        assert!(
            !matches!(last, Some(Call::CommitFailed)),
            "deletes must follow a successful commit: {calls:?}"
        );
    }
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
