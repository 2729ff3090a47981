//! Bringing the incremental compiler up to date with what changed (pure): the batch from
//! what the kernel holds (our last committed tables) to the desired state, and the UDP
//! destinations the conntrack cleanup is to judge again.

use std::collections::{BTreeMap, BTreeSet};

use nft_model::{Family, Op};
use ruleset::names::PortId;
use ruleset::{Build, Changes, Compiler, ParsedConfig, UdpDest};

use kube_model::Cluster;

/// What bringing the compiler up to date did.
#[derive(Debug, Default)]
pub struct Step {
    /// The batch from our last committed tables to the new desired ones (the kernel
    /// holds those when it holds our last commit); None when only a diff from what the
    /// kernel holds can tell (the compiler was built from scratch, or rebuilt).
    pub ops: Option<Vec<Op>>,
    /// UDP destinations whose owner or serving endpoints may have changed.
    pub udp_touched: BTreeSet<UdpDest>,
    /// Of those, the frontends their service port stopped claiming, with that port.
    pub udp_released: BTreeMap<UdpDest, PortId>,
    /// The compiler was built or rebuilt: every UDP flow is to be judged again.
    pub full: bool,
}

/// Bring `compiler` (built here when there is none: the build begun ahead finished, or
/// one from scratch) up to date with `changes` to `cluster`, the configuration `parsed`
/// and the excluded service ports.
pub fn advance(
    compiler: &mut Option<Compiler>,
    building: &mut Option<Build>,
    cluster: &Cluster,
    parsed: &ParsedConfig,
    exclude: &BTreeSet<PortId>,
    mut changes: Changes,
) -> Step {
    let Some(c) = compiler.as_mut() else {
        *compiler = Some(match building.take() {
            Some(b) => b.finish(parsed, cluster, exclude, &changes),
            None => Compiler::with_excluded(parsed.clone(), cluster, exclude.clone()),
        });
        return Step {
            full: true,
            ..Step::default()
        };
    };
    changes.services.extend(c.set_excluded(exclude.clone()));
    let mut updates = vec![c.update(cluster, &changes)];
    if parsed != c.config() {
        updates.push(c.set_config(parsed.clone(), cluster));
    }
    let mut step = Step::default();
    for u in &mut updates {
        step.udp_touched.append(&mut u.udp_touched);
        for (d, port) in std::mem::take(&mut u.udp_released) {
            step.udp_released.entry(d).or_insert(port);
        }
        step.full |= u.full;
    }
    // An update's batch covers everything since the last commit, so the last one is the
    // batch; a rebuild (a configuration change beyond addresses) is a diff from the
    // previous desired tables, which the kernel may not hold: then read it back.
    if !updates.iter().any(|u| u.full) {
        step.ops = updates.pop().map(|u| u.ops);
    }
    step
}

/// Before there is a compiler (a cold start's lists still arriving): compile what
/// arrived into `building` (begun here from the whole `cluster`), taking `changes`
/// (a service without slices yet is kept by the build for its finish). Returns whether
/// there was anything to compile.
pub fn build_ahead(
    building: &mut Option<Build>,
    cluster: &Cluster,
    parsed: &ParsedConfig,
    exclude: &BTreeSet<PortId>,
    changes: &mut Changes,
) -> bool {
    let changes = std::mem::take(changes);
    let Some(b) = building.as_mut() else {
        *building = Some(Build::new(parsed.clone(), cluster, exclude.clone()));
        return true;
    };
    b.set_config(parsed, cluster);
    if changes.services.is_empty() {
        return false;
    }
    b.add(cluster, &changes);
    true
}

/// The table families the compiler programs.
pub fn families(compiler: &Compiler) -> Vec<Family> {
    families_of(compiler.config())
}

/// The table families a configuration programs.
pub fn families_of(cfg: &ParsedConfig) -> Vec<Family> {
    cfg.families
        .iter()
        .map(|f| ruleset::nft_family(*f))
        .collect()
}
