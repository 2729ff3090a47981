//! The TCP probes of `churn-prod`: event->first packet per change kind under the churn
//! trace, seen from the client namespace like the rest. A TCP probe service
//! (198.18.240.1:80, a few endpoints of the endpoints namespace answering TCP 8080 with
//! the address reached) that a prober keeps opening new connections to (`probe.rs`),
//! changed in place of the trace's change at a steady pace through the kinds of the
//! trace in turn (a rolling update's surge, its terminating endpoints removed, scale
//! up, scale down, one endpoint removed as by a node drain); and, between those, probe
//! services created (their slice, then the Service, timed, as the trace does) whose
//! endpoint is in the endpoints namespace, each probed from just before its creation
//! (attempts given up after 3 ms, as `change --shape prod` does), and deleted at the
//! next such step. After the run each change's first packet is read from its prober's
//! record: for an endpoint added (or a service created), the start of the first attempt
//! answered by it; for endpoints removed (or a service deleted), the start of the first
//! attempt after which none of them (no endpoint at all) answers again, proven by at
//! least 100 ms of attempts after it. A record is read from the change's event up to the
//! next probe change touching the addresses it reads.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use netns_tests::bench_cluster::who;
use netns_tests::Netns;
use serde_json::{json, Value};

use super::churn_attr::{recent, Attr};
use super::churn_trace::{Change, Kind, Op, Witness};
use super::prod::probe_service;
use crate::probe::{first_after_none, Probe, Shot};
use crate::report::*;

pub const TCP_VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 240, 1);
const TCP_NAME: &str = "probe-tcp";
/// The TCP probe service's endpoint addresses, 198.18.251.202 - .249, taken least
/// recently used first.
const POOL: u8 = 48;
/// The created probe services' endpoints: 198.18.251.250 - .254 in turn.
const NEW_EPS: u8 = 5;
/// The TCP probe service's endpoints at the start.
const START: usize = 4;
/// Its endpoints after a scale up (from 3 or 4: x2 - x2.7); a scale down halves them.
const UP: usize = 8;
/// The TCP probe service's changes, in turn.
const CYCLE: [Kind; 5] = [
    Kind::RolloutSurge,
    Kind::RolloutRemove,
    Kind::ScaleUp,
    Kind::ScaleDown,
    Kind::Drain,
];
/// The kinds measured, in the report's order: the trace's, without the UDP wave's.
fn kinds() -> impl Iterator<Item = Kind> {
    Kind::ALL
        .into_iter()
        .filter(|k| !matches!(k, Kind::UdpSurge | Kind::UdpRemove))
}
/// A deleted probe service's prober stops this long after the deletion was applied.
const LINGER: Duration = Duration::from_secs(10);
/// An attempt to a service not created yet (or deleted) waits for its timeout: the
/// node's ICMP unreachable comes about once a second (`probe.rs`).
const SHORT: Duration = Duration::from_millis(3);
/// A removal is proven by this much of attempts after the last answer.
const SETTLE: Duration = Duration::from_millis(100);

fn pool_addr(k: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 251, 202 + k)
}

/// Every address the probes' endpoints answer at (for the endpoints namespace).
pub fn endpoint_addrs() -> impl Iterator<Item = Ipv4Addr> {
    (0..POOL + NEW_EPS).map(pool_addr)
}

fn slice(svc: &str, eps: &[(Ipv4Addr, bool)]) -> Value {
    let e: Vec<Value> = eps
        .iter()
        .map(|(a, term)| {
            json!({"addresses": [a.to_string()],
                   "conditions": {"ready": !term, "serving": true, "terminating": term},
                   "nodeName": "node-1",
                   "targetRef": {"kind": "Pod", "namespace": "bench", "name": format!("{svc}-{a}")}})
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{svc}-0"), "namespace": "bench", "generateName": format!("{svc}-"),
                     "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "ports": [{"name": "p", "protocol": "TCP", "port": 8080}],
        "endpoints": e
    })
}

/// How a change shows to the client.
#[derive(Debug, Clone, PartialEq)]
enum Show {
    /// The first attempt answered by one of these.
    Reach(Vec<String>),
    /// The first attempt after which none of these answers again (`None`: nothing
    /// answers: the service is gone).
    Leave(Option<Vec<String>>),
}

/// A probe change to read: its record in the run's list of changes, its prober.
#[derive(Debug, Clone)]
struct Measure {
    rec: usize,
    kind: Kind,
    target: usize,
    show: Show,
    /// What it adds or removes; `watched`: what its first packet reads (the record is
    /// read up to the next change on the target touching one of those).
    touched: Vec<Ipv4Addr>,
    watched: Vec<Ipv4Addr>,
}

