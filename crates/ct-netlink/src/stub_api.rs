//! Placeholder of the listing / delete-by-flow / event API (replaced by the events
//! branch).

use std::os::fd::BorrowedFd;
use std::time::Duration;

use crate::{Conntrack, Error, Family, Filter, Flow, FlowEvent};

/// Whether a listing of one filter was complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListOutcome {
    Complete,
    Incomplete,
    Failed(i32),
}

/// What a listing found.
#[derive(Debug, Clone, Default)]
pub struct ListReport {
    pub flows: Vec<Flow>,
    pub per_filter: Vec<ListOutcome>,
    pub walks: usize,
}

/// The outcome of deleting one flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowOutcome {
    Deleted,
    AlreadyGone,
    Failed(i32),
    Unacked,
}

fn unsupported() -> Error {
    Error::InvalidFilter {
        filter: String::new(),
        reason: "not implemented yet",
    }
}

impl Conntrack {
    pub fn list_proto(
        &mut self,
        _family: Family,
        _proto: u8,
        _out: &mut Vec<Flow>,
    ) -> Result<ListOutcome, Error> {
        Err(unsupported())
    }
    pub fn list(&mut self, filters: &[Filter]) -> ListReport {
        ListReport {
            per_filter: vec![ListOutcome::Failed(libc::EOPNOTSUPP); filters.len()],
            ..ListReport::default()
        }
    }
    pub fn delete_flows(&mut self, flows: &[Flow]) -> Vec<FlowOutcome> {
        vec![FlowOutcome::Failed(libc::EOPNOTSUPP); flows.len()]
    }
}

/// Settings of the event socket.
#[derive(Debug, Clone, Default)]
pub struct EventConfig {
    pub rcvbuf: Option<usize>,
}

/// What one receive gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    Events(usize),
    Lost,
    Timeout,
    Stopped,
}

/// The conntrack event socket.
pub struct EventSocket;

impl EventSocket {
    pub fn open(_cfg: EventConfig) -> Result<EventSocket, Error> {
        Err(unsupported())
    }
    pub fn recv_until(
        &mut self,
        _out: &mut Vec<FlowEvent>,
        _stop: BorrowedFd<'_>,
        _timeout: Option<Duration>,
    ) -> Result<Received, Error> {
        Err(unsupported())
    }
}
