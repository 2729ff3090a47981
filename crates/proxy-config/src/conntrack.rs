//! The `nf_conntrack_max` kube-proxy 1.38 sets from `linux.conntrack` (pure; the daemon
//! reads the inputs from sysfs/procfs and writes the result):
//! `max(min, maxPerCore × online CPUs)`, capped at 1048576 (1.36), and only ever raised:
//! a node tuned higher is left alone (1.38, after 1.36's cap lowered tuned nodes).
//! The CPU count is the kernel's list of online CPUs (`/sys/devices/system/cpu/online`),
//! not the CPUs this process may use (cpusets and CPU quotas of a container).

/// The ceiling of the computed value (1.36).
pub const CONNTRACK_MAX_CAP: u64 = 1 << 20;

/// The kernel's CPU list (`0-3,6`, `0`, with a trailing newline): how many CPUs it
/// names. `None` for anything malformed (never a panic); ranges are `a-b` with `a <= b`.
pub fn parse_cpu_list(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for part in s.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u64>().ok()?, b.parse::<u64>().ok()?),
            None => {
                let a = part.parse::<u64>().ok()?;
                (a, a)
            }
        };
        if a > b {
            return None;
        }
        n = n.checked_add((b - a).checked_add(1)?)?;
    }
    Some(n)
}

/// What to do with `nf_conntrack_max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConntrackMax {
    /// `maxPerCore` is unset or 0: leave it alone.
    Unset,
    /// Raise it to this value.
    Set(u64),
    /// The node already allows at least `computed`: leave it (never lowered).
    Keep { current: u64, computed: u64 },
}

/// The computed value: `max(min, maxPerCore × cpus)`, capped; `None` when `maxPerCore`
/// is unset or not positive (upstream then leaves the sysctl alone).
pub fn computed_max(max_per_core: Option<i32>, min: Option<i32>, cpus: u64) -> Option<u64> {
    let per_core = u64::try_from(max_per_core?).ok().filter(|&p| p > 0)?;
    let floor = min.and_then(|m| u64::try_from(m).ok()).unwrap_or(0);
    let scaled = per_core.saturating_mul(cpus.max(1));
    Some(scaled.max(floor).min(CONNTRACK_MAX_CAP))
}

/// The decision given the sysctl's current value (`None`: unreadable, so set it).
pub fn conntrack_max(
    max_per_core: Option<i32>,
    min: Option<i32>,
    cpus: u64,
    current: Option<u64>,
) -> ConntrackMax {
    let Some(computed) = computed_max(max_per_core, min, cpus) else {
        return ConntrackMax::Unset;
    };
    match current {
        Some(current) if current >= computed => ConntrackMax::Keep { current, computed },
        _ => ConntrackMax::Set(computed),
    }
}

/// The hash table size for `max` (four entries a bucket): `Some(max / 4)` when the
/// current size is smaller, as upstream's `SetMax` grows it (never shrinks).
pub fn hashsize_for(max: u64, current: u64) -> Option<u64> {
    (current < max / 4).then_some(max / 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        for (s, want) in [
            ("0\n", Some(1)),
            ("0-3\n", Some(4)),
            ("0-3,6\n", Some(5)),
            ("0-1,4-5,8", Some(5)),
            ("0-127", Some(128)),
            // malformed: never a panic, never a guess
            ("", None),
            ("\n", None),
            ("3-1", None),
            ("0-", None),
            ("-3", None),
            ("0,,2", None),
            ("a-b", None),
            ("0-3 junk", None),
            ("0-18446744073709551615", None),
            ("0-18446744073709551614,5", None),
        ] {
            assert_eq!(parse_cpu_list(s), want, "{s:?}");
        }
    }

    #[test]
    fn computed_is_max_of_min_and_scaled_capped_at_1m() {
        // kube-proxy's defaults: 32768 per core, min 131072
        assert_eq!(computed_max(Some(32768), Some(131072), 2), Some(131072));
        assert_eq!(computed_max(Some(32768), Some(131072), 8), Some(262144));
        // 40 CPUs: 1310720 capped
        assert_eq!(computed_max(Some(32768), Some(131072), 40), Some(1 << 20));
        assert_eq!(computed_max(Some(32768), Some(0), 32), Some(1 << 20));
        assert_eq!(computed_max(Some(32768), Some(0), 31), Some(32768 * 31));
        // maxPerCore unset or 0: left alone
        assert_eq!(computed_max(None, Some(131072), 8), None);
        assert_eq!(computed_max(Some(0), Some(131072), 8), None);
        assert_eq!(computed_max(Some(-1), Some(131072), 8), None);
        // no overflow
        assert_eq!(computed_max(Some(i32::MAX), None, u64::MAX), Some(1 << 20));
    }

    #[test]
    fn only_ever_raised() {
        use ConntrackMax::*;
        let d = |cpus, current| conntrack_max(Some(32768), Some(131072), cpus, current);
        assert_eq!(d(8, Some(131072)), Set(262144));
        assert_eq!(d(8, None), Set(262144));
        // a node tuned higher (or capped lower by 1.36 than its tuning) keeps its value
        assert_eq!(
            d(40, Some(1310720)),
            Keep {
                current: 1310720,
                computed: 1 << 20
            }
        );
        assert_eq!(
            d(8, Some(262144)),
            Keep {
                current: 262144,
                computed: 262144
            }
        );
        assert_eq!(conntrack_max(None, None, 8, Some(1)), Unset);
    }

    #[test]
    fn hashsize_grows_only() {
        assert_eq!(hashsize_for(262144, 16384), Some(65536));
        assert_eq!(hashsize_for(262144, 65536), None);
        assert_eq!(hashsize_for(262144, 262144), None);
    }
}
