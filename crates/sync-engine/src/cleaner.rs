//! The conntrack cleanup's driver: the state ([`Cleanup`]) and the conntrack kernel
//! together. It carries out the state's jobs (seed, list, delete) on the kernel and
//! feeds the results back; it opens ctnetlink (again, while it is unavailable) and
//! publishes the cleanup's status. It runs on the engine's thread after each commit
//! (`Engine::sync` called directly: tests, `--once`), or on a thread of its own
//! ([`beside`], under `run`), fed by messages ([`ToCleaner`]): the engine's commits and
//! the conntrack event stream, read by a third thread (`ct-events`).

use std::time::{Duration, Instant};

use ct_netlink::{Flow, FlowEvent};
use flume::{Receiver, Sender};
use kube_model::IpFamily;
use proxy_status::{CleanupReport, FilterWork, StatusHandle};

use crate::cleanup::{Cleanup, Job, Judged, Removal, Scope};
use crate::kernel::{ConntrackKernel, ConntrackOpener, FlowEvents, Received};
use crate::stale::Delta;
use crate::stoppable::Stoppable;

/// A message to a cleaner running beside the engine.
#[derive(Debug)]
pub enum ToCleaner {
    /// A commit is about to be sent.
    Begin,
    /// It succeeded, changing this.
    Committed(Delta),
    /// It was refused: nothing changed.
    Aborted,
    /// Conntrack events, from the event thread.
    Events(Vec<FlowEvent>),
    /// The kernel dropped events.
    Lost,
    /// The event stream ended.
    EventsEnded,
    /// The engine is gone: end.
    Stop,
}

/// The conntrack kernel, or why it is unavailable and when to try opening it again.
struct Slot<C> {
    kernel: Option<C>,
    opener: Option<ConntrackOpener<C>>,
    unavailable: Option<(String, Instant)>,
}

/// The cleanup's driver. See the module documentation.
pub struct Cleaner<C> {
    state: Cleanup,
    slot: Slot<C>,
    reprobe: Duration,
    status: StatusHandle,
    /// Whether to open the event stream (only beside the engine: someone must read it).
    want_events: bool,
    events: Option<EventThread>,
    /// A message for the loop that owns this cleaner (the event thread's sender).
    to_self: Option<Sender<ToCleaner>>,
}

