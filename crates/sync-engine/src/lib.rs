//! kube-nlproxy's sync engine.
//!
//! Collects Service / EndpointSlice / Node changes (no-op changes dropped), compiles them
//! into the nftables ruleset, diffs against the last committed ruleset kept in memory,
//! commits ONE atomic batch, and only after a successful commit deletes the UDP conntrack
//! entries that contradict the new rules. Full resyncs use the ruleset generation id to
//! learn whether anyone else changed nftables, and only then dump our tables; a watcher
//! on nftables notifications repairs our tables when another program changes them.
//! See docs/sync.md.

pub mod targets;
pub mod watch;

/// The k8s-openapi version the events carry.
pub use k8s_openapi;

use std::collections::{BTreeMap, BTreeSet};

use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_model::{Cluster, ServiceKey};
use nft_model::{Family, Op, Table, TableRef};

use targets::{EndpointSnapshot, Target};

/// An input of the engine. (The objects are not boxed: this is the agreed API, and an
/// event is moved once through a channel.)
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum Event {
    ServiceApplied(Service),
    ServiceDeleted(Service),
    SliceApplied(EndpointSlice),
    SliceDeleted(EndpointSlice),
    NodeApplied(Node),
    /// The services source's initial list (or a relist) is complete.
    ServicesListed,
    /// The endpoint slices source's initial list (or a relist) is complete.
    SlicesListed,
    /// Ask for a full resync now (bypasses minSyncPeriod).
    Resync,
    Shutdown,
}

/// Settings of the engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub ruleset: ruleset::Config,
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
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            ruleset: ruleset::Config::default(),
            min_sync_period: Duration::from_secs(1),
            sync_period: Duration::from_secs(30),
            conntrack_cleanup: true,
            retry_initial: Duration::from_millis(500),
            retry_max: Duration::from_secs(30),
            watch_tamper: true,
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
    #[error("configuration: {0}")]
    Config(#[from] ruleset::RulesetError),
    #[error("nftables event watch: {0}")]
    Watch(std::io::Error),
    #[error("the sources have not listed yet; no sync before the initial lists")]
    NotListed,
    #[error("{0}")]
    Other(String),
}

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
    fn dump_table(&mut self, t: &TableRef) -> Result<Option<Table>, EngineError>;
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
    fn dump_table(&mut self, t: &TableRef) -> Result<Option<Table>, EngineError> {
        Ok(nft_netlink::Nft::dump_table(self, t)?)
    }
}

/// The conntrack side of the kernel (fakeable in tests). Returns the entries deleted.
pub trait ConntrackKernel {
    fn delete(&mut self, filters: &[ct_netlink::Filter]) -> Result<u64, EngineError>;
}

impl ConntrackKernel for ct_netlink::Conntrack {
    fn delete(&mut self, filters: &[ct_netlink::Filter]) -> Result<u64, EngineError> {
        Ok(ct_netlink::Conntrack::delete(self, filters)?.deleted)
    }
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

/// What one successful sync did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncReport {
    pub full: bool,
    pub services: usize,
    pub endpoints: usize,
    pub ops: usize,
    pub bytes: usize,
    pub compile: Duration,
    pub commit: Duration,
    pub conntrack: Duration,
    pub conntrack_deleted: u64,
    pub conntrack_targets: usize,
    /// Invalid objects (skipped or partly skipped).
    pub errors: Vec<String>,
}

/// Metrics hooks (default: no-op).
pub trait Observer: Send {
    fn synced(&self, _r: &SyncReport) {}
    fn failed(&self, _e: &EngineError) {}
    fn repaired(&self) {}
}

struct NoObserver;
impl Observer for NoObserver {}

/// What the /healthz endpoint needs of this node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeHealth {
    pub name: String,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The node carries the `ToBeDeletedByClusterAutoscaler` taint.
    pub to_be_deleted_taint: bool,
}

impl NodeHealth {
    /// Whether the node may receive load-balancer traffic (`nodeEligible`).
    pub fn eligible(&self) -> bool {
        !self.deleting && !self.to_be_deleted_taint
    }
}

/// Local endpoints of one service with a healthCheckNodePort.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    pub node_port: u16,
    pub local_endpoints: usize,
}

