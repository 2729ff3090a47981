//! kube-nlproxy's sync engine.
//!
//! Collects Service / EndpointSlice / Node changes (no-op changes dropped), brings the
//! incremental compiler up to date, plans ONE atomic batch from what the kernel holds
//! (our last commit, known by its generation, or our tables read back) to the desired
//! state, commits it, and only after a successful commit deletes the UDP conntrack
//! entries that contradict the new rules. A batch the kernel refuses is planned again
//! without the service ports it is to blame on and committed at once; those ports are
//! checked one by one between syncs. Notifications from nftables (its own watcher
//! thread) repair our tables when another program changes them. See docs/sync.md.
//!
//! Modules, by job (each file imports only those above it in the list, and the
//! `Engine`'s methods in one file call only those of files above it):
//! - [`kernel`], `backoff`, [`schedule`], [`status`], `stoppable`: the kernel traits,
//!   the backoff rule, when the next sync is due, the status, a thread stopped by an
//!   eventfd;
//! - [`ledger`]: what the engine knows of the kernel, one type with named transitions
//!   (pure);
//! - [`stale`]: which UDP flows are stale, by the committed state (pure);
//! - [`cleanup`]: the conntrack cleanup's state, one type with named transitions (pure);
//! - [`cleaner`]: its driver on a conntrack kernel, on the engine's thread or beside it;
//! - [`compile`]: bringing the compiler up to date with what changed (pure);
//! - [`plan`]: the planner: the batch, the frontends it serves that the tables read back
//!   did not, and why (pure);
//! - [`isolate`]: the service ports a refusal is to blame on, the skipped ports (pure);
//! - [`engine`]: the engine's state, what the watcher tells of other programs;
//! - `inputs` (the sources' events in), `skipped` (the skipped ports published and
//!   paced), `conntrack` (telling the cleanup of each commit), `forward` (iptables
//!   mode's `KUBE-FORWARD` after a sync), `publish` (status and metrics after a sync),
//!   `ctnetlink` (the conntrack kernel on `ct-netlink`);
//! - `sync` (the executor: [`Engine::sync`]), then `trials` (checking skipped ports),
//!   then `work` (what is due and doing it: [`Engine::step`]);
//! - [`run`](mod@run): the loop around it.

mod backoff;
pub mod cleaner;
pub mod cleanup;
pub mod compile;
mod conntrack;
mod ctnetlink;
pub mod engine;
mod forward;
pub mod heard;
mod inputs;
pub mod isolate;
pub mod kernel;
pub mod ledger;
pub mod plan;
mod publish;
pub mod run;
pub mod schedule;
mod skipped;
pub mod stale;
pub mod status;
mod stoppable;
mod sync;
mod trials;
pub mod watch;
mod work;

/// The k8s-openapi version the events carry.
pub use k8s_openapi;
/// The events in and their channel (`proxy-events`, which the sources use too).
pub use proxy_events::{channel, Event, EventReceiver, EventSender};

pub use engine::Engine;
pub use heard::Heard;
pub use kernel::ConntrackOpener;
pub use kernel::{
    Clock, CommitStats, ConntrackKernel, FirstSyncStep, FlowEvents, Listening, NftKernel, Received,
    SystemClock,
};
pub use proxy_status::{
    CleanupReport, FilterWork, ForeignWriter, HealthCheck, LocalhostNodePort, NodeHealth, Observer,
    SkippedPort, Status, StatusHandle, SyncReport,
};
pub use run::{real_engine, run};
pub use work::Work;

use std::time::Duration;

use nft_model::{Family, TableRef};

