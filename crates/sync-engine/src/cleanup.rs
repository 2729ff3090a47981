//! The conntrack cleanup after committed batches.
//!
//! Every target stays pending until the kernel proves it finished (deleted, or already
//! gone); capped, incomplete and failed targets are retried, failed and incomplete ones
//! with an exponential backoff. Pending targets are recorded in our own tables (sets
//! `cleanup-dst`, `cleanup-nodeport`, `cleanup-endpoint` in `ip`/`ip6 kube-nlproxy`), in
//! the same atomic batch as the rules that made them targets, and removed (an
//! element-only batch) when finished, so a restart resumes them. Work is done in bounded
//! slices (at most `cleanup_slice_targets` targets per kernel call, one call per loop
//! turn), so a large backlog never holds rule syncs back for more than one call. Without
//! ctnetlink the targets wait and the socket is opened again periodically.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use nft_model::{DataType, Element, Family, Op, Set, Table, Value};

use crate::engine::Engine;
use crate::kernel::{CleanupOutcome, Clock, ConntrackKernel, FilterDetail, NftKernel};
use crate::targets::Target;
use crate::{next_generation, CleanupReport, EngineError};
use kube_model::IpFamily;
use proxy_status::FilterWork;

/// Set of pending destination targets (address . port).
pub const SET_DST: &str = "cleanup-dst";
/// Set of pending NodePort targets (port).
pub const SET_NODEPORT: &str = "cleanup-nodeport";
/// Set of pending endpoint targets (address . port).
pub const SET_ENDPOINT: &str = "cleanup-endpoint";
const COMMENT: &str = "conntrack cleanup pending (kube-nlproxy)";

/// One pending target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// When it became a target (for a target resumed from our tables: when this process
    /// found it there).
    pub since: Instant,
    /// Attempts that did not finish it.
    pub attempts: u32,
    /// Not before this time.
    pub next_try: Instant,
    pub last: Option<CleanupOutcome>,
}

/// The pending targets.
#[derive(Debug, Clone, Default)]
pub struct Pending {
    map: BTreeMap<Target, Entry>,
}

impl Pending {
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    pub fn targets(&self) -> impl Iterator<Item = &Target> {
        self.map.keys()
    }
    pub fn get(&self, t: &Target) -> Option<&Entry> {
        self.map.get(t)
    }
    pub fn contains(&self, t: &Target) -> bool {
        self.map.contains_key(t)
    }

    /// A (new or renewed) target: due at once.
    pub fn add(&mut self, t: Target, now: Instant) {
        self.map
            .entry(t)
            .and_modify(|e| e.next_try = e.next_try.min(now))
            .or_insert(Entry {
                since: now,
                attempts: 0,
                next_try: now,
                last: None,
            });
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// The targets due at `now`, at most `max`: those of `first` (the targets the sync
    /// that just committed found: their flows are the ones the user is waiting for),
    /// then the others oldest first.
    pub fn due(&self, now: Instant, max: usize, first: &BTreeSet<Target>) -> Vec<Target> {
        let mut due: Vec<(bool, Instant, &Target)> = self
            .map
            .iter()
            .filter(|(_, e)| e.next_try <= now)
            .map(|(t, e)| (!first.contains(t), e.since, t))
            .collect();
        due.sort();
        due.into_iter().take(max).map(|(_, _, t)| *t).collect()
    }

    /// When the next target is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.map.values().map(|e| e.next_try).min()
    }

    /// When the oldest pending target became one.
    pub fn oldest(&self) -> Option<Instant> {
        self.map.values().map(|e| e.since).min()
    }

    /// Record an attempt's outcome. Returns true when the target is finished (removed).
    /// Capped targets are due again at once (work remains, nothing is wrong); failed and
    /// incomplete ones after `initial` doubled per attempt, at most `max`.
    pub fn record(
        &mut self,
        t: &Target,
        outcome: CleanupOutcome,
        now: Instant,
        initial: Duration,
        max: Duration,
    ) -> bool {
        if outcome.done() {
            return self.map.remove(t).is_some();
        }
        if let Some(e) = self.map.get_mut(t) {
            e.attempts = e.attempts.saturating_add(1);
            e.last = Some(outcome);
            e.next_try = match outcome {
                CleanupOutcome::Capped => now,
                _ => {
                    let shift = e.attempts.saturating_sub(1).min(16);
                    now + initial.saturating_mul(1u32 << shift).min(max)
                }
            };
        }
        false
    }
}