impl<C: ConntrackKernel + 'static> Cleaner<C> {
    pub fn new(state: Cleanup, kernel: C, status: StatusHandle) -> Cleaner<C> {
        Cleaner {
            state,
            slot: Slot {
                kernel: Some(kernel),
                opener: None,
                unavailable: None,
            },
            reprobe: Duration::from_secs(30),
            status,
            want_events: false,
            events: None,
            to_self: None,
        }
    }

    /// A cleaner whose kernel is opened by `open` (tried again every `reprobe` while it
    /// fails: rules are still programmed, the cleanup waits).
    pub fn with_opener(
        state: Cleanup,
        open: ConntrackOpener<C>,
        reprobe: Duration,
        status: StatusHandle,
        now: Instant,
    ) -> Cleaner<C> {
        let mut c = Cleaner {
            state,
            slot: Slot {
                kernel: None,
                opener: Some(open),
                unavailable: None,
            },
            reprobe,
            status,
            want_events: false,
            events: None,
            to_self: None,
        };
        c.reprobe(now);
        c
    }

    pub fn state(&self) -> &Cleanup {
        &self.state
    }

    /// Whether ctnetlink is open.
    pub fn available(&self) -> bool {
        self.slot.kernel.is_some()
    }

    pub fn begin(&mut self) {
        self.state.begin();
    }

    pub fn committed(&mut self, d: Delta, now: Instant) -> Judged {
        self.state.committed(d, now)
    }

    pub fn aborted(&mut self, now: Instant) -> Judged {
        self.state.aborted(now)
    }

    /// Take one message (beside the engine).
    pub fn handle(&mut self, m: ToCleaner, now: Instant) {
        match m {
            ToCleaner::Begin => self.state.begin(),
            ToCleaner::Committed(d) => {
                self.state.committed(d, now);
            }
            ToCleaner::Aborted => {
                self.state.aborted(now);
            }
            ToCleaner::Events(es) => {
                for e in es {
                    self.state.event(e, now);
                }
            }
            ToCleaner::Lost => {
                tracing::debug!("conntrack events lost; listing every UDP flow again");
                self.state.lost(now);
            }
            ToCleaner::Stop => {}
            ToCleaner::EventsEnded => {
                tracing::warn!("the conntrack event stream ended; listing destinations from the kernel after each commit");
                self.events = None;
                self.state.events_off(now);
            }
        }
    }

    /// When the next piece of work is due (a job, or opening ctnetlink again).
    pub fn next_due(&self) -> Option<Instant> {
        let reprobe = match (&self.slot.kernel, &self.slot.opener, &self.slot.unavailable) {
            (None, Some(_), Some((_, at))) => Some(*at),
            (None, Some(_), None) => Some(Instant::now()),
            _ => None,
        };
        let job = self.slot.kernel.as_ref().and(self.state.next_due());
        [reprobe, job].into_iter().flatten().min()
    }

    /// Do the work due at `now`: at most `max_jobs` kernel jobs. One report per job.
    pub fn work(&mut self, now: Instant, max_jobs: usize) -> Vec<CleanupReport> {
        self.reprobe(now);
        let mut out = Vec::new();
        for _ in 0..max_jobs {
            let Some(kernel) = self.slot.kernel.as_mut() else {
                break;
            };
            let (job, judged) = self.state.next_job(now);
            if judged.dropped > 0 {
                tracing::debug!(
                    flows = judged.dropped,
                    "conntrack flows no longer stale when their turn came; kept"
                );
            }
            let Some(job) = job else { break };
            let t0 = Instant::now();
            let r = run_job(&mut self.state, kernel, job, now);
            let mut report = r;
            report.took = t0.elapsed();
            report.pending = self.state.pending();
            if report
                .filters
                .iter()
                .any(|f| matches!(f.outcome, "failed" | "incomplete"))
            {
                self.status.update(|s| s.conntrack_failures += 1);
            }
            out.push(report);
        }
        self.publish();
        out
    }

    /// The pending count and age into the status.
    pub fn publish(&self) {
        let (n, oldest) = (self.state.pending(), self.state.oldest());
        self.status.update(|s| {
            s.cleanup_pending = n;
            s.cleanup_oldest_pending = oldest;
        });
    }

    /// Open ctnetlink when it is unavailable and the re-probe is due. Once open, every
    /// flow is judged once (what happened while it was unavailable is not known).
    fn reprobe(&mut self, now: Instant) {
        if self.slot.kernel.is_some() || self.slot.unavailable.as_ref().is_some_and(|u| u.1 > now) {
            return;
        }
        let Some(open) = self.slot.opener.as_mut() else {
            return;
        };
        match open() {
            Ok(c) => {
                if self.slot.unavailable.is_some() {
                    tracing::info!(
                        pending = self.state.pending(),
                        "conntrack cleanup available again"
                    );
                }
                self.slot.kernel = Some(c);
                self.slot.unavailable = None;
                self.status.update(|s| s.cleanup_unavailable = None);
                self.state.reset(now);
                self.open_events(now);
            }
            Err(e) => {
                let reason = e.to_string();
                let again = now + self.reprobe;
                if self.slot.unavailable.as_ref().map(|u| &u.0) != Some(&reason) {
                    tracing::error!(error = %reason, retry_s = self.reprobe.as_secs(),
                        "conntrack cleanup unavailable (no ctnetlink); rules are still programmed, stale flows wait");
                }
                self.status
                    .update(|s| s.cleanup_unavailable = Some(reason.clone()));
                self.slot.unavailable = Some((reason, again));
            }
        }
    }

    /// Open the conntrack event stream (beside the engine) and start its reader thread.
    fn open_events(&mut self, now: Instant) {
        if !self.want_events || self.events.is_some() {
            return;
        }
        let (Some(kernel), Some(tx)) = (self.slot.kernel.as_mut(), self.to_self.clone()) else {
            return;
        };
        let Some(stream) = kernel.events() else {
            tracing::info!("conntrack events unavailable; listing destinations from the kernel after each commit");
            return;
        };
        match EventThread::start(stream, tx) {
            Ok(t) => {
                self.events = Some(t);
                self.state.events_on(now);
                tracing::info!(
                    "following conntrack events: UDP flows are indexed and judged as they come"
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the conntrack event thread; listing destinations from the kernel after each commit");
            }
        }
    }
}

/// Carry out one job and feed its result back; its report.
fn run_job<C: ConntrackKernel>(
    state: &mut Cleanup,
    kernel: &mut C,
    job: Job,
    now: Instant,
) -> CleanupReport {
    match job {
        Job::Seed(families) => seed(state, kernel, &families, now),
        Job::List(scopes) => list(state, kernel, &scopes, now),
        Job::Delete(flows) => delete(state, kernel, &flows, now),
    }
}

