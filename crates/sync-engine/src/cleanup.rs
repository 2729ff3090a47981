//! The conntrack cleanup's state, one type with named transitions (pure; driven by
//! [`crate::cleaner`]). See docs/sync.md and docs/decisions/0013.
//!
//! What it holds: the committed state flows are judged against ([`Judge`]), whether a
//! commit is under way, the index of the node's UDP flows (fed by conntrack events,
//! seeded by one dump) or, without events, the destinations still to list from the
//! kernel, and the flows judged stale that are still to be deleted.
//!
//! Its rule: **a flow is judged when it is acted on.** Nothing is queued as "delete
//! what matches X" to be replayed later: a destination queued for listing is listed and
//! each entry judged against the state committed *then*; a flow queued for deletion is
//! judged again right before it is sent, and dropped when it is no longer stale (its
//! endpoint serves again, its service is back). While a commit is under way (between
//! [`Cleanup::begin`] and its outcome) nothing is judged: flows learned meanwhile are
//! held and judged once the outcome is known (a flow made by the new rules must not be
//! judged by the old ones). An unknown outcome keeps holding until the next commit,
//! which the engine then sends as a full replacement.
//!
//! Transitions (each a method): `begin`, `committed`, `aborted` (the engine's commits);
//! `events_on`, `events_off`, `event`, `lost` (the conntrack event stream);
//! `next_job` and `seeded`, `listed`, `deleted` (the kernel work and its results).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use ct_netlink::{Flow, FlowEvent, FlowIndex};
use kube_model::IpFamily;
use ruleset::UdpDest;

use crate::backoff;
use crate::stale::{Delta, Judge, Rejudge, Stale};

/// What the cleanup lists from the kernel when it has no index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// The flows sent to one destination (a NodePort: to that port, any address; the
    /// judgement keeps to this node's addresses).
    Dest(UdpDest),
    /// Every UDP flow of a family.
    All(IpFamily),
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Dest(d) => d.fmt(f),
            Scope::All(fam) => write!(f, "every udp flow of {}", fam.k8s_name()),
        }
    }
}

/// Work for the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Job {
    /// Every UDP flow of these families: the index's seed (the event subscription is
    /// already open, so nothing made meanwhile is missed).
    Seed(Vec<IpFamily>),
    /// The flows sent to these scopes (no index).
    List(Vec<Scope>),
    /// Delete these flows, each judged stale just now.
    Delete(Vec<Flow>),
}

/// The outcome of deleting one flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    Deleted,
    /// It was gone already (or its id no longer matched: another flow now).
    AlreadyGone,
    /// Refused or unanswered: tried again with a backoff.
    Failed,
}

/// Settings.
#[derive(Debug, Clone)]
pub struct CleanupConfig {
    /// First retry delay of a failed delete or an incomplete listing; doubled per
    /// attempt, at most `retry_max`.
    pub retry_initial: Duration,
    pub retry_max: Duration,
    /// At most this many flows per delete job and scopes per list job.
    pub deletes_per_job: usize,
    pub scopes_per_job: usize,
    /// At most this many flows held while a commit is under way; past it, everything
    /// is judged once the outcome is known.
    pub max_held: usize,
    /// Every flow judged again this often (the index seeded again: entries whose
    /// DESTROY event never came leave it; without an index, one listing of every UDP
    /// flow). None: never.
    pub audit: Option<Duration>,
}

