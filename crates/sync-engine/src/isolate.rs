//! A batch the kernel refuses must not hold other services back (pure part): the
//! service ports a refusal is to blame on, and the skipped ports with their checks.
//!
//! The kernel names every refused message of a batch, and in a set element list the
//! one element it refused (`nft_netlink::OpError`: the op, the errno, the element, from
//! the extended acknowledgement). The compiler knows which service ports an op or an
//! element is about (`ruleset::Compiler::owners`), so the ports to blame are known at
//! once, without any search: the engine plans the batch again without them and commits
//! it (every other change reaches the kernel in the same sync). Each suspect is then
//! tried again between syncs, never instead of one: a small batch that adds just that
//! port's rules to what the kernel holds (`trials`). Accepted (it only shared a refused
//! op with the guilty port, when the kernel named no element), it is programmed by that
//! very batch; refused, it stays skipped, named in an error, and is tried again with a
//! backoff (at once when its Service changes).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kube_model::ServiceKey;
use nft_model::Op;
use ruleset::names::PortId;
use ruleset::Compiler;

use crate::backoff;
use crate::{EngineError, SkippedPort};

/// The service ports a refused batch is to blame on, each with the kernel's error for
/// it: the owners of the refused ops. Empty when no port explains the refusal (the
/// skeleton's objects were refused, or the kernel named no op).
pub fn suspects(compiler: &Compiler, error: &EngineError, ops: &[Op]) -> BTreeMap<PortId, String> {
    let mut out = BTreeMap::new();
    let EngineError::Nft(nft_netlink::NftError::Rejected(refused)) = error else {
        return out;
    };
    for e in refused {
        let Some(op) = ops.get(e.op_index) else {
            continue;
        };
        let owners = match one_element(op, e.element) {
            Some(one) => compiler.owners(&one),
            None => compiler.owners(op),
        };
        for p in owners {
            out.entry(p).or_insert_with(|| e.to_string());
        }
    }
    out
}

/// The element op `op` with only its `k`-th element (the one the kernel refused),
/// unpacked.
fn one_element(op: &Op, k: Option<usize>) -> Option<Op> {
    op.one_element(k?)
}

/// A service port left out because the kernel refused a batch with its rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    pub since: Instant,
    /// Checks that refused it.
    pub attempts: u32,
    /// When it is checked (again).
    pub retry_at: Instant,
    /// The kernel's answer.
    pub error: String,
    /// Only named by a refusal so far: no check has confirmed it (it may have shared a
    /// refused message with the port to blame).
    pub suspected: bool,
    /// A check accepted it: it is in the next sync's batch, and leaves the list once
    /// that batch is committed (refused again, it is skipped with a longer backoff).
    pub retrying: bool,
}

/// The skipped service ports.
#[derive(Debug, Default)]
pub struct Skips {
    map: BTreeMap<PortId, Skip>,
}