/// Settings of the engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The compiler's configuration, parsed at the edge (the engine parses nothing).
    pub ruleset: ruleset::ParsedConfig,
    /// At most one sync per this period (upstream minSyncPeriod, default 1 s).
    pub min_sync_period: Duration,
    /// A full resync at least this often (upstream syncPeriod, default 30 s).
    pub sync_period: Duration,
    /// Test-only switch: false disables the conntrack cleanup. True by default.
    pub conntrack_cleanup: bool,
    /// First retry delay after a failed sync; doubled per consecutive failure.
    pub retry_initial: Duration,
    /// Upper bound of the retry delay.
    pub retry_max: Duration,
    /// Watch nftables events and repair our tables when another program changes them.
    pub watch_tamper: bool,
    /// At most this many flows deleted, or destinations listed, per conntrack kernel
    /// call (one call per loop turn, so a backlog never holds rule syncs back for more
    /// than one call).
    pub cleanup_slice_targets: usize,
    /// How often to try opening ctnetlink again while it is unavailable.
    pub conntrack_reprobe: Duration,
    /// Tamper repair backoff while another program fights over our tables: the second
    /// repair waits `repair_initial` after the first, doubled per repair, at most
    /// `repair_max`; back to immediate repairs after `repair_quiet` without changes.
    pub repair_initial: Duration,
    pub repair_max: Duration,
    pub repair_quiet: Duration,
    /// The IP families whose TCP NodePorts the localhost NodePort proxy serves (nftables
    /// mode with `KubeProxyNFTablesLocalhostNodePorts` and loopback in
    /// nodePortAddresses): the engine then publishes them in the status
    /// (`Status::localhost_node_ports`). Empty by default.
    pub localhost_node_port_families: Vec<kube_model::IpFamily>,
    /// Commits of more operations than this (each element of an element list counted
    /// as one: the kernel notifies each) are made with the nftables watcher's
    /// subscription dropped (the kernel then builds no notification of our elements);
    /// smaller ones are heard, and another program's commit right after them told apart.
    pub quiet_above_ops: usize,
    /// iptables mode: after each successful sync, upstream's `KUBE-FORWARD` chain and
    /// its jump from `FORWARD` in the iptables-nft `filter` tables of the compiler's
    /// families, put in place by a batch of their own (`nft-netlink::forward`) whose
    /// generation the engine knows as its own. None (the default): not written.
    pub forward: Option<nft_netlink::forward::ForwardConfig>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            ruleset: ruleset::ParsedConfig::default(),
            min_sync_period: Duration::from_secs(1),
            sync_period: Duration::from_secs(30),
            conntrack_cleanup: true,
            retry_initial: Duration::from_millis(500),
            retry_max: Duration::from_secs(30),
            watch_tamper: true,
            cleanup_slice_targets: 256,
            conntrack_reprobe: Duration::from_secs(30),
            repair_initial: Duration::from_millis(250),
            repair_max: Duration::from_secs(30),
            repair_quiet: Duration::from_secs(60),
            localhost_node_port_families: Vec::new(),
            quiet_above_ops: 2_000,
            forward: None,
        }
    }
}

/// Errors of the engine. Messages are lowercase.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("nftables: {0}")]
    Nft(#[from] nft_netlink::NftError),
    #[error("conntrack: {0}")]
    Conntrack(#[from] ct_netlink::Error),
    #[error("nftables event watch: {0}")]
    Watch(std::io::Error),
    #[error("the sources have not listed yet; no sync before the initial lists")]
    NotListed,
    #[error("{0}")]
    Other(String),
}

impl EngineError {
    /// Whether the kernel refused a batch (as opposed to a generation race, a socket
    /// or a decoding problem): then retrying the same batch cannot help.
    pub fn is_rejection(&self) -> bool {
        matches!(
            self,
            EngineError::Nft(
                nft_netlink::NftError::Rejected(_) | nft_netlink::NftError::BatchFailed(_)
            )
        )
    }
}

/// Our tables, in both families (the daemon only ever writes these).
pub fn our_tables() -> Vec<TableRef> {
    vec![
        TableRef::new(Family::Ip, ruleset::names::TABLE),
        TableRef::new(Family::Ip6, ruleset::names::TABLE),
    ]
}

/// The generation a successful commit on top of `g` produces (the kernel skips 0).
pub fn next_generation(g: u32) -> u32 {
    match g.wrapping_add(1) {
        0 => 1,
        n => n,
    }
}
