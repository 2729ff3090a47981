//! A batch the kernel refuses must not stall the node. After a refusal the engine
//! replaces our tables from the desired state in one batch; if the kernel refuses that
//! too, it finds the service ports whose rules the kernel refuses by bisection, with
//! batches the kernel checks without committing (`NftKernel::check`), skips them (named
//! in an error, the status and a metric), keeps every other service in sync, and
//! retries the skipped ones with a backoff (at once when their Service changes).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kube_model::Cluster;
use ruleset::names::PortId;

use crate::cleanup;
use crate::commit::{Mode, Synced};
use crate::engine::Engine;
use crate::kernel::{Clock, ConntrackKernel, NftKernel};
use crate::plan;
use crate::{EngineError, SkippedPort};

/// What bisection found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Isolated<P> {
    /// The whole set is accepted now: the refusal was not caused by a service port
    /// (or went away).
    NoneRefused,
    /// Even without any candidate the kernel refuses: no service port is to blame.
    NotPortRelated(String),
    /// These candidates are refused (each with the kernel's error); all the others
    /// together are accepted.
    Refused(BTreeMap<P, String>),
    /// The check budget ran out.
    GaveUp,
}

/// Find the candidates the kernel refuses. `check(included)` answers whether a ruleset
/// with exactly the `included` candidates is accepted (`None`) or refused (the error).
/// Adaptive group testing: O(k log n) checks for k refused of n candidates, at most
/// `budget` checks.
pub fn isolate<P: Ord + Clone, E>(
    cands: Vec<P>,
    budget: u32,
    mut check: impl FnMut(&BTreeSet<P>) -> Result<Option<String>, E>,
) -> Result<Isolated<P>, E> {
    let mut left = budget;
    let mut run = |set: &BTreeSet<P>| -> Result<Option<Option<String>>, E> {
        if left == 0 {
            return Ok(None);
        }
        left -= 1;
        check(set).map(Some)
    };
    let all: BTreeSet<P> = cands.iter().cloned().collect();
    let err = match run(&all)? {
        None => return Ok(Isolated::GaveUp),
        Some(None) => return Ok(Isolated::NoneRefused),
        Some(Some(e)) => e,
    };
    match run(&BTreeSet::new())? {
        None => return Ok(Isolated::GaveUp),
        Some(Some(e)) => return Ok(Isolated::NotPortRelated(e)),
        Some(None) => {}
    }
    let with = |ok: &BTreeSet<P>, part: &[P]| {
        let mut s = ok.clone();
        s.extend(part.iter().cloned());
        s
    };
    // Invariant: `ok` is accepted. A `Refused` part makes `ok` refused (with that
    // error); an `Unknown` part is yet to be tested against `ok`.
    enum Part<P> {
        Refused(Vec<P>, String),
        Unknown(Vec<P>),
    }
    let mut ok = BTreeSet::new();
    let mut bad = BTreeMap::new();
    let mut work = vec![Part::Refused(cands, err)];
    while let Some(part) = work.pop() {
        match part {
            Part::Unknown(c) => match run(&with(&ok, &c))? {
                None => return Ok(Isolated::GaveUp),
                Some(None) => ok.extend(c),
                Some(Some(e)) => work.push(Part::Refused(c, e)),
            },
            Part::Refused(c, err) if c.len() == 1 => {
                bad.insert(c[0].clone(), err);
            }
            Part::Refused(c, err) => {
                let (a, b) = c.split_at(c.len() / 2);
                match run(&with(&ok, a))? {
                    None => return Ok(Isolated::GaveUp),
                    Some(None) => {
                        // `a` is fine: the refusal is in `b`.
                        ok.extend(a.iter().cloned());
                        work.push(Part::Refused(b.to_vec(), err));
                    }
                    Some(Some(ea)) => {
                        // Something in `a` is refused; `b` is tested once `a` is settled.
                        work.push(Part::Unknown(b.to_vec()));
                        work.push(Part::Refused(a.to_vec(), ea));
                    }
                }
            }
        }
    }
    Ok(Isolated::Refused(bad))
}

/// A service port whose rules the kernel refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    pub since: Instant,
    /// Retries that were refused again.
    pub attempts: u32,
    pub retry_at: Instant,
    pub error: String,
}

/// Every service port of the model.
pub fn service_ports(cluster: &Cluster) -> Vec<PortId> {
    cluster
        .services
        .values()
        .flat_map(|s| s.ports.iter().map(move |p| PortId::new(&s.key, p)))
        .collect()
}

