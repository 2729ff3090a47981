//! The strategies: filtered flush, filtered dump + delete, full dump matched against
//! all filters + delete; and the upstream-style baseline for benchmarks.

use crate::filter::{families, Filter, Matcher};
use crate::wire::*;
use crate::{Conntrack, DeleteReport, Error, FilterReport, Strategy};
use nl_core::{NLM_F_ACK, NLM_F_REQUEST};
use std::collections::HashSet;

impl Conntrack {
    /// Whether the kernel can be trusted with this filter's address.
    pub(crate) fn kernel_addr_ok(&self, f: &Filter) -> bool {
        f.af() == AF_INET || !f.has_addr() || self.probe.ipv6_addr_filter
    }

    /// Delete every entry matching any of `filters` with the chosen strategy.
    pub fn delete(&mut self, filters: &[Filter]) -> Result<DeleteReport, Error> {
        self.delete_with(self.probe.strategy, filters)
    }

    /// Delete with an explicit strategy (tests and benchmarks compare them).
    pub fn delete_with(
        &mut self,
        strategy: Strategy,
        filters: &[Filter],
    ) -> Result<DeleteReport, Error> {
        self.delete_inner(strategy, filters, &mut |_| {})
    }

    /// [`Conntrack::delete_with`], calling `before_delete(n)` once the `n` entries to
    /// delete by tuple are known and before they are deleted (the test hook
    /// `testing::delete_with_pause` uses this window to remove entries out of band).
    pub(crate) fn delete_inner(
        &mut self,
        strategy: Strategy,
        filters: &[Filter],
        before_delete: &mut dyn FnMut(usize),
    ) -> Result<DeleteReport, Error> {
        for f in filters {
            f.validate()?;
        }
        let mut rep = DeleteReport::empty(strategy, filters);
        match strategy {
            Strategy::FilteredFlush => self.filtered_flush(filters, &mut rep, before_delete)?,
            Strategy::FilteredDump => {
                let targets = self.collect_filtered(filters, &mut rep)?;
                before_delete(targets.len());
                self.delete_targets(&targets, filters, &mut rep)?;
            }
            Strategy::FullDump => {
                let targets = self.collect_full(filters, &mut rep)?;
                before_delete(targets.len());
                self.delete_targets(&targets, filters, &mut rep)?;
            }
        }
        rep.deleted = rep.per_filter.iter().filter_map(|r| r.deleted).sum();
        rep.exact = rep.per_filter.iter().all(|r| r.deleted.is_some());
        tracing::debug!(?rep, "conntrack delete done");
        Ok(rep)
    }

    /// The approach upstream kube-proxy takes, for benchmarks: full dump, match in user
    /// space, full dump again, delete the entries seen in the first pass.
    pub fn delete_upstream_style(&mut self, filters: &[Filter]) -> Result<DeleteReport, Error> {
        let mut rep = DeleteReport::empty(Strategy::FullDump, filters);
        let first = self.collect_full(filters, &mut rep)?;
        let wanted: HashSet<Vec<u8>> = first.into_iter().map(|(t, _)| t.orig_raw).collect();
        let mut second = Vec::new();
        for af in families(filters) {
            self.dump_retrying(af, None, "upstream second dump", &mut rep, &mut |e, _| {
                if let Some(raw) = e.orig_raw {
                    if wanted.contains(raw) {
                        if let (Some(t), Some(i)) =
                            (Target::of(e), filters.iter().position(|f| f.matches(e)))
                        {
                            second.push((t, i));
                        }
                    }
                }
            })?;
        }
        self.delete_targets(&second, filters, &mut rep)?;
        rep.deleted = rep.per_filter.iter().filter_map(|r| r.deleted).sum();
        Ok(rep)
    }

