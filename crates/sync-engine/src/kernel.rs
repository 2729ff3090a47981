//! The engine's view of the kernel (nftables and conntrack) and of time: traits, so that
//! the deterministic tests drive a fake kernel and a fake clock.

use std::os::fd::BorrowedFd;
use std::time::Instant;

use ct_netlink::{Flow, FlowEvent};
use kube_model::IpFamily;

use nft_model::{Family, Op, Table, TableRef};

use crate::cleanup::{Removal, Scope};
use crate::EngineError;

/// What a successful commit did (the kernel-facing part of a sync).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitStats {
    pub ops: usize,
    pub bytes: usize,
}

/// The nftables side of the kernel (fakeable in tests).
pub trait NftKernel {
    fn generation(&mut self) -> Result<u32, EngineError>;
    fn commit(&mut self, ops: &[Op], genid: Option<u32>) -> Result<CommitStats, EngineError>;
    /// Our table `t` as the kernel holds it (None: absent). A dump the generation moved
    /// under (from `before` to `after`) is still good when `others_only(before, after)`
    /// (every transaction in between touched other tables only: [`crate::Heard`]).
    fn dump_table(
        &mut self,
        t: &TableRef,
        others_only: &mut dyn FnMut(u32, u32) -> bool,
    ) -> Result<Option<Table>, EngineError>;
    /// Put `KUBE-FORWARD` and its jump in place in the `filter` tables of `families`
    /// (a guarded batch per family that needs one). Returns the generation that guarded
    /// each committed batch (empty: everything was in place). A kernel without iptables
    /// tables to tend (a file, a test's) has nothing to do.
    fn ensure_forward(
        &mut self,
        _families: &[Family],
        _cfg: nft_netlink::forward::ForwardConfig,
    ) -> Result<Vec<u32>, EngineError> {
        Ok(Vec::new())
    }
}

/// A step the engine runs once, right after its first successful sync (the daemon's
/// removal of kube-proxy's leftovers: other programs' chains and tables, never ours).
/// Returns the generation that guarded each nftables batch it committed: the engine
/// enters them in its ledger as commits of its own (`Ledger::side_commit`).
pub trait FirstSyncStep: Send {
    fn run(self: Box<Self>) -> Vec<u32>;
}

/// The nftables watcher's subscription to notifications, dropped (`set(false)`) right
/// before each of our large commits and taken again (`set(true)`) right after it, before
/// the generation is read: the kernel builds a notification per element of a commit only
/// while some socket on the machine listens, and the engine needs none of its own. A
/// commit by another program while it was dropped is not heard, so it shows in that
/// generation as a reason to read our tables back. Small commits stay heard: another
/// program's commit waiting for ours is then told apart.
pub trait Listening: Send {
    fn set(&self, on: bool) -> std::io::Result<()>;
}

impl Listening for nft_netlink::watch::Membership {
    fn set(&self, on: bool) -> std::io::Result<()> {
        nft_netlink::watch::Membership::set(self, on)
    }
}

impl NftKernel for nft_netlink::Nft {
    fn generation(&mut self) -> Result<u32, EngineError> {
        Ok(nft_netlink::Nft::generation(self)?)
    }
    fn commit(&mut self, ops: &[Op], genid: Option<u32>) -> Result<CommitStats, EngineError> {
        let r = nft_netlink::Nft::commit(self, ops, genid)?;
        Ok(CommitStats {
            ops: r.ops,
            bytes: r.bytes,
        })
    }
    fn dump_table(
        &mut self,
        t: &TableRef,
        others_only: &mut dyn FnMut(u32, u32) -> bool,
    ) -> Result<Option<Table>, EngineError> {
        Ok(nft_netlink::Nft::dump_table_judged(self, t, others_only)?)
    }
    fn ensure_forward(
        &mut self,
        families: &[Family],
        cfg: nft_netlink::forward::ForwardConfig,
    ) -> Result<Vec<u32>, EngineError> {
        Ok(nft_netlink::Nft::ensure_kube_forward(self, families, cfg)?.guards)
    }
}

/// The conntrack side of the kernel (fakeable in tests): listing UDP flows, deleting
/// exact flows, and the stream of NEW/DESTROY events. The cleanup judges what it lists
/// ([`crate::stale`]); nothing here decides what is stale.
pub trait ConntrackKernel: Send {
    /// Every UDP flow of `family`, appended to `out`. False: the listing was incomplete
    /// (an interrupted dump); what it found is still appended.
    fn list_udp(&mut self, family: IpFamily, out: &mut Vec<Flow>) -> Result<bool, EngineError>;

    /// The UDP flows sent to each scope (a NodePort: to that port, any address), appended
    /// to `out` (each flow once). One completeness per scope, in order.
    fn list(&mut self, scopes: &[Scope], out: &mut Vec<Flow>) -> Result<Vec<bool>, EngineError>;

    /// Delete exactly these flows (by tuple, zone and id). One outcome per flow, in
    /// order (missing ones count as failed).
    fn delete(&mut self, flows: &[Flow]) -> Result<Vec<Removal>, EngineError>;

    /// Open the stream of conntrack NEW/DESTROY events for UDP flows (None: not
    /// available here; the cleanup then lists destinations from the kernel).
    fn events(&mut self) -> Option<Box<dyn FlowEvents>> {
        None
    }

    /// How listings are made, for the metrics (`filtered-dump`, `port-dump`,
    /// `full-dump`; `unknown` when the kernel side does not say).
    fn listing(&self) -> &'static str {
        "unknown"
    }
}

/// What one wait on the event stream gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// Events were appended (maybe none).
    Events,
    /// The kernel dropped events (the receive buffer overflowed): seed again.
    Lost,
    /// `stop` became readable.
    Stopped,
}

/// The conntrack event stream (read on a thread of its own).
pub trait FlowEvents: Send {
    /// Wait until events arrive (appended to `out`) or `stop` becomes readable.
    fn recv(&mut self, out: &mut Vec<FlowEvent>, stop: BorrowedFd<'_>)
        -> std::io::Result<Received>;
}

/// A source of time (injectable for tests).
pub trait Clock {
    fn now(&self) -> Instant;
}

/// The system's monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// Opens the conntrack socket (probing the kernel); called again while it fails.
pub type ConntrackOpener<C> = Box<dyn FnMut() -> Result<C, EngineError> + Send>;
