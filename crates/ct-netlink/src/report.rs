//! What a delete call did, per filter and in total.

use crate::{Filter, Strategy};

/// What happened to one filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterReport {
    pub filter: Filter,
    /// Entries deleted (ACKed deletes; for a filtered flush, the pre-counted matches,
    /// or `None` when `count_flushed` is off).
    pub deleted: Option<u64>,
    /// Deletes answered ENOENT: the entry was already gone (counted as success).
    pub already_gone: u64,
    /// Deletes the kernel refused with another error (logged).
    pub failed: u64,
}

/// The result of one [`Conntrack::delete`] call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteReport {
    pub strategy: Strategy,
    pub per_filter: Vec<FilterReport>,
    /// Sum of the known `deleted` counts.
    pub deleted: u64,
    /// False when some count is unknown (filtered flush without `count_flushed`).
    pub exact: bool,
    /// The work cap was hit: more matching entries may remain.
    pub capped: bool,
    /// A dump stayed interrupted after all retries: some matches may remain.
    pub incomplete: bool,
    /// Dump restarts (NLM_F_DUMP_INTR / ENOBUFS).
    pub dump_retries: u32,
    /// Entries examined in user space (dump strategies).
    pub scanned: u64,
}

impl DeleteReport {
    /// Nothing deleted yet, one zeroed line per filter.
    pub(crate) fn empty(strategy: Strategy, filters: &[Filter]) -> DeleteReport {
        DeleteReport {
            strategy,
            per_filter: filters
                .iter()
                .map(|&filter| FilterReport {
                    filter,
                    deleted: Some(0),
                    already_gone: 0,
                    failed: 0,
                })
                .collect(),
            deleted: 0,
            exact: true,
            capped: false,
            incomplete: false,
            dump_retries: 0,
            scanned: 0,
        }
    }
}
