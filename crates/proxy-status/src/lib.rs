//! The proxy's status, as the sync engine writes it and the operator servers (`/healthz`,
//! `/livez`, metrics, health-check node ports) read it, the engine's metrics hooks
//! ([`Observer`]) and the sources' ([`SourceObserver`], [`RestObserver`]). A small crate
//! of plain data so that the servers depend neither on the engine nor on the netlink
//! stack, and the sources not on the servers. Also the retry pacing they share
//! ([`Backoff`]).

pub mod backoff;
pub use backoff::Backoff;

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use kube_model::{IpFamily, ServiceKey};

/// What one successful sync did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncReport {
    /// A full sync: the periodic (or a forced) resync, or a batch made from our tables
    /// as read back (a diff, a repair or a replacement). How the batch was made is
    /// `kind`: a periodic resync whose generation shows the kernel holds our last
    /// commit commits the compiler's (empty) batch.
    pub full: bool,
    /// How the batch was made: `incremental`, `full`, `repair` or `replacement`
    /// (empty in a default report).
    pub kind: &'static str,
    /// The batch repaired a change another program made to our tables.
    pub repaired: bool,
    pub services: usize,
    pub endpoints: usize,
    pub ops: usize,
    pub bytes: usize,
    pub compile: Duration,
    pub commit: Duration,
    pub conntrack: Duration,
    pub conntrack_deleted: u64,
    /// Cleanup targets this sync worked on (cleaned, or dropped with the cleanup off).
    pub conntrack_targets: usize,
    /// Cleanup targets still pending after this sync (retried later).
    pub conntrack_pending: usize,
    /// Invalid objects (skipped or partly skipped).
    pub errors: Vec<String>,
    /// When the batch was committed (wall clock; the end of network programming).
    pub committed_at: Option<SystemTime>,
    /// From the oldest change this sync consumed reaching the engine (the first change
    /// queued since the last successful sync) to the kernel's ACK of the commit; `None`
    /// when no change was queued (a periodic or repair sync).
    pub since_event: Option<Duration>,
    /// The `endpoints.kubernetes.io/last-change-trigger-time` of each EndpointSlice
    /// change this sync applied (changes since the engine started), with the slice's
    /// family: kube-proxy's network programming latency runs from there to the commit.
    pub trigger_times: Vec<(IpFamily, SystemTime)>,
    /// What the conntrack cleanup did with each target of this sync, and how.
    pub conntrack_filters: Vec<FilterWork>,
}

/// How the conntrack cleanup served one target (one filter of a delete call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterWork {
    pub family: IpFamily,
    /// The strategy actually used (`filtered-flush`, `filtered-dump`, `full-dump`;
    /// `None` when the kernel side does not say).
    pub strategy: Option<&'static str>,
    /// `deleted`, `already-gone`, `capped`, `incomplete` or `failed`.
    pub outcome: &'static str,
    /// Entries deleted, when known (a filtered flush is not counted by the kernel).
    pub deleted: Option<u64>,
}

/// What one conntrack cleanup slice between syncs did (the slice run by a sync is in
/// its [`SyncReport`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CleanupReport {
    /// Targets worked on.
    pub targets: usize,
    /// Targets finished (deleted or already gone).
    pub done: usize,
    /// Conntrack entries deleted (as far as the kernel says).
    pub deleted: u64,
    pub took: Duration,
    /// Targets still pending.
    pub pending: usize,
    /// Each target worked on, and how.
    pub filters: Vec<FilterWork>,
}

