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

/// The bounded-frequency loop, on the calling thread: handles events, syncs when due
/// ([`Engine::next_sync_at`]), watches nftables for changes by other programs (when
/// `watch_tamper` is on) and repairs them at once. Returns on [`Event::Shutdown`] or
/// when the sender is dropped. Sync failures are retried, never returned.
pub fn run<N: NftKernel, C: ConntrackKernel, K: Clock>(
    mut engine: Engine<N, C, K>,
    events: Receiver<Event>,
) -> Result<(), EngineError> {
    let mut watcher = if engine.config().watch_tamper {
        match watch::Watcher::open(our_tables()) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch nftables events; relying on periodic resyncs");
                None
            }
        }
    } else {
        None
    };
    loop {
        if let Some(at) = engine.next_sync_at() {
            // Read the clock after next_sync_at, which may answer with its own "now".
            if at <= engine.clock().now() {
                // Failures are counted and retried by next_sync_at's backoff.
                let _ = engine.sync();
                if let Some(w) = watcher.as_mut() {
                    for g in engine.take_our_generations() {
                        w.ours(g);
                    }
                }
                continue;
            }
        }
        let now = engine.clock().now();
        let mut wait = engine
            .next_sync_at()
            .map_or(IDLE, |at| at.saturating_duration_since(now));
        if watcher.is_some() {
            wait = wait.min(WATCH_POLL);
        }
        match events.recv_timeout(wait) {
            Ok(Event::Shutdown) => return Ok(()),
            Ok(ev) => {
                engine.handle(ev);
                // Take everything already queued before deciding to sync.
                for _ in 0..100_000 {
                    match events.try_recv() {
                        Ok(Event::Shutdown) => return Ok(()),
                        Ok(ev) => engine.handle(ev),
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => return Ok(()),
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
        if let Some(w) = watcher.as_mut() {
            for g in engine.take_our_generations() {
                w.ours(g);
            }
            if w.poll() {
                engine.request_repair();
            }
        }
    }
}

/// An engine on real netlink sockets, in the calling thread's network namespace.
pub fn real_engine(
    cfg: EngineConfig,
) -> Result<Engine<nft_netlink::Nft, ct_netlink::Conntrack, SystemClock>, EngineError> {
    let nft = nft_netlink::Nft::open()?;
    let ct = ct_netlink::Conntrack::open(ct_netlink::Config::default())?;
    Ok(Engine::new(cfg, nft, ct, SystemClock))
}
