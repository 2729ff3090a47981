//! The engine's view of the kernel (nftables and conntrack) and of time: traits, so that
//! the deterministic tests drive a fake kernel and a fake clock.

use std::time::Instant;

use nft_model::{Op, Table, TableRef};

use crate::EngineError;

/// What a successful commit did (the kernel-facing part of a sync).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitStats {
    pub ops: usize,
    pub bytes: usize,
}

/// The nftables side of the kernel (fakeable in tests).
pub trait NftKernel {
    fn generation(&mut self) -> Result<u32, EngineError>;
    fn commit(&mut self, ops: &[Op], genid: Option<u32>) -> Result<CommitStats, EngineError>;
    fn dump_table(&mut self, t: &TableRef) -> Result<Option<Table>, EngineError>;
}

/// The nftables watcher's subscription to notifications, dropped (`set(false)`) right
/// before each of our commits and taken again (`set(true)`) right after it, before the
/// generation is read: the kernel builds a notification per element of a commit only
/// while some socket on the machine listens, and the engine needs none of its own. A
/// commit by another program while it was dropped shows in that generation (a repair).
pub trait Listening: Send {
    fn set(&self, on: bool) -> std::io::Result<()>;
}

impl Listening for nft_netlink::watch::Membership {
    fn set(&self, on: bool) -> std::io::Result<()> {
        nft_netlink::watch::Membership::set(self, on)
    }
}

impl NftKernel for nft_netlink::Nft {
    fn generation(&mut self) -> Result<u32, EngineError> {
        Ok(nft_netlink::Nft::generation(self)?)
    }
    fn commit(&mut self, ops: &[Op], genid: Option<u32>) -> Result<CommitStats, EngineError> {
        let r = nft_netlink::Nft::commit(self, ops, genid)?;
        Ok(CommitStats {
            ops: r.ops,
            bytes: r.bytes,
        })
    }
    fn dump_table(&mut self, t: &TableRef) -> Result<Option<Table>, EngineError> {
        Ok(nft_netlink::Nft::dump_table(self, t)?)
    }
}

/// The outcome of cleaning one target (one filter of a [`ConntrackKernel::delete`] call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanupOutcome {
    /// Every matching entry was deleted (`entries`: how many, when the kernel says;
    /// `Some(0)`: none matched). Done.
    Deleted { entries: Option<u64> },
    /// The entries found were gone by the time they were deleted (ENOENT). Done.
    AlreadyGone,
    /// The call's work cap was hit before this target was finished: entries may remain.
    Capped,
    /// A dump stayed interrupted: entries may remain.
    Incomplete,
    /// The kernel refused, or the call failed: nothing is known.
    Failed,
}

impl std::fmt::Display for CleanupOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CleanupOutcome::Deleted { entries: Some(n) } => write!(f, "deleted {n}"),
            CleanupOutcome::Deleted { entries: None } => f.write_str("deleted"),
            CleanupOutcome::AlreadyGone => f.write_str("already gone"),
            CleanupOutcome::Capped => f.write_str("capped"),
            CleanupOutcome::Incomplete => f.write_str("incomplete"),
            CleanupOutcome::Failed => f.write_str("failed"),
        }
    }
}

impl CleanupOutcome {
    /// Whether the target is finished (it leaves the pending set).
    pub fn done(&self) -> bool {
        matches!(
            self,
            CleanupOutcome::Deleted { .. } | CleanupOutcome::AlreadyGone
        )
    }
}

/// The conntrack side of the kernel (fakeable in tests).
pub trait ConntrackKernel {
    /// Delete the entries matching each filter. One outcome per filter, in order; an
    /// `Err` means every filter failed. (Missing outcomes count as failed.)
    fn delete(
        &mut self,
        filters: &[ct_netlink::Filter],
    ) -> Result<Vec<CleanupOutcome>, EngineError>;

    /// [`ConntrackKernel::delete`] with, per filter, the strategy that served it and the
    /// entries it deleted (also when it was not finished), for the metrics.
    fn delete_detailed(
        &mut self,
        filters: &[ct_netlink::Filter],
    ) -> Result<Vec<FilterDetail>, EngineError> {
        Ok(self
            .delete(filters)?
            .into_iter()
            .map(|outcome| FilterDetail {
                outcome,
                strategy: None,
                deleted: match outcome {
                    CleanupOutcome::Deleted { entries } => entries,
                    _ => Some(0),
                },
            })
            .collect())
    }
}

/// One filter of a delete call, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterDetail {
    pub outcome: CleanupOutcome,
    /// How the filter was served (`None`: not known).
    pub strategy: Option<ct_netlink::Strategy>,
    /// Entries deleted (`None`: a filtered flush, which the kernel does not count).
    pub deleted: Option<u64>,
}