/// Metrics hooks of the engine (default: no-op).
pub trait Observer: Send {
    fn synced(&self, _r: &SyncReport) {}
    /// A conntrack cleanup slice ran between syncs.
    fn cleaned(&self, _r: &CleanupReport) {}
    /// A sync failed (it is retried with a backoff).
    fn failed(&self, _e: &(dyn std::error::Error + 'static)) {}
    fn repaired(&self) {}
    /// Another program changed our tables (one transaction).
    fn foreign_write(&self, _w: &ForeignWriter) {}
}

/// Metrics hooks of the sources: a change on its way to the engine (counted before it
/// is queued, so that it is counted before the engine can apply it).
pub trait SourceObserver: Send + Sync {
    /// A Service was applied or deleted.
    fn service_change(&self) {}
    /// An EndpointSlice was applied or deleted.
    fn endpoint_change(&self) {}
}

/// Metrics hooks of the API client, as client-go records its requests (`rest_client_*`).
pub trait RestObserver: Send + Sync {
    /// A request got its answer: `code` is the HTTP status, or `None` when no answer
    /// came (client-go's `<error>`).
    fn result(&self, code: Option<u16>, method: &str, host: &str);
    /// A request's latency (until its response was read, for a watch until its
    /// response headers).
    fn latency(&self, verb: &str, host: &str, took: Duration);
    fn request_size(&self, verb: &str, host: &str, bytes: u64);
    fn response_size(&self, verb: &str, host: &str, bytes: u64);
    /// How long a request waited in the client-side rate limiter (`--kube-api-qps`,
    /// `--kube-api-burst`; zero when a token was there), as client-go times its
    /// `tryThrottle`. Not called without a rate limiter (negative QPS).
    fn rate_limiter(&self, verb: &str, host: &str, waited: Duration) {
        let _ = (verb, host, waited);
    }
}

/// A program that changed our tables, as the kernel names it (`NFT_MSG_NEWGEN`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ForeignWriter {
    pub pid: Option<u32>,
    /// The process name (`comm`, at most 15 characters).
    pub process: Option<String>,
}

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

/// One TCP NodePort the localhost NodePort proxy serves (nftables mode,
/// `KubeProxyNFTablesLocalhostNodePorts`): on `127.0.0.1` or `::1` of `family`, to the
/// endpoints upstream's proxier hands its userspace proxy (the cluster endpoints, the
/// local ones with externalTrafficPolicy Local; never empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalhostNodePort {
    pub family: IpFamily,
    pub node_port: u16,
    /// `namespace/name:port`, for the logs.
    pub service_port: String,
    pub endpoints: Vec<std::net::SocketAddr>,
    /// ClientIP session affinity timeout in seconds (None: no affinity).
    pub affinity_timeout: Option<u32>,
}

/// Metrics hooks of the localhost NodePort proxy (kube-proxy's
/// `kubeproxy_nftables_localhost_nodeport_*`), which `ops-server` implements.
pub trait LocalhostObserver: Send + Sync {
    /// The listeners of `family` now open.
    fn listeners(&self, _family: IpFamily, _n: usize) {}
    /// A listener of `family` could not be opened.
    fn listener_failed(&self, _family: IpFamily) {}
}

/// A service port left out of the rules because the kernel refused them (retried with a
/// backoff, and at once when its Service changes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedPort {
    /// `namespace/name`.
    pub service: String,
    pub port: String,
    /// The kernel's answer, with the refused operation.
    pub error: String,
    pub since: Instant,
    pub retry_at: Instant,
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
    /// Conntrack delete calls that failed (or left a target failed) since start.
    pub conntrack_failures: u64,
    /// Conntrack cleanup targets not finished yet (retried with a backoff; persisted in
    /// our tables so that a restart resumes them).
    pub cleanup_pending: usize,
    /// When the oldest of them became a target (for a resumed one: when this process
    /// found it).
    pub cleanup_oldest_pending: Option<Instant>,
    /// Why the conntrack cleanup is unavailable (None: available). Rules are programmed
    /// regardless; targets wait, and ctnetlink is probed again periodically.
    pub cleanup_unavailable: Option<String>,
    /// Service ports skipped because the kernel refused their rules.
    pub skipped_service_ports: Vec<SkippedPort>,
    /// Repairs of our tables after another program changed them.
    pub repairs: u64,
    /// Transactions of other programs that changed our tables, and the last writer.
    pub foreign_writes: u64,
    pub last_foreign_writer: Option<ForeignWriter>,
    /// How long the pending repair waits (backoff while our tables are fought over).
    pub repair_delay: Duration,
    pub node: Option<NodeHealth>,
    /// The node's primary IPs (health-check node ports listen there when
    /// nodePortAddresses says `primary`).
    pub node_primary_ips: Vec<std::net::IpAddr>,
    /// Services with a healthCheckNodePort, and their endpoints on this node.
    pub health_checks: BTreeMap<ServiceKey, HealthCheck>,
    /// TCP NodePorts served on localhost by the userspace proxy, per service (only
    /// services with one; empty unless the engine is told the families to serve).
    pub localhost_node_ports: BTreeMap<ServiceKey, Vec<LocalhostNodePort>>,
    /// Services with a Local internal / external traffic policy that have ready
    /// endpoints but none on this node (kube-proxy's `no_local_endpoints_total`).
    pub no_local_internal: usize,
    pub no_local_external: usize,
    /// The same per IP family and service port (internal, external), as kube-proxy's
    /// per-family proxiers report them.
    pub no_local: BTreeMap<IpFamily, (usize, usize)>,
    /// Sources that made no progress (e.g. `"service"`), and when each last did.
    pub stalled_sources: BTreeMap<String, Instant>,
}

