//! Plan a sync (pure): bring the incremental compiler up to date with what changed, and
//! build the one batch from what the kernel holds to the desired state, with the
//! conntrack targets that batch creates.
//!
//! Two ways to the batch:
//! - the kernel holds exactly what we committed last (the generation says nobody else
//!   committed since): the compiler's own batch for the change, plus the changes of the
//!   recorded cleanup targets. Work proportional to the change.
//! - otherwise (first sync, after a failure, another program changed our tables): our
//!   tables are dumped and the batch is the diff from the dump to the desired tables.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use kube_model::{Cluster, IpFamily};
use nft_model::{Family, Op, Table, TableRef};
use ruleset::names::PortId;
use ruleset::{Changes, Compiler, ParsedConfig};

use crate::our_tables;
use crate::targets::{self, Target};

/// What we know of one of our tables in the kernel.
#[derive(Debug, Clone)]
pub enum Base {
    /// Exactly this (None: absent).
    Known(Option<Table>),
    /// It exists and holds what we committed last (not read back).
    Ours,
    /// It exists but could not be read back into the model: replace it wholesale.
    Unreadable,
}

/// Our tables as the kernel holds them (or as we trust it holds them).
pub type Bases = Vec<(TableRef, Base)>;

/// Per UDP service port and family: some of its endpoints.
pub type Stopped = BTreeMap<(PortId, IpFamily), BTreeSet<(IpAddr, u16)>>;

/// Endpoints that stopped or started serving UDP ports since the last commit: the net
/// change over the compiler updates whose batches are not committed yet (a failed
/// commit keeps them; an endpoint that stops and serves again in between is no target).
#[derive(Debug, Default)]
pub struct Serving {
    pub stopped: Stopped,
    pub started: Stopped,
}

impl Serving {
    /// Add one update's changes.
    pub fn add(&mut self, stopped: Stopped, started: Stopped) {
        for (k, eps) in started {
            for e in eps {
                let back = self.stopped.get_mut(&k).is_some_and(|s| s.remove(&e));
                if !back {
                    self.started.entry(k.clone()).or_default().insert(e);
                }
            }
        }
        for (k, eps) in stopped {
            for e in eps {
                let new = self.started.get_mut(&k).is_some_and(|s| s.remove(&e));
                if !new {
                    self.stopped.entry(k.clone()).or_default().insert(e);
                }
            }
        }
    }

    /// The endpoints that stopped serving since the last commit.
    pub fn stopped(&self) -> impl Iterator<Item = &(IpAddr, u16)> {
        self.stopped.values().flatten()
    }

    pub fn clear(&mut self) {
        self.stopped.clear();
        self.started.clear();
    }
}

/// What bringing the compiler up to date did.
#[derive(Debug, Default)]
pub struct Step {
    /// The batch from the previous desired tables to the new ones; None when the
    /// compiler was built from scratch (the batch must then come from a diff).
    pub ops: Option<Vec<Op>>,
    /// UDP destinations the change made served.
    pub became_served: BTreeSet<Target>,
    /// UDP endpoints the change made stop serving, per port.
    pub stopped: Stopped,
    /// UDP endpoints the change made start serving, per port.
    pub started: Stopped,
}

/// Bring `compiler` (built here when there is none) up to date with `changes` to
/// `cluster`, the configuration `parsed` and the excluded service ports.
pub fn advance(
    compiler: &mut Option<Compiler>,
    cluster: &Cluster,
    parsed: &ParsedConfig,
    exclude: &BTreeSet<PortId>,
    mut changes: Changes,
) -> Step {
    let Some(c) = compiler.as_mut() else {
        *compiler = Some(Compiler::with_excluded(
            parsed.clone(),
            cluster,
            exclude.clone(),
        ));
        return Step::default();
    };
    changes.services.extend(c.set_excluded(exclude.clone()));
    let mut updates = vec![c.update(cluster, &changes)];
    if parsed != c.config() {
        updates.push(c.set_config(parsed.clone(), cluster));
    }
    let mut step = Step {
        ops: Some(Vec::new()),
        ..Step::default()
    };
    for u in updates {
        step.ops.get_or_insert_with(Vec::new).extend(u.ops);
        for (key, t) in u.targets {
            step.became_served
                .extend(t.became_served.into_iter().map(targets::of_served));
            if !t.stopped_serving.is_empty() {
                step.stopped
                    .entry(key.clone())
                    .or_default()
                    .extend(t.stopped_serving);
            }
            if !t.started_serving.is_empty() {
                step.started
                    .entry(key)
                    .or_default()
                    .extend(t.started_serving);
            }
        }
    }
    step
}

/// The desired tables from the compiler, with the pending cleanup targets recorded.
pub fn desired<'a>(compiler: &Compiler, recorded: impl Iterator<Item = &'a Target>) -> Vec<Table> {
    let mut tables = compiler.tables();
    crate::cleanup::record_in_tables(&mut tables, recorded);
    tables
}

