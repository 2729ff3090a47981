//! Bringing the incremental compiler up to date with what changed (pure): the batch from
//! what the kernel holds (our last committed tables) to the desired state, and the
//! conntrack cleanup inputs of the change.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use kube_model::{Cluster, IpFamily};
use nft_model::{Family, Op};
use ruleset::names::PortId;
use ruleset::{Changes, Compiler, ParsedConfig};

use crate::targets::{self, Target};

/// Per UDP service port and family: some of its endpoints.
pub type Stopped = BTreeMap<(PortId, IpFamily), BTreeSet<(IpAddr, u16)>>;

/// Endpoints that stopped or started serving UDP ports since the last commit: the net
/// change over the compiler updates whose batches are not committed yet (a failed
/// commit keeps them; an endpoint that stops and serves again in between is no target).
#[derive(Debug, Default)]
pub struct Serving {
    pub stopped: Stopped,
    pub started: Stopped,
}

impl Serving {
    /// Add one update's changes.
    pub fn add(&mut self, stopped: Stopped, started: Stopped) {
        for (k, eps) in started {
            for e in eps {
                let back = self.stopped.get_mut(&k).is_some_and(|s| s.remove(&e));
                if !back {
                    self.started.entry(k.clone()).or_default().insert(e);
                }
            }
        }
        for (k, eps) in stopped {
            for e in eps {
                let new = self.started.get_mut(&k).is_some_and(|s| s.remove(&e));
                if !new {
                    self.stopped.entry(k.clone()).or_default().insert(e);
                }
            }
        }
    }

    /// The endpoint targets: every endpoint that stopped serving since the last commit.
    pub fn targets(&self) -> BTreeSet<Target> {
        self.stopped
            .values()
            .flatten()
            .map(|&(addr, port)| Target::Endpoint { addr, port })
            .collect()
    }

    pub fn clear(&mut self) {
        self.stopped.clear();
        self.started.clear();
    }
}

/// What bringing the compiler up to date did.
#[derive(Debug, Default)]
pub struct Step {
    /// The batch from our last committed tables to the new desired ones (the kernel
    /// holds those when it holds our last commit); None when only a diff from what the
    /// kernel holds can tell (the compiler was built from scratch, or rebuilt).
    pub ops: Option<Vec<Op>>,
    /// UDP destinations the change made served.
    pub became_served: BTreeSet<Target>,
    /// UDP endpoints the change made stop serving, per port.
    pub stopped: Stopped,
    /// UDP endpoints the change made start serving, per port.
    pub started: Stopped,
}

/// Bring `compiler` (built here when there is none) up to date with `changes` to
/// `cluster`, the configuration `parsed` and the excluded service ports.
pub fn advance(
    compiler: &mut Option<Compiler>,
    cluster: &Cluster,
    parsed: &ParsedConfig,
    exclude: &BTreeSet<PortId>,
    mut changes: Changes,
) -> Step {
    let Some(c) = compiler.as_mut() else {
        *compiler = Some(Compiler::with_excluded(
            parsed.clone(),
            cluster,
            exclude.clone(),
        ));
        return Step::default();
    };
    changes.services.extend(c.set_excluded(exclude.clone()));
    let mut updates = vec![c.update(cluster, &changes)];
    if parsed != c.config() {
        updates.push(c.set_config(parsed.clone(), cluster));
    }
    let mut step = Step::default();
    for u in &mut updates {
        for (key, t) in std::mem::take(&mut u.targets) {
            step.became_served
                .extend(t.became_served.into_iter().map(targets::of_served));
            if !t.stopped_serving.is_empty() {
                step.stopped
                    .entry(key.clone())
                    .or_default()
                    .extend(t.stopped_serving);
            }
            if !t.started_serving.is_empty() {
                step.started
                    .entry(key)
                    .or_default()
                    .extend(t.started_serving);
            }
        }
    }
    // An update's batch covers everything since the last commit, so the last one is the
    // batch; a rebuild (a configuration change beyond addresses) is a diff from the
    // previous desired tables, which the kernel may not hold: then read it back.
    if !updates.iter().any(|u| u.full) {
        step.ops = updates.pop().map(|u| u.ops);
    }
    step
}

/// The table families the compiler programs.
pub fn families(compiler: &Compiler) -> Vec<Family> {
    compiler
        .config()
        .families
        .iter()
        .map(|f| ruleset::nft_family(*f))
        .collect()
}