struct Target {
    probe: Option<Probe>,
    shots: Vec<Shot>,
    deleted: Option<Instant>,
}

pub struct Probes {
    /// The TCP probe service's endpoints (address, terminating).
    eps: Vec<(Ipv4Addr, bool)>,
    free: VecDeque<Ipv4Addr>,
    step: u64,
    /// 0: the TCP probe service; then one per probe service created.
    targets: Vec<Target>,
    measures: Vec<Measure>,
    /// Created probe services alive (target, number).
    alive: VecDeque<(usize, u32)>,
    made: u32,
    end: Instant,
}

fn texts(a: &[Ipv4Addr]) -> Vec<String> {
    a.iter().map(Ipv4Addr::to_string).collect()
}

impl Probes {
    /// The probes' state, before `start` (which sets how long the probers run).
    pub fn new() -> Probes {
        let mut free: VecDeque<Ipv4Addr> = (0..POOL).map(pool_addr).collect();
        let eps = free.drain(..START).map(|a| (a, false)).collect();
        Probes {
            eps,
            free,
            step: 0,
            targets: Vec::new(),
            measures: Vec::new(),
            alive: VecDeque::new(),
            made: 0,
            end: Instant::now(),
        }
    }

    /// The TCP probe service and its slice, for the API double before the start.
    pub fn objects(&self) -> [Value; 2] {
        [
            probe_service(TCP_NAME, &TCP_VIP.to_string(), "TCP", 80),
            slice(TCP_NAME, &self.eps),
        ]
    }

    fn limit(&self) -> Duration {
        self.end.saturating_duration_since(Instant::now())
    }

    /// Wait (up to 30 s) for the TCP probe service to answer, then start its prober;
    /// whether it answered. The probers run at most until `end`: set here, after the
    /// cold start, which takes minutes on the production shape at 50k.
    pub fn start(&mut self, client: &Netns, end: Instant) -> bool {
        self.end = end;
        let dst = SocketAddr::new(TCP_VIP.into(), 80);
        let eps = texts(&self.eps.iter().map(|e| e.0).collect::<Vec<_>>());
        let ok = client.run(|| {
            netns_tests::wait_until(Duration::from_secs(30), || {
                who(dst).is_some_and(|w| eps.contains(&w))
            })
        });
        self.targets.push(Target {
            probe: Some(Probe::tcp(client, dst, self.limit())),
            shots: Vec::new(),
            deleted: None,
        });
        ok
    }

    /// The next probe change (to be the run's change number `rec`): the TCP probe
    /// service's next kind and a probe service created or deleted, alternately. A
    /// creation starts its prober first.
    pub fn next(&mut self, client: &Netns, rec: usize) -> Change {
        let s = self.step;
        self.step += 1;
        if s.is_multiple_of(2) {
            self.tcp_change(CYCLE[(s / 2 % CYCLE.len() as u64) as usize], rec)
        } else if (s / 2).is_multiple_of(2) || self.alive.is_empty() {
            self.create(client, rec)
        } else {
            self.delete(rec)
        }
    }

    fn take_free(&mut self, n: usize) -> Vec<Ipv4Addr> {
        (0..n).filter_map(|_| self.free.pop_front()).collect()
    }

