//! The planner (pure): from the desired state, what we know of the kernel and the
//! pending cleanup targets, the plan of one commit: its batch, the cleanup targets our
//! tables record once it is committed, the targets it makes (cleared only after it is
//! committed), and why it looks as it does.
//!
//! Two ways to the batch:
//! - the kernel holds exactly what we committed last (the generation says nobody else
//!   committed since): the compiler's own batch for the change, plus the changes of the
//!   recorded cleanup targets. Work proportional to the change.
//! - otherwise (first sync, after a failure, another program changed our tables): our
//!   tables as read back, and the batch is the diff to the desired tables (or, after a
//!   refusal that no service port explains, their replacement in one batch).

use std::collections::BTreeSet;

use nft_model::{Family, Op, PackedTable, Table, TableRef};
use ruleset::Compiler;

use crate::compile::families;
use crate::our_tables;
use crate::pending;
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

/// What we know of the kernel, one type.
#[derive(Debug, Clone)]
pub enum Kernel {
    /// It holds exactly what we committed last, at this generation.
    Trusted { genid: u32 },
    /// Our tables as read back at this generation. `was_trusted`: we knew what the
    /// kernel held until the generation moved (another program may have changed our
    /// tables: a repair).
    Read {
        genid: u32,
        tables: Bases,
        was_trusted: bool,
    },
}

/// Why a plan's batch is what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The compiler's batch for the change (the kernel holds our last commit).
    Incremental,
    /// The diff from our tables as read back.
    Full,
    /// The diff from our tables as read back, which another program had changed.
    Repair,
    /// Our tables deleted and created again from the desired state, in one batch.
    Replacement,
}

impl Why {
    pub fn name(self) -> &'static str {
        match self {
            Why::Incremental => "incremental",
            Why::Full => "full",
            Why::Repair => "repair",
            Why::Replacement => "replacement",
        }
    }
}

/// The desired state.
pub struct Desired<'a> {
    pub compiler: &'a Compiler,
    /// The compiler's batch since our last commit (None: only a diff can tell).
    pub ops: Option<&'a [Op]>,
    /// UDP destinations served since our last commit, and UDP endpoints that stopped
    /// serving since then (the compiler's net change).
    pub became_served: &'a BTreeSet<Target>,
    pub stopped: &'a BTreeSet<Target>,
    /// Replace our tables rather than diff them.
    pub replace: bool,
}

/// The cleanup side of the plan.
pub struct Cleanup<'a> {
    /// False: targets are found and dropped (a test-only switch).
    pub enabled: bool,
    pub pending: &'a BTreeSet<Target>,
    /// What our tables record as of our last commit.
    pub recorded: &'a BTreeSet<Target>,
    /// This process has not committed yet: the endpoint targets come from the tables a
    /// previous run left, and the targets it recorded there are resumed.
    pub first: bool,
}

/// One commit, planned.
#[derive(Debug, Clone)]
pub struct Plan {
    pub ops: Vec<Op>,
    /// The generation the batch is computed against (it guards the commit).
    pub genid: u32,
    /// The targets our tables record once the batch is committed.
    pub records: BTreeSet<Target>,
    /// The targets the batch makes (and those resumed): pending once it is committed,
    /// cleared only then.
    pub clears: BTreeSet<Target>,
    /// Of `clears`, those a previous run recorded and did not finish.
    pub resumed: usize,
    /// Targets found while the cleanup is disabled (dropped).
    pub dropped: usize,
    pub why: Why,
}

/// Plan one commit.
pub fn plan(kernel: Kernel, want: &Desired, cleanup: &Cleanup) -> Plan {
    let families = families(want.compiler);
    let (genid, read, was_trusted) = match kernel {
        Kernel::Trusted { genid } => (genid, None, false),
        Kernel::Read {
            genid,
            tables,
            was_trusted,
        } => (genid, Some(tables), was_trusted),
    };
    let incremental = !want.replace && want.ops.is_some() && read.is_none();
    // the desired tables, their large sets' elements packed (shared with the
    // compiler): a table created from scratch is created from them as they are
    let desired = (!incremental).then(|| want.compiler.packed_tables());
    let (clears, resumed, dropped) =
        cleanup_targets(read.as_ref(), desired.as_deref(), want, cleanup);
    let records: BTreeSet<Target> = cleanup
        .pending
        .iter()
        .chain(clears.iter())
        .filter(|t| families.contains(&pending::family_of(t)))
        .copied()
        .collect();
    let (ops, why) = match (desired, read) {
        (None, _) => {
            let mut ops = want.ops.map(<[Op]>::to_vec).unwrap_or_default();
            ops.extend(pending::recorded_ops(&families, cleanup.recorded, &records));
            (ops, Why::Incremental)
        }
        (Some(mut d), read) => {
            let base = read.unwrap_or_else(|| ours(&families));
            // We knew what the kernel held, but the generation moved: did another
            // program change our tables? (Our last batch played forward on the tables
            // read back must reach the desired ones.)
            let repaired = match (was_trusted, want.ops) {
                (true, Some(ops)) => {
                    let mut ours = ops.to_vec();
                    ours.extend(pending::recorded_ops(
                        &families,
                        cleanup.recorded,
                        &BTreeSet::new(),
                    ));
                    drifted(&base, &ours, &d)
                }
                _ => false,
            };
            pending::record_in_tables(d.iter_mut().map(|t| &mut t.table), records.iter());
            if want.replace {
                (replace(&base, d), Why::Replacement)
            } else {
                (
                    batch(&base, d),
                    if repaired { Why::Repair } else { Why::Full },
                )
            }
        }
    };
    Plan {
        ops,
        genid,
        records,
        clears,
        resumed,
        dropped,
        why,
    }
}