fn addr_value(a: IpAddr) -> Value {
    match a {
        IpAddr::V4(a) => Value::Ipv4(a),
        IpAddr::V6(a) => Value::Ipv6(a),
    }
}

/// The set and key recording one target, and the table family it goes to.
fn element_of(t: &Target) -> (Family, &'static str, Vec<Value>) {
    let fam = |a: &IpAddr| if a.is_ipv4() { Family::Ip } else { Family::Ip6 };
    match *t {
        Target::Dst { addr, port } => (
            fam(&addr),
            SET_DST,
            vec![addr_value(addr), Value::Port(port)],
        ),
        Target::NodePort { v6, port } => (
            if v6 { Family::Ip6 } else { Family::Ip },
            SET_NODEPORT,
            vec![Value::Port(port)],
        ),
        Target::Endpoint { addr, port } => (
            fam(&addr),
            SET_ENDPOINT,
            vec![addr_value(addr), Value::Port(port)],
        ),
    }
}

fn declaration(family: Family, name: &str) -> Set {
    let addr = if family == Family::Ip6 {
        DataType::Ipv6Addr
    } else {
        DataType::Ipv4Addr
    };
    let key = if name == SET_NODEPORT {
        vec![DataType::InetService]
    } else {
        vec![addr, DataType::InetService]
    };
    Set::set(name, key).with_comment(COMMENT)
}

fn is_ours(name: &str) -> bool {
    matches!(name, SET_DST | SET_NODEPORT | SET_ENDPOINT)
}

/// Make the pending sets of `tables` hold exactly `targets` (a set exists only while it
/// has elements, so that a table without pending work lists as compiled). Targets of a
/// family without a table stay in memory only.
pub fn record_in_tables<'a>(tables: &mut [Table], targets: impl Iterator<Item = &'a Target>) {
    let mut by: BTreeMap<(Family, &str), BTreeSet<Vec<Value>>> = BTreeMap::new();
    for t in targets {
        let (f, set, key) = element_of(t);
        by.entry((f, set)).or_default().insert(key);
    }
    for table in tables.iter_mut() {
        table.sets.retain(|s| !is_ours(&s.name));
        for name in [SET_DST, SET_NODEPORT, SET_ENDPOINT] {
            if let Some(keys) = by.get(&(table.family, name)) {
                let mut s = declaration(table.family, name);
                s.elements = keys.iter().cloned().map(Element::key).collect();
                table.sets.push(s);
            }
        }
    }
}

/// The pending targets recorded in `tables` (a previous run's, read back at start).
pub fn recorded_in<'a>(tables: impl IntoIterator<Item = &'a Table>) -> Vec<Target> {
    let ip = |v: &Value| match v {
        Value::Ipv4(a) => Some(IpAddr::V4(*a)),
        Value::Ipv6(a) => Some(IpAddr::V6(*a)),
        _ => None,
    };
    let mut out = Vec::new();
    for t in tables {
        for s in t.sets.iter().filter(|s| is_ours(&s.name)) {
            for e in &s.elements {
                let target = match (s.name.as_str(), e.key.as_slice()) {
                    (SET_DST, [a, Value::Port(port)]) => {
                        ip(a).map(|addr| Target::Dst { addr, port: *port })
                    }
                    (SET_ENDPOINT, [a, Value::Port(port)]) => {
                        ip(a).map(|addr| Target::Endpoint { addr, port: *port })
                    }
                    (SET_NODEPORT, [Value::Port(port)]) => Some(Target::NodePort {
                        v6: t.family == Family::Ip6,
                        port: *port,
                    }),
                    _ => None,
                };
                out.extend(target);
            }
        }
    }
    out
}

/// The table family a target is recorded in.
pub fn family_of(t: &Target) -> Family {
    element_of(t).0
}

/// The batch that changes the pending sets of our tables (of `families`) from holding
/// `before` to holding `after` (element and set operations only: no rule changes, so the
/// kernel re-validates nothing). Work proportional to the targets, not to the tables.
pub fn recorded_ops(
    families: &[Family],
    before: &BTreeSet<Target>,
    after: &BTreeSet<Target>,
) -> Vec<Op> {
    if before == after {
        return Vec::new();
    }
    families
        .iter()
        .flat_map(|f| {
            let mut old = [Table::new(*f, ruleset::names::TABLE)];
            let mut new = [Table::new(*f, ruleset::names::TABLE)];
            record_in_tables(&mut old, before.iter());
            record_in_tables(&mut new, after.iter());
            ruleset::diff_tables(Some(&old[0]), &new[0])
        })
        .collect()
}

