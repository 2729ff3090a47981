//! The nftables commits a sync is followed by, outside our tables, each a batch of its
//! own whose generation goes into the ledger as a side commit of ours (it neither ends
//! the trust in our tables nor counts as another program's write):
//!
//! iptables mode's `KUBE-FORWARD` (upstream's chain in the iptables-nft `filter` tables,
//! and its jump from `FORWARD`: an accept in our table cannot undo another table's DROP
//! policy), put in place after each successful sync by a batch of its own, planned by
//! `nft-netlink::forward` from the chains as they are (nothing is sent when they are in
//! place); and the step run once after the first successful sync
//! ([`crate::FirstSyncStep`]: the daemon's removal of kube-proxy's leftovers).

use crate::engine::Engine;
use crate::kernel::{Clock, ConntrackKernel, NftKernel};

impl<N: NftKernel, C: ConntrackKernel + 'static, K: Clock> Engine<N, C, K> {
    /// After a successful sync: the first sync's step, once.
    pub(crate) fn first_sync_step(&mut self) {
        if let Some(step) = self.first_sync_step.take() {
            for g in step.run() {
                self.ledger.side_commit(g);
            }
        }
    }

    /// After a successful sync: `KUBE-FORWARD` in place, when configured.
    pub(crate) fn ensure_forward(&mut self) {
        let Some(cfg) = self.cfg.forward else {
            return;
        };
        let families = crate::compile::families_of(&self.cfg.ruleset);
        match self.nft.ensure_forward(&families, cfg) {
            Ok(guards) => {
                for g in &guards {
                    self.ledger.side_commit(*g);
                }
                if !guards.is_empty() {
                    tracing::info!(
                        batches = guards.len(),
                        "wrote the KUBE-FORWARD chain and its jump from FORWARD (iptables filter table)"
                    );
                }
            }
            Err(e) => {
                // the 1st, 2nd, 4th, ... failure of a run
                self.forward_failures += 1;
                let n = self.forward_failures;
                if n.is_power_of_two() {
                    tracing::warn!(err = %e, failures = n, "could not write the KUBE-FORWARD chain; forwarded service traffic may be dropped where FORWARD's policy is DROP");
                }
            }
        }
    }
}
