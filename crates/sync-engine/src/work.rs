//! The loop's work (the top of the engine): what is due next, and doing it: a rule
//! sync, a conntrack cleanup job on the engine's thread, a check of a skipped port.

use std::time::Instant;

use crate::engine::Engine;
use crate::kernel::{Clock, ConntrackKernel, NftKernel};

/// A kind of work of the loop (see [`Engine::next_work`]), in the order they go when
/// several are due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// A rule sync.
    Sync,
    /// Conntrack cleanup work between syncs (a retry, a listing, opening ctnetlink
    /// again), when the cleanup runs on the engine's thread.
    Cleanup,
    /// Checking a service port skipped because the kernel refused its rules.
    Check,
}

impl<N: NftKernel, C: ConntrackKernel + 'static, K: Clock> Engine<N, C, K> {
    /// The next work of the loop and when it is due. Of the work due now, a rule sync
    /// goes first, then conntrack cleanup work, then checking a skipped port; otherwise
    /// the earliest. None: nothing is due until an event arrives.
    pub fn next_work(&self) -> Option<(Instant, Work)> {
        let now = self.clock.now();
        [
            self.next_sync_at().map(|t| (t, Work::Sync)),
            self.cleanup_due().map(|t| (t, Work::Cleanup)),
            self.check_due().map(|t| (t, Work::Check)),
        ]
        .into_iter()
        .flatten()
        .min_by_key(|(t, w)| ((*t).max(now), *w as u8))
    }

    /// Do the work due now, if any (one sync, one cleanup job or one check), and
    /// say which. Sync failures are counted and retried with a backoff.
    pub fn step(&mut self) -> Option<Work> {
        let (at, work) = self.next_work()?;
        if at > self.clock.now() {
            return None;
        }
        match work {
            Work::Sync => {
                let _ = self.sync();
            }
            Work::Cleanup => {
                self.cleanup_turn();
            }
            Work::Check => self.check_skipped(),
        }
        Some(work)
    }

    /// Run the cleanup jobs that are due now, one after the other (for a one-shot run
    /// that exits after its sync: what is left, e.g. deletes backing off, is judged
    /// again by the next run, which judges every flow once). Returns the jobs run.
    pub fn drain_cleanup(&mut self) -> usize {
        let mut n = 0;
        while let Some((at, crate::Work::Cleanup)) = self.next_work() {
            if at > self.clock.now() || n >= 1_000_000 {
                break;
            }
            let ran = self.cleanup_turn();
            if ran == 0 {
                break;
            }
            n += ran;
        }
        n
    }
}