impl ConntrackKernel for ct_netlink::Conntrack {
    fn delete(
        &mut self,
        filters: &[ct_netlink::Filter],
    ) -> Result<Vec<CleanupOutcome>, EngineError> {
        let report = ct_netlink::Conntrack::delete(self, filters)?;
        Ok(outcomes(filters, &report))
    }
    fn delete_detailed(
        &mut self,
        filters: &[ct_netlink::Filter],
    ) -> Result<Vec<FilterDetail>, EngineError> {
        let report = ct_netlink::Conntrack::delete(self, filters)?;
        Ok(outcomes(filters, &report)
            .into_iter()
            .zip(filters)
            .map(|(outcome, f)| {
                let line = report.per_filter.iter().find(|r| r.filter == *f);
                FilterDetail {
                    outcome,
                    strategy: line.map(|r| r.strategy),
                    deleted: line.map_or(Some(0), |r| r.deleted),
                }
            })
            .collect())
    }
}

/// One outcome per filter from a [`ct_netlink::DeleteReport`], which gives each filter
/// its own outcome (a filter is done only when its matching was complete). A filter the
/// report does not mention failed.
pub fn outcomes(
    filters: &[ct_netlink::Filter],
    report: &ct_netlink::DeleteReport,
) -> Vec<CleanupOutcome> {
    filters
        .iter()
        .enumerate()
        .map(|(i, f)| {
            // Reports list the filters in order; look the filter up if they do not.
            let line = report
                .per_filter
                .get(i)
                .filter(|r| r.filter == *f)
                .or_else(|| report.per_filter.iter().find(|r| r.filter == *f));
            let Some(r) = line else {
                return CleanupOutcome::Failed;
            };
            match r.outcome() {
                ct_netlink::Outcome::Deleted(entries) => CleanupOutcome::Deleted { entries },
                ct_netlink::Outcome::AlreadyGone => CleanupOutcome::AlreadyGone,
                ct_netlink::Outcome::Capped => CleanupOutcome::Capped,
                ct_netlink::Outcome::Incomplete => CleanupOutcome::Incomplete,
                ct_netlink::Outcome::Failed(_) => CleanupOutcome::Failed,
            }
        })
        .collect()
}

/// A source of time (injectable for tests).
pub trait Clock {
    fn now(&self) -> Instant;
}

/// The system's monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// Opens the conntrack socket (probing the kernel); called again while it fails.
pub type ConntrackOpener<C> = Box<dyn FnMut() -> Result<C, EngineError>>;

/// The conntrack kernel, or why it is unavailable and how to try again.
pub(crate) struct CtSlot<C> {
    pub kernel: Option<C>,
    pub opener: Option<ConntrackOpener<C>>,
    /// Why it is unavailable, and when to try opening it again.
    pub unavailable: Option<(String, Instant)>,
    /// The kernel is lent to a cleanup slice running beside the engine.
    pub lent: bool,
}

impl<C> CtSlot<C> {
    pub fn ready(c: C) -> CtSlot<C> {
        CtSlot {
            kernel: Some(c),
            opener: None,
            unavailable: None,
            lent: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ct_netlink::{DeleteReport, Filter, FilterReport, Strategy};

    /// A report line: (filter, deleted, already gone, errno, capped, incomplete).
    type Line = (Filter, Option<u64>, u64, Option<i32>, bool, bool);

    fn report(lines: &[Line]) -> DeleteReport {
        DeleteReport {
            strategy: Strategy::FilteredDump,
            per_filter: lines
                .iter()
                .map(
                    |&(filter, deleted, already_gone, errno, capped, incomplete)| FilterReport {
                        filter,
                        deleted,
                        already_gone,
                        failed: u64::from(errno.is_some()),
                        unacked: 0,
                        capped,
                        incomplete,
                        errno,
                        strategy: Strategy::FilteredDump,
                    },
                )
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

    #[test]
    fn outcomes_per_filter_from_a_delete_report() {
        let a = Filter::udp_orig_dst("198.18.0.1".parse().unwrap(), Some(53));
        let b = Filter::udp_reply_src("198.18.0.2".parse().unwrap(), 5353);
        let c = Filter::udp_nodeport(ct_netlink::Family::V4, 30053);
        let d = Filter::udp_orig_dst("198.18.0.4".parse().unwrap(), Some(53));
        let e = Filter::udp_orig_dst("198.18.0.5".parse().unwrap(), Some(53));
        let f = Filter::udp_orig_dst("198.18.0.6".parse().unwrap(), Some(53));
        let r = report(&[
            (a, Some(3), 0, None, false, false),
            (b, Some(0), 2, None, false, false),
            (c, None, 0, None, false, false),
            (d, Some(1), 0, Some(libc::EPERM), false, false),
            (e, Some(1), 0, None, true, false),
            (f, Some(1), 0, None, false, true),
        ]);
        use CleanupOutcome::*;
        assert_eq!(
            outcomes(&[a, b, c, d, e, f], &r),
            vec![
                Deleted { entries: Some(3) },
                AlreadyGone,
                Deleted { entries: None },
                Failed,
                Capped,
                Incomplete
            ]
        );
        // A filter the report does not mention failed.
        assert_eq!(
            outcomes(&[c, a], &report(&[(a, Some(1), 0, None, false, false)])),
            vec![Failed, Deleted { entries: Some(1) }]
        );
    }
}
