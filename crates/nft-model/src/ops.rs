//! Batch operations: what one atomic transaction is made of.

use crate::expr::Family;
use crate::object::{BaseHook, Chain, Element, Rule, Set, Table};

/// Names a table.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableRef {
    pub family: Family,
    pub name: String,
}

impl TableRef {
    pub fn new(family: Family, name: impl Into<String>) -> TableRef {
        TableRef {
            family,
            name: name.into(),
        }
    }
}

/// One operation of a batch. Each maps to one netlink message, except element
/// lists, which the wire layer may split so that no attribute exceeds 64 KiB.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Op {
    /// Create the table if it does not exist (idempotent).
    AddTable {
        table: TableRef,
        comment: Option<String>,
    },
    DeleteTable {
        table: TableRef,
    },
    /// Create the chain if it does not exist (idempotent for an identical declaration).
    AddChain {
        table: TableRef,
        name: String,
        base: Option<BaseHook>,
        comment: Option<String>,
    },
    /// Delete every rule of the chain.
    FlushChain {
        table: TableRef,
        chain: String,
    },
    DeleteChain {
        table: TableRef,
        chain: String,
    },
    /// Delete one rule by its kernel handle (used to remove rules we did not create,
    /// e.g. jumps into kube-proxy's iptables chains when migrating).
    DeleteRule {
        table: TableRef,
        chain: String,
        handle: u64,
    },
    /// Append a rule to the chain.
    AddRule {
        table: TableRef,
        chain: String,
        rule: Rule,
    },
    /// Create the set (elements are not part of this operation).
    AddSet {
        table: TableRef,
        set: Set,
    },
    DeleteSet {
        table: TableRef,
        set: String,
    },
    /// Delete every element of the set or map.
    FlushSet {
        table: TableRef,
        set: String,
    },
    AddElements {
        table: TableRef,
        set: String,
        elements: Vec<Element>,
    },
    DeleteElements {
        table: TableRef,
        set: String,
        elements: Vec<Element>,
    },
}

impl Op {
    pub fn table(&self) -> &TableRef {
        match self {
            Op::AddTable { table, .. }
            | Op::DeleteTable { table }
            | Op::AddChain { table, .. }
            | Op::FlushChain { table, .. }
            | Op::DeleteChain { table, .. }
            | Op::DeleteRule { table, .. }
            | Op::AddRule { table, .. }
            | Op::AddSet { table, .. }
            | Op::DeleteSet { table, .. }
            | Op::FlushSet { table, .. }
            | Op::AddElements { table, .. }
            | Op::DeleteElements { table, .. } => table,
        }
    }
}

/// The operations that create `table` with everything in it, in an order the kernel
/// accepts: table, sets, chains, elements (verdict maps refer to chains), rules.
pub fn create_table_ops(table: &Table) -> Vec<Op> {
    let t = TableRef::new(table.family, table.name.clone());
    let mut ops = vec![Op::AddTable {
        table: t.clone(),
        comment: table.comment.clone(),
    }];
    for s in &table.sets {
        ops.push(Op::AddSet {
            table: t.clone(),
            set: Set {
                elements: Vec::new(),
                ..s.clone()
            },
        });
    }
    for c in &table.chains {
        ops.push(add_chain_op(&t, c));
    }
    for s in &table.sets {
        if !s.elements.is_empty() && !s.flags.dynamic {
            ops.push(Op::AddElements {
                table: t.clone(),
                set: s.name.clone(),
                elements: s.elements.clone(),
            });
        }
    }
    for c in &table.chains {
        for r in &c.rules {
            ops.push(Op::AddRule {
                table: t.clone(),
                chain: c.name.clone(),
                rule: r.clone(),
            });
        }
    }
    ops
}

/// The `AddChain` operation declaring `c` (its rules are not included).
pub fn add_chain_op(t: &TableRef, c: &Chain) -> Op {
    Op::AddChain {
        table: t.clone(),
        name: c.name.clone(),
        base: c.base,
        comment: c.comment.clone(),
    }
}