/// A snapshot of the engine's status.
#[derive(Debug, Clone, Default)]
pub struct Status {
    /// Monotonic time of the last successful sync.
    pub last_sync: Option<Instant>,
    /// Wall-clock time of the last successful sync.
    pub last_sync_wall: Option<SystemTime>,
    /// The oldest change queued but not yet applied (None: nothing pending).
    pub queued_since: Option<Instant>,
    /// Wall-clock time of `queued_since`.
    pub queued_since_wall: Option<SystemTime>,
    pub sync_period: Duration,
    pub last_report: Option<SyncReport>,
    /// Failed syncs since start, and in a row.
    pub failures: u64,
    pub consecutive_failures: u32,
    /// Conntrack delete calls that failed since start.
    pub conntrack_failures: u64,
    /// Repairs of our tables after another program changed them.
    pub repairs: u64,
    pub node: Option<NodeHealth>,
    /// Services with a healthCheckNodePort, and their endpoints on this node.
    pub health_checks: std::collections::BTreeMap<ServiceKey, HealthCheck>,
    /// Services with a Local internal / external traffic policy that have ready
    /// endpoints but none on this node (kube-proxy's `no_local_endpoints_total`).
    pub no_local_internal: usize,
    pub no_local_external: usize,
}

impl Status {
    /// Upstream's rule: unhealthy when a change has been queued for more than
    /// 2 x syncPeriod without being applied.
    pub fn healthy(&self, now: Instant) -> bool {
        match self.queued_since {
            None => true,
            Some(q) => now.saturating_duration_since(q) <= self.sync_period * 2,
        }
    }
}

/// A clonable handle on the engine's status, for the health and metrics servers.
#[derive(Debug, Clone, Default)]
pub struct StatusHandle(Arc<Mutex<Status>>);

