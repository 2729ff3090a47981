//! Pending conntrack cleanup targets (pure): each target with its attempts and
//! backoff, and how they are recorded in our own tables (sets `cleanup-dst`,
//! `cleanup-nodeport`, `cleanup-endpoint` in `ip`/`ip6 kube-nlproxy`) so that a restart
//! resumes them. Recorded by the same atomic batch as the rules that made them targets;
//! removed by an element-only batch once finished (see docs/sync.md).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use nft_model::{DataType, Element, Family, Op, Set, Table, Value};

use crate::backoff;
use crate::kernel::CleanupOutcome;
use crate::targets::Target;

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
    /// How often it was made a target again since it became one: a cleanup slice
    /// running beside the engine (`run`'s worker) finishes a target only if no commit
    /// renewed it meanwhile (entries made after the renewing commit may be past the
    /// kernel walk that was under way).
    pub renewed: u64,
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
            .and_modify(|e| {
                e.next_try = e.next_try.min(now);
                e.renewed += 1;
            })
            .or_insert(Entry {
                since: now,
                attempts: 0,
                next_try: now,
                last: None,
                renewed: 0,
            });
    }

    /// A target's renewal count now (0 when not pending).
    pub fn renewed(&self, t: &Target) -> u64 {
        self.map.get(t).map_or(0, |e| e.renewed)
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

    /// Record an attempt's outcome; `renewed` is the target's renewal count when the
    /// attempt took it. Returns true when the target is finished (removed). A done
    /// target renewed since it was taken stays, due at once; capped targets are due
    /// again at once (work remains, nothing is wrong); failed and incomplete ones after
    /// `initial` doubled per attempt, at most `max`.
    pub fn record(
        &mut self,
        t: &Target,
        renewed: u64,
        outcome: CleanupOutcome,
        now: Instant,
        initial: Duration,
        max: Duration,
    ) -> bool {
        if outcome.done() {
            return match self.map.get_mut(t) {
                Some(e) if e.renewed != renewed => {
                    e.last = Some(outcome);
                    e.next_try = now;
                    false
                }
                Some(_) => self.map.remove(t).is_some(),
                None => false,
            };
        }
        if let Some(e) = self.map.get_mut(t) {
            e.attempts = e.attempts.saturating_add(1);
            e.last = Some(outcome);
            e.next_try = match outcome {
                CleanupOutcome::Capped => now,
                _ => now + backoff::doubling(initial, e.attempts.saturating_sub(1), max),
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
pub fn record_in_tables<'a, 'b>(
    tables: impl IntoIterator<Item = &'b mut Table>,
    targets: impl Iterator<Item = &'a Target>,
) {
    let mut by: BTreeMap<(Family, &str), BTreeSet<Vec<Value>>> = BTreeMap::new();
    for t in targets {
        let (f, set, key) = element_of(t);
        by.entry((f, set)).or_default().insert(key);
    }
    for table in tables {
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
