//! The conntrack cleanup running beside the engine (`run`: its own thread, `ct-cleanup`,
//! and the event reader, `ct-events`): a kernel call never delays the next sync, every
//! delete follows the commit that made its flows stale, flows learned from conntrack
//! events are judged by the state committed, and a cleanup thread that dies neither
//! stops nor spins the loop.

mod common;

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::*;
use ct_netlink::{Flow, FlowEvent};
use serde_json::json;
use sync_engine::cleanup::{Removal, Scope};
use sync_engine::*;

fn commits(w: &World) -> usize {
    w.log
        .lock()
        .unwrap()
        .iter()
        .filter(|c| matches!(c, Call::Commit { .. }))
        .count()
}

fn tcp_service(name: &str, cluster_ip: &str) -> k8s_openapi::api::core::v1::Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "ns1"},
        "spec": {"clusterIP": cluster_ip, "ports": [{"name": "p", "port": 80, "protocol": "TCP"}]}
    }))
    .unwrap()
}

/// A gate a conntrack call waits at until the test opens it (bounded: 20 s).
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<(bool, usize)>, Condvar)>);

impl Gate {
    fn entered(&self) -> usize {
        self.0 .0.lock().unwrap().1
    }
    fn open(&self) {
        self.0 .0.lock().unwrap().0 = true;
        self.0 .1.notify_all();
    }
    fn pass(&self) {
        let (m, cv) = &*self.0;
        let mut g = m.lock().unwrap();
        g.1 += 1;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !g.0 && Instant::now() < deadline {
            g = cv.wait_timeout(g, Duration::from_millis(50)).unwrap().0;
        }
    }
}

/// The fake conntrack kernel behind a gate: every call waits until the gate opens (a
/// kernel walk of a large table, held as long as the test wants).
struct Held {
    inner: FakeCt,
    gate: Gate,
}

impl ConntrackKernel for Held {
    fn list_udp(
        &mut self,
        family: kube_model::IpFamily,
        out: &mut Vec<Flow>,
    ) -> Result<bool, EngineError> {
        self.gate.pass();
        self.inner.list_udp(family, out)
    }
    fn list(&mut self, scopes: &[Scope], out: &mut Vec<Flow>) -> Result<Vec<bool>, EngineError> {
        self.gate.pass();
        self.inner.list(scopes, out)
    }
    fn delete(&mut self, flows: &[Flow]) -> Result<Vec<Removal>, EngineError> {
        self.inner.delete(flows)
    }
}

const OLD: &str = "198.18.2.1";

