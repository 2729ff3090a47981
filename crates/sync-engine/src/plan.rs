//! The planner (pure): from the desired state and what we know of the kernel, the plan
//! of one commit: its batch, why it looks as it does, and (planned from our tables read
//! back) the UDP destinations it starts serving that the kernel's tables did not.
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

use ruleset::UdpDest;

use crate::compile::families;
use crate::our_tables;

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

/// What we know of the kernel, one type (made from the engine's
/// [`crate::ledger::View`]: the compiler's batch comes only with a trusted view).
#[derive(Debug, Clone)]
pub enum Kernel {
    /// It holds exactly what we committed last, at this generation; `ops` is the
    /// compiler's batch since that commit.
    Trusted { genid: u32, ops: Vec<Op> },
    /// Our tables as read back at this generation. `since_ours`: the batch since our
    /// last commit, when we knew the kernel held that commit until the generation moved
    /// (another program may have changed our tables: played on the tables read back, it
    /// tells a repair).
    Read {
        genid: u32,
        tables: Bases,
        since_ours: Option<Vec<Op>>,
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
    /// Replace our tables rather than diff them.
    pub replace: bool,
}

/// One commit, planned.
#[derive(Debug, Clone)]
pub struct Plan {
    pub ops: Vec<Op>,
    /// The generation the batch is computed against (it guards the commit).
    pub genid: u32,
    /// Planned from our tables read back: the UDP destinations the desired tables serve
    /// and those did not (after another program deleted our table, packets in the gap
    /// made un-NATed entries: the cleanup judges their flows).
    pub became_served: BTreeSet<UdpDest>,
    pub why: Why,
}

/// Plan one commit.
pub fn plan(kernel: Kernel, want: &Desired) -> Plan {
    let families = families(want.compiler);
    let (genid, read, since_ours) = match kernel {
        Kernel::Trusted { genid, ops } if !want.replace => {
            return Plan {
                ops,
                genid,
                became_served: BTreeSet::new(),
                why: Why::Incremental,
            };
        }
        Kernel::Trusted { genid, .. } => (genid, None, None),
        Kernel::Read {
            genid,
            tables,
            since_ours,
        } => (genid, Some(tables), since_ours),
    };
    // the desired tables, their large sets' elements packed (shared with the
    // compiler): a table created from scratch is created from them as they are
    let d = want.compiler.packed_tables();
    let became_served = read
        .as_ref()
        .map(|base| became_served(base, &d))
        .unwrap_or_default();
    let base = read.unwrap_or_else(|| ours(&families));
    // We knew what the kernel held, but the generation moved: did another program
    // change our tables? (Our last batch played forward on the tables read back must
    // reach the desired ones.)
    let repaired = since_ours.is_some_and(|ops| drifted(&base, &ops, &d));
    let (ops, why) = if want.replace {
        (replace(&base, d), Why::Replacement)
    } else {
        (
            batch(&base, d),
            if repaired { Why::Repair } else { Why::Full },
        )
    };
    Plan {
        ops,
        genid,
        became_served,
        why,
    }
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

/// The UDP destinations `desired` serves and the kernel's tables (`base`, as dumped)
/// did not.
pub fn became_served(base: &Bases, desired: &[PackedTable]) -> BTreeSet<UdpDest> {
    let of = |s: ruleset::Served| match s {
        ruleset::Served::Dst { addr, port } => UdpDest::Addr { addr, port },
        ruleset::Served::NodePort { v6, port } => UdpDest::NodePort { v6, port },
    };
    let old = ruleset::incremental::served_destinations(known_tables(base));
    ruleset::incremental::served_destinations(desired)
        .difference(&old)
        .map(|s| of(*s))
        .collect()
}
