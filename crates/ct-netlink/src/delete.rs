//! The strategies, chosen per call and per family (see [`crate::plan`]): per-filter
//! kernel requests (filtered flush, or filtered dump + delete by tuple) or one full dump
//! of the family matched against all its filters + delete by tuple; and the
//! upstream-style baseline for benchmarks. Every failure is recorded on the filters it
//! concerns; one filter's failure never stops the others.

use crate::exec::{record_error, validated, KernelFilter};
use crate::filter::{families, port_groups, Filter, Matcher};
use crate::plan::{TableSize, Walks};
use crate::report::FamilyPlan;
use crate::wire::*;
use crate::{Conntrack, DeleteReport, Error, Family, Flow, Strategy};
use nl_core::{NLM_F_ACK, NLM_F_REQUEST};
use std::collections::HashSet;
use std::hash::Hash;

/// How a call chooses its strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Per family, by the cost model.
    Auto,
    Forced(Strategy),
}

pub(crate) fn family_of_af(af: u8) -> Family {
    if af == AF_INET6 {
        Family::V6
    } else {
        Family::V4
    }
}

impl Conntrack {
    /// Whether the kernel can be trusted with this filter's address.
    pub(crate) fn kernel_addr_ok(&self, f: &Filter) -> bool {
        f.af() == AF_INET || !f.has_addr() || self.probe.ipv6_addr_filter
    }

    /// Delete every entry matching any of `filters`. Unless the configuration forces a
    /// strategy, each family is served by per-filter kernel requests (the probed kind)
    /// or by one full dump matched against all its filters, whichever the cost model
    /// finds cheaper for this call (see docs/conntrack.md). Failures are per filter
    /// ([`crate::Outcome`]); the call itself does not fail.
    pub fn delete(&mut self, filters: &[Filter]) -> Result<DeleteReport, Error> {
        let mode = if self.probe.forced {
            Mode::Forced(self.probe.strategy)
        } else {
            Mode::Auto
        };
        self.delete_inner(mode, filters, &mut |_| {})
    }

    /// Delete with an explicit strategy for every family (tests and benchmarks compare
    /// them).
    pub fn delete_with(
        &mut self,
        strategy: Strategy,
        filters: &[Filter],
    ) -> Result<DeleteReport, Error> {
        self.delete_inner(Mode::Forced(strategy), filters, &mut |_| {})
    }

    /// How [`Conntrack::delete`] would serve `filters` now (per family), without
    /// deleting anything.
    pub fn plan(&self, filters: &[Filter]) -> Vec<FamilyPlan> {
        let table = TableSize::read();
        families(filters)
            .into_iter()
            .map(|af| {
                let idx: Vec<usize> = (0..filters.len())
                    .filter(|&i| filters[i].af() == af)
                    .collect();
                FamilyPlan {
                    family: family_of_af(af),
                    strategy: self.choose(Mode::Auto, table, filters, &idx, false),
                    filters: idx.len(),
                }
            })
            .collect()
    }

    /// The strategy for one family's filters. `listing`: the matches are listed, not
    /// deleted (a flush is never counted first: see [`Conntrack::list`]).
    pub(crate) fn choose(
        &self,
        mode: Mode,
        table: Option<TableSize>,
        filters: &[Filter],
        idx: &[usize],
        listing: bool,
    ) -> Strategy {
        let per_filter = match mode {
            Mode::Forced(s) => return s,
            Mode::Auto => self.probe.strategy,
        };
        if matches!(per_filter, Strategy::FullDump | Strategy::PortDump) {
            return per_filter;
        }
        // Walks the per-filter way would make: one per filter, and one more per flushed
        // filter when flushes are counted first.
        let counted = if per_filter == Strategy::FilteredFlush && self.cfg.count_flushed && !listing
        {
            idx.iter()
                .filter(|&&i| self.kernel_addr_ok(&filters[i]))
                .count()
        } else {
            0
        };
        let walks = (idx.len() + counted) as u64;
        let groups = port_groups(filters, idx).len() as u64;
        match self
            .cfg
            .cost
            .choose(table.unwrap_or(TableSize::UNKNOWN), walks, Some(groups))
        {
            Walks::PerFilter => per_filter,
            Walks::FullDump => Strategy::FullDump,
            Walks::PortDump => Strategy::PortDump,
        }
    }