impl Status {
    /// A source that has made no progress for more than 2 x syncPeriod, if any: what it
    /// delivered may be stale. Informational only: no health answer depends on it
    /// (`/healthz`, `/livez` and the health-check node ports follow upstream's
    /// queued-change rule, [`Status::healthy`]; an API outage queues nothing, and
    /// failing the checks for it would take every node out of its load balancers at
    /// once while the rules in place keep working).
    pub fn stale_source(&self, now: Instant) -> Option<&str> {
        self.stalled_sources
            .iter()
            .find(|(_, since)| now.saturating_duration_since(**since) > self.sync_period * 2)
            .map(|(s, _)| s.as_str())
    }

    /// Upstream's rule: unhealthy when a change has been queued for more than
    /// 2 x syncPeriod without being applied.
    pub fn healthy(&self, now: Instant) -> bool {
        match self.queued_since {
            None => true,
            Some(q) => now.saturating_duration_since(q) <= self.sync_period * 2,
        }
    }
}

/// A clonable handle on the engine's status, for the health and metrics servers. Every
/// update counts as a change that [`StatusHandle::wait_change`] wakes on.
#[derive(Debug, Clone, Default)]
pub struct StatusHandle(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    /// The status and its number of updates.
    status: Mutex<(Status, u64)>,
    changed: Condvar,
}

impl StatusHandle {
    fn lock(&self) -> std::sync::MutexGuard<'_, (Status, u64)> {
        self.0.status.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub fn snapshot(&self) -> Status {
        self.lock().0.clone()
    }
    /// What `f` reads of the status, without copying the rest (the status holds maps
    /// per service: a copy on every sync costs in proportion to the cluster).
    pub fn read<T>(&self, f: impl FnOnce(&Status) -> T) -> T {
        f(&self.lock().0)
    }
    pub fn healthy(&self, now: Instant) -> bool {
        self.read(|s| s.healthy(now))
    }
    /// Change the status in place (the engine is the only writer).
    pub fn update(&self, f: impl FnOnce(&mut Status)) {
        let mut g = self.lock();
        f(&mut g.0);
        g.1 = g.1.wrapping_add(1);
        drop(g);
        self.0.changed.notify_all();
    }
    /// The number of updates so far.
    pub fn changes(&self) -> u64 {
        self.lock().1
    }
    /// Block until the number of updates differs from `seen`, at most `timeout`;
    /// returns the number then. For a reader that follows the status without polling.
    pub fn wait_change(&self, seen: u64, timeout: Duration) -> u64 {
        let g = self.lock();
        let (g, _) = self
            .0
            .changed
            .wait_timeout_while(g, timeout, |(_, n)| *n == seen)
            .unwrap_or_else(|e| e.into_inner());
        g.1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_wakes_on_an_update_or_its_timeout() {
        let h = StatusHandle::default();
        let seen = h.changes();
        let t = Instant::now();
        assert_eq!(h.wait_change(seen, Duration::from_millis(50)), seen);
        assert!(t.elapsed() >= Duration::from_millis(50));
        let writer = {
            let h = h.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                h.update(|s| s.repairs += 1);
            })
        };
        let t = Instant::now();
        let now = h.wait_change(seen, Duration::from_secs(10));
        assert_eq!(now, seen + 1);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        writer.join().unwrap();
        assert_eq!(h.snapshot().repairs, 1);
    }
}