/// The conntrack targets this plan clears after its commit: those implied by going
/// from the kernel's rules to the desired ones, and on this process's first commit those
/// recorded in our tables (resumed); none when cleanup is off (all dropped).
/// Returns (targets to clear, how many were resumed, how many were dropped).
fn cleanup_targets(
    read: Option<&Bases>,
    desired: Option<&[PackedTable]>,
    want: &Desired,
    cleanup: &Cleanup,
) -> (BTreeSet<Target>, usize, usize) {
    // Targets implied by going from the kernel's rules to the desired ones.
    let mut found = match (read, desired) {
        (Some(base), Some(d)) => became_served(base, d),
        _ => want.became_served.clone(),
    };
    // Endpoints that stopped serving: on this process's first commit, those in the
    // endpoint maps of the tables the kernel holds and in none of the desired ones;
    // afterwards, the compiler's net change since the last commit.
    match (read, desired, cleanup.first) {
        (Some(base), Some(d), true) => found.extend(gone_from_tables(base, d)),
        _ => found.extend(want.stopped.iter().copied()),
    }
    let mut clears = BTreeSet::new();
    let mut resumed = 0;
    let mut dropped = 0;
    if cleanup.enabled {
        if let (Some(base), true) = (read, cleanup.first) {
            let r = pending::recorded_in(known_tables(base));
            resumed = r.len();
            clears.extend(r);
        }
        clears.extend(found);
    } else {
        dropped = found.len();
    }
    (clears, resumed, dropped)
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
pub fn drifted(read: &Bases, ops: &[Op], desired: &[PackedTable]) -> bool {
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
    let desired: Vec<Table> = desired.iter().map(|t| t.clone().unpack()).collect();
    canon(&played) != canon(&desired)
}

/// The one batch turning `base` into `desired`, table by table. (A table we trust but
/// did not read is replaced; callers use the compiler's batch for those.) The desired
/// tables are taken: a table created from scratch is created from their packed
/// elements as they are (`Op::AddPackedElements`: nothing unpacked, nothing copied).
pub fn batch(base: &Bases, desired: Vec<PackedTable>) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut desired: Vec<Option<PackedTable>> = desired.into_iter().map(Some).collect();
    let mut take = |family, name: &str| {
        desired
            .iter_mut()
            .find(|x| {
                x.as_ref()
                    .is_some_and(|x| x.table.family == family && x.table.name == name)
            })
            .and_then(Option::take)
    };
    for (t, b) in base {
        let want = take(t.family, &t.name);
        match (b, want) {
            (Base::Known(old), Some(new)) => {
                ops.extend(ruleset::diff_packed_into(old.as_ref(), new))
            }
            (Base::Known(Some(_)) | Base::Ours, None) => {
                ops.push(Op::DeleteTable { table: t.clone() })
            }
            (Base::Known(None), None) => {}
            (Base::Unreadable | Base::Ours, want) => {
                ops.push(Op::DeleteTable { table: t.clone() });
                if let Some(new) = want {
                    ops.extend(ruleset::diff_packed_into(None, new));
                }
            }
        }
    }
    // Tables we do not track by name (none today) are created as they are.
    for d in desired.into_iter().flatten() {
        ops.extend(ruleset::diff_packed_into(None, d));
    }
    ops
}

/// The one batch replacing our tables by `desired`: delete each of our tables the
/// kernel holds, then create the desired ones (one transaction: no moment without
/// rules).
pub fn replace(base: &Bases, desired: Vec<PackedTable>) -> Vec<Op> {
    let mut ops: Vec<Op> = base
        .iter()
        .filter(|(_, b)| !matches!(b, Base::Known(None)))
        .map(|(t, _)| Op::DeleteTable { table: t.clone() })
        .collect();
    for d in desired {
        ops.extend(ruleset::diff_packed_into(None, d));
    }
    ops
}

/// The destination targets of going from the kernel's tables (`base`, as dumped) to
/// `desired`: UDP destinations served now and not before.
pub fn became_served(base: &Bases, desired: &[PackedTable]) -> BTreeSet<Target> {
    let old = targets::served_destinations(known_tables(base));
    targets::served_destinations(desired)
        .difference(&old)
        .copied()
        .collect()
}

/// Endpoint targets on this process's first commit: every UDP endpoint of the dumped
/// tables that is in none of the desired ones (the UDP endpoints that disappeared while
/// no engine ran).
pub fn gone_from_tables(base: &Bases, desired: &[PackedTable]) -> BTreeSet<Target> {
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