    /// [`Conntrack::delete`] in a given mode, calling `before_delete(n)` once the `n`
    /// entries to delete by tuple of a family are known and before they are deleted
    /// (the test hook `testing::delete_with_pause` uses this window).
    pub(crate) fn delete_inner(
        &mut self,
        mode: Mode,
        filters: &[Filter],
        before_delete: &mut dyn FnMut(usize),
    ) -> Result<DeleteReport, Error> {
        let initial = match mode {
            Mode::Forced(s) => s,
            Mode::Auto => self.probe.strategy,
        };
        let mut rep = DeleteReport::empty(initial, filters);
        let (valid, valid_filters) = validated(filters, &mut rep);
        let table = match mode {
            Mode::Auto => TableSize::read(),
            Mode::Forced(_) => None,
        };
        let mut budget = self.cfg.max_deletes_per_call;
        for af in families(&valid_filters) {
            let idx: Vec<usize> = valid
                .iter()
                .copied()
                .filter(|&i| filters[i].af() == af)
                .collect();
            let strategy = self.choose(mode, table, filters, &idx, false);
            rep.plans.push(FamilyPlan {
                family: family_of_af(af),
                strategy,
                filters: idx.len(),
            });
            for &i in &idx {
                rep.per_filter[i].strategy = strategy;
            }
            // the dump strategies collect the matches, then delete them by tuple
            let targets = match strategy {
                Strategy::FilteredFlush => {
                    self.filtered_flush(filters, &idx, &mut budget, &mut rep, before_delete);
                    continue;
                }
                Strategy::FilteredDump => self.collect_filtered(filters, &idx, budget, &mut rep),
                Strategy::FullDump => self.collect_full(af, filters, &idx, budget, &mut rep),
                Strategy::PortDump => self.collect_by_port(af, filters, &idx, budget, &mut rep),
            };
            budget -= targets.len();
            before_delete(targets.len());
            self.delete_targets(&targets, filters, &mut rep);
        }
        rep.finish();
        tracing::debug!(
            filters = rep.per_filter.len(),
            deleted = rep.deleted,
            exact = rep.exact,
            capped = rep.capped,
            incomplete = rep.incomplete,
            walks = rep.walks,
            plans = %crate::plans_text(&rep.plans),
            "conntrack delete done"
        );
        Ok(rep)
    }

    /// The approach upstream kube-proxy takes, for benchmarks: full dump, match in user
    /// space, full dump again, delete the entries seen in the first pass.
    pub fn delete_upstream_style(&mut self, filters: &[Filter]) -> Result<DeleteReport, Error> {
        let mut rep = DeleteReport::empty(Strategy::FullDump, filters);
        let mut first = Vec::new();
        for af in families(filters) {
            let idx: Vec<usize> = (0..filters.len())
                .filter(|&i| filters[i].af() == af)
                .collect();
            first.extend(self.collect_full::<Target>(af, filters, &idx, usize::MAX, &mut rep));
        }
        let wanted: HashSet<Vec<u8>> = first.into_iter().map(|(t, _)| t.orig_raw).collect();
        let mut second = Vec::new();
        for af in families(filters) {
            self.dump_retrying(
                af,
                KernelFilter::All,
                "upstream second dump",
                &mut rep,
                &mut |e, _| {
                    if let Some(raw) = e.orig_raw {
                        if wanted.contains(raw) {
                            if let (Some(t), Some(i)) =
                                (Target::of(e), filters.iter().position(|f| f.matches(e)))
                            {
                                second.push((t, i));
                            }
                        }
                    }
                },
            )?;
        }
        self.delete_targets(&second, filters, &mut rep);
        rep.finish();
        Ok(rep)
    }

    /// Count the entries matching `filter` with a filtered dump (nothing is deleted).
    pub fn count_matching(&mut self, filter: &Filter) -> Result<u64, Error> {
        let mut n = 0u64;
        let mut rep = self.scratch_report();
        let with_addr = self.kernel_addr_ok(filter);
        self.dump_retrying(
            filter.af(),
            KernelFilter::Filter(filter, with_addr),
            "count dump",
            &mut rep,
            &mut |e, _| {
                if filter.matches(e) {
                    n += 1;
                }
            },
        )?;
        Ok(n)
    }