/// The model without some service ports (their rules are left out of the compile).
pub fn without(cluster: &Cluster, exclude: &BTreeSet<PortId>) -> Cluster {
    let mut c = cluster.clone();
    for (k, svc) in c.services.iter_mut() {
        svc.ports.retain(|p| !exclude.contains(&PortId::new(k, p)));
    }
    c
}

/// The retry delay after `attempts` refused retries.
pub fn retry_delay(attempts: u32, initial: Duration, max: Duration) -> Duration {
    initial.saturating_mul(1u32 << attempts.min(16)).min(max)
}

impl<N: NftKernel, C: ConntrackKernel, K: Clock> Engine<N, C, K> {
    /// One sync's rules: the diff; after a refusal (with skipped service ports due for
    /// a retry: without them again), the replacement of our tables; if refused too, the
    /// refused service ports found and skipped, and the rest committed.
    pub(crate) fn try_sync(&mut self, full: bool) -> Result<Synced, EngineError> {
        let parsed = self.cfg.ruleset.clone();
        let now = self.clock.now();
        let (mut retrying, mut held) = (BTreeSet::new(), BTreeSet::new());
        for (p, s) in &self.skipped {
            if s.retry_at <= now {
                &mut retrying
            } else {
                &mut held
            }
            .insert(p.clone());
        }
        let first = match self.attempt(&parsed, &held, Mode::Diff, full) {
            Ok(mut s) => {
                let gone: BTreeSet<String> = self
                    .skip_messages()
                    .into_iter()
                    .zip(self.skipped.keys())
                    .filter(|(_, p)| retrying.contains(*p))
                    .map(|(m, _)| m)
                    .collect();
                s.report.errors.retain(|e| !gone.contains(e));
                for p in &retrying {
                    self.skipped.remove(p);
                    tracing::info!(service = %p.service, port = %p.port_name,
                        "service port accepted by the kernel again; no longer skipped");
                }
                self.publish_skipped();
                return Ok(s);
            }
            Err(e) if e.is_rejection() => e,
            Err(e) => return Err(e),
        };
        let mut exclude = held;
        if !retrying.is_empty() {
            for p in &retrying {
                let attempts = self.skipped.get(p).map_or(0, |s| s.attempts + 1);
                let delay = self.skip_delay(attempts);
                if let Some(s) = self.skipped.get_mut(p) {
                    s.attempts = attempts;
                    s.retry_at = now + delay;
                    s.error = first.to_string();
                    tracing::warn!(service = %p.service, port = %p.port_name, error = %first,
                        retry_in_ms = (s.retry_at - now).as_millis() as u64,
                        "service port still refused by the kernel; still skipped");
                }
            }
            exclude.extend(retrying);
            self.publish_skipped();
            match self.attempt(&parsed, &exclude, Mode::Diff, true) {
                Ok(s) => return Ok(s),
                Err(e) if e.is_rejection() => {}
                Err(e) => return Err(e),
            }
        }
        tracing::warn!(error = %first,
            "the kernel refused our batch; replacing our tables from the desired state in one batch");
        match self.attempt(&parsed, &exclude, Mode::Replace, true) {
            Ok(s) => return Ok(s),
            Err(e) if e.is_rejection() => {}
            Err(e) => return Err(e),
        }
        match self.isolate_refused(&parsed, &exclude)? {
            Isolated::Refused(bad) => {
                for (p, error) in bad {
                    tracing::error!(service = %p.service, port = %p.port_name, error = %error,
                        "the kernel refuses this service port's rules; skipping it, every other service stays in sync");
                    let s = Skip {
                        since: now,
                        attempts: 0,
                        retry_at: now + self.skip_delay(0),
                        error,
                    };
                    self.skipped.insert(p.clone(), s);
                    exclude.insert(p);
                }
                self.publish_skipped();
                self.attempt(&parsed, &exclude, Mode::Replace, true)
            }
            Isolated::NoneRefused => {
                tracing::warn!("the kernel accepts the desired state when checked; retrying later");
                Err(first)
            }
            Isolated::NotPortRelated(e) => {
                tracing::error!(error = %e, "the kernel refuses our tables even without any service port");
                Err(first)
            }
            Isolated::GaveUp => {
                tracing::error!(
                    "could not narrow the refusal down to service ports; retrying later"
                );
                Err(first)
            }
        }
    }

    fn skip_delay(&self, attempts: u32) -> Duration {
        retry_delay(
            attempts,
            self.cfg.retry_initial.max(self.cfg.min_sync_period),
            self.cfg.retry_max,
        )
    }

