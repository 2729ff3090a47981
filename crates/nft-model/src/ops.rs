//! Batch operations: what one atomic transaction is made of.

use crate::expr::Family;
use crate::object::{BaseHook, Chain, Element, Rule, Set, Table};
use crate::packed::{PackedElement, PackedTable};

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
    /// Insert a rule at the head of the chain (`iptables -I`, `nft insert rule`).
    InsertRule {
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
    /// Create the named counter if it does not exist; an existing one keeps its values
    /// (the kernel's counter object has no update: `NLM_F_CREATE` without `EXCL`).
    AddCounter {
        table: TableRef,
        name: String,
    },
    /// Delete the named counter (no rule may still refer to it).
    DeleteCounter {
        table: TableRef,
        name: String,
    },
    DeleteElements {
        table: TableRef,
        set: String,
        elements: Vec<Element>,
    },
    /// [`Op::AddElements`] with the elements packed (shared with whoever built them,
    /// e.g. the compiler): the same operation, the same bytes on the wire, without
    /// unpacking a large set's elements to send them (docs/decisions/0012).
    AddPackedElements {
        table: TableRef,
        set: String,
        elements: Vec<PackedElement>,
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
            | Op::InsertRule { table, .. }
            | Op::AddSet { table, .. }
            | Op::DeleteSet { table, .. }
            | Op::FlushSet { table, .. }
            | Op::AddElements { table, .. }
            | Op::AddCounter { table, .. }
            | Op::DeleteCounter { table, .. }
            | Op::DeleteElements { table, .. }
            | Op::AddPackedElements { table, .. } => table,
        }
    }

    /// The op with its packed elements unpacked ([`Op::AddPackedElements`] as the
    /// [`Op::AddElements`] it stands for); any other op as it is.
    pub fn unpacked(&self) -> std::borrow::Cow<'_, Op> {
        match self {
            Op::AddPackedElements {
                table,
                set,
                elements,
            } => std::borrow::Cow::Owned(Op::AddElements {
                table: table.clone(),
                set: set.clone(),
                elements: elements.iter().map(PackedElement::element).collect(),
            }),
            _ => std::borrow::Cow::Borrowed(self),
        }
    }

    /// For an element op, the op with only its `k`-th element (unpacked), e.g. the one
    /// the kernel refused; None for other ops or past the last element.
    pub fn one_element(&self, k: usize) -> Option<Op> {
        let (table, set, kind, e) = match self {
            Op::AddElements {
                table,
                set,
                elements,
            } => (table, set, true, elements.get(k)?.clone()),
            Op::AddPackedElements {
                table,
                set,
                elements,
            } => (table, set, true, elements.get(k)?.element()),
            Op::DeleteElements {
                table,
                set,
                elements,
            } => (table, set, false, elements.get(k)?.clone()),
            _ => return None,
        };
        let (table, set, elements) = (table.clone(), set.clone(), vec![e]);
        Some(if kind {
            Op::AddElements {
                table,
                set,
                elements,
            }
        } else {
            Op::DeleteElements {
                table,
                set,
                elements,
            }
        })
    }

    /// The number of elements of an element op (0 for other ops).
    pub fn element_count(&self) -> usize {
        match self {
            Op::AddElements { elements, .. } | Op::DeleteElements { elements, .. } => {
                elements.len()
            }
            Op::AddPackedElements { elements, .. } => elements.len(),
            _ => 0,
        }
    }
}

/// The operations that create `table` with everything in it, in an order the kernel
/// accepts and that is cheap for it: table, counters, sets, chains, rules, elements. Rules before
/// elements: kernel 6.18 walks every element of a map each time a rule that looks it up
/// is added (`nf_tables_bind_set`, for each rule, not once per chain), so a rule added
/// to a full map costs the map's size; elements added to a map that rules already use
/// cost nothing more. Verdict-map elements refer to chains, created before them. The
/// elements of constant sets go before the rules (a bound constant set takes none).
pub fn create_table_ops(table: &Table) -> Vec<Op> {
    into_create_table_ops(table.clone())
}

/// [`create_table_ops`] taking the table: its elements move into the operations (no
/// copy of a large table's elements).
pub fn into_create_table_ops(table: Table) -> Vec<Op> {
    into_create_table_ops_packed(PackedTable::from(table))
}

/// [`into_create_table_ops`] of a table some of whose sets hold packed elements: those
/// are added by [`Op::AddPackedElements`] where [`Op::AddElements`] would add them
/// unpacked (the same batch on the wire; nothing is unpacked).
pub fn into_create_table_ops_packed(table: PackedTable) -> Vec<Op> {
    let PackedTable {
        mut table,
        mut packed,
    } = table;
    let t = TableRef::new(table.family, table.name.clone());
    let mut ops = vec![Op::AddTable {
        table: t.clone(),
        comment: table.comment.clone(),
    }];
    for name in &table.counters {
        ops.push(Op::AddCounter {
            table: t.clone(),
            name: name.clone(),
        });
    }
    for s in &table.sets {
        ops.push(Op::AddSet {
            table: t.clone(),
            set: Set {
                name: s.name.clone(),
                key: s.key.clone(),
                data: s.data.clone(),
                flags: s.flags,
                timeout_ms: s.timeout_ms,
                size: s.size,
                saddr_key: s.saddr_key,
                comment: s.comment.clone(),
                elements: Vec::new(),
            },
        });
    }
    for c in &table.chains {
        ops.push(add_chain_op(&t, c));
    }
    let mut elements = |constant: bool, sets: &mut Vec<Set>| -> Vec<Op> {
        let mut ops = Vec::new();
        for s in sets
            .iter_mut()
            .filter(|s| s.flags.constant == constant && !s.flags.dynamic)
        {
            match packed.remove(&s.name) {
                Some(p) if !p.is_empty() => {
                    // (elements of both kinds: one op, the unpacked ones first)
                    let mut elements: Vec<PackedElement> = s
                        .elements
                        .drain(..)
                        .map(|e| PackedElement::new(&e))
                        .collect();
                    elements.extend(p);
                    ops.push(Op::AddPackedElements {
                        table: t.clone(),
                        set: s.name.clone(),
                        elements,
                    })
                }
                _ if !s.elements.is_empty() => ops.push(Op::AddElements {
                    table: t.clone(),
                    set: s.name.clone(),
                    elements: std::mem::take(&mut s.elements),
                }),
                _ => {}
            }
        }
        ops
    };
    // a constant set takes no element once a rule uses it
    let constant = elements(true, &mut table.sets);
    ops.extend(constant);
    for c in std::mem::take(&mut table.chains) {
        for r in c.rules {
            ops.push(Op::AddRule {
                table: t.clone(),
                chain: c.name.clone(),
                rule: r,
            });
        }
    }
    let rest = elements(false, &mut table.sets);
    ops.extend(rest);
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