/// Opens the conntrack socket (probing the kernel); called again while it fails.
pub type ConntrackOpener<C> = Box<dyn FnMut() -> Result<C, EngineError>>;

/// The conntrack kernel, or why it is unavailable and how to try again.
pub(crate) struct CtSlot<C> {
    pub kernel: Option<C>,
    pub opener: Option<ConntrackOpener<C>>,
    /// Why it is unavailable, and when to try opening it again.
    pub unavailable: Option<(String, Instant)>,
}

impl<C> CtSlot<C> {
    pub fn ready(c: C) -> CtSlot<C> {
        CtSlot {
            kernel: Some(c),
            opener: None,
            unavailable: None,
        }
    }
}

/// What one cleanup slice did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// Targets worked on.
    pub targets: usize,
    /// Targets finished.
    pub done: usize,
    /// Conntrack entries deleted (as far as the kernel says).
    pub deleted: u64,
    pub took: Duration,
    /// Each target worked on, and how (for the metrics).
    pub filters: Vec<FilterWork>,
}

/// A target's outcome and strategy for the metrics.
fn filter_work(t: &Target, d: FilterDetail) -> FilterWork {
    let v6 = match *t {
        Target::Dst { addr, .. } | Target::Endpoint { addr, .. } => addr.is_ipv6(),
        Target::NodePort { v6, .. } => v6,
    };
    FilterWork {
        family: if v6 { IpFamily::V6 } else { IpFamily::V4 },
        strategy: d.strategy.map(|s| match s {
            ct_netlink::Strategy::FilteredFlush => "filtered-flush",
            ct_netlink::Strategy::FilteredDump => "filtered-dump",
            ct_netlink::Strategy::FullDump => "full-dump",
        }),
        outcome: match d.outcome {
            CleanupOutcome::Deleted { .. } => "deleted",
            CleanupOutcome::AlreadyGone => "already-gone",
            CleanupOutcome::Capped => "capped",
            CleanupOutcome::Incomplete => "incomplete",
            CleanupOutcome::Failed => "failed",
        },
        deleted: d.deleted,
    }
}

impl<N: NftKernel, C: ConntrackKernel, K: Clock> Engine<N, C, K> {
    /// Open the conntrack socket when it is unavailable and the re-probe is due.
    pub(crate) fn reprobe_conntrack(&mut self) {
        let now = self.clock.now();
        if self.ct.kernel.is_some() || self.ct.unavailable.as_ref().is_some_and(|u| u.1 > now) {
            return;
        }
        let Some(open) = self.ct.opener.as_mut() else {
            return;
        };
        match open() {
            Ok(c) => {
                if self.ct.unavailable.is_some() {
                    tracing::info!(
                        pending = self.pending.len(),
                        "conntrack cleanup available again"
                    );
                }
                self.ct.kernel = Some(c);
                self.ct.unavailable = None;
                self.status.update(|s| s.cleanup_unavailable = None);
            }
            Err(e) => {
                let reason = e.to_string();
                let again = now + self.cfg.conntrack_reprobe;
                if self.ct.unavailable.as_ref().map(|u| &u.0) != Some(&reason) {
                    tracing::error!(error = %reason, retry_s = self.cfg.conntrack_reprobe.as_secs(),
                        "conntrack cleanup unavailable (no ctnetlink); rules are still programmed, cleanup targets wait");
                }
                self.status
                    .update(|s| s.cleanup_unavailable = Some(reason.clone()));
                self.ct.unavailable = Some((reason, again));
            }
        }
    }

    /// When the conntrack socket is to be opened again (None: it is open, or cannot be).
    pub(crate) fn reprobe_due(&self) -> Option<Instant> {
        match (&self.ct.kernel, &self.ct.opener, &self.ct.unavailable) {
            (None, Some(_), Some((_, at))) => Some(*at),
            (None, Some(_), None) => Some(self.clock.now()),
            _ => None,
        }
    }

    /// When the next cleanup slice is due (None: nothing pending, or no conntrack).
    pub(crate) fn cleanup_due(&self) -> Option<Instant> {
        self.ct.kernel.as_ref()?;
        self.pending.next_due()
    }

