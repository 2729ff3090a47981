//! Where the servers read the engine's status from: [`StatusSource`] (the engine's
//! [`StatusHandle`], or a test's), below every server that reads it (re-exported as
//! `ops_server::StatusSource`).

use proxy_status::{Status, StatusHandle};
use std::time::Instant;

/// Where the servers read the proxy's status from (the engine's [`StatusHandle`], or a
/// fixed status in tests).
pub trait StatusSource: Clone + Send + Sync + 'static {
    fn snapshot(&self) -> Status;
    /// What `f` reads of the status (by default from a copy).
    fn read<T>(&self, f: impl FnOnce(&Status) -> T) -> T {
        f(&self.snapshot())
    }
    fn now(&self) -> Instant {
        Instant::now()
    }
}

impl StatusSource for StatusHandle {
    fn snapshot(&self) -> Status {
        StatusHandle::snapshot(self)
    }
    fn read<T>(&self, f: impl FnOnce(&Status) -> T) -> T {
        StatusHandle::read(self, f)
    }
}
