//! What the engine knows about the kernel's copy of our tables, in one place (pure).
//!
//! The kernel's ruleset has one generation counter, moved by every commit of anyone's.
//! The engine may skip reading its tables back only while it knows the kernel holds
//! exactly what it committed last: that commit's generation is the kernel's, or every
//! commit since was another program's to its own tables (heard by the watcher), or a
//! commit of ours outside our tables (`KUBE-FORWARD`: a side commit). Then the
//! compiler's batch since that commit is the batch to send.
//!
//! Invariants (held by this type alone: its fields are private, and every change is a
//! named transition):
//! - [`Ledger::view`] gives the compiler's batch only for the generation at which the
//!   kernel holds our last commit, and only while the batch starts from that commit:
//!   the incremental path cannot be taken on a view that is not trusted.
//! - After a commit whose outcome is not known, or a generation moved by someone who
//!   may have touched our tables, nothing is trusted until a commit of ours succeeds.
//! - A compiler built or rebuilt (its journal no longer starts at our last commit) has
//!   no batch until its first commit.

use std::collections::VecDeque;

use nft_model::Op;

/// How many of our latest commits' generations are remembered (to tell our own
/// commits from another program's in the nftables notifications).
const REMEMBERED: usize = 64;

/// What the engine knows about the kernel (see the module documentation).
#[derive(Debug, Default)]
pub struct Ledger {
    /// The generation at which the kernel holds exactly what we committed last (None:
    /// unknown; our tables are read back).
    held: Option<u32>,
    /// The compiler's batch from our last commit to its desired tables (None: the
    /// compiler does not start from our last commit; only a diff can tell).
    batch: Option<Vec<Op>>,
    /// Generations produced by our latest commits (ours and side commits).
    ours: VecDeque<u32>,
    /// Whether this process committed a batch of ours.
    committed: bool,
}

/// The kernel as the ledger sees it at one generation.
#[derive(Debug, Clone, PartialEq)]
pub enum View {
    /// It holds our last commit: the compiler's batch since then is the batch.
    Trusted { genid: u32, ops: Vec<Op> },
    /// Our tables must be read back. `since_ours`: the batch since our last commit,
    /// when we knew the kernel held it until the generation moved (played on the tables
    /// read back, it tells whether another program changed them).
    Unknown { since_ours: Option<Vec<Op>> },
}

impl Ledger {
    pub fn new() -> Ledger {
        Ledger::default()
    }

    // -- what is known ------------------------------------------------------------

    /// The generation at which the kernel holds our last commit (None: unknown).
    pub fn held(&self) -> Option<u32> {
        self.held
    }

    /// The kernel at generation `genid`.
    pub fn view(&self, genid: u32) -> View {
        match (&self.batch, self.held) {
            (Some(ops), Some(g)) if g == genid => View::Trusted {
                genid,
                ops: ops.clone(),
            },
            (Some(ops), Some(_)) => View::Unknown {
                since_ours: Some(ops.clone()),
            },
            _ => View::Unknown { since_ours: None },
        }
    }

    /// Whether the compiler's batch starts from our last commit and the kernel holds
    /// it (a skipped port may then be tried by a batch of its own).
    pub fn incremental(&self) -> bool {
        self.held.is_some() && self.batch.is_some()
    }

    /// Whether a transaction of generation `g` was one of our commits.
    pub fn is_ours(&self, g: u32) -> bool {
        self.ours.contains(&g)
    }

    /// Whether this process committed a batch of ours.
    pub fn has_committed(&self) -> bool {
        self.committed
    }

    // -- transitions --------------------------------------------------------------

    /// The compiler was brought up to date: its batch since our last commit (None: it
    /// cannot tell), and whether it was built or rebuilt meanwhile.
    pub fn compiled(&mut self, ops: Option<Vec<Op>>, rebuilt: bool) {
        self.batch = ops.filter(|_| !rebuilt && self.batch.is_some());
    }

    /// The generation moved from `from` to `to` by other programs' commits to their
    /// own tables only: the kernel still holds what it held.
    pub fn moved_on(&mut self, from: u32, to: u32) {
        if self.held == Some(from) {
            self.held = Some(to);
        }
    }

    /// A batch of ours was committed on generation `base` (`empty`: there was nothing
    /// to send, nothing was committed). Returns the generation the kernel holds it at.
    pub fn committed(&mut self, base: u32, empty: bool) -> u32 {
        let g = if empty {
            base
        } else {
            let g = crate::next_generation(base);
            self.remember(g);
            g
        };
        self.held = Some(g);
        self.batch = Some(Vec::new());
        self.committed = true;
        g
    }