impl StatusHandle {
    pub fn snapshot(&self) -> Status {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    pub fn healthy(&self, now: Instant) -> bool {
        self.snapshot().healthy(now)
    }
    fn update(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
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

/// Our tables as read (or trusted), the generation they belong to, and whether another
/// program changed them since our last commit.
type BaseRead = (Vec<(TableRef, Base)>, u32, bool);

/// What we know of one of our tables in the kernel.
#[derive(Debug, Clone)]
enum Base {
    /// Exactly this (None: absent).
    Known(Option<Table>),
    /// It exists but could not be read back into the model: replace it wholesale.
    Unreadable,
}

/// The sync engine: owns the cluster model, the last committed ruleset and the pending
/// conntrack targets. Single-threaded: one sync at a time by construction.
pub struct Engine<N: NftKernel, C: ConntrackKernel, K: Clock> {
    cfg: EngineConfig,
    nft: N,
    ct: C,
    clock: K,
    status: StatusHandle,
    observer: Box<dyn Observer>,

    cluster: Cluster,
    /// Latest problem per object (from conversion), for the reports.
    model_errors: BTreeMap<String, Vec<String>>,
    services_listed: bool,
    slices_listed: bool,
    /// A change was queued since the last successful sync.
    dirty: bool,
    queued_since: Option<Instant>,

    /// The ruleset as of our last successful commit (None: unknown).
    committed: Option<Vec<Table>>,
    /// The generation our last commit produced (None: unknown).
    committed_gen: Option<u32>,
    /// Serving endpoints of the UDP service ports as of the last successful sync.
    applied_eps: Option<EndpointSnapshot>,
    /// Conntrack targets not yet cleared (kept across failed commits).
    pending: BTreeSet<Target>,

    last_attempt: Option<Instant>,
    last_success: Option<Instant>,
    last_full: Option<Instant>,
    consecutive_failures: u32,
    force_full: bool,
    /// Sync at once, bypassing minSyncPeriod (tamper repair, explicit resync).
    urgent: bool,
    /// Generations produced by our commits, not yet handed to the watcher.
    our_gens: Vec<u32>,
}

impl<N: NftKernel, C: ConntrackKernel, K: Clock> Engine<N, C, K> {
    pub fn new(cfg: EngineConfig, nft: N, ct: C, clock: K) -> Engine<N, C, K> {
        let status = StatusHandle::default();
        status.update(|s| s.sync_period = cfg.sync_period);
        Engine {
            cfg,
            nft,
            ct,
            clock,
            status,
            observer: Box::new(NoObserver),
            cluster: Cluster::new(),
            model_errors: BTreeMap::new(),
            services_listed: false,
            slices_listed: false,
            dirty: false,
            queued_since: None,
            committed: None,
            committed_gen: None,
            applied_eps: None,
            pending: BTreeSet::new(),
            last_attempt: None,
            last_success: None,
            last_full: None,
            consecutive_failures: 0,
            force_full: false,
            urgent: false,
            our_gens: Vec::new(),
        }
    }

    pub fn set_observer(&mut self, o: Box<dyn Observer>) {
        self.observer = o;
    }

    pub fn status(&self) -> StatusHandle {
        self.status.clone()
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// The cluster model as the engine sees it.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The ruleset as of the last successful commit.
    pub fn committed(&self) -> Option<&[Table]> {
        self.committed.as_deref()
    }

    /// Conntrack targets waiting for the next successful commit.
    pub fn pending_targets(&self) -> Vec<Target> {
        self.pending.iter().copied().collect()
    }

    /// Whether a change is queued and not yet applied.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Ask for a full sync at once (another program changed our tables).
    pub fn request_repair(&mut self) {
        self.force_full = true;
        self.urgent = true;
    }

    /// Generations produced by our own commits since the last call (for the watcher).
    pub fn take_our_generations(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.our_gens)
    }

    fn queue(&mut self) {
        self.dirty = true;
        if self.queued_since.is_none() {
            let now = self.clock.now();
            self.queued_since = Some(now);
            let wall = SystemTime::now();
            self.status.update(|s| {
                s.queued_since = Some(now);
                s.queued_since_wall = Some(wall);
            });
        }
    }

    fn note_errors(&mut self, object: String, mut warnings: Vec<String>, err: Option<String>) {
        warnings.extend(err);
        if warnings.is_empty() {
            self.model_errors.remove(&object);
        } else {
            for w in &warnings {
                tracing::warn!(%object, error = %w, "invalid object");
            }
            self.model_errors.insert(object, warnings);
        }
    }

    /// Take one input. Changes that leave the model as it was are dropped.
    pub fn handle(&mut self, ev: Event) {
        match ev {
            Event::ServiceApplied(svc) => {
                let key = ns_key(&svc.metadata);
                let before = self.cluster.services.get(&key).cloned();
                let mut warnings = Vec::new();
                let r = self.cluster.upsert_service(&svc, &mut warnings);
                self.note_errors(
                    format!("service {key}"),
                    warnings.iter().map(ToString::to_string).collect(),
                    r.err().map(|e| e.to_string()),
                );
                if self.cluster.services.get(&key) != before.as_ref() {
                    self.queue();
                }
            }
            Event::ServiceDeleted(svc) => {
                let key = ns_key(&svc.metadata);
                self.model_errors.remove(&format!("service {key}"));
                if self.cluster.remove_service(&key).is_some() {
                    self.queue();
                }
            }
            Event::SliceApplied(slice) => {
                let key = ns_key(&slice.metadata);
                let before = self.cluster.slice(&key).cloned();
                let mut warnings = Vec::new();
                let r = self.cluster.upsert_slice(&slice, &mut warnings);
                self.note_errors(
                    format!("endpointslice {key}"),
                    warnings.iter().map(ToString::to_string).collect(),
                    r.err().map(|e| e.to_string()),
                );
                if self.cluster.slice(&key) != before.as_ref() {
                    self.queue();
                }
            }
            Event::SliceDeleted(slice) => {
                let key = ns_key(&slice.metadata);
                self.model_errors.remove(&format!("endpointslice {key}"));
                if self.cluster.remove_slice(&key).is_some() {
                    self.queue();
                }
            }
            Event::NodeApplied(node) => self.node_applied(&node),
            Event::ServicesListed => self.services_listed = true,
            Event::SlicesListed => self.slices_listed = true,
            Event::Resync => self.request_repair(),
            Event::Shutdown => {}
        }
    }

    fn node_applied(&mut self, node: &Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let ours = &self.cfg.ruleset.node_name;
        if !ours.is_empty() && &name != ours {
            tracing::debug!(node = %name, "ignoring another node");
            return;
        }
        let health = NodeHealth {
            name: name.clone(),
            deleting: node.metadata.deletion_timestamp.is_some(),
            to_be_deleted_taint: node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == "ToBeDeletedByClusterAutoscaler")),
        };
        self.status.update(|s| s.node = Some(health));
        let before = self.cluster.node.clone();
        let mut warnings = Vec::new();
        let r = self.cluster.set_node(node, &mut warnings);
        self.note_errors(
            format!("node {name}"),
            warnings.iter().map(ToString::to_string).collect(),
            r.err().map(|e| e.to_string()),
        );
        if self.cluster.node != before {
            self.queue();
        }
    }

    /// Whether both sources delivered their initial list.
    pub fn listed(&self) -> bool {
        self.services_listed && self.slices_listed
    }

    fn retry_delay(&self) -> Duration {
        let shift = self.consecutive_failures.saturating_sub(1).min(16);
        let d = self
            .cfg
            .retry_initial
            .saturating_mul(1u32 << shift)
            .min(self.cfg.retry_max);
        d.max(self.cfg.min_sync_period)
    }

    /// When the next sync is due (None: not before the initial lists, or never).
    ///
    /// - after a failure: the last attempt plus the backoff (at least minSyncPeriod);
    /// - the first sync: as soon as both sources listed;
    /// - a repair or explicit resync: now (bypasses minSyncPeriod);
    /// - queued changes: the last attempt plus minSyncPeriod;
    /// - otherwise the periodic full resync: the last full sync plus syncPeriod.
    pub fn next_sync_at(&self) -> Option<Instant> {
        if !self.listed() {
            return None;
        }
        let now = self.clock.now();
        if self.consecutive_failures > 0 {
            return Some(self.last_attempt.map_or(now, |t| t + self.retry_delay()));
        }
        let (Some(last_full), Some(last_attempt)) = (self.last_full, self.last_attempt) else {
            return Some(now);
        };
        if self.last_success.is_none() {
            return Some(now);
        }
        let mut at = last_full + self.cfg.sync_period;
        if self.urgent {
            at = at.min(now);
        }
        if self.dirty || self.force_full {
            at = at.min(last_attempt + self.cfg.min_sync_period);
        }
        Some(at)
    }

    /// Sync now: compile, diff, commit one atomic batch, then (only on success) clear the
    /// conntrack targets. A failed sync changes nothing, keeps its targets pending and
    /// makes the next sync a full one.
    pub fn sync(&mut self) -> Result<SyncReport, EngineError> {
        if !self.listed() {
            return Err(EngineError::NotListed);
        }
        let now = self.clock.now();
        self.last_attempt = Some(now);
        let full = self.committed.is_none()
            || self.force_full
            || self
                .last_full
                .filter(|t| now < *t + self.cfg.sync_period)
                .is_none();
        match self.try_sync(full) {
            Ok((report, repaired)) => {
                self.consecutive_failures = 0;
                self.force_full = false;
                self.urgent = false;
                self.dirty = false;
                self.queued_since = None;
                self.last_success = Some(now);
                if report.full {
                    self.last_full = Some(now);
                }
                let checks = self.health_checks();
                let (no_local_internal, no_local_external) = self.no_local_endpoints();
                let wall = SystemTime::now();
                let r = report.clone();
                self.status.update(|s| {
                    s.last_sync = Some(now);
                    s.last_sync_wall = Some(wall);
                    s.queued_since = None;
                    s.queued_since_wall = None;
                    s.consecutive_failures = 0;
                    s.last_report = Some(r);
                    s.health_checks = checks;
                    s.no_local_internal = no_local_internal;
                    s.no_local_external = no_local_external;
                    if repaired {
                        s.repairs += 1;
                    }
                });
                if repaired {
                    self.observer.repaired();
                }
                self.observer.synced(&report);
                Ok(report)
            }
            Err(e) => {
                tracing::warn!(error = %e, "sync failed; will retry with a full sync");
                self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                self.force_full = true;
                let n = self.consecutive_failures;
                self.status.update(|s| {
                    s.failures += 1;
                    s.consecutive_failures = n;
                });
                self.observer.failed(&e);
                Err(e)
            }
        }
    }

    /// Read our tables back: trust the in-memory copy when the generation says nobody
    /// committed since our last commit, else dump our tables over netlink.
    fn read_base(&mut self) -> Result<BaseRead, EngineError> {
        let gen = self.nft.generation()?;
        if let (Some(c), Some(g)) = (&self.committed, self.committed_gen) {
            if g == gen {
                return Ok((known(c), gen, false));
            }
        }
        let mut out = Vec::new();
        for t in our_tables() {
            let b = match self.nft.dump_table(&t) {
                Ok(tab) => Base::Known(tab),
                Err(EngineError::Nft(e @ nft_netlink::NftError::Decode { .. })) => {
                    tracing::warn!(table = ?t, error = %e, "our table cannot be read back; replacing it");
                    Base::Unreadable
                }
                Err(e) => return Err(e),
            };
            out.push((t, b));
        }
        let drift = match &self.committed {
            None => false,
            Some(c) => out.iter().any(|(t, b)| {
                let mine = c.iter().find(|x| x.family == t.family && x.name == t.name);
                match (b, mine) {
                    (Base::Unreadable, _) => true,
                    (Base::Known(None), None) => false,
                    (Base::Known(Some(_)), None) | (Base::Known(None), Some(_)) => true,
                    (Base::Known(Some(k)), Some(m)) => {
                        !ruleset::diff_tables(Some(k), m).is_empty()
                            || !ruleset::diff_tables(Some(m), k).is_empty()
                    }
                }
            }),
        };
        if drift {
            tracing::warn!("our nftables tables were changed by another program; repairing");
        }
        Ok((out, gen, drift))
    }

    fn try_sync(&mut self, mut full: bool) -> Result<(SyncReport, bool), EngineError> {
        let t0 = Instant::now();
        let parsed = self.cfg.ruleset.parse()?;
        let compiled = ruleset::compile_parsed(&self.cluster, &parsed);
        let desired = compiled.tables;
        let mut errors: Vec<String> = self.model_errors.values().flatten().cloned().collect();
        errors.extend(compiled.errors.iter().map(ToString::to_string));
        let new_eps = targets::endpoint_snapshot(&self.cluster, &parsed.families);
        let compile = t0.elapsed();

        let mut tries = 0;
        loop {
            tries += 1;
            let (base, guard, drift) = if full {
                self.read_base()?
            } else {
                match (&self.committed, self.committed_gen) {
                    (Some(c), Some(g)) => (known(c), g, false),
                    _ => {
                        full = true;
                        continue;
                    }
                }
            };
            let ops = batch(&base, &desired);

            // Targets implied by going from the kernel's rules to the desired ones.
            let base_tables: Vec<Table> = base
                .iter()
                .filter_map(|(_, b)| match b {
                    Base::Known(Some(t)) => Some(t.clone()),
                    _ => None,
                })
                .collect();
            let old_served = targets::served_destinations(&base_tables);
            let new_served = targets::served_destinations(&desired);
            self.pending
                .extend(targets::new_destinations(&old_served, &new_served));
            match &self.applied_eps {
                Some(old) => self.pending.extend(targets::stale_endpoints(old, &new_eps)),
                None => {
                    // First sync of this process: the endpoints the previous run's rules
                    // DNAT to and the new ones do not.
                    let now = targets::table_endpoints(&desired);
                    for (addr, port) in targets::table_endpoints(&base_tables) {
                        if !now.contains(&(addr, port)) {
                            self.pending.insert(Target::Endpoint { addr, port });
                        }
                    }
                }
            }

            let t1 = Instant::now();
            let stats = if ops.is_empty() {
                CommitStats::default()
            } else {
                match self.nft.commit(&ops, Some(guard)) {
                    Ok(s) => s,
                    Err(EngineError::Nft(nft_netlink::NftError::GenerationChanged { .. }))
                        if tries < 3 =>
                    {
                        tracing::info!("ruleset changed under us; re-reading and retrying");
                        full = true;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            };
            let commit = t1.elapsed();
            if !ops.is_empty() {
                let expected = next_generation(guard);
                self.our_gens.push(expected);
                self.committed_gen = Some(expected);
                match self.nft.generation() {
                    Ok(g) if g == expected => {}
                    Ok(_) => {
                        // Someone committed right after us: verify on the next sync.
                        self.force_full = true;
                        self.urgent = true;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the generation after a commit");
                        self.force_full = true;
                    }
                }
            } else {
                self.committed_gen = Some(guard);
            }
            self.committed = Some(desired);
            self.applied_eps = Some(new_eps);

            // Only now, with the new rules in place: clear what contradicts them.
            let t2 = Instant::now();
            let conntrack_targets = self.pending.len();
            let mut conntrack_deleted = 0;
            if !self.pending.is_empty() {
                if self.cfg.conntrack_cleanup {
                    let filters: Vec<ct_netlink::Filter> =
                        self.pending.iter().map(Target::filter).collect();
                    match self.ct.delete(&filters) {
                        Ok(n) => conntrack_deleted = n,
                        Err(e) => {
                            tracing::warn!(error = %e, "conntrack cleanup failed");
                            self.status.update(|s| s.conntrack_failures += 1);
                        }
                    }
                } else {
                    tracing::debug!(
                        targets = conntrack_targets,
                        "conntrack cleanup disabled; skipped"
                    );
                }
                self.pending.clear();
            }
            let conntrack = t2.elapsed();
            let endpoints = self
                .cluster
                .slices()
                .values()
                .map(|s| s.endpoints.len())
                .sum();
            let report = SyncReport {
                full,
                services: self.cluster.services.len(),
                endpoints,
                ops: ops.len(),
                bytes: stats.bytes,
                compile,
                commit,
                conntrack,
                conntrack_deleted,
                conntrack_targets,
                errors,
            };
            tracing::debug!(?report, "synced");
            return Ok((report, drift && !ops.is_empty()));
        }
    }

    /// Ready local endpoints per service with a healthCheckNodePort (distinct addresses).
    /// (internal, external): services with that traffic policy Local, ready endpoints,
    /// and none of them on this node.
    fn no_local_endpoints(&self) -> (usize, usize) {
        let node = &self.cfg.ruleset.node_name;
        let idx = self.cluster.endpoint_index();
        let (mut internal, mut external) = (0, 0);
        for svc in self.cluster.services.values() {
            let (mut any, mut local) = (false, false);
            for s in idx.get(&svc.key).map(Vec::as_slice).unwrap_or(&[]) {
                for e in s.endpoints.iter().filter(|e| e.ready) {
                    any = true;
                    local |= !node.is_empty() && e.node_name.as_deref() == Some(node);
                }
            }
            if any && !local {
                internal +=
                    usize::from(svc.internal_traffic_policy == kube_model::TrafficPolicy::Local);
                external +=
                    usize::from(svc.external_traffic_policy == kube_model::TrafficPolicy::Local);
            }
        }
        (internal, external)
    }

    fn health_checks(&self) -> BTreeMap<ServiceKey, HealthCheck> {
        let node = &self.cfg.ruleset.node_name;
        let idx = self.cluster.endpoint_index();
        let mut out = BTreeMap::new();
        for svc in self.cluster.services.values() {
            let Some(np) = svc.health_check_node_port else {
                continue;
            };
            // Ready local endpoint addresses per family: a dual-stack pod is one endpoint
            // (kube-proxy counts per family, one proxier each).
            let (mut v4, mut v6) = (BTreeSet::new(), BTreeSet::new());
            for s in idx.get(&svc.key).map(Vec::as_slice).unwrap_or(&[]) {
                for e in &s.endpoints {
                    if e.ready && !node.is_empty() && e.node_name.as_deref() == Some(node) {
                        if e.addr.is_ipv4() { &mut v4 } else { &mut v6 }.insert(e.addr);
                    }
                }
            }
            out.insert(
                svc.key.clone(),
                HealthCheck {
                    node_port: np,
                    local_endpoints: v4.len().max(v6.len()),
                },
            );
        }
        out
    }
}

fn ns_key(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> ServiceKey {
    ServiceKey::new(
        m.namespace.clone().unwrap_or_else(|| "default".into()),
        m.name.clone().unwrap_or_default(),
    )
}

fn known(tables: &[Table]) -> Vec<(TableRef, Base)> {
    our_tables()
        .into_iter()
        .map(|t| {
            let tab = tables
                .iter()
                .find(|x| x.family == t.family && x.name == t.name)
                .cloned();
            (t, Base::Known(tab))
        })
        .collect()
}

/// The one batch turning `base` into `desired`, table by table.
fn batch(base: &[(TableRef, Base)], desired: &[Table]) -> Vec<Op> {
    let mut ops = Vec::new();
    for (t, b) in base {
        let want = desired
            .iter()
            .find(|x| x.family == t.family && x.name == t.name);
        match (b, want) {
            (Base::Known(old), Some(new)) => ops.extend(ruleset::diff_tables(old.as_ref(), new)),
            (Base::Known(Some(_)), None) => ops.push(Op::DeleteTable { table: t.clone() }),
            (Base::Known(None), None) => {}
            (Base::Unreadable, want) => {
                ops.push(Op::DeleteTable { table: t.clone() });
                if let Some(new) = want {
                    ops.extend(ruleset::diff_tables(None, new));
                }
            }
        }
    }
    // Tables we do not track by name (none today) are created as they are.
    for d in desired {
        if !base
            .iter()
            .any(|(t, _)| t.family == d.family && t.name == d.name)
        {
            ops.extend(ruleset::diff_tables(None, d));
        }
    }
    ops
}

/// How often the loop polls the nftables event socket.
const WATCH_POLL: Duration = Duration::from_millis(50);
/// How long the loop sleeps when nothing is due.
const IDLE: Duration = Duration::from_secs(3600);

/// The bounded-frequency loop, on the calling thread: handles events, syncs when due
/// ([`Engine::next_sync_at`]), watches nftables for changes by other programs (when
/// `watch_tamper` is on) and repairs them at once. Returns on [`Event::Shutdown`] or
/// when the sender is dropped. Sync failures are retried, never returned.
pub fn run<N: NftKernel, C: ConntrackKernel, K: Clock>(
    mut engine: Engine<N, C, K>,
    events: Receiver<Event>,
) -> Result<(), EngineError> {
    use std::sync::mpsc::RecvTimeoutError;
    let mut watcher = if engine.cfg.watch_tamper {
        match watch::Watcher::open(our_tables()) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch nftables events; relying on periodic resyncs");
                None
            }
        }
    } else {
        None
    };
    loop {
        if let Some(at) = engine.next_sync_at() {
            // Read the clock after next_sync_at, which may answer with its own "now".
            if at <= engine.clock.now() {
                // Failures are counted and retried by next_sync_at's backoff.
                let _ = engine.sync();
                if let Some(w) = watcher.as_mut() {
                    for g in engine.take_our_generations() {
                        w.ours(g);
                    }
                }
                continue;
            }
        }
        let now = engine.clock.now();
        let mut wait = engine
            .next_sync_at()
            .map_or(IDLE, |at| at.saturating_duration_since(now));
        if watcher.is_some() {
            wait = wait.min(WATCH_POLL);
        }
        match events.recv_timeout(wait) {
            Ok(Event::Shutdown) => return Ok(()),
            Ok(ev) => {
                engine.handle(ev);
                // Take everything already queued before deciding to sync.
                for _ in 0..100_000 {
                    match events.try_recv() {
                        Ok(Event::Shutdown) => return Ok(()),
                        Ok(ev) => engine.handle(ev),
                        Err(std::sync::mpsc::TryRecvError::Empty) => break,
                        Err(std::sync::mpsc::TryRecvError::Disconnected) => return Ok(()),
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
        if let Some(w) = watcher.as_mut() {
            for g in engine.take_our_generations() {
                w.ours(g);
            }
            if w.poll() {
                engine.request_repair();
            }
        }
    }
}

/// An engine on real netlink sockets, in the calling thread's network namespace.
pub fn real_engine(
    cfg: EngineConfig,
) -> Result<Engine<nft_netlink::Nft, ct_netlink::Conntrack, SystemClock>, EngineError> {
    let nft = nft_netlink::Nft::open()?;
    let ct = ct_netlink::Conntrack::open(ct_netlink::Config::default())?;
    Ok(Engine::new(cfg, nft, ct, SystemClock))
}
