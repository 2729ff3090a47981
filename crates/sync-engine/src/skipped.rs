//! The service ports left out because the kernel refused their rules, as the engine
//! publishes and paces them (the state is `isolate::Skips`): the status's list, the
//! retries' backoff, a changed Service's ports checked again at once.

use kube_model::ServiceKey;

use crate::engine::Engine;
use crate::kernel::{Clock, ConntrackKernel, NftKernel};

impl<N: NftKernel, C: ConntrackKernel + 'static, K: Clock> Engine<N, C, K> {
    /// A Service changed: its skipped ports are checked again at once (those of a
    /// deleted Service are forgotten).
    pub(crate) fn skipped_service_changed(&mut self, key: &ServiceKey, deleted: bool) {
        let now = self.clock.now();
        if self.skips.service_changed(key, deleted, now) {
            self.publish_skipped();
        }
    }

    /// The backoff of skipped ports' retries: from `max(retry_initial, minSyncPeriod)`.
    pub(crate) fn skip_backoff(&self) -> (std::time::Duration, std::time::Duration) {
        (
            self.cfg.retry_initial.max(self.cfg.min_sync_period),
            self.cfg.retry_max,
        )
    }

    /// The skipped service ports into the status.
    pub(crate) fn publish_skipped(&mut self) {
        let list = self.skips.list();
        self.status.update(|s| s.skipped_service_ports = list);
    }
}
