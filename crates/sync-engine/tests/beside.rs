//! Conntrack cleanup slices running beside the engine (`run`'s worker thread): a slice
//! never delays the next sync, is only ever taken after the commit that made its
//! targets, and a target that a commit renews while its slice runs is cleaned again.

mod common;

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::*;
use ct_netlink::Filter;
use serde_json::json;
use sync_engine::slice::Slice;
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
    fn delete(&mut self, filters: &[Filter]) -> Result<Vec<CleanupOutcome>, EngineError> {
        self.gate.pass();
        self.inner.delete(filters)
    }
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The loop on real time: the first sync's cleanup is held in the kernel; a change
/// arriving meanwhile is committed anyway, and the held slice's deletes come after
/// the commit that made its targets. (Negative control: with the slices on the
/// engine's thread (`run` without `clean_beside`) the second commit waits for the
/// gate and the test times out waiting for it.)
#[test]
fn a_slice_held_in_the_kernel_does_not_delay_the_next_sync() {
    let w = World::new();
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
    wait_for("the held slice's deletes", || {
        deletes(&w.log.lock().unwrap()).len() == 4
    });
    tx.send(Event::Shutdown).unwrap();
    loop_thread.join().unwrap().unwrap();
    let calls = w.take();
    assert_eq!(deletes(&calls), four_deletes(), "{calls:?}");
    assert_deletes_after_commit(&calls);
}

/// A slice taken, then (while it is out) the service loses its endpoint and gets it
/// back: the second commit makes the same targets again. The slice that was out may
/// have walked past entries made between those commits, so its "done" does not finish
/// them: they stay pending and the next slice cleans them. (Negative control: with the
/// renewal ignored (`Pending::record` finishing a done target whatever its renewal
/// count) the targets are gone after the first slice and no second slice is sent.)
#[test]
fn a_target_renewed_while_its_slice_is_out_is_cleaned_again() {
    let w = World::new();
    let mut e = w.engine(true);
    let (jobs, slices) = flume::unbounded::<Slice<FakeCt>>();
    e.clean_beside(jobs);
    e.handle(Event::ServiceApplied(udp_lb()));
    let ready = slice("dns-1", &[("198.18.2.2", true, true, false)]);
    e.handle(Event::SliceApplied(ready.clone()));
    listed(&mut e);
    let r = e.sync().unwrap();
    assert_eq!(
        (r.conntrack_targets, r.conntrack_deleted),
        (4, 0),
        "handed to the slice"
    );
    assert!(deletes(&w.take()).is_empty(), "nothing deleted inline");
    assert_eq!(e.step(), Some(Work::Cleanup));
    let out = slices.try_recv().expect("the slice is sent to the worker");
    assert!(
        e.next_work().is_none_or(|(_, w)| w != Work::Cleanup),
        "one slice at a time"
    );

    // While it is out: no endpoint, then the endpoint again (two commits).
    w.clock.advance(Duration::from_secs(2));
    e.handle(Event::SliceApplied(slice("dns-1", &[])));
    e.sync().unwrap();
    w.clock.advance(Duration::from_secs(2));
    e.handle(Event::SliceApplied(ready));
    let r = e.sync().unwrap();
    assert_eq!(r.conntrack_targets, 4, "made targets again");

    e.slice_done(out.run());
    // the four renewed, and the endpoint the first of the two commits removed
    let pending: Vec<Filter> = e.pending_targets().iter().map(|t| t.filter()).collect();
    assert_eq!(pending.len(), 5, "{pending:?}");
    for f in four_deletes() {
        assert!(pending.contains(&f), "renewed while out: {f} still pending");
    }
    assert_eq!(e.step(), Some(Work::Cleanup));
    let again = slices.try_recv().expect("a second slice");
    e.slice_done(again.run());
    assert!(e.pending_targets().is_empty());
    let calls = w.take();
    assert_eq!(deletes(&calls).len(), 9, "{calls:?}");
    assert_deletes_after_commit(&calls);
}

/// The fake conntrack kernel that panics in its first delete (a bug in the kernel
/// layer, on the cleanup thread); the kernels opened after it work.
struct PanicsOnce {
    inner: FakeCt,
    armed: Arc<Mutex<bool>>,
}

impl ConntrackKernel for PanicsOnce {
    fn delete(&mut self, filters: &[Filter]) -> Result<Vec<CleanupOutcome>, EngineError> {
        if std::mem::take(&mut *self.armed.lock().unwrap()) {
            panic!("injected: the conntrack layer panics on the cleanup thread");
        }
        self.inner.delete(filters)
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

/// The cleanup thread dies (a panic in the conntrack layer) with the socket it was lent:
/// the loop neither spins on the closed channel nor stops; the socket is opened again and
/// the targets are cleaned on the engine's thread, and later changes are committed.
/// (Negative control: with the closed channel kept in the selection the loop wakes at
/// once, every time: about a core of CPU over the idle second; without `cleaner_gone`
/// the kernel stays lent and the targets are never cleaned.)
#[test]
fn a_cleanup_thread_that_dies_neither_stops_nor_spins_the_loop() {
    let w = World::new();
    let mut cfg = w.config(true);
    cfg.min_sync_period = Duration::from_millis(50);
    let armed = Arc::new(Mutex::new(true));
    let nft = w.nft();
    // the first socket panics; the ones opened after it work
    let mut kernels: Vec<PanicsOnce> = (0..4)
        .map(|_| PanicsOnce {
            inner: w.ct(),
            armed: armed.clone(),
        })
        .collect();
    let (tx, rx) = channel(64);
    let loop_thread = std::thread::spawn(move || {
        let open: ConntrackOpener<PanicsOnce> = Box::new(move || {
            kernels
                .pop()
                .ok_or_else(|| EngineError::Other("no more sockets".into()))
        });
        run(
            Engine::with_conntrack_opener(cfg, nft, open, SystemClock),
            rx,
        )
    });
    for ev in [
        Event::ServiceApplied(udp_lb()),
        Event::SliceApplied(slice("dns-1", &[("198.18.2.2", true, true, false)])),
        Event::ServicesListed,
        Event::SlicesListed,
    ] {
        tx.send(ev).unwrap();
    }
    wait_for("the panic", || !*armed.lock().unwrap());
    wait_for("the targets cleaned with a new socket", || {
        deletes(&w.log.lock().unwrap()).len() == 4
    });
    std::thread::sleep(Duration::from_millis(200));
    let cpu0 = process_cpu();
    std::thread::sleep(Duration::from_secs(1));
    let idle = process_cpu() - cpu0;
    assert!(
        idle < Duration::from_millis(300),
        "the loop spins: {idle:?} of CPU in 1 s idle"
    );
    tx.send(Event::ServiceApplied(tcp_service("web", "198.18.100.20")))
        .unwrap();
    let before = commits(&w);
    wait_for("a later change committed", || commits(&w) > before);
    tx.send(Event::Shutdown).unwrap();
    loop_thread.join().unwrap().unwrap();
    assert_deletes_after_commit(&w.take());
}