    fn tcp_change(&mut self, kind: Kind, rec: usize) -> Change {
        let ready: Vec<usize> = (0..self.eps.len()).filter(|&k| !self.eps[k].1).collect();
        let (added, removed, gone_now): (Vec<Ipv4Addr>, Vec<Ipv4Addr>, Vec<Ipv4Addr>) = match kind {
            Kind::RolloutSurge => {
                // a quarter of the ready ones terminating, as many new ready ones
                let wave = ready.len().div_ceil(4).max(1);
                let old: Vec<Ipv4Addr> = ready[..wave.min(ready.len())]
                    .iter()
                    .map(|&k| {
                        self.eps[k].1 = true;
                        self.eps[k].0
                    })
                    .collect();
                (self.take_free(wave), vec![], old)
            }
            Kind::RolloutRemove => {
                let t: Vec<Ipv4Addr> = self.eps.iter().filter(|e| e.1).map(|e| e.0).collect();
                (vec![], t, vec![])
            }
            Kind::ScaleUp => (
                self.take_free(UP.max(ready.len() + 1) - ready.len()),
                vec![],
                vec![],
            ),
            Kind::ScaleDown => {
                let keep = (ready.len() / 2).max(1);
                let gone = ready.iter().skip(keep).map(|&k| self.eps[k].0).collect();
                (vec![], gone, vec![])
            }
            // a node drain's effect: one endpoint removed (the oldest)
            _ => (
                vec![],
                ready
                    .iter()
                    .take(usize::from(ready.len() > 1))
                    .map(|&k| self.eps[k].0)
                    .collect(),
                vec![],
            ),
        };
        self.eps.retain(|e| !removed.contains(&e.0));
        self.eps.extend(added.iter().map(|a| (*a, false)));
        self.free.extend(removed.iter().copied());
        let witness = match (added.first(), kind) {
            (Some(a), _) => Some(Witness {
                add: true,
                addr: *a,
            }),
            // terminating endpoints are out of the rules already: nothing to see
            (None, Kind::RolloutRemove) => None,
            (None, _) => removed.first().map(|a| Witness {
                add: false,
                addr: *a,
            }),
        };
        let (show, watched) = if added.is_empty() {
            (Show::Leave(Some(texts(&removed))), removed.clone())
        } else {
            (Show::Reach(texts(&added)), added.clone())
        };
        self.measures.push(Measure {
            rec,
            kind,
            target: 0,
            show,
            touched: added
                .iter()
                .chain(&removed)
                .chain(&gone_now)
                .copied()
                .collect(),
            watched,
        });
        Change {
            kind,
            ops: vec![Op::Apply(slice(TCP_NAME, &self.eps))],
            timed: 0,
            witness,
            removed,
            added,
        }
    }

    fn create(&mut self, client: &Netns, rec: usize) -> Change {
        let k = self.made;
        self.made += 1;
        let name = format!("probe-new-{k}");
        let vip = Ipv4Addr::new(198, 18, 241, 1 + (k % 254) as u8);
        let ep = pool_addr(POOL + (k % u32::from(NEW_EPS)) as u8);
        let dst = SocketAddr::new(vip.into(), 80);
        self.targets.push(Target {
            probe: Some(Probe::tcp_within(client, dst, self.limit(), SHORT)),
            shots: Vec::new(),
            deleted: None,
        });
        let target = self.targets.len() - 1;
        self.alive.push_back((target, k));
        self.measures.push(Measure {
            rec,
            kind: Kind::ServiceCreated,
            target,
            show: Show::Reach(vec![ep.to_string()]),
            touched: vec![vip],
            watched: vec![vip],
        });
        Change {
            kind: Kind::ServiceCreated,
            ops: vec![
                Op::Apply(slice(&name, &[(ep, false)])),
                Op::Apply(probe_service(&name, &vip.to_string(), "TCP", 80)),
            ],
            timed: 1,
            witness: Some(Witness {
                add: true,
                addr: vip,
            }),
            removed: vec![],
            added: vec![ep, vip],
        }
    }

    fn delete(&mut self, rec: usize) -> Change {
        let (target, k) = self.alive.pop_front().expect("a probe service alive");
        let name = format!("probe-new-{k}");
        let vip = Ipv4Addr::new(198, 18, 241, 1 + (k % 254) as u8);
        self.targets[target].deleted = Some(Instant::now());
        self.measures.push(Measure {
            rec,
            kind: Kind::ServiceDeleted,
            target,
            show: Show::Leave(None),
            touched: vec![vip],
            watched: vec![vip],
        });
        Change {
            kind: Kind::ServiceDeleted,
            ops: vec![
                Op::Delete {
                    kind: "Service",
                    ns: "bench".into(),
                    name: name.clone(),
                },
                Op::Delete {
                    kind: "EndpointSlice",
                    ns: "bench".into(),
                    name: format!("{name}-0"),
                },
            ],
            timed: 0,
            witness: Some(Witness {
                add: false,
                addr: vip,
            }),
            removed: vec![vip],
            added: vec![],
        }
    }

    /// Stop the probers of services deleted more than `LINGER` ago (few run at once).
    pub fn tick(&mut self) {
        for t in &mut self.targets {
            if t.deleted.is_some_and(|d| d.elapsed() >= LINGER) {
                if let Some(p) = t.probe.take() {
                    t.shots = p.finish();
                }
            }
        }
    }

    /// Stop every prober.
    pub fn finish(&mut self) {
        for t in &mut self.targets {
            if let Some(p) = t.probe.take() {
                t.shots = p.finish();
            }
        }
    }