    /// A commit of ours outside our tables (e.g. `KUBE-FORWARD`), guarded by `base`:
    /// ours for the watcher, and when the kernel held our last commit at `base`, it
    /// still does (the guard proves nobody committed in between).
    pub fn side_commit(&mut self, base: u32) {
        let g = crate::next_generation(base);
        self.moved_on(base, g);
        self.remember(g);
    }

    /// What the kernel holds is not known any more: a commit's outcome was lost, or
    /// the generation moved and our tables may have been changed.
    pub fn lost(&mut self) {
        self.held = None;
    }

    fn remember(&mut self, g: u32) {
        if self.ours.len() >= REMEMBERED {
            self.ours.pop_front();
        }
        self.ours.push_back(g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nft_model::{Family, TableRef};

    fn op() -> Op {
        Op::DeleteTable {
            table: TableRef::new(Family::Ip, "t"),
        }
    }

    #[test]
    fn nothing_is_trusted_before_our_first_commit() {
        let mut l = Ledger::new();
        assert_eq!(l.view(7), View::Unknown { since_ours: None });
        l.compiled(Some(vec![op()]), false);
        assert_eq!(l.view(7), View::Unknown { since_ours: None });
        assert!(!l.incremental());
        assert!(!l.has_committed());
    }

    #[test]
    fn after_a_commit_the_batch_since_is_trusted_at_its_generation_only() {
        let mut l = Ledger::new();
        l.compiled(None, true);
        assert_eq!(l.committed(7, false), 8);
        assert!(l.is_ours(8) && !l.is_ours(7));
        l.compiled(Some(vec![op()]), false);
        assert_eq!(
            l.view(8),
            View::Trusted {
                genid: 8,
                ops: vec![op()]
            }
        );
        // another generation: read back, with the batch to tell a repair
        assert_eq!(
            l.view(9),
            View::Unknown {
                since_ours: Some(vec![op()])
            }
        );
        assert!(l.incremental());
    }

    #[test]
    fn an_empty_commit_keeps_the_generation() {
        let mut l = Ledger::new();
        assert_eq!(l.committed(7, true), 7);
        assert!(!l.is_ours(7));
        assert!(matches!(l.view(7), View::Trusted { .. }));
    }

    #[test]
    fn a_rebuilt_compiler_has_no_batch_until_it_commits() {
        let mut l = Ledger::new();
        l.committed(1, false);
        l.compiled(Some(vec![op()]), true);
        assert_eq!(l.view(2), View::Unknown { since_ours: None });
        // nor does a later step restore it
        l.compiled(Some(vec![op()]), false);
        assert_eq!(l.view(2), View::Unknown { since_ours: None });
        l.committed(2, false);
        l.compiled(Some(vec![]), false);
        assert!(matches!(l.view(3), View::Trusted { .. }));
    }

    #[test]
    fn others_commits_move_the_trust_on_a_loss_ends_it() {
        let mut l = Ledger::new();
        l.committed(1, false);
        l.moved_on(2, 5);
        assert!(matches!(l.view(5), View::Trusted { .. }));
        // a move from a generation we do not hold changes nothing
        l.moved_on(4, 9);
        assert!(matches!(l.view(5), View::Trusted { .. }));
        l.lost();
        assert_eq!(l.held(), None);
        assert!(!l.incremental());
        assert!(matches!(l.view(5), View::Unknown { .. }));
    }

    #[test]
    fn a_side_commit_from_the_held_generation_keeps_the_trust() {
        let mut l = Ledger::new();
        l.committed(1, false);
        l.side_commit(2);
        assert!(l.is_ours(3));
        assert!(matches!(l.view(3), View::Trusted { .. }));
        // from another generation: ours for the watcher, no trust gained
        l.side_commit(10);
        assert!(l.is_ours(11));
        assert!(matches!(l.view(11), View::Unknown { .. }));
    }

    #[test]
    fn only_the_latest_generations_are_remembered() {
        let mut l = Ledger::new();
        for g in 0..(REMEMBERED as u32 + 3) {
            l.committed(g * 2, false);
        }
        assert!(!l.is_ours(1));
        assert!(l.is_ours((REMEMBERED as u32 + 2) * 2 + 1));
    }
}
