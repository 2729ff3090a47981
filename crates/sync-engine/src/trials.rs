//! Trying a skipped service port again, between syncs (see [`crate::isolate`]): a batch
//! that adds just that port's rules to what the kernel holds, committed like any other
//! (planned, guarded by the generation, the conntrack cleanup told of it after).
//! Made by the incremental compiler (the port taken back in: work proportional to its
//! service), only while the kernel holds exactly our last commit and the port's Service
//! has no change waiting, so that a refusal (which changes nothing) is undone exactly by
//! taking the port out again.

use std::collections::BTreeSet;
use std::time::Instant;

use ruleset::Changes;

use crate::engine::Engine;
use crate::kernel::{Clock, ConntrackKernel, NftKernel};
use crate::sync::Failure;

impl<N: NftKernel, C: ConntrackKernel + 'static, K: Clock> Engine<N, C, K> {
    /// When a skipped port is due to be tried again (None: none skipped, or none can
    /// be tried before the next sync).
    pub(crate) fn check_due(&self) -> Option<Instant> {
        let c = self.compiler.as_ref()?;
        if !self.ledger.incremental() || !c.confirmed() {
            return None;
        }
        self.skips.next_due(&self.changes.services)
    }

    /// Try the skipped port that is due: accepted, it is programmed by this very
    /// commit; refused, it stays skipped (named in an error) and is tried again after a
    /// backoff.
    pub(crate) fn check_skipped(&mut self) {
        let now = self.clock.now();
        if self.check_due().is_none_or(|t| t > now) {
            return;
        }
        let Some(p) = self.skips.due(now, &self.changes.services) else {
            return;
        };
        let only = || Changes {
            services: BTreeSet::from([p.service.clone()]),
            node: false,
        };
        self.skips.accepted(&p);
        self.advance_with(only());
        let (initial, max) = self.skip_backoff();
        match self.commit(false) {
            Ok(mut c) => {
                let cleaned = self.ct_committed(std::mem::take(&mut c.served));
                tracing::debug!(service = %p.service, port = %p.port_name,
                    conntrack_targets = cleaned.targets, "skipped service port programmed");
            }
            Err(failure) => {
                let (refused, error) = match failure {
                    Failure::Refused { error, .. } => (true, error),
                    Failure::Other(error) => (false, error),
                };
                // Taken out again: the compiler is back at what the kernel holds (a
                // failed commit changed nothing).
                self.skips.left_out(&p);
                self.advance_with(only());
                if let Some(c) = self.compiler.as_mut() {
                    c.confirm();
                }
                if !refused {
                    tracing::debug!(service = %p.service, port = %p.port_name, error = %error,
                        "trying a skipped service port failed; trying again later");
                    self.skips.postpone(&p, now + initial);
                } else if self.skips.refused(&p, error.to_string(), now, initial, max) {
                    tracing::error!(service = %p.service, port = %p.port_name, error = %error,
                        "the kernel refuses this service port's rules; skipping it, every other service stays in sync");
                } else {
                    tracing::warn!(service = %p.service, port = %p.port_name, error = %error,
                        "service port still refused by the kernel; still skipped");
                }
            }
        }
        self.publish_skipped();
    }
}