    pub(crate) fn scratch_report(&self) -> DeleteReport {
        DeleteReport::empty(self.probe.strategy, &[])
    }

    fn filtered_flush(
        &mut self,
        filters: &[Filter],
        idx: &[usize],
        budget: &mut usize,
        rep: &mut DeleteReport,
        before_delete: &mut dyn FnMut(usize),
    ) {
        // Filters the kernel cannot be trusted with (IPv6 addresses on kernels that
        // invert them) are never flushed: they go the filtered-dump way.
        let (flushable, other): (Vec<usize>, Vec<usize>) =
            idx.iter().partition(|&&i| self.kernel_addr_ok(&filters[i]));
        if !other.is_empty() {
            for &i in &other {
                rep.per_filter[i].strategy = Strategy::FilteredDump;
            }
            let targets = self.collect_filtered(filters, &other, *budget, rep);
            *budget -= targets.len();
            before_delete(targets.len());
            self.delete_targets(&targets, filters, rep);
        }
        for i in flushable {
            let f = filters[i];
            let counted = if self.cfg.count_flushed {
                rep.walks += 1;
                match self.count_matching(&f) {
                    Ok(n) => Some(n),
                    Err(e) => {
                        record_error(&mut rep.per_filter[i], &e);
                        continue;
                    }
                }
            } else {
                None
            };
            rep.walks += 1;
            let r = self.request_ack(&f, "filtered flush", |m, f, seq| {
                let s = m.begin_nfnl(MSG_CT_DELETE, NLM_F_REQUEST | NLM_F_ACK, seq, f.af());
                f.put_kernel_filter(m, true);
                m.end_msg(s);
            });
            match r {
                Ok(0) => rep.per_filter[i].deleted = counted,
                Ok(errno) => record_error(
                    &mut rep.per_filter[i],
                    &Error::Kernel {
                        op: "filtered flush",
                        filter: f.to_string(),
                        errno,
                    },
                ),
                Err(e) => record_error(&mut rep.per_filter[i], &e),
            }
        }
    }

    /// One filtered dump per filter of `idx`; matches (deduplicated, at most `cap`).
    pub(crate) fn collect_filtered<T: Collect>(
        &mut self,
        filters: &[Filter],
        idx: &[usize],
        cap: usize,
        rep: &mut DeleteReport,
    ) -> Vec<(T, usize)> {
        let mut seen: HashSet<T> = HashSet::new();
        let mut out = Vec::new();
        for &i in idx {
            let f = &filters[i];
            let mut scanned = 0u64;
            let mut capped = false;
            let with_addr = self.kernel_addr_ok(f);
            rep.walks += 1;
            let r = self.dump_retrying(
                f.af(),
                KernelFilter::Filter(f, with_addr),
                "filtered dump",
                rep,
                &mut |e, _| {
                    scanned += 1;
                    // Re-checked in user space: a kernel that ignored part of the filter
                    // can cost time but never delete the wrong entry.
                    if !f.matches(e) {
                        return;
                    }
                    if let Some(t) = T::of(e) {
                        if seen.contains(&t) {
                            return;
                        }
                        if out.len() >= cap {
                            capped = true;
                            return;
                        }
                        seen.insert(t.clone());
                        out.push((t, i));
                    }
                },
            );
            rep.scanned += scanned;
            let r_i = &mut rep.per_filter[i];
            r_i.capped |= capped;
            match r {
                Ok(st) => r_i.incomplete |= st.incomplete,
                Err(e) => record_error(r_i, &e),
            }
        }
        out
    }

    /// One full dump of family `af`, matched against the filters of `idx` at once (hash
    /// lookups: O(entries), whatever the number of filters); at most `cap` matches.
    pub(crate) fn collect_full<T: Collect>(
        &mut self,
        af: u8,
        filters: &[Filter],
        idx: &[usize],
        cap: usize,
        rep: &mut DeleteReport,
    ) -> Vec<(T, usize)> {
        // When every filter names one protocol and the kernel honours CTA_FILTER, only
        // that protocol's entries are copied to user space.
        let protos: HashSet<u8> = idx.iter().map(|&i| filters[i].proto()).collect();
        let kernel = match protos.iter().next() {
            Some(&p) if protos.len() == 1 && self.probe.strategy != Strategy::FullDump => {
                KernelFilter::Proto(p)
            }
            _ => KernelFilter::All,
        };
        let mut found = Found::default();
        self.collect_matching(af, kernel, "full dump", filters, idx, cap, rep, &mut found);
        found.out
    }