fn four_old() -> Vec<Flow> {
    vec![
        flow(1001, CLUSTER_IP, 53, OLD, 5353),
        flow(1002, EXTERNAL_IP, 53, OLD, 5353),
        flow(1003, LB_IP, 53, OLD, 5353),
        flow(1004, NODE_IP, NODE_PORT, OLD, 5353),
    ]
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The loop on real time: the first sync's cleanup is held in the kernel; a change
/// arriving meanwhile is committed anyway, and the held listing's deletes come after
/// the commit that made its flows stale. (Negative control: with the cleanup on the
/// engine's thread (`run` without `cleaner::beside`) the second commit waits for the
/// gate and the test times out waiting for it.)
#[test]
fn a_cleanup_held_in_the_kernel_does_not_delay_the_next_sync() {
    let w = World::new();
    w.flows(&four_old());
    let mut cfg = w.config(true);
    cfg.min_sync_period = Duration::from_millis(50);
    let gate = Gate::default();
    let ct = Held {
        inner: w.ct(),
        gate: gate.clone(),
    };
    let nft = w.nft();
    let (tx, rx) = channel(64);
    let loop_thread = std::thread::spawn(move || run(Engine::new(cfg, nft, ct, SystemClock), rx));
    for ev in [
        Event::NodeApplied(node()),
        Event::ServiceApplied(udp_lb()),
        Event::SliceApplied(slice("dns-1", &[("198.18.2.2", true, true, false)])),
        Event::ServicesListed,
        Event::SlicesListed,
    ] {
        tx.send(ev).unwrap();
    }
    wait_for("the first cleanup to reach the kernel", || {
        gate.entered() == 1
    });
    assert_eq!(commits(&w), 1, "the first sync committed");
    tx.send(Event::ServiceApplied(tcp_service("web", "198.18.100.20")))
        .unwrap();
    wait_for("the second commit while the cleanup is held", || {
        commits(&w) >= 2
    });
    assert!(deletes(&w.log.lock().unwrap()).is_empty(), "still held");
    gate.open();
    wait_for("the held listing's deletes", || {
        deletes(&w.log.lock().unwrap()).len() == 4
    });
    tx.send(Event::Shutdown).unwrap();
    loop_thread.join().unwrap().unwrap();
    let calls = w.take();
    assert_eq!(deletes(&calls), four_old(), "{calls:?}");
    assert_deletes_after_commit(&calls);
}

/// The fake conntrack kernel with an event stream the test feeds.
struct WithEvents {
    inner: FakeCt,
    events: Option<FakeEvents>,
}

impl ConntrackKernel for WithEvents {
    fn list_udp(
        &mut self,
        family: kube_model::IpFamily,
        out: &mut Vec<Flow>,
    ) -> Result<bool, EngineError> {
        self.inner.list_udp(family, out)
    }
    fn list(&mut self, scopes: &[Scope], out: &mut Vec<Flow>) -> Result<Vec<bool>, EngineError> {
        self.inner.list(scopes, out)
    }
    fn delete(&mut self, flows: &[Flow]) -> Result<Vec<Removal>, EngineError> {
        self.inner.delete(flows)
    }
    fn events(&mut self) -> Option<Box<dyn FlowEvents>> {
        self.events
            .take()
            .map(|e| Box::new(e) as Box<dyn FlowEvents>)
    }
}

/// Events the test sends; `recv` polls the stop descriptor between looks.
struct FakeEvents(flume::Receiver<FlowEvent>);

impl FlowEvents for FakeEvents {
    fn recv(
        &mut self,
        out: &mut Vec<FlowEvent>,
        stop: std::os::fd::BorrowedFd<'_>,
    ) -> std::io::Result<Received> {
        use std::os::fd::AsRawFd;
        loop {
            while let Ok(e) = self.0.try_recv() {
                out.push(e);
            }
            if !out.is_empty() {
                return Ok(Received::Events);
            }
            let mut p = libc::pollfd {
                fd: stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd we own, a 10 ms timeout.
            if unsafe { libc::poll(&mut p, 1, 10) } > 0 {
                return Ok(Received::Stopped);
            }
        }
    }
}

/// With conntrack events: the index is seeded once (every flow judged), then each new
/// flow is judged as its event comes: one DNAT'ed to a serving endpoint stays, one not
/// DNAT'ed to a served frontend (made in the instant before the rules served it) and
/// one DNAT'ed to an endpoint that left go; an endpoint removal is judged from the index
/// with no listing at all. (Negative control: with `Cleanup::event` not judging new
/// flows, the two stale arrivals stay and the test times out waiting for them.)
#[test]
fn flows_learned_from_events_are_judged_by_the_committed_state() {
    let w = World::new();
    w.flows(&four_old());
    let mut cfg = w.config(true);
    cfg.min_sync_period = Duration::from_millis(50);
    let (etx, erx) = flume::unbounded();
    let ct = WithEvents {
        inner: w.ct(),
        events: Some(FakeEvents(erx)),
    };
    let nft = w.nft();
    let (tx, rx) = channel(64);
    let loop_thread = std::thread::spawn(move || run(Engine::new(cfg, nft, ct, SystemClock), rx));
    let two = |b: bool| {
        let mut eps = vec![("198.18.2.2", true, true, false)];
        if b {
            eps.push(("198.18.2.3", true, true, false));
        }
        slice("dns-1", &eps)
    };
    for ev in [
        Event::NodeApplied(node()),
        Event::ServiceApplied(udp_lb()),
        Event::SliceApplied(two(true)),
        Event::ServicesListed,
        Event::SlicesListed,
    ] {
        tx.send(ev).unwrap();
    }
    wait_for("the seed's stale flows deleted", || {
        deletes(&w.log.lock().unwrap()).len() == 4
    });
    let listings = |w: &World| {
        w.log
            .lock()
            .unwrap()
            .iter()
            .filter(|c| matches!(c, Call::List(_)))
            .count()
    };
    assert_eq!(listings(&w), 1, "one seed");
    let good = flow(7001, CLUSTER_IP, 53, "198.18.2.3", 5353);
    let unnated_one = unnated(7002, CLUSTER_IP, 53);
    let to_old = flow(7003, LB_IP, 53, OLD, 5353);
    let arrivals = [good, unnated_one, to_old];
    w.flows(&arrivals);
    for f in arrivals {
        etx.send(FlowEvent::New(f)).unwrap();
    }
    wait_for("the stale arrivals deleted", || {
        deletes(&w.log.lock().unwrap()).len() == 6
    });
    // the endpoint .3 leaves: its flow goes, judged from the index
    tx.send(Event::SliceApplied(two(false))).unwrap();
    wait_for("the flow of the endpoint that left", || {
        deletes(&w.log.lock().unwrap()).len() == 7
    });
    assert_eq!(listings(&w), 1, "no listing after the seed");
    tx.send(Event::Shutdown).unwrap();
    loop_thread.join().unwrap().unwrap();
    let calls = w.take();
    let mut want = four_old();
    want.extend([good, unnated_one, to_old]);
    assert_eq!(deletes(&calls), sorted(want));
    assert_deletes_after_commit(&calls);
}

/// The fake conntrack kernel that panics in its first listing (a bug in the kernel
/// layer, on the cleanup thread).
struct PanicsOnce {
    inner: FakeCt,
    armed: Arc<Mutex<bool>>,
}

impl ConntrackKernel for PanicsOnce {
    fn list_udp(
        &mut self,
        family: kube_model::IpFamily,
        out: &mut Vec<Flow>,
    ) -> Result<bool, EngineError> {
        // the first listing of either kind panics (which one comes first depends on
        // whether the cleanup thread listed its table before the first commit's job)
        if std::mem::take(&mut *self.armed.lock().unwrap()) {
            panic!("injected: the conntrack layer panics on the cleanup thread");
        }
        self.inner.list_udp(family, out)
    }
    fn list(&mut self, scopes: &[Scope], out: &mut Vec<Flow>) -> Result<Vec<bool>, EngineError> {
        if std::mem::take(&mut *self.armed.lock().unwrap()) {
            panic!("injected: the conntrack layer panics on the cleanup thread");
        }
        self.inner.list(scopes, out)
    }
    fn delete(&mut self, flows: &[Flow]) -> Result<Vec<Removal>, EngineError> {
        self.inner.delete(flows)
    }
}

/// CPU time of this process (every thread), for telling a sleeping loop from a spinning
/// one.
fn process_cpu() -> Duration {
    // SAFETY: getrusage writes into the struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// The cleanup thread dies (a panic in the conntrack layer): the loop neither spins on
/// the closed channel nor stops; the cleanup is reported unavailable, and later changes
/// are committed. (Negative control: with the closed channel kept in the selection the
/// loop wakes at once, every time: about a core of CPU over the idle second.)
#[test]
fn a_cleanup_thread_that_dies_neither_stops_nor_spins_the_loop() {
    let w = World::new();
    let mut cfg = w.config(true);
    cfg.min_sync_period = Duration::from_millis(50);
    let armed = Arc::new(Mutex::new(true));
    let nft = w.nft();
    let ct = PanicsOnce {
        inner: w.ct(),
        armed: armed.clone(),
    };
    let e = Engine::new(cfg, nft, ct, SystemClock);
    let status = e.status();
    let (tx, rx) = channel(64);
    let loop_thread = std::thread::spawn(move || run(e, rx));
    for ev in [
        Event::ServiceApplied(udp_lb()),
        Event::SliceApplied(slice("dns-1", &[("198.18.2.2", true, true, false)])),
        Event::ServicesListed,
        Event::SlicesListed,
    ] {
        tx.send(ev).unwrap();
    }
    wait_for("the panic", || !*armed.lock().unwrap());
    wait_for("the cleanup reported unavailable", || {
        status.snapshot().cleanup_unavailable.is_some()
    });
    std::thread::sleep(Duration::from_millis(200));
    let cpu0 = process_cpu();
    std::thread::sleep(Duration::from_secs(1));
    let idle = process_cpu() - cpu0;
    assert!(
        idle < Duration::from_millis(300),
        "the loop spins: {idle:?} of CPU in 1 s idle"
    );
    // (counted before sending: the loop may commit before this thread looks)
    let before = commits(&w);
    tx.send(Event::ServiceApplied(tcp_service("web", "198.18.100.20")))
        .unwrap();
    wait_for("a later change committed", || commits(&w) > before);
    tx.send(Event::Shutdown).unwrap();
    loop_thread.join().unwrap().unwrap();
    assert_deletes_after_commit(&w.take());
}
