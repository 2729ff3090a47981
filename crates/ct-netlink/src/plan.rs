//! Choosing, per call and per address family, how many kernel table walks to make: one
//! request per filter (filtered flush or filtered dump: one walk of the whole,
//! namespace-shared hash table each) or one full dump of the family matched against all
//! filters at once (one walk, plus copying and parsing every entry of our namespace).
//! Pure; the numbers are measured by `ct-bench --model` (docs/conntrack.md, "Cost model").

/// The size of the conntrack table as seen from our namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableSize {
    /// Entries of our namespace (`net.netfilter.nf_conntrack_count`, per namespace).
    pub entries: u64,
    /// Hash buckets (`net.netfilter.nf_conntrack_buckets`, global: every walk visits them
    /// all).
    pub buckets: u64,
}

impl TableSize {
    /// Read from /proc/sys of the calling thread's namespace; `None` when not readable.
    pub fn read() -> Option<TableSize> {
        let read = |k: &str| -> Option<u64> {
            std::fs::read_to_string(format!("/proc/sys/net/netfilter/{k}"))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        Some(TableSize {
            entries: read("nf_conntrack_count")?,
            buckets: read("nf_conntrack_buckets")?,
        })
    }

    /// Assumed when /proc cannot be read: a large table (the choice then favours the
    /// full dump from a few filters on, which bounds the cost).
    pub const UNKNOWN: TableSize = TableSize {
        entries: 1 << 20,
        buckets: 1 << 18,
    };
}

/// Measured costs, nanoseconds (2-vCPU VM, Linux 6.18, thread CPU time; `ct-bench
/// --targets` prints them; docs/conntrack.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// One walk of the hash table: per bucket (empty ones included) ...
    pub walk_bucket_ns: f64,
    /// ... and per entry. The kernel walks every namespace's entries; we can only count
    /// ours, which on a node is where almost all of them are (the host namespace).
    pub walk_entry_ns: f64,
    /// Full dump only: copying one entry to user space, parsing and matching it.
    pub dump_entry_ns: f64,
    /// One request's fixed cost (syscalls, ACK).
    pub request_ns: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            walk_bucket_ns: 16.0,
            walk_entry_ns: 400.0,
            dump_entry_ns: 1300.0,
            request_ns: 20_000.0,
        }
    }
}

/// How one family's filters are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walks {
    /// One kernel request (one walk) per filter.
    PerFilter,
    /// One full dump of the family, matched against all its filters.
    FullDump,
    /// One filtered dump per port the filters share (protocol and port, no address).
    PortDump,
}

impl CostModel {
    /// One table walk.
    pub fn walk_ns(&self, t: TableSize) -> f64 {
        t.buckets as f64 * self.walk_bucket_ns + t.entries as f64 * self.walk_entry_ns
    }

    /// `walks` per-filter requests.
    pub fn per_filter_ns(&self, t: TableSize, walks: u64) -> f64 {
        walks as f64 * (self.walk_ns(t) + self.request_ns)
    }

    /// One full dump of a family.
    pub fn full_dump_ns(&self, t: TableSize) -> f64 {
        self.walk_ns(t) + t.entries as f64 * self.dump_entry_ns + self.request_ns
    }

    /// `groups` filtered dumps by port. Each walks the table once; the entries of the
    /// port it copies to user space are not known before, and are not counted: they
    /// are flows to the service ports being cleaned, the ones a cleanup is about (at
    /// worst, a port that holds the whole table, one full dump's copy per group).
    pub fn port_dump_ns(&self, t: TableSize, groups: u64) -> f64 {
        self.per_filter_ns(t, groups)
    }

    /// The cheaper way for a family whose per-filter requests would make `walks` walks
    /// and whose filters share `port_groups` ports (None: the kernel cannot filter a
    /// dump). Per filter unless another way makes fewer walks and costs less; ties go
    /// to per filter (a filtered flush copies nothing), then to the port dumps.
    pub fn choose(&self, t: TableSize, walks: u64, port_groups: Option<u64>) -> Walks {
        if walks <= 1 {
            return Walks::PerFilter;
        }
        let per_filter = self.per_filter_ns(t, walks);
        let full = self.full_dump_ns(t);
        let port = port_groups
            .filter(|&g| g < walks)
            .map(|g| self.port_dump_ns(t, g));
        match port {
            Some(p) if p < per_filter && p <= full => Walks::PortDump,
            _ if per_filter <= full => Walks::PerFilter,
            _ => Walks::FullDump,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: TableSize = TableSize {
        entries: 1_000_000,
        buckets: 262_144,
    };

    #[test]
    fn one_filter_is_always_one_request() {
        let m = CostModel::default();
        for t in [
            M,
            TableSize {
                entries: 0,
                buckets: 1,
            },
            TableSize::UNKNOWN,
        ] {
            assert_eq!(m.choose(t, 1, Some(1)), Walks::PerFilter);
            assert_eq!(m.choose(t, 0, Some(0)), Walks::PerFilter);
        }
    }

    #[test]
    fn many_filters_take_one_full_dump() {
        let m = CostModel::default();
        assert_eq!(m.choose(M, 1000, None), Walks::FullDump);
        assert_eq!(m.choose(TableSize::UNKNOWN, 1000, None), Walks::FullDump);
        // The crossover at 1M entries is a few filters: never more than ~1 full dump.
        let first_full = (1..100)
            .find(|&k| m.choose(M, k, None) == Walks::FullDump)
            .unwrap();
        assert!((2..=6).contains(&first_full), "{first_full}");
        let worst = (1..1000)
            .map(|k| match m.choose(M, k, None) {
                Walks::PerFilter => m.per_filter_ns(M, k),
                Walks::FullDump => m.full_dump_ns(M),
                Walks::PortDump => unreachable!("no port groups given"),
            })
            .fold(0.0, f64::max);
        assert!(worst <= m.full_dump_ns(M) * 1.0001, "{worst}");
    }

    #[test]
    fn an_empty_table_never_needs_a_full_dump_for_few_filters() {
        let m = CostModel::default();
        let small = TableSize {
            entries: 100,
            buckets: 262_144,
        };
        // Walking empty buckets costs the same both ways; the dump adds almost nothing:
        // from two filters on, one dump is cheaper.
        assert_eq!(m.choose(small, 2, None), Walks::FullDump);
    }

    #[test]
    fn filters_sharing_a_port_take_one_walk_per_port() {
        let m = CostModel::default();
        // A rolling update: 25 removed endpoints of one service, one target port.
        assert_eq!(m.choose(M, 25, Some(1)), Walks::PortDump);
        // As many ports as filters: per filter (a flush copies nothing) or full dump.
        assert_eq!(m.choose(M, 2, Some(2)), Walks::PerFilter);
        assert_eq!(m.choose(M, 1000, Some(1000)), Walks::FullDump);
        // Many ports, fewer than filters, but more walks than one full dump costs.
        assert_eq!(m.choose(M, 1000, Some(500)), Walks::FullDump);
        // A single filter is one request, whatever the grouping.
        assert_eq!(m.choose(M, 1, Some(1)), Walks::PerFilter);
        // Never more than about one full dump, whatever the grouping.
        for k in 2..200u64 {
            for g in 1..=k {
                let cost = match m.choose(M, k, Some(g)) {
                    Walks::PerFilter => m.per_filter_ns(M, k),
                    Walks::FullDump => m.full_dump_ns(M),
                    Walks::PortDump => m.port_dump_ns(M, g),
                };
                assert!(cost <= m.full_dump_ns(M) * 1.0001, "{k} {g}");
            }
        }
    }
}
