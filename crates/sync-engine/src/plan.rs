//! Compile and diff (pure): the desired tables, the one batch from what the kernel holds
//! to them, and the conntrack targets that batch creates.

use std::collections::BTreeSet;

use kube_model::Cluster;
use nft_model::{Op, Table, TableRef};

use crate::our_tables;
use crate::targets::{self, EndpointSnapshot, Target};

/// What we know of one of our tables in the kernel.
#[derive(Debug, Clone)]
pub enum Base {
    /// Exactly this (None: absent).
    Known(Option<Table>),
    /// It exists but could not be read back into the model: replace it wholesale.
    Unreadable,
}

/// Our tables as the kernel holds them (or as we trust it holds them).
pub type Bases = Vec<(TableRef, Base)>;

/// The desired state of one sync: the compiled tables, the problems met compiling, and
/// the serving endpoints of UDP service ports (for endpoint cleanup targets).
#[derive(Debug, Clone)]
pub struct Desired {
    pub tables: Vec<Table>,
    pub errors: Vec<ruleset::RulesetError>,
    pub endpoints: EndpointSnapshot,
}

/// Compile the whole model (today's full compile; an incremental compiler replaces this
/// function and nothing else).
pub fn compile(cluster: &Cluster, parsed: &ruleset::ParsedConfig) -> Desired {
    let compiled = ruleset::compile_parsed(cluster, parsed);
    Desired {
        tables: compiled.tables,
        errors: compiled.errors,
        endpoints: targets::endpoint_snapshot(cluster, &parsed.families),
    }
}

/// Our tables as known from an in-memory copy.
pub fn known(tables: &[Table]) -> Bases {
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

/// The tables of `base` that are known exactly.
pub fn known_tables(base: &Bases) -> Vec<Table> {
    base.iter()
        .filter_map(|(_, b)| match b {
            Base::Known(Some(t)) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

/// Whether what the kernel holds differs from our copy of it (another program changed
/// our tables).
pub fn drifted(read: &Bases, mine: &[Table]) -> bool {
    read.iter().any(|(t, b)| {
        let m = mine
            .iter()
            .find(|x| x.family == t.family && x.name == t.name);
        match (b, m) {
            (Base::Unreadable, _) => true,
            (Base::Known(None), None) => false,
            (Base::Known(Some(_)), None) | (Base::Known(None), Some(_)) => true,
            (Base::Known(Some(k)), Some(m)) => {
                !ruleset::diff_tables(Some(k), m).is_empty()
                    || !ruleset::diff_tables(Some(m), k).is_empty()
            }
        }
    })
}

/// The one batch turning `base` into `desired`, table by table.
pub fn batch(base: &Bases, desired: &[Table]) -> Vec<Op> {
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

/// The one batch replacing our tables by `desired`: delete each of our tables the
/// kernel holds, then create the desired ones (one transaction: no moment without
/// rules).
pub fn replace(base: &Bases, desired: &[Table]) -> Vec<Op> {
    let mut ops: Vec<Op> = base
        .iter()
        .filter(|(_, b)| !matches!(b, Base::Known(None)))
        .map(|(t, _)| Op::DeleteTable { table: t.clone() })
        .collect();
    for d in desired {
        ops.extend(ruleset::diff_tables(None, d));
    }
    ops
}

/// The conntrack targets of going from the kernel's rules (`base`) to `desired`:
/// destinations that start being served, and endpoints that stop serving (against the
/// endpoints applied by this process's last sync, or on its first sync against the
/// endpoint maps of the tables the previous run left).
pub fn targets(
    base: &Bases,
    desired: &Desired,
    applied: Option<&EndpointSnapshot>,
) -> BTreeSet<Target> {
    let base_tables = known_tables(base);
    let old_served = targets::served_destinations(&base_tables);
    let new_served = targets::served_destinations(&desired.tables);
    let mut out = targets::new_destinations(&old_served, &new_served);
    match applied {
        Some(old) => out.extend(targets::stale_endpoints(old, &desired.endpoints)),
        None => {
            let now = targets::table_endpoints(&desired.tables);
            for (addr, port) in targets::table_endpoints(&base_tables) {
                if !now.contains(&(addr, port)) {
                    out.insert(Target::Endpoint { addr, port });
                }
            }
        }
    }
    out
}