impl Skips {
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The ports to leave out of the compile.
    pub fn excluded(&self) -> BTreeSet<PortId> {
        self.map
            .iter()
            .filter(|(_, s)| !s.retrying)
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Ports a refusal names: left out, checked at once (a port refused before, with
    /// the backoff its attempts earned).
    pub fn suspect(
        &mut self,
        ports: BTreeMap<PortId, String>,
        now: Instant,
        initial: Duration,
        max: Duration,
    ) {
        for (p, error) in ports {
            let s = self.map.entry(p).or_insert(Skip {
                since: now,
                attempts: 0,
                retry_at: now,
                error: String::new(),
                suspected: true,
                retrying: false,
            });
            if s.retrying {
                // accepted when checked, refused again in a batch: back off
                s.retrying = false;
                s.attempts = s.attempts.saturating_add(1);
                s.retry_at = now + backoff::doubling(initial, s.attempts, max);
            }
            s.error = error;
        }
    }

    /// The earliest check due at `now` among the ports whose Service has no change
    /// waiting for the next sync (a check compares with what the kernel holds).
    pub fn due(&self, now: Instant, busy: &BTreeSet<ServiceKey>) -> Option<PortId> {
        self.checkable(busy)
            .filter(|(_, s)| s.retry_at <= now)
            .min_by_key(|(_, s)| s.retry_at)
            .map(|(p, _)| p.clone())
    }

    /// When the next check is due (among the ports whose Service has no change waiting).
    pub fn next_due(&self, busy: &BTreeSet<ServiceKey>) -> Option<Instant> {
        self.checkable(busy).map(|(_, s)| s.retry_at).min()
    }

    fn checkable<'a>(
        &'a self,
        busy: &'a BTreeSet<ServiceKey>,
    ) -> impl Iterator<Item = (&'a PortId, &'a Skip)> {
        self.map
            .iter()
            .filter(move |(p, s)| !s.retrying && !busy.contains(&p.service))
    }

    /// The port is tried again (in the compile from now on).
    pub fn accepted(&mut self, p: &PortId) {
        if let Some(s) = self.map.get_mut(p) {
            s.retrying = true;
        }
    }

    /// A retry of the port failed: it is left out again (its state as before).
    pub fn left_out(&mut self, p: &PortId) {
        if let Some(s) = self.map.get_mut(p) {
            s.retrying = false;
        }
    }

    /// A check refused the port: it stays out, checked again after the backoff.
    /// Returns whether this confirmed a suspicion (the first refusal by a check).
    pub fn refused(
        &mut self,
        p: &PortId,
        error: String,
        now: Instant,
        initial: Duration,
        max: Duration,
    ) -> bool {
        let Some(s) = self.map.get_mut(p) else {
            return false;
        };
        let first = s.suspected;
        if !first {
            s.attempts = s.attempts.saturating_add(1);
        }
        s.suspected = false;
        s.error = error;
        s.retry_at = now + backoff::doubling(initial, s.attempts, max);
        first
    }

    /// The check could not be made now: try again at `at`.
    pub fn postpone(&mut self, p: &PortId, at: Instant) {
        if let Some(s) = self.map.get_mut(p) {
            s.retry_at = at;
        }
    }

    /// A batch was committed: the ports it brought back are no longer skipped (returned).
    pub fn committed(&mut self) -> Vec<PortId> {
        let back: Vec<PortId> = self
            .map
            .iter()
            .filter(|(_, s)| s.retrying)
            .map(|(p, _)| p.clone())
            .collect();
        for p in &back {
            self.map.remove(p);
        }
        back
    }

    /// A Service changed: check its ports at once (a deleted Service's are forgotten).
    /// Returns whether it had skipped ports.
    pub fn service_changed(&mut self, key: &ServiceKey, deleted: bool, now: Instant) -> bool {
        let mut touched = false;
        self.map.retain(|p, s| {
            if &p.service != key {
                return true;
            }
            touched = true;
            s.retry_at = s.retry_at.min(now);
            !deleted
        });
        touched
    }

    /// The skipped ports as report errors.
    pub fn messages(&self) -> Vec<String> {
        self.map
            .iter()
            .filter(|(_, s)| !s.retrying)
            .map(|(p, s)| {
                format!(
                    "service {} port {:?}: skipped, the kernel refuses its rules: {}",
                    p.service, p.port_name, s.error
                )
            })
            .collect()
    }

    /// The skipped ports for the status.
    pub fn list(&self) -> Vec<SkippedPort> {
        self.map
            .iter()
            .filter(|(_, s)| !s.retrying)
            .map(|(p, s)| SkippedPort {
                service: p.service.to_string(),
                port: p.port_name.to_string(),
                error: s.error.clone(),
                since: s.since,
                retry_at: s.retry_at,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(svc: &str) -> PortId {
        PortId {
            service: ServiceKey::new("ns", svc),
            port_name: "p".into(),
        }
    }

    #[test]
    fn a_suspect_is_checked_at_once_then_backs_off_while_refused() {
        let (t0, i, m) = (
            Instant::now(),
            Duration::from_secs(1),
            Duration::from_secs(30),
        );
        let mut s = Skips::default();
        let idle = BTreeSet::new();
        s.suspect(BTreeMap::from([(port("a"), "EEXIST".into())]), t0, i, m);
        assert_eq!(s.excluded(), BTreeSet::from([port("a")]));
        assert_eq!(s.due(t0, &idle), Some(port("a")));
        // not while its Service has a change waiting for the next sync
        let busy = BTreeSet::from([ServiceKey::new("ns", "a")]);
        assert_eq!((s.due(t0, &busy), s.next_due(&busy)), (None, None));
        assert!(
            s.refused(&port("a"), "EEXIST".into(), t0, i, m),
            "confirmed"
        );
        assert_eq!(s.next_due(&idle), Some(t0 + i));
        assert!(!s.refused(&port("a"), "EEXIST".into(), t0 + i, i, m));
        assert_eq!(s.next_due(&idle), Some(t0 + i + 2 * i));
        // accepted: in the next batch, gone once it is committed
        s.accepted(&port("a"));
        assert!(s.excluded().is_empty() && s.list().is_empty());
        assert_eq!(s.committed(), vec![port("a")]);
        assert!(s.is_empty());
    }

    #[test]
    fn accepted_then_refused_in_a_batch_backs_off() {
        let (t0, i, m) = (
            Instant::now(),
            Duration::from_secs(1),
            Duration::from_secs(30),
        );
        let mut s = Skips::default();
        s.suspect(BTreeMap::from([(port("a"), "x".into())]), t0, i, m);
        s.accepted(&port("a"));
        s.suspect(BTreeMap::from([(port("a"), "y".into())]), t0, i, m);
        assert_eq!(s.excluded(), BTreeSet::from([port("a")]));
        assert_eq!(s.next_due(&BTreeSet::new()), Some(t0 + 2 * i));
        assert!(s.service_changed(&ServiceKey::new("ns", "a"), false, t0));
        assert_eq!(
            s.next_due(&BTreeSet::new()),
            Some(t0),
            "a change is checked at once"
        );
        assert!(s.service_changed(&ServiceKey::new("ns", "a"), true, t0));
        assert!(s.is_empty(), "a deleted service is forgotten");
    }
}