    /// Print per kind event->first packet beside event->kernel of the same changes
    /// (`sent`, `attr`: per change of the run; `commits`: the transactions' NEWGENs).
    pub fn report(&self, sent: &[Option<Instant>], attr: &[Attr], commits: &[Instant]) {
        let fps = first_packets(&self.measures, &self.targets, sent);
        println!("   event->first packet per kind (the TCP probes: the probe service {TCP_VIP}:80 changed in place of the trace's change, through rolling surge, terminating removed, scale up, scale down, one endpoint removed (drain), and probe services created and deleted, in turn), ms p50 / p99 / max (nearest rank), beside event->kernel of the same changes; targets as event->kernel: a change arriving >= minSyncPeriod after the last transaction: p99 <= 5 ms; the others (held by minSyncPeriod): <= 1020 ms");
        for kind in kinds() {
            // per class (after minSyncPeriod, held): kernel, first packet, without one
            let mut c: [(Vec<f64>, Vec<f64>, usize); 2] = Default::default();
            let (mut unseen, mut no_event) = (0, 0);
            for (m, fp) in self
                .measures
                .iter()
                .zip(&fps)
                .filter(|(m, _)| m.kind == kind)
            {
                let Some(s) = sent[m.rec] else {
                    no_event += 1;
                    continue;
                };
                let (kernel, held) = match attr[m.rec] {
                    Attr::Seen { kernel, held } => (Some(kernel), held),
                    Attr::Unseen | Attr::Ambiguous => {
                        unseen += 1;
                        (None, recent(commits, s))
                    }
                    Attr::Blind => (None, recent(commits, s)),
                };
                let e = &mut c[usize::from(held)];
                e.0.extend(kernel);
                match fp {
                    Some(f) => e.1.push(*f),
                    None => e.2 += 1,
                }
            }
            let n = c[0].1.len() + c[0].2 + c[1].1.len() + c[1].2;
            let class = |(k, f, without): &(Vec<f64>, Vec<f64>, usize), held: bool| {
                let (_, f99, fmax, cnt) = stats(f.clone());
                let ok = without == &0 && if held { fmax <= 1020.0 } else { f99 <= 5.0 };
                format!(
                    "{:<3} kernel {}  first packet {}{} ({})",
                    cnt + without,
                    trio(k),
                    trio(f),
                    if *without > 0 {
                        format!(" ({without} without)")
                    } else {
                        String::new()
                    },
                    if cnt + without == 0 { "-" } else { verdict(ok) }
                )
            };
            println!(
                "   {:<36} n={n:<4} after minSyncPeriod: {}  held: {}; {unseen} not seen in the kernel (or not attributable), {no_event} without an event time",
                kind.name(),
                class(&c[0], false),
                class(&c[1], true),
            );
        }
        let (mut tried, mut answered) = ([0usize; 2], [0usize; 2]);
        for (k, t) in self.targets.iter().enumerate() {
            tried[usize::from(k > 0)] += t.shots.len();
            answered[usize::from(k > 0)] += t.shots.iter().filter(|s| s.1.is_some()).count();
        }
        // the resolution: how far apart the probe service's attempts started
        let starts: Vec<Instant> = self
            .targets
            .first()
            .map_or(vec![], |t| t.shots.iter().map(|s| s.0).collect());
        let gaps: Vec<f64> = starts.windows(2).map(|w| ms(w[1] - w[0])).collect();
        let (g50, g99, gmax, _) = stats(gaps);
        println!(
            "   TCP probers: the probe service {} of {} connections answered (attempts started {g50:.2} / {g99:.2} / {gmax:.2} ms apart, p50 / p99 / max); {} probe services created, {} of {} connections to them answered; without a first packet: an endpoint added (service created) that never answered, or a removal not proven by {} ms of attempts after it",
            answered[0],
            tried[0],
            self.made,
            answered[1],
            tried[1],
            SETTLE.as_millis()
        );
    }
}

/// p50 / p99 / max, or "-".
fn trio(v: &[f64]) -> String {
    if v.is_empty() {
        return format!("{:>25}", "-");
    }
    let (p50, p99, max, _) = stats(v.to_vec());
    format!("{p50:7.2} / {p99:7.2} / {max:7.2}")
}