/// The table families the compiler programs.
pub fn families(compiler: &Compiler) -> Vec<Family> {
    compiler
        .config()
        .families
        .iter()
        .map(|f| ruleset::nft_family(*f))
        .collect()
}

/// Our tables as the kernel holds them when it holds what we committed: present for
/// the compiler's families, absent for the others.
pub fn ours(families: &[Family]) -> Bases {
    our_tables()
        .into_iter()
        .map(|t| {
            let b = if families.contains(&t.family) {
                Base::Ours
            } else {
                Base::Known(None)
            };
            (t, b)
        })
        .collect()
}

/// The tables of `base` that are known exactly.
pub fn known_tables(base: &Bases) -> impl Iterator<Item = &Table> {
    base.iter().filter_map(|(_, b)| match b {
        Base::Known(Some(t)) => Some(t),
        _ => None,
    })
}

/// Whether what the kernel holds (`read`) differs from what we committed last, given
/// that `ops` turn what we committed into `desired`: the dump played forward by the
/// same batch must reach the same tables.
pub fn drifted(read: &Bases, ops: &[Op], desired: &[Table]) -> bool {
    if read.iter().any(|(_, b)| matches!(b, Base::Unreadable)) {
        return true;
    }
    let mut played: Vec<Table> = known_tables(read).cloned().collect();
    if ruleset::apply(&mut played, ops).is_err() {
        return true;
    }
    let canon = |t: &[Table]| {
        let mut v: Vec<Table> = t.iter().map(Table::canonical).collect();
        v.sort_by(|a, b| (a.family as u8, &a.name).cmp(&(b.family as u8, &b.name)));
        v
    };
    canon(&played) != canon(desired)
}

/// The one batch turning `base` into `desired`, table by table. (A table we trust but
/// did not read is replaced; callers use the compiler's batch for those.) The desired
/// tables are taken: a table created from scratch moves its elements into the batch.
pub fn batch(base: &Bases, desired: Vec<Table>) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut desired: Vec<Option<Table>> = desired.into_iter().map(Some).collect();
    let mut take = |family, name: &str| {
        desired
            .iter_mut()
            .find(|x| {
                x.as_ref()
                    .is_some_and(|x| x.family == family && x.name == name)
            })
            .and_then(Option::take)
    };
    for (t, b) in base {
        let want = take(t.family, &t.name);
        match (b, want) {
            (Base::Known(old), Some(new)) => {
                ops.extend(ruleset::diff_tables_into(old.as_ref(), new))
            }
            (Base::Known(Some(_)) | Base::Ours, None) => {
                ops.push(Op::DeleteTable { table: t.clone() })
            }
            (Base::Known(None), None) => {}
            (Base::Unreadable | Base::Ours, want) => {
                ops.push(Op::DeleteTable { table: t.clone() });
                if let Some(new) = want {
                    ops.extend(ruleset::diff_tables_into(None, new));
                }
            }
        }
    }
    // Tables we do not track by name (none today) are created as they are.
    for d in desired.into_iter().flatten() {
        ops.extend(ruleset::diff_tables_into(None, d));
    }
    ops
}

/// The one batch replacing our tables by `desired`: delete each of our tables the
/// kernel holds, then create the desired ones (one transaction: no moment without
/// rules).
pub fn replace(base: &Bases, desired: Vec<Table>) -> Vec<Op> {
    let mut ops: Vec<Op> = base
        .iter()
        .filter(|(_, b)| !matches!(b, Base::Known(None)))
        .map(|(t, _)| Op::DeleteTable { table: t.clone() })
        .collect();
    for d in desired {
        ops.extend(ruleset::diff_tables_into(None, d));
    }
    ops
}

/// The destination targets of going from the kernel's tables (`base`, as dumped) to
/// `desired`: UDP destinations served now and not before.
pub fn became_served(base: &Bases, desired: &[Table]) -> BTreeSet<Target> {
    let old = targets::served_destinations(known_tables(base));
    targets::served_destinations(desired)
        .difference(&old)
        .copied()
        .collect()
}

/// Endpoint targets on this process's first commit: every endpoint in the endpoint
/// maps of the dumped tables that is in none of the desired ones (the endpoints that
/// disappeared while no engine ran).
pub fn gone_from_tables(base: &Bases, desired: &[Table]) -> BTreeSet<Target> {
    let before = targets::table_endpoints(known_tables(base));
    if before.is_empty() {
        // a start into empty tables: no need to list the desired endpoints
        return BTreeSet::new();
    }
    let now = targets::table_endpoints(desired);
    before
        .into_iter()
        .filter(|e| !now.contains(e))
        .map(|(addr, port)| Target::Endpoint { addr, port })
        .collect()
}

/// The full compile of a cluster (isolating refused service ports bisects with these).
pub fn compile(cluster: &Cluster, parsed: &ParsedConfig) -> Vec<Table> {
    ruleset::compile_parsed(cluster, parsed).tables
}
