//! What a delete call did, per filter and in total, and whether each filter is done.

use crate::{Family, Filter, Strategy};

/// The outcome of one filter in one delete call. Only [`Outcome::Deleted`] and
/// [`Outcome::AlreadyGone`] mean the filter is done: its matching was complete and every
/// match is gone. Every other outcome leaves matches behind and the filter must be
/// tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Every match deleted: the count (`None`: a filtered flush, which the kernel does
    /// not count). Zero matches is `Deleted(Some(0))`.
    Deleted(Option<u64>),
    /// Every match was already gone when its delete arrived (ENOENT), none deleted by us.
    AlreadyGone,
    /// The call's work cap was hit before this filter's matches were exhausted.
    Capped,
    /// The dump stayed interrupted or lost messages after all retries, a request got no
    /// answer in time, or deletes stayed unacknowledged after all resends.
    Incomplete,
    /// The kernel (or the socket) refused this filter's request or one of its deletes.
    Failed(i32),
}

impl Outcome {
    pub fn is_done(self) -> bool {
        matches!(self, Outcome::Deleted(_) | Outcome::AlreadyGone)
    }
}

/// What happened to one filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterReport {
    pub filter: Filter,
    /// Entries deleted (ACKed deletes; for a filtered flush, the pre-counted matches,
    /// or `None` when `count_flushed` is off).
    pub deleted: Option<u64>,
    /// Deletes answered ENOENT: the entry was already gone (counted as success).
    pub already_gone: u64,
    /// Deletes the kernel refused with another error (logged; see `errno`).
    pub failed: u64,
    /// Deletes never acknowledged, even after resending (the filter is incomplete).
    pub unacked: u64,
    /// The work cap stopped collecting this filter's matches.
    pub capped: bool,
    /// Its dump stayed interrupted or lossy after the retries, or its request got no
    /// answer in time.
    pub incomplete: bool,
    /// The errno of a refused request or delete (the last one seen).
    pub errno: Option<i32>,
    /// How this filter was served (per-filter kernel request, or the family's full
    /// dump).
    pub strategy: Strategy,
}

impl FilterReport {
    pub(crate) fn new(filter: Filter, strategy: Strategy) -> FilterReport {
        FilterReport {
            filter,
            deleted: Some(0),
            already_gone: 0,
            failed: 0,
            unacked: 0,
            capped: false,
            incomplete: false,
            errno: None,
            strategy,
        }
    }

    /// The filter's outcome; precedence: failed, incomplete, capped, then done.
    pub fn outcome(&self) -> Outcome {
        if let Some(e) = self.errno {
            Outcome::Failed(e)
        } else if self.incomplete || self.unacked > 0 {
            Outcome::Incomplete
        } else if self.capped {
            Outcome::Capped
        } else if self.deleted == Some(0) && self.already_gone > 0 {
            Outcome::AlreadyGone
        } else {
            Outcome::Deleted(self.deleted)
        }
    }

    pub fn is_done(&self) -> bool {
        self.outcome().is_done()
    }
}

/// How one address family's filters were served in a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FamilyPlan {
    pub family: Family,
    pub strategy: Strategy,
    pub filters: usize,
}

/// The plans of a call as text for a log line (`ipv4 full-dump 12 filters, ...`).
pub fn plans_text(plans: &[FamilyPlan]) -> String {
    plans
        .iter()
        .map(|p| {
            format!(
                "{} {} {} filters",
                match p.family {
                    Family::V4 => "ipv4",
                    Family::V6 => "ipv6",
                },
                p.strategy,
                p.filters
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The result of one [`crate::Conntrack::delete`] call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteReport {
    /// The strategy used: the full dump if any family used one, else the per-filter one.
    pub strategy: Strategy,
    /// One line per filter, in the order given.
    pub per_filter: Vec<FilterReport>,
    /// Per family: how its filters were served.
    pub plans: Vec<FamilyPlan>,
    /// Sum of the known `deleted` counts.
    pub deleted: u64,
    /// False when some count is unknown (filtered flush without `count_flushed`).
    pub exact: bool,
    /// The work cap was hit: more matching entries may remain (some filter is capped).
    pub capped: bool,
    /// Some filter is incomplete (see [`FilterReport::incomplete`]).
    pub incomplete: bool,
    /// Dump restarts (NLM_F_DUMP_INTR / ENOBUFS).
    pub dump_retries: u32,
    /// Entries examined in user space (dump strategies).
    pub scanned: u64,
    /// Kernel table walks made (one per filtered flush or dump, one per full dump).
    pub walks: u32,
}

impl DeleteReport {
    /// Nothing deleted yet, one zeroed line per filter.
    pub(crate) fn empty(strategy: Strategy, filters: &[Filter]) -> DeleteReport {
        DeleteReport {
            strategy,
            per_filter: filters
                .iter()
                .map(|&f| FilterReport::new(f, strategy))
                .collect(),
            plans: Vec::new(),
            deleted: 0,
            exact: true,
            capped: false,
            incomplete: false,
            dump_retries: 0,
            scanned: 0,
            walks: 0,
        }
    }

    /// Every filter's outcome, in the order given.
    pub fn outcomes(&self) -> Vec<Outcome> {
        self.per_filter.iter().map(FilterReport::outcome).collect()
    }

    /// Every filter is done.
    pub fn all_done(&self) -> bool {
        self.per_filter.iter().all(FilterReport::is_done)
    }

    /// Totals from the per-filter lines.
    pub(crate) fn finish(&mut self) {
        self.deleted = self.per_filter.iter().filter_map(|r| r.deleted).sum();
        self.exact = self.per_filter.iter().all(|r| r.deleted.is_some());
        self.capped = self.per_filter.iter().any(|r| r.capped);
        self.incomplete = self
            .per_filter
            .iter()
            .any(|r| r.incomplete || r.unacked > 0);
        for s in [Strategy::FullDump, Strategy::PortDump] {
            if self.plans.iter().any(|p| p.strategy == s) {
                self.strategy = s;
                break;
            }
        }
    }
}
