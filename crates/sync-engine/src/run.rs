//! The loop around the engine: events in, the work that is due, nothing else. It sleeps
//! until the next piece of work is due or an event arrives (no polling): the sources'
//! events, the nftables notifications, read by a watcher thread of its own, and the
//! reports of the conntrack cleanup, which runs on a thread of its own (`ct-cleanup`,
//! with its event reader `ct-events`): it is told of every commit and never delays a
//! sync.

use std::sync::Arc;
use std::time::Duration;

use flume::{RecvTimeoutError, Sender};

use crate::engine::Engine;
use crate::heard::Heard;
use crate::kernel::{Clock, ConntrackKernel, NftKernel, SystemClock};
use crate::stoppable::Stoppable;
use crate::{
    cleaner, our_tables, watch, CleanupReport, EngineConfig, EngineError, Event, EventReceiver,
};

/// How long the loop sleeps when nothing is due (it wakes for events anyway).
const IDLE: Duration = Duration::from_secs(3600);

/// What the loop woke up for. (The event is not boxed: it is moved once, as on the
/// channel.)
#[allow(clippy::large_enum_variant)]
enum Woke {
    Event(Event),
    Notified(watch::Poll),
    Cleaned(CleanupReport),
    Closed,
    /// The watcher thread ended (its sender dropped).
    WatcherGone,
    /// The cleanup thread ended (its sender dropped: it panicked).
    CleanerGone,
    Nothing,
}

/// The loop, on the calling thread: handles events, does the work that is due
/// ([`Engine::next_work`]: a sync, a check of a skipped port), and (when `watch_tamper`
/// is on) follows nftables notifications to repair our tables when another program
/// changes them. The conntrack cleanup runs on a thread of its own (`ct-cleanup`), told
/// of every commit; the loop goes on syncing meanwhile and takes its reports for the
/// metrics. Events are taken between any two pieces of work. Returns on
/// [`Event::Shutdown`] or when every sender is dropped (the cleanup thread then ends;
/// what it had not done is judged again by the next run). Sync failures are retried,
/// never returned.
pub fn run<N: NftKernel, C: ConntrackKernel + Send + 'static, K: Clock>(
    mut engine: Engine<N, C, K>,
    events: EventReceiver,
) -> Result<(), EngineError> {
    // A channel whose sender is gone leaves the selection (a closed channel would wake
    // the selector at once, every time).
    let mut cleaned = start_cleaner(&mut engine);
    // (held until the loop returns: dropping it stops and joins the thread)
    let (_watcher, mut notes) = start_watcher(&mut engine);
    loop {
        let worked = engine.step().is_some();
        let now = engine.clock().now();
        let wait = if worked {
            // More may be due at once: only take what already arrived.
            Duration::ZERO
        } else {
            engine
                .next_work()
                .map_or(IDLE, |(at, _)| at.saturating_duration_since(now))
        };
        let mut selector =
            flume::Selector::new().recv(&events, |r| r.map_or(Woke::Closed, Woke::Event));
        if let Some(n) = notes.as_ref() {
            selector = selector.recv(n, |r| r.map_or(Woke::WatcherGone, Woke::Notified));
        }
        if let Some(c) = cleaned.as_ref() {
            selector = selector.recv(c, |r| r.map_or(Woke::CleanerGone, Woke::Cleaned));
        }
        match selector.wait_timeout(wait).unwrap_or(Woke::Nothing) {
            Woke::Event(ev) => {
                if !take_events(&mut engine, ev, &events) {
                    return Ok(());
                }
            }
            Woke::Notified(p) => engine.nftables(p),
            Woke::Cleaned(r) => engine.cleaned(r),
            Woke::WatcherGone => notes = None,
            Woke::CleanerGone => {
                cleaned = None;
                tracing::error!(
                    "the conntrack cleanup thread ended; stale UDP flows are no longer deleted"
                );
                engine.status().update(|s| {
                    s.cleanup_unavailable = Some("the conntrack cleanup thread ended".into())
                });
            }
            Woke::Closed => return Ok(()),
            Woke::Nothing => {}
        }
    }
}