impl Default for CleanupConfig {
    fn default() -> Self {
        CleanupConfig {
            retry_initial: Duration::from_millis(500),
            retry_max: Duration::from_secs(30),
            deletes_per_job: 4096,
            scopes_per_job: 256,
            max_held: 100_000,
            audit: Some(Duration::from_secs(15 * 60)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pace {
    since: Instant,
    attempts: u32,
    next: Instant,
}

impl Pace {
    fn now(now: Instant) -> Pace {
        Pace {
            since: now,
            attempts: 0,
            next: now,
        }
    }
}

/// The flows the cleanup knows of.
#[derive(Debug)]
enum Index {
    /// No event stream: destinations are listed from the kernel.
    Off,
    /// Events are on; the index is to be seeded (not before `at`).
    Want {
        at: Instant,
    },
    /// The seed is being listed; events that arrive meanwhile wait for it.
    Seeding {
        buffered: Vec<FlowEvent>,
    },
    Live(FlowIndex),
}

/// A flow's identity for the pending deletes (tuple and zone).
type Key = (IpAddr, IpAddr, u16, u16, u16);

fn key(f: &Flow) -> Key {
    (f.src, f.dst, f.sport, f.dport, f.zone)
}

/// What a transition did, for the reports: flows judged stale, and dropped because they
/// were no longer stale when their turn came.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Judged {
    pub looked_at: usize,
    pub stale: usize,
    pub dropped: usize,
}

/// The conntrack cleanup's state. See the module documentation.
#[derive(Debug)]
pub struct Cleanup {
    cfg: CleanupConfig,
    judge: Judge,
    families: Vec<IpFamily>,
    /// A commit is under way (or its outcome is unknown).
    committing: bool,
    index: Index,
    /// Flows learned while a commit was under way, judged at its outcome; `held_all`:
    /// too many, judge everything then.
    held: Vec<Flow>,
    held_all: bool,
    /// Scopes to list (no index), and those out in a job now.
    todo: BTreeMap<Scope, Pace>,
    out: BTreeSet<Scope>,
    /// Flows judged stale, to delete (with the frontend that judged them).
    doomed: HashMap<Key, (Flow, Pace, UdpDest)>,
    next_audit: Option<Instant>,
}

impl Cleanup {
    pub fn new(cfg: CleanupConfig, families: Vec<IpFamily>, now: Instant) -> Cleanup {
        let next_audit = cfg.audit.map(|a| now + a);
        Cleanup {
            cfg,
            judge: Judge::default(),
            families,
            committing: false,
            index: Index::Off,
            held: Vec::new(),
            held_all: false,
            todo: BTreeMap::new(),
            out: BTreeSet::new(),
            doomed: HashMap::new(),
            next_audit,
        }
    }

    // -- what it holds -------------------------------------------------------------

    pub fn judge(&self) -> &Judge {
        &self.judge
    }

    /// Whether a commit is under way (or its outcome unknown): nothing is judged.
    pub fn committing(&self) -> bool {
        self.committing
    }

    /// Whether flows are known from an index fed by events.
    pub fn indexed(&self) -> bool {
        matches!(self.index, Index::Live(_))
    }

    /// Flows in the index (0 without one).
    pub fn indexed_flows(&self) -> usize {
        match &self.index {
            Index::Live(i) => i.len(),
            _ => 0,
        }
    }

    /// Work not finished: scopes to list and flows to delete.
    pub fn pending(&self) -> usize {
        self.todo.len() + self.out.len() + self.doomed.len()
    }

    /// When the oldest unfinished work was queued.
    pub fn oldest(&self) -> Option<Instant> {
        self.todo
            .values()
            .map(|p| p.since)
            .chain(self.doomed.values().map(|(_, p, _)| p.since))
            .min()
    }

    /// The flows waiting to be deleted.
    pub fn doomed(&self) -> impl Iterator<Item = &Flow> {
        self.doomed.values().map(|(f, _, _)| f)
    }

    /// When the next job is due (None: nothing to do until something happens).
    pub fn next_due(&self) -> Option<Instant> {
        if self.committing {
            return None;
        }
        let seed = match self.index {
            Index::Want { at } => Some(at),
            _ => None,
        };
        [
            self.doomed.values().map(|(_, p, _)| p.next).min(),
            seed,
            self.todo.values().map(|p| p.next).min(),
            self.next_audit,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    // -- the engine's commits ------------------------------------------------------

    /// A commit is about to be sent: judge nothing until its outcome is known.
    pub fn begin(&mut self) {
        self.committing = true;
    }

    /// The commit succeeded: `delta` is what it changed. The flows it may have made
    /// stale are judged now (from the index) or queued for listing (without one), and
    /// so are those held meanwhile.
    pub fn committed(&mut self, delta: Delta, now: Instant) -> Judged {
        self.committing = false;
        let again = self.judge.apply(delta);
        let mut j = self.rejudge(again, now);
        let h = self.judge_held(now);
        j.looked_at += h.looked_at;
        j.stale += h.stale;
        self.prune_gone();
        j
    }

    /// Stop judging the frontends of deleted service ports once no work about them is
    /// left (their flows judged and deleted): from then on, flows to those addresses are
    /// not the proxy's business.
    fn prune_gone(&mut self) {
        if self.judge.gone().is_empty()
            || self
                .todo
                .keys()
                .chain(self.out.iter())
                .any(|s| matches!(s, Scope::All(_)))
            || matches!(self.index, Index::Want { .. } | Index::Seeding { .. })
        {
            return;
        }
        let keep: BTreeSet<UdpDest> = self
            .doomed
            .values()
            .map(|(_, _, d)| *d)
            .chain(
                self.todo
                    .keys()
                    .chain(self.out.iter())
                    .filter_map(|s| match s {
                        Scope::Dest(d) => Some(*d),
                        Scope::All(_) => None,
                    }),
            )
            .collect();
        self.judge.forget_gone(&keep);
    }

    /// The commit was refused (nothing changed): judge what was held.
    pub fn aborted(&mut self, now: Instant) -> Judged {
        self.committing = false;
        self.judge_held(now)
    }

    fn judge_held(&mut self, now: Instant) -> Judged {
        let held = std::mem::take(&mut self.held);
        if std::mem::take(&mut self.held_all) {
            return self.rejudge(Rejudge::All, now);
        }
        let mut j = Judged::default();
        for f in held {
            j.looked_at += 1;
            j.stale += usize::from(self.doom(f, now));
        }
        j
    }

    /// Judge again what `again` names: from the index when there is one; otherwise
    /// queued for listing (a seed to come judges everything anyway).
    fn rejudge(&mut self, again: Rejudge, now: Instant) -> Judged {
        let mut j = Judged::default();
        match &self.index {
            Index::Live(idx) => {
                // judged while walking the index; only the stale ones are kept (a full
                // judgement walks every flow: a million at most, no copy of them)
                let judge = &self.judge;
                let mut looked = 0usize;
                let mut stale: Vec<(Flow, UdpDest)> = Vec::new();
                let mut take = |f: Flow| {
                    looked += 1;
                    if let Some(s) = judge.judge(&f) {
                        stale.push((f, s.dest()));
                    }
                };
                match &again {
                    Rejudge::All => idx.iter().for_each(&mut take),
                    Rejudge::Dests(ds) => {
                        for d in ds {
                            match *d {
                                UdpDest::Addr { addr, port } => {
                                    idx.to_dst(addr, port).for_each(&mut take)
                                }
                                UdpDest::NodePort { v6, port } => idx
                                    .to_port(ct_family(v6), port)
                                    .filter(|f| judge.on_node(&f.dst))
                                    .for_each(&mut take),
                            }
                        }
                    }
                }
                j.looked_at = looked;
                j.stale = stale.len();
                for (f, dest) in stale {
                    self.doom_as(f, dest, now);
                }
            }
            Index::Want { .. } | Index::Seeding { .. } => {}
            Index::Off => {
                let scopes: Vec<Scope> = match again {
                    Rejudge::All => self.families.iter().map(|f| Scope::All(*f)).collect(),
                    Rejudge::Dests(ds) => ds.into_iter().map(Scope::Dest).collect(),
                };
                for s in scopes {
                    self.todo.entry(s).or_insert_with(|| Pace::now(now)).next = now;
                }
            }
        }
        j
    }

    /// Judge `f` now; stale, it is queued for deletion. Returns whether it was.
    fn doom(&mut self, f: Flow, now: Instant) -> bool {
        let Some(why) = self.judge.judge(&f) else {
            return false;
        };
        self.doom_as(f, why.dest(), now);
        true
    }

    /// Queue `f`, judged stale by `dest`, for deletion.
    fn doom_as(&mut self, f: Flow, dest: UdpDest, now: Instant) {
        self.doomed
            .entry(key(&f))
            .and_modify(|(old, p, d)| {
                *old = f;
                *d = dest;
                p.next = p.next.min(now);
            })
            .or_insert((f, Pace::now(now), dest));
    }

    // -- the conntrack event stream ------------------------------------------------

    /// Events are on (the subscription is open): seed the index (judging everything).
    pub fn events_on(&mut self, now: Instant) {
        self.index = Index::Want { at: now };
        self.todo.retain(|_, _| false);
    }

    /// No events (none on this host, or the stream ended): list from the kernel; what
    /// the index would have judged is judged by listing every flow once.
    pub fn events_off(&mut self, now: Instant) {
        let had = !matches!(self.index, Index::Off);
        self.index = Index::Off;
        if had {
            self.rejudge(Rejudge::All, now);
        }
    }

    /// Everything the kernel knows may differ from what was judged (ctnetlink opened
    /// again after being unavailable): judge everything once.
    pub fn reset(&mut self, now: Instant) {
        match self.index {
            Index::Off => {
                self.rejudge(Rejudge::All, now);
            }
            _ => self.index = Index::Want { at: now },
        }
    }

    /// One event. A new flow is judged at once (held while a commit is under way); a
    /// destroyed one leaves the index and the deletes.
    pub fn event(&mut self, e: FlowEvent, now: Instant) -> Judged {
        let mut j = Judged::default();
        match &mut self.index {
            Index::Live(idx) => match e {
                FlowEvent::New(f) => {
                    if !idx.insert(f) {
                        return j;
                    }
                    if self.committing {
                        if self.held.len() < self.cfg.max_held {
                            self.held.push(f);
                        } else {
                            self.held_all = true;
                        }
                    } else {
                        j.looked_at = 1;
                        j.stale = usize::from(self.doom(f, now));
                    }
                }
                FlowEvent::Destroy(f) => {
                    if idx.remove(&f).is_some() {
                        self.doomed.remove(&key(&f));
                    }
                }
            },
            Index::Seeding { buffered } => buffered.push(e),
            Index::Off | Index::Want { .. } => {}
        }
        j
    }

    /// Events were lost: the index is seeded again (and everything judged).
    pub fn lost(&mut self, now: Instant) {
        if !matches!(self.index, Index::Off) {
            self.index = Index::Want { at: now };
        }
    }

    // -- kernel work ---------------------------------------------------------------

    /// The job due now, if any (none while a commit is under way). Deletes first (their
    /// flows judged again now: those no longer stale are dropped), then the seed, then
    /// listings, then the audit.
    pub fn next_job(&mut self, now: Instant) -> (Option<Job>, Judged) {
        let mut j = Judged::default();
        if self.committing {
            return (None, j);
        }
        let due: Vec<Key> = self
            .doomed
            .iter()
            .filter(|(_, (_, p, _))| p.next <= now)
            .map(|(k, _)| *k)
            .take(self.cfg.deletes_per_job.max(1))
            .collect();
        if !due.is_empty() {
            let mut flows = Vec::with_capacity(due.len());
            for k in due {
                let Some((f, _, _)) = self.doomed.get(&k) else {
                    continue;
                };
                if self.judge.judge(f).is_some() {
                    flows.push(*f);
                } else {
                    self.doomed.remove(&k);
                    j.dropped += 1;
                }
            }
            if j.dropped > 0 {
                self.prune_gone();
            }
            if !flows.is_empty() {
                return (Some(Job::Delete(flows)), j);
            }
        }
        if let Index::Want { at } = self.index {
            if at <= now {
                self.index = Index::Seeding {
                    buffered: Vec::new(),
                };
                return (Some(Job::Seed(self.families.clone())), j);
            }
        }
        let due: Vec<Scope> = self
            .todo
            .iter()
            .filter(|(_, p)| p.next <= now)
            .map(|(s, _)| *s)
            .take(self.cfg.scopes_per_job.max(1))
            .collect();
        if !due.is_empty() {
            for s in &due {
                self.todo.remove(s);
                self.out.insert(*s);
            }
            return (Some(Job::List(due)), j);
        }
        if self.next_audit.is_some_and(|t| t <= now) {
            self.next_audit = self.cfg.audit.map(|a| now + a);
            self.reset(now);
            return self.next_job(now);
        }
        (None, j)
    }

    /// The seed came back: the index is these flows (and the events buffered meanwhile),
    /// and every flow is judged. An incomplete seed is taken as it is and tried again
    /// after the retry delay.
    pub fn seeded(&mut self, flows: Vec<Flow>, complete: bool, now: Instant) -> Judged {
        let buffered = match std::mem::replace(&mut self.index, Index::Off) {
            Index::Seeding { buffered } => buffered,
            other => {
                // events were switched off or lost meanwhile: keep that state
                self.index = other;
                return Judged::default();
            }
        };
        let mut idx = FlowIndex::new();
        for f in flows {
            idx.insert(f);
        }
        for e in buffered {
            match e {
                FlowEvent::New(f) => {
                    idx.insert(f);
                }
                FlowEvent::Destroy(f) => {
                    idx.remove(&f);
                }
            }
        }
        self.doomed.retain(|_, (f, _, _)| idx.contains(f));
        self.index = Index::Live(idx);
        let j = if self.committing {
            self.held_all = true;
            Judged::default()
        } else {
            self.rejudge(Rejudge::All, now)
        };
        if !complete {
            // judged what it has; seeded again later (a new index replaces this one)
            self.index_retry(now);
        }
        self.prune_gone();
        j
    }

    /// Seed the index again after the retry delay (keeping the one it has meanwhile).
    fn index_retry(&mut self, now: Instant) {
        let at = now + self.cfg.retry_initial;
        self.next_audit = Some(self.next_audit.map_or(at, |t| t.min(at)));
    }

    /// A listing came back: each flow judged now (held while a commit is under way);
    /// an incomplete scope is listed again with a backoff.
    pub fn listed(&mut self, scopes: &[(Scope, bool)], flows: Vec<Flow>, now: Instant) -> Judged {
        for (s, complete) in scopes {
            self.out.remove(s);
            if !complete {
                let (initial, max) = (self.cfg.retry_initial, self.cfg.retry_max);
                let p = self.todo.entry(*s).or_insert_with(|| Pace::now(now));
                p.attempts = p.attempts.saturating_add(1);
                p.next = p
                    .next
                    .max(now + backoff::doubling(initial, p.attempts - 1, max));
            }
        }
        let mut j = Judged::default();
        for f in flows {
            if self.committing {
                if self.held.len() < self.cfg.max_held {
                    self.held.push(f);
                } else {
                    self.held_all = true;
                }
                continue;
            }
            j.looked_at += 1;
            j.stale += usize::from(self.doom(f, now));
        }
        self.prune_gone();
        j
    }

    /// Deletes came back: done ones leave the index; failed ones are tried again with a
    /// backoff (and judged again then).
    pub fn deleted(&mut self, flows: &[Flow], outcomes: &[Removal], now: Instant) {
        for (i, f) in flows.iter().enumerate() {
            let o = outcomes.get(i).copied().unwrap_or(Removal::Failed);
            match o {
                Removal::Deleted | Removal::AlreadyGone => {
                    if let Some((d, _, _)) = self.doomed.get(&key(f)) {
                        if d.id == f.id {
                            self.doomed.remove(&key(f));
                        }
                    }
                    if let Index::Live(idx) = &mut self.index {
                        idx.remove(f);
                    }
                }
                Removal::Failed => {
                    if let Some((_, p, _)) = self.doomed.get_mut(&key(f)) {
                        p.attempts = p.attempts.saturating_add(1);
                        p.next = now
                            + backoff::doubling(
                                self.cfg.retry_initial,
                                p.attempts - 1,
                                self.cfg.retry_max,
                            );
                    }
                }
            }
        }
        self.prune_gone();
    }

    /// Why `f` would be deleted now (None: it would not).
    pub fn verdict(&self, f: &Flow) -> Option<Stale> {
        self.judge.judge(f)
    }
}

fn ct_family(v6: bool) -> ct_netlink::Family {
    if v6 {
        ct_netlink::Family::V6
    } else {
        ct_netlink::Family::V4
    }
}

#[cfg(test)]
#[path = "cleanup_tests.rs"]
mod tests;