    /// Count the entries matching `filter` with a filtered dump (nothing is deleted).
    pub fn count_matching(&mut self, filter: &Filter) -> Result<u64, Error> {
        let mut n = 0u64;
        let mut rep = self.scratch_report();
        let with_addr = self.kernel_addr_ok(filter);
        self.dump_retrying(
            filter.af(),
            Some((filter, with_addr)),
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
        rep: &mut DeleteReport,
        before_delete: &mut dyn FnMut(usize),
    ) -> Result<(), Error> {
        // Filters the kernel cannot be trusted with (IPv6 addresses on kernels that
        // invert them) are never flushed: they go the filtered-dump way.
        let (flushable, other): (Vec<usize>, Vec<usize>) =
            (0..filters.len()).partition(|&i| self.kernel_addr_ok(&filters[i]));
        if !other.is_empty() {
            let sub: Vec<Filter> = other.iter().map(|&i| filters[i]).collect();
            let mut sub_rep = self.scratch_report();
            sub_rep.per_filter = sub
                .iter()
                .map(|&filter| FilterReport {
                    filter,
                    deleted: Some(0),
                    already_gone: 0,
                    failed: 0,
                })
                .collect();
            let targets = self.collect_filtered(&sub, &mut sub_rep)?;
            before_delete(targets.len());
            self.delete_targets(&targets, &sub, &mut sub_rep)?;
            for (k, &i) in other.iter().enumerate() {
                rep.per_filter[i] = sub_rep.per_filter[k].clone();
            }
            rep.capped |= sub_rep.capped;
            rep.incomplete |= sub_rep.incomplete;
            rep.dump_retries += sub_rep.dump_retries;
            rep.scanned += sub_rep.scanned;
        }
        for i in flushable {
            let f = &filters[i];
            let counted = if self.cfg.count_flushed {
                Some(self.count_matching(f)?)
            } else {
                None
            };
            let errno = self.request_ack(f, "filtered flush", |m, f, seq| {
                let s = m.begin_nfnl(MSG_CT_DELETE, NLM_F_REQUEST | NLM_F_ACK, seq, f.af());
                f.put_kernel_filter(m, true);
                m.end_msg(s);
            })?;
            if errno != 0 {
                return Err(Error::Kernel {
                    op: "filtered flush",
                    filter: f.to_string(),
                    errno,
                });
            }
            rep.per_filter[i].deleted = counted;
        }
        Ok(())
    }

    fn collect_filtered(
        &mut self,
        filters: &[Filter],
        rep: &mut DeleteReport,
    ) -> Result<Vec<(Target, usize)>, Error> {
        let cap = self.cfg.max_deletes_per_call;
        let mut seen: HashSet<Target> = HashSet::new();
        let mut out = Vec::new();
        let mut capped = false;
        for (i, f) in filters.iter().enumerate() {
            let mut scanned = 0u64;
            let with_addr = self.kernel_addr_ok(f);
            self.dump_retrying(
                f.af(),
                Some((f, with_addr)),
                "filtered dump",
                rep,
                &mut |e, _| {
                    scanned += 1;
                    // Re-checked in user space: a kernel that ignored part of the filter
                    // can cost time but never delete the wrong entry.
                    if !f.matches(e) {
                        return;
                    }
                    if let Some(t) = Target::of(e) {
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
            )?;
            rep.scanned += scanned;
        }
        rep.capped |= capped;
        Ok(out)
    }

    fn collect_full(
        &mut self,
        filters: &[Filter],
        rep: &mut DeleteReport,
    ) -> Result<Vec<(Target, usize)>, Error> {
        let cap = self.cfg.max_deletes_per_call;
        let matcher = Matcher::new(filters);
        let mut seen: HashSet<Target> = HashSet::new();
        let mut out = Vec::new();
        let mut capped = false;
        for af in families(filters) {
            let mut scanned = 0u64;
            self.dump_retrying(af, None, "full dump", rep, &mut |e, _| {
                scanned += 1;
                if let Some(i) = matcher.find(e) {
                    if let Some(t) = Target::of(e) {
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
                }
            })?;
            rep.scanned += scanned;
        }
        rep.capped |= capped;
        Ok(out)
    }
}