    /// One filtered dump per port the filters of `idx` share (the kernel filters on
    /// protocol and port, without an address: it copies only that port's entries),
    /// each matched against that port's filters at once; at most `cap` matches.
    pub(crate) fn collect_by_port<T: Collect>(
        &mut self,
        af: u8,
        filters: &[Filter],
        idx: &[usize],
        cap: usize,
        rep: &mut DeleteReport,
    ) -> Vec<(T, usize)> {
        let mut found = Found::default();
        for g in port_groups(filters, idx) {
            let coarse;
            let kernel = match g.key {
                Some(k) => {
                    coarse = k.kernel_filter();
                    KernelFilter::Filter(&coarse, false)
                }
                None => {
                    let f = &filters[g.filters[0]];
                    KernelFilter::Filter(f, self.kernel_addr_ok(f))
                }
            };
            self.collect_matching(
                af,
                kernel,
                "port dump",
                filters,
                &g.filters,
                cap,
                rep,
                &mut found,
            );
        }
        found.out
    }

    /// One dump of family `af` with `kernel`'s filter, matched against the filters of
    /// `idx` at once (hash lookups: O(entries), whatever the number of filters); new
    /// matches into `found` (deduplicated), at most `cap` in all.
    #[allow(clippy::too_many_arguments)]
    fn collect_matching<T: Collect>(
        &mut self,
        af: u8,
        kernel: KernelFilter<'_>,
        op: &'static str,
        filters: &[Filter],
        idx: &[usize],
        cap: usize,
        rep: &mut DeleteReport,
        found: &mut Found<T>,
    ) {
        let sub: Vec<Filter> = idx.iter().map(|&i| filters[i]).collect();
        let matcher = Matcher::new(&sub);
        let mut capped = vec![false; sub.len()];
        let mut scanned = 0u64;
        rep.walks += 1;
        let Found { seen, out } = found;
        let r = self.dump_retrying(af, kernel, op, rep, &mut |e, _| {
            scanned += 1;
            // Re-checked in user space: a kernel that ignored part of the filter can
            // cost time but never delete the wrong entry.
            let Some(k) = matcher.find(e) else {
                return;
            };
            let Some(t) = T::of(e) else {
                return;
            };
            if seen.contains(&t) {
                return;
            }
            if out.len() >= cap {
                // Every filter this entry matches still has work left.
                matcher.for_each_match(e, |k| capped[k] = true);
                return;
            }
            seen.insert(t.clone());
            out.push((t, idx[k]));
        });
        rep.scanned += scanned;
        for (k, &i) in idx.iter().enumerate() {
            let r_i = &mut rep.per_filter[i];
            r_i.capped |= capped[k];
            match &r {
                Ok(st) => r_i.incomplete |= st.incomplete,
                Err(e) => record_error(r_i, e),
            }
        }
    }
}

/// The matches of one call's dumps so far (deduplicated), each with the filter that
/// found it.
struct Found<T> {
    seen: HashSet<T>,
    out: Vec<(T, usize)>,
}

impl<T> Default for Found<T> {
    fn default() -> Self {
        Found {
            seen: HashSet::new(),
            out: Vec::new(),
        }
    }
}

/// What the dump strategies collect for each match: a [`Target`] to delete (its
/// original tuple echoed verbatim) or a [`Flow`] to list.
pub(crate) trait Collect: Hash + Eq + Clone {
    fn of(e: &EntryView<'_>) -> Option<Self>;
}

impl Collect for Target {
    fn of(e: &EntryView<'_>) -> Option<Target> {
        Target::of(e)
    }
}

impl Collect for Flow {
    fn of(e: &EntryView<'_>) -> Option<Flow> {
        Flow::from_entry(e)
    }
}
