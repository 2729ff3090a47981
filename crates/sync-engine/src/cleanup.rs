//! The conntrack cleanup after a committed batch: delete the UDP entries of every
//! pending target.

use std::time::{Duration, Instant};

use crate::engine::Engine;
use crate::kernel::{Clock, ConntrackKernel, NftKernel};
use crate::targets::Target;

/// What one cleanup did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// Targets worked on.
    pub targets: usize,
    /// Conntrack entries deleted (0 when the kernel does not say).
    pub deleted: u64,
    pub took: Duration,
}

impl<N: NftKernel, C: ConntrackKernel, K: Clock> Engine<N, C, K> {
    /// Delete the entries of the pending targets (after a successful commit only).
    pub(crate) fn cleanup(&mut self) -> Cleaned {
        let t0 = Instant::now();
        let mut out = Cleaned {
            targets: self.pending.len(),
            ..Cleaned::default()
        };
        if !self.pending.is_empty() {
            if self.cfg.conntrack_cleanup {
                let filters: Vec<ct_netlink::Filter> =
                    self.pending.iter().map(Target::filter).collect();
                match self.ct.delete(&filters) {
                    Ok(n) => out.deleted = n,
                    Err(e) => {
                        tracing::warn!(error = %e, "conntrack cleanup failed");
                        self.status.update(|s| s.conntrack_failures += 1);
                    }
                }
            } else {
                tracing::debug!(targets = out.targets, "conntrack cleanup disabled; skipped");
            }
            self.pending.clear();
        }
        out.took = t0.elapsed();
        out
    }
}