/// Every UDP flow of `families` listed into the index.
fn seed<C: ConntrackKernel>(
    state: &mut Cleanup,
    kernel: &mut C,
    families: &[IpFamily],
    now: Instant,
) -> CleanupReport {
    let mut r = CleanupReport::default();
    let mut flows = Vec::new();
    let mut complete = true;
    for f in families {
        match kernel.list_udp(*f, &mut flows) {
            Ok(c) => complete &= c,
            Err(e) => {
                tracing::warn!(family = f.k8s_name(), error = %e, "listing the UDP flows to index them");
                complete = false;
            }
        }
        r.filters.push(work(
            *f,
            "seed",
            if complete { "listed" } else { "incomplete" },
            0,
        ));
    }
    r.targets = families.len();
    let j = state.seeded(flows, complete, now);
    r.done = usize::from(complete) * families.len();
    tracing::debug!(
        flows = state.indexed_flows(),
        stale = j.stale,
        complete,
        "conntrack flows indexed"
    );
    r
}

/// The flows sent to `scopes` listed (no index).
fn list<C: ConntrackKernel>(
    state: &mut Cleanup,
    kernel: &mut C,
    scopes: &[Scope],
    now: Instant,
) -> CleanupReport {
    let mut r = CleanupReport::default();
    let mut flows = Vec::new();
    let done: Vec<(Scope, bool)> = match kernel.list(scopes, &mut flows) {
        Ok(c) => scopes
            .iter()
            .enumerate()
            .map(|(i, s)| (*s, c.get(i).copied().unwrap_or(false)))
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, scopes = scopes.len(), "listing conntrack flows failed; retrying with a backoff");
            scopes.iter().map(|s| (*s, false)).collect()
        }
    };
    let strategy = kernel.listing();
    for (s, complete) in &done {
        r.filters.push(work(
            scope_family(s),
            strategy,
            if *complete { "listed" } else { "incomplete" },
            0,
        ));
    }
    r.targets = done.len();
    r.done = done.iter().filter(|(_, c)| *c).count();
    state.listed(&done, flows, now);
    r
}

/// Stale flows deleted, counted per family and outcome.
fn delete<C: ConntrackKernel>(
    state: &mut Cleanup,
    kernel: &mut C,
    flows: &[Flow],
    now: Instant,
) -> CleanupReport {
    let mut r = CleanupReport::default();
    let outcomes = kernel.delete(flows).unwrap_or_else(|e| {
        tracing::warn!(error = %e, flows = flows.len(), "deleting conntrack flows failed; retrying with a backoff");
        Vec::new()
    });
    let source = if state.indexed() {
        "index"
    } else {
        kernel.listing()
    };
    let mut per: [(u64, u64, u64); 2] = [(0, 0, 0); 2];
    for (i, f) in flows.iter().enumerate() {
        let o = outcomes.get(i).copied().unwrap_or(Removal::Failed);
        let k = usize::from(f.dst.is_ipv6());
        match o {
            Removal::Deleted => per[k].0 += 1,
            Removal::AlreadyGone => per[k].1 += 1,
            Removal::Failed => per[k].2 += 1,
        }
        if o != Removal::Failed {
            r.done += 1;
        }
        if o == Removal::Deleted {
            tracing::trace!(flow = %f, "conntrack flow deleted");
        }
    }
    for (k, (deleted, gone, failed)) in per.iter().enumerate() {
        if deleted + gone + failed == 0 {
            continue;
        }
        let fam = if k == 1 { IpFamily::V6 } else { IpFamily::V4 };
        let outcome = if *failed > 0 {
            "failed"
        } else if *deleted > 0 {
            "deleted"
        } else {
            "already-gone"
        };
        r.filters.push(work(fam, source, outcome, *deleted));
        r.deleted += deleted;
        if *failed > 0 {
            tracing::warn!(
                family = fam.k8s_name(),
                failed,
                "conntrack deletes failed; retrying with a backoff"
            );
        }
    }
    r.targets = flows.len();
    state.deleted(flows, &pad(outcomes, flows.len()), now);
    r
}

fn pad(mut v: Vec<Removal>, n: usize) -> Vec<Removal> {
    v.resize(n, Removal::Failed);
    v
}

