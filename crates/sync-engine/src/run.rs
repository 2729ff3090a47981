//! The loop around the engine: events in, syncs when due, the nftables watcher polled.

use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::Duration;

use crate::engine::Engine;
use crate::kernel::{Clock, ConntrackKernel, NftKernel, SystemClock};
use crate::{our_tables, watch, EngineConfig, EngineError, Event};

/// How often the loop polls the nftables event socket.
const WATCH_POLL: Duration = Duration::from_millis(50);
/// How long the loop sleeps when nothing is due.
const IDLE: Duration = Duration::from_secs(3600);

/// The loop, on the calling thread: handles events, does the work that is due
/// ([`Engine::next_work`]: a sync, a conntrack cleanup slice, re-opening ctnetlink),
/// watches nftables for changes by other programs (when `watch_tamper` is on) and
/// repairs them. Events are taken between any two pieces of work, so a cleanup backlog
/// never delays a sync by more than one slice. Returns on [`Event::Shutdown`] or when
/// the sender is dropped. Sync failures are retried, never returned.
pub fn run<N: NftKernel, C: ConntrackKernel, K: Clock>(
    mut engine: Engine<N, C, K>,
    events: Receiver<Event>,
) -> Result<(), EngineError> {
    // The watcher listens from our first commit on: that commit creates every element
    // of the ruleset, and a listener would make the kernel build one notification per
    // element (its time is the commit's, and they overflow the socket at scale, which
    // forces a needless repair). Whatever happened before it listens shows in the
    // generation (`Engine::watcher_opened`).
    let mut watcher: Option<watch::Watcher> = None;
    let mut want_watcher = engine.config().watch_tamper;
    loop {
        let worked = engine.step().is_some();
        if want_watcher && engine.has_committed() {
            want_watcher = false;
            match watch::Watcher::open(our_tables()) {
                Ok(w) => {
                    watcher = Some(w);
                    engine.take_our_generations();
                    engine.watcher_opened();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch nftables events; relying on periodic resyncs");
                }
            }
        }
        if let Some(w) = watcher.as_mut() {
            for g in engine.take_our_generations() {
                w.ours(g);
            }
        }
        let now = engine.clock().now();
        let mut wait = if worked {
            // More may be due at once: only take what already arrived.
            Duration::ZERO
        } else {
            engine
                .next_work()
                .map_or(IDLE, |(at, _)| at.saturating_duration_since(now))
        };
        if watcher.is_some() {
            wait = wait.min(WATCH_POLL);
        }
        let first = if wait.is_zero() {
            match events.try_recv() {
                Ok(ev) => Some(ev),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => return Ok(()),
            }
        } else {
            match events.recv_timeout(wait) {
                Ok(ev) => Some(ev),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
        };
        if let Some(ev) = first {
            if matches!(ev, Event::Shutdown) {
                return Ok(());
            }
            engine.handle(ev);
            // Take everything already queued before deciding what to do next.
            for _ in 0..100_000 {
                match events.try_recv() {
                    Ok(Event::Shutdown) => return Ok(()),
                    Ok(ev) => engine.handle(ev),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return Ok(()),
                }
            }
        }
        if let Some(w) = watcher.as_mut() {
            for g in engine.take_our_generations() {
                w.ours(g);
            }
            let seen = w.poll();
            engine.foreign_change(&seen.touches, seen.overflow);
        }
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