    /// Find the refused service ports: batches replacing our tables by the desired
    /// state with subsets of the service ports, checked by the kernel, never committed.
    fn isolate_refused(
        &mut self,
        parsed: &ruleset::ParsedConfig,
        exclude: &BTreeSet<PortId>,
    ) -> Result<Isolated<PortId>, EngineError> {
        let read = self.read_base(self.trust, true)?;
        let cands: Vec<PortId> = service_ports(&self.cluster)
            .into_iter()
            .filter(|p| !exclude.contains(p))
            .collect();
        // 2 + 2k(log2 n + 1) checks find k refused ports; allow k up to 8.
        let log = usize::BITS - cands.len().leading_zeros();
        let budget = 2 + 16 * (log + 1);
        let (cluster, pending, nft) = (&self.cluster, &self.pending, &mut self.nft);
        let mut checks = 0u32;
        let r = isolate(cands.clone(), budget, |included| {
            checks += 1;
            let mut ex = exclude.clone();
            ex.extend(cands.iter().filter(|p| !included.contains(*p)).cloned());
            let mut d = plan::compile(&without(cluster, &ex), parsed);
            cleanup::record_in_tables(&mut d, pending.targets());
            let ops = plan::replace(&read.base, d);
            match nft.check(&ops, Some(read.genid)) {
                Ok(()) => Ok(None),
                Err(e) if e.is_rejection() => Ok(Some(e.to_string())),
                Err(e) => Err(e),
            }
        });
        tracing::debug!(candidates = cands.len(), checks, "bisected a refused batch");
        r
    }

    /// The skipped service ports as report errors.
    pub(crate) fn skip_messages(&self) -> Vec<String> {
        self.skipped
            .iter()
            .map(|(p, s)| {
                format!(
                    "service {} port {:?}: skipped, the kernel refuses its rules: {}",
                    p.service, p.port_name, s.error
                )
            })
            .collect()
    }

    /// The skipped service ports into the status and the schedule.
    pub(crate) fn publish_skipped(&mut self) {
        let list: Vec<SkippedPort> = self
            .skipped
            .iter()
            .map(|(p, s)| SkippedPort {
                service: p.service.to_string(),
                port: p.port_name.clone(),
                error: s.error.clone(),
                since: s.since,
                retry_at: s.retry_at,
            })
            .collect();
        self.schedule
            .retry_skipped_at(self.skipped.values().map(|s| s.retry_at).min());
        self.status.update(|s| s.skipped_service_ports = list);
    }

    /// A Service changed: retry its skipped ports at the next sync (and forget those of
    /// a deleted service).
    pub(crate) fn service_changed(&mut self, key: &kube_model::ServiceKey, deleted: bool) {
        let now = self.clock.now();
        let mut touched = false;
        self.skipped.retain(|p, s| {
            if &p.service != key {
                return true;
            }
            touched = true;
            s.retry_at = s.retry_at.min(now);
            !deleted
        });
        if touched {
            self.publish_skipped();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(n: u32, bad: &[u32]) -> (Isolated<u32>, u32) {
        let bad: BTreeSet<u32> = bad.iter().copied().collect();
        let mut checks = 0;
        let r = isolate((0..n).collect(), 1000, |inc: &BTreeSet<u32>| {
            checks += 1;
            Ok::<_, ()>(
                inc.iter()
                    .find(|p| bad.contains(p))
                    .map(|p| format!("refused {p}")),
            )
        })
        .unwrap();
        (r, checks)
    }

    #[test]
    fn finds_every_refused_candidate_in_k_log_n_checks() {
        for (n, bad) in [
            (1u32, vec![0u32]),
            (2, vec![1]),
            (100, vec![37]),
            (1000, vec![0, 999]),
            (1000, vec![5, 6, 7, 500]),
            (10_000, vec![4242]),
        ] {
            let (r, checks) = run(n, &bad);
            let want: BTreeMap<u32, String> =
                bad.iter().map(|p| (*p, format!("refused {p}"))).collect();
            assert_eq!(r, Isolated::Refused(want), "n={n} bad={bad:?}");
            let log = 32 - n.leading_zeros();
            let bound = 2 + 2 * bad.len() as u32 * (log + 1);
            assert!(
                checks <= bound,
                "n={n} bad={bad:?}: {checks} checks > {bound}"
            );
        }
    }

    #[test]
    fn nothing_to_isolate() {
        assert_eq!(run(10, &[]), (Isolated::NoneRefused, 1));
        let r = isolate(vec![1, 2], 10, |_: &BTreeSet<i32>| {
            Ok::<_, ()>(Some("no".into()))
        });
        assert_eq!(r, Ok(Isolated::NotPortRelated("no".into())));
        let r = isolate((0..1000).collect(), 5, |inc: &BTreeSet<i32>| {
            Ok::<_, ()>(inc.contains(&3).then(|| "x".into()))
        });
        assert_eq!(r, Ok(Isolated::GaveUp));
    }
}
