//! A conntrack cleanup slice: targets taken from the pending set, lent together with
//! the conntrack kernel so that the kernel call can run on another thread (`run`'s
//! worker) while the engine goes on syncing. The engine records the outcomes when the
//! slice comes back (`Engine::slice_done`). Pure data and one kernel call.

use std::time::{Duration, Instant};

use crate::kernel::{ConntrackKernel, FilterDetail};
use crate::targets::Target;

/// Targets to clear, each with its renewal count when taken (`Pending::renewed`), and
/// the conntrack kernel that clears them.
pub struct Slice<C> {
    pub(crate) kernel: C,
    pub(crate) targets: Vec<(Target, u64)>,
}

/// A slice that ran: the kernel back, one outcome per target (or why the call failed
/// as a whole), and how long the kernel call took.
pub struct SliceDone<C> {
    pub(crate) kernel: C,
    pub(crate) targets: Vec<(Target, u64)>,
    pub(crate) result: Result<Vec<FilterDetail>, String>,
    pub(crate) took: Duration,
}

impl<C: ConntrackKernel> Slice<C> {
    /// The kernel call: delete the entries of every target.
    pub fn run(mut self) -> SliceDone<C> {
        let t0 = Instant::now();
        let filters: Vec<ct_netlink::Filter> =
            self.targets.iter().map(|(t, _)| t.filter()).collect();
        let result = self
            .kernel
            .delete_detailed(&filters)
            .map_err(|e| e.to_string());
        SliceDone {
            kernel: self.kernel,
            targets: self.targets,
            result,
            took: t0.elapsed(),
        }
    }
}