/// Each measure's event->first packet (ms), read from its target's record between its
/// event and the next probe change on that target touching what it reads.
fn first_packets(
    measures: &[Measure],
    targets: &[Target],
    sent: &[Option<Instant>],
) -> Vec<Option<f64>> {
    measures
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let s = sent[m.rec]?;
            let end = measures[i + 1..]
                .iter()
                .filter(|n| n.target == m.target && n.touched.iter().any(|a| m.watched.contains(a)))
                .find_map(|n| sent[n.rec].filter(|t| *t > s));
            let shots = &targets.get(m.target)?.shots;
            let hi = end.map_or(shots.len(), |e| shots.partition_point(|x| x.0 < e));
            let shots = &shots[..hi];
            let at = match &m.show {
                Show::Reach(who) => shots
                    .iter()
                    .find(|(t, w)| *t >= s && w.as_ref().is_some_and(|w| who.contains(w)))
                    .map(|x| x.0),
                Show::Leave(gone) => first_after_none(
                    shots,
                    s,
                    |w| match (gone, w) {
                        (Some(g), Some(w)) => g.iter().any(|g| g == w),
                        (None, w) => w.is_some(),
                        (Some(_), None) => false,
                    },
                    SETTLE,
                ),
            }?;
            Some(ms(at - s))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(c: &Change) -> Vec<(String, bool)> {
        let Op::Apply(v) = &c.ops[0] else { panic!() };
        v["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["addresses"][0].as_str().unwrap().to_string(),
                    e["conditions"]["terminating"] == true,
                )
            })
            .collect()
    }

    #[test]
    fn the_probe_service_cycles_through_the_kinds_and_stays_small() {
        let mut p = Probes::new();
        let mut sizes = Vec::new();
        for k in 0..20 {
            let c = p.tcp_change(CYCLE[k % 5], k);
            let eps = addrs(&c);
            sizes.push(eps.iter().filter(|e| !e.1).count());
            match c.kind {
                Kind::RolloutSurge => {
                    assert!(eps.iter().any(|e| e.1));
                    assert_eq!(c.witness.map(|w| w.add), Some(true));
                }
                Kind::RolloutRemove => {
                    assert!(eps.iter().all(|e| !e.1) && !c.removed.is_empty());
                    assert_eq!(c.witness, None);
                }
                Kind::ScaleUp => assert_eq!(eps.len(), UP),
                _ => {
                    assert_eq!(c.witness.map(|w| w.add), Some(false));
                    assert!(!c.removed.is_empty());
                }
            }
            // an address added is one not in use
            for a in &c.added {
                assert_eq!(eps.iter().filter(|e| e.0 == a.to_string()).count(), 1);
            }
        }
        // up to 8, down to 4, one drained: 3, and so on
        assert_eq!(&sizes[5..10], &[3, 3, 8, 4, 3]);
        assert_eq!(&sizes[10..15], &sizes[5..10]);
    }

    #[test]
    fn first_packets_are_read_within_the_window_of_their_addresses() {
        let t0 = Instant::now();
        let t = |ms| t0 + Duration::from_millis(ms);
        let s = |x: &str| Some(x.to_string());
        let m = |rec, show, touched: Vec<Ipv4Addr>| Measure {
            rec,
            kind: Kind::ScaleUp,
            target: 0,
            show,
            touched: touched.clone(),
            watched: touched,
        };
        let (a, b) = (pool_addr(0), pool_addr(1));
        let measures = vec![
            m(0, Show::Reach(vec![a.to_string()]), vec![a]),
            m(1, Show::Leave(Some(vec![a.to_string()])), vec![a]),
            m(2, Show::Reach(vec![b.to_string()]), vec![b]),
        ];
        let mut shots: Vec<Shot> = vec![(t(0), s("x")), (t(3), s("x")), (t(4), s(&a.to_string()))];
        shots.extend((5..300).map(|k| (t(k), s("x"))));
        // b answers only after a's removal came: its window is its own
        shots.push((t(400), s(&b.to_string())));
        let targets = vec![Target {
            probe: None,
            shots,
            deleted: None,
        }];
        let sent = vec![Some(t(1)), Some(t(10)), Some(t(2))];
        let fp = first_packets(&measures, &targets, &sent);
        assert_eq!(fp[0], Some(3.0));
        assert_eq!(fp[1], Some(0.0));
        assert_eq!(fp[2], Some(398.0));
        // a removal without 100 ms of attempts after it is not proven
        let mut targets = targets;
        targets[0].shots.pop();
        let sent = vec![Some(t(1)), Some(t(250)), Some(t(2))];
        assert_eq!(first_packets(&measures, &targets, &sent)[1], None);
    }
}