    /// One bounded slice: delete the entries of the targets due now (at most
    /// `cleanup_slice_targets`, those of `first` before the others), record each
    /// outcome, then remove the finished targets from our tables. Only after a
    /// successful commit.
    pub(crate) fn cleanup_slice(&mut self, first: &BTreeSet<Target>) -> Cleaned {
        let t0 = self.clock.now();
        let mut out = Cleaned::default();
        let Some(ct) = self.ct.kernel.as_mut() else {
            return out;
        };
        let due = self
            .pending
            .due(t0, self.cfg.cleanup_slice_targets.max(1), first);
        if due.is_empty() {
            return out;
        }
        out.targets = due.len();
        let filters: Vec<ct_netlink::Filter> = due.iter().map(Target::filter).collect();
        let outcomes = match ct.delete_detailed(&filters) {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(error = %e, targets = due.len(), "conntrack cleanup failed; retrying with a backoff");
                Vec::new()
            }
        };
        let now = self.clock.now();
        let mut failed = 0usize;
        for (i, t) in due.iter().enumerate() {
            let d = outcomes.get(i).copied().unwrap_or(FilterDetail {
                outcome: CleanupOutcome::Failed,
                strategy: None,
                deleted: Some(0),
            });
            out.filters.push(filter_work(t, d));
            let o = d.outcome;
            if let CleanupOutcome::Deleted { entries: Some(n) } = o {
                out.deleted += n;
            }
            if o == CleanupOutcome::Failed {
                failed += 1;
            }
            if self
                .pending
                .record(t, o, now, self.cfg.retry_initial, self.cfg.retry_max)
            {
                out.done += 1;
            } else {
                tracing::trace!(target_filter = %t.filter(), outcome = %o, "conntrack cleanup target not finished; pending");
            }
        }
        if failed > 0 {
            self.status.update(|s| s.conntrack_failures += 1);
        }
        if out.done > 0 {
            self.forget_finished();
        }
        self.publish_pending();
        out.took = self.clock.now().saturating_duration_since(t0);
        tracing::trace!(
            targets = out.targets,
            done = out.done,
            failed,
            deleted = out.deleted,
            pending = self.pending.len(),
            "conntrack cleanup slice"
        );
        out
    }

    /// Remove finished targets from our tables (one element-only batch, guarded by our
    /// last generation). On failure they stay recorded: the next sync's batch removes
    /// them, or a restart cleans them once more (harmless).
    fn forget_finished(&mut self) {
        let (Some(gen), Some(c)) = (self.trust, self.compiler.as_ref()) else {
            return;
        };
        let families = crate::plan::families(c);
        let want: BTreeSet<Target> = self
            .pending
            .targets()
            .filter(|t| families.contains(&family_of(t)))
            .copied()
            .collect();
        let ops = recorded_ops(&families, &self.recorded, &want);
        if ops.is_empty() {
            return;
        }
        match self.nft.commit(&ops, Some(gen)) {
            Ok(_) => {
                let g = next_generation(gen);
                self.our_gens.push(g);
                self.trust = Some(g);
                self.recorded = want;
            }
            Err(e) => {
                tracing::debug!(error = %e, "removing finished cleanup targets from our tables; left for the next sync");
            }
        }
    }

    /// Pending count and age into the status.
    pub(crate) fn publish_pending(&self) {
        let (n, oldest) = (self.pending.len(), self.pending.oldest());
        self.status.update(|s| {
            s.cleanup_pending = n;
            s.cleanup_oldest_pending = oldest;
        });
    }

    /// A cleanup slice between syncs (when due), reported to the observer.
    pub(crate) fn cleanup_turn(&mut self) -> CleanupReport {
        let c = self.cleanup_slice(&BTreeSet::new());
        let r = CleanupReport {
            targets: c.targets,
            done: c.done,
            deleted: c.deleted,
            took: c.took,
            pending: self.pending.len(),
            filters: c.filters,
        };
        if c.targets > 0 {
            tracing::debug!(
                targets = r.targets,
                done = r.done,
                deleted = r.deleted,
                pending = r.pending,
                took_ms = r.took.as_secs_f64() * 1e3,
                "conntrack cleanup between syncs"
            );
            self.observer.cleaned(&r);
        }
        r
    }
}