/// `first` and everything already queued after it, then (nothing waiting) the initial
/// lists' compile ahead. False: shut down (asked, or every sender gone).
fn take_events<N: NftKernel, C: ConntrackKernel + 'static, K: Clock>(
    engine: &mut Engine<N, C, K>,
    first: Event,
    events: &EventReceiver,
) -> bool {
    if matches!(first, Event::Shutdown) {
        return false;
    }
    engine.handle(first);
    for _ in 0..100_000 {
        match events.recv_timeout(Duration::ZERO) {
            Ok(Event::Shutdown) => return false,
            Ok(ev) => engine.handle(ev),
            Err(RecvTimeoutError::Timeout) => break,
            Err(RecvTimeoutError::Disconnected) => return false,
        }
    }
    engine.build_ahead();
    true
}

/// The conntrack cleanup on a thread of its own (`ct-cleanup`); its reports' channel
/// (None: it runs on the engine's thread, as when the thread cannot start).
fn start_cleaner<N: NftKernel, C: ConntrackKernel + Send + 'static, K: Clock>(
    engine: &mut Engine<N, C, K>,
) -> Option<flume::Receiver<CleanupReport>> {
    let c = engine.take_cleaner()?;
    match cleaner::beside(c) {
        Ok(b) => {
            engine.clean_beside(b.tx);
            Some(b.reports)
        }
        Err(b) => {
            let (e, c) = *b;
            tracing::warn!(error = %e, "cannot start the conntrack cleanup thread; cleaning after each commit on the engine's thread");
            engine.clean_here(c);
            None
        }
    }
}

/// The nftables watcher's thread and its notifications (when `watch_tamper` is on).
/// It listens from the start: a dump of our tables that other programs' commits to
/// their own tables moved the generation under is then still good. The first commit
/// of a cold start creates every element of the ruleset: a listener would make the
/// kernel build one notification per element (its time is the commit's, and they
/// overflow the socket at scale), so large commits are made with the subscription
/// dropped (`Engine::quiet_own_commits`).
fn start_watcher<N: NftKernel, C: ConntrackKernel + 'static, K: Clock>(
    engine: &mut Engine<N, C, K>,
) -> (Option<WatcherThread>, Option<flume::Receiver<watch::Poll>>) {
    // (the sender is the thread's once it runs)
    let (note_tx, notes) = flume::bounded::<watch::Poll>(64);
    if !engine.config().watch_tamper {
        return (None, None);
    }
    let heard = Arc::new(Heard::new());
    match WatcherThread::start(note_tx, heard.clone()) {
        Ok(mut w) => {
            if let Some(m) = w.membership.take() {
                engine.quiet_own_commits(Box::new(m));
            }
            engine.hear(heard);
            engine.watcher_opened();
            (Some(w), Some(notes))
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch nftables events; relying on periodic resyncs");
            (None, None)
        }
    }
}

/// The nftables watcher on a thread of its own (its socket opened in the loop's
/// namespace): it blocks on the socket, records every transaction it hears
/// ([`Heard`]) and sends what touched our tables. Stopped (and joined) when dropped.
struct WatcherThread {
    _thread: Stoppable,
    /// Its socket's subscription, for the engine (None: the socket could not be
    /// duplicated; our commits are then heard, as before).
    membership: Option<watch::Membership>,
}

impl WatcherThread {
    fn start(tx: Sender<watch::Poll>, heard: Arc<Heard>) -> std::io::Result<WatcherThread> {
        let mut w = watch::Watcher::open(our_tables())?;
        let membership = w
            .membership()
            .map_err(|e| tracing::warn!(error = %e, "cannot share the nftables watcher's subscription; our own commits stay heard"))
            .ok();
        let thread = Stoppable::start("nft-watch", move |stop| loop {
            match w.wait(stop) {
                Ok(None) => return,
                Ok(Some(p)) if p.touches.is_empty() && !p.overflow => heard.record(&p),
                Ok(Some(p)) => {
                    heard.record(&p);
                    if tx.send(p).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "waiting for nftables events; relying on periodic resyncs");
                    return;
                }
            }
        })?;
        Ok(WatcherThread {
            _thread: thread,
            membership,
        })
    }
}

/// An engine on real netlink sockets, in the calling thread's network namespace. The
/// nftables socket must open; ctnetlink may be missing (see
/// [`Engine::with_conntrack_opener`]).
pub fn real_engine(
    cfg: EngineConfig,
) -> Result<Engine<nft_netlink::Nft, ct_netlink::Conntrack, SystemClock>, EngineError> {
    let nft = nft_netlink::Nft::open()?;
    Ok(Engine::with_conntrack_opener(
        cfg,
        nft,
        Box::new(|| Ok(ct_netlink::Conntrack::open(ct_netlink::Config::default())?)),
        SystemClock,
    ))
}