fn scope_family(s: &Scope) -> IpFamily {
    match s {
        Scope::Dest(d) => d.family(),
        Scope::All(f) => *f,
    }
}

fn work(
    family: IpFamily,
    strategy: &'static str,
    outcome: &'static str,
    deleted: u64,
) -> FilterWork {
    FilterWork {
        family,
        strategy: Some(strategy),
        outcome,
        deleted: Some(deleted),
    }
}

/// A cleaner running beside the engine: its channel, and where its reports come back.
pub struct Beside {
    pub tx: Sender<ToCleaner>,
    pub reports: Receiver<CleanupReport>,
}

/// Run `cleaner` on a thread of its own (`ct-cleanup`), with the conntrack event stream
/// when the kernel has one. It ends when `tx` (every sender) is dropped.
/// When the thread cannot start, the cleaner comes back with the error.
pub fn beside<C: ConntrackKernel + 'static>(
    mut cleaner: Cleaner<C>,
) -> Result<Beside, Box<(std::io::Error, Cleaner<C>)>> {
    let (tx, rx) = flume::unbounded::<ToCleaner>();
    let (rtx, reports) = flume::unbounded::<CleanupReport>();
    cleaner.want_events = true;
    cleaner.to_self = Some(tx.clone());
    // The cleaner moves into the thread; it comes back through this slot if the
    // thread cannot start.
    let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(cleaner)));
    let mine = slot.clone();
    let started = std::thread::Builder::new()
        .name("ct-cleanup".into())
        .spawn(move || {
            let c = mine.lock().ok().and_then(|mut s| s.take());
            if let Some(c) = c {
                c.run(rx, rtx);
            }
        });
    match started {
        Ok(_) => Ok(Beside { tx, reports }),
        Err(e) => {
            let c = slot.lock().ok().and_then(|mut s| s.take());
            match c {
                Some(mut c) => {
                    c.want_events = false;
                    c.to_self = None;
                    Err(Box::new((e, c)))
                }
                None => Ok(Beside { tx, reports }),
            }
        }
    }
}

impl<C: ConntrackKernel + 'static> Cleaner<C> {
    fn run(mut self, rx: Receiver<ToCleaner>, reports: Sender<CleanupReport>) {
        self.open_events(Instant::now());
        loop {
            // Every message already queued goes first: a job's flows are judged by the
            // newest committed state, and nothing is judged while a commit is under way.
            loop {
                match rx.try_recv() {
                    Ok(ToCleaner::Stop) => return,
                    Ok(m) => self.handle(m, Instant::now()),
                    Err(flume::TryRecvError::Empty) => break,
                    Err(flume::TryRecvError::Disconnected) => return,
                }
            }
            let now = Instant::now();
            if self.next_due().is_some_and(|t| t <= now) {
                for r in self.work(now, 1) {
                    if r.targets > 0 && reports.send(r).is_err() {
                        return;
                    }
                }
                continue;
            }
            let wait = self.next_due().map_or(Duration::from_secs(3600), |t| {
                t.saturating_duration_since(now)
            });
            match rx.recv_timeout(wait) {
                Ok(ToCleaner::Stop) => return,
                Ok(m) => self.handle(m, Instant::now()),
                Err(flume::RecvTimeoutError::Timeout) => {}
                Err(flume::RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

/// The event stream on a thread of its own (`ct-events`), forwarding batches of events
/// to the cleaner's channel. Stopped (and joined) when dropped.
struct EventThread(#[allow(dead_code)] Stoppable);

impl EventThread {
    fn start(
        mut stream: Box<dyn FlowEvents>,
        tx: Sender<ToCleaner>,
    ) -> std::io::Result<EventThread> {
        let t = Stoppable::start("ct-events", move |stop| {
            let mut buf: Vec<FlowEvent> = Vec::new();
            loop {
                let m = match stream.recv(&mut buf, stop) {
                    Ok(Received::Stopped) => return,
                    Ok(Received::Lost) => ToCleaner::Lost,
                    Ok(Received::Events) if buf.is_empty() => continue,
                    Ok(Received::Events) => ToCleaner::Events(std::mem::take(&mut buf)),
                    Err(e) => {
                        tracing::warn!(error = %e, "reading conntrack events");
                        let _ = tx.send(ToCleaner::EventsEnded);
                        return;
                    }
                };
                if tx.send(m).is_err() {
                    return;
                }
            }
        })?;
        Ok(EventThread(t))
    }
}
