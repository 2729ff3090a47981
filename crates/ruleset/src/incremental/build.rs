//! Building a compiler from scratch, also while its cluster is still arriving.
//!
//! A build from scratch adds every service's fragments to mirrors that only stage their
//! elements (sorted once at the end, `Mirror::start_journal`), then sets the skeleton
//! the classes in use imply and starts the journal. [`Build`] is that build spread over
//! time: a cold start's lists arrive over seconds, and the services that arrived can be
//! compiled meanwhile (on the engine's thread, while the sources still decode), each
//! recompiled when it changes again before the end; [`Build::finish`] compiles what is
//! left and ends the build. The result is the compiler [`Compiler::with_excluded`]
//! builds from the final cluster (the property test in `tests/` holds them equal).

use std::collections::{BTreeMap, BTreeSet};

use kube_model::{Cluster, EndpointSlice, ServiceKey};

use super::{build_service, Changes, Compiler, FamilyState};
use crate::compile::mirror::Mirror;
use crate::compile::skeleton::skeleton;
use crate::compile::Ctx;
use crate::config::ParsedConfig;
use crate::names::PortId;

impl Compiler {
    /// Compile `cluster` from scratch, leaving the `excluded` service ports out.
    pub fn with_excluded(
        cfg: ParsedConfig,
        cluster: &Cluster,
        excluded: BTreeSet<PortId>,
    ) -> Compiler {
        let mut c = Compiler::staged(cfg, cluster, excluded, |_| true);
        c.end_build();
        c
    }

    /// Every service of `cluster` that `now` takes added to mirrors that stage their
    /// elements.
    fn staged(
        cfg: ParsedConfig,
        cluster: &Cluster,
        excluded: BTreeSet<PortId>,
        now: impl Fn(&ServiceKey) -> bool,
    ) -> Compiler {
        let node = cluster.node.clone();
        let idx = cluster.endpoint_index();
        let families = cfg
            .families
            .iter()
            .map(|fam| {
                let ctx = Ctx::new(*fam, &cfg, node.as_ref());
                let mut st = FamilyState {
                    fam: *fam,
                    mirror: Mirror::new(ctx.family),
                    fragments: BTreeMap::new(),
                    node_dependent: BTreeSet::new(),
                    with_errors: BTreeSet::new(),
                };
                for key in cluster.services.keys().filter(|k| now(k)) {
                    let slices = idx.get(key).map(Vec::as_slice).unwrap_or(&[]);
                    let frags = build_service(&ctx, cluster, key, slices, &excluded);
                    st.insert(key.clone(), frags);
                }
                st
            })
            .collect();
        Compiler {
            cfg,
            node,
            families,
            excluded,
        }
    }

    /// Recompile `services` (and, when the cluster's node changed, the services that
    /// depend on it) while still staging.
    fn restage(&mut self, cluster: &Cluster, services: &BTreeSet<ServiceKey>) {
        let mut services = services.clone();
        if cluster.node != self.node {
            self.node = cluster.node.clone();
            for st in &self.families {
                services.extend(st.node_dependent.iter().cloned());
            }
        }
        for st in &mut self.families {
            let ctx = Ctx::new(st.fam, &self.cfg, self.node.as_ref());
            for k in &services {
                for f in st.fragments.remove(k).unwrap_or_default() {
                    st.mirror.remove(&f);
                }
                let slices: Vec<&EndpointSlice> = cluster.slices_of(k).collect();
                let frags = build_service(&ctx, cluster, k, &slices, &self.excluded);
                st.insert(k.clone(), frags);
            }
        }
    }

    /// The skeleton of the classes in use, the staged elements merged, the journal
    /// started.
    fn end_build(&mut self) {
        for st in &mut self.families {
            let ctx = Ctx::new(st.fam, &self.cfg, self.node.as_ref());
            st.mirror
                .set_skeleton(skeleton(&ctx, &st.mirror.classes(), st.mirror.affinity()));
            st.mirror.start_journal();
        }
    }
}

/// A compiler being built while its cluster arrives (see the module documentation).
/// It cannot be read: only [`Build::finish`] gives the compiler.
#[derive(Debug)]
pub struct Build {
    c: Compiler,
    /// Services named while they had no slice: compiled at the finish (their slices
    /// usually follow, which names them again).
    deferred: BTreeSet<ServiceKey>,
}

impl Build {
    /// Start from what `cluster` holds now.
    pub fn new(cfg: ParsedConfig, cluster: &Cluster, excluded: BTreeSet<PortId>) -> Build {
        let deferred: BTreeSet<ServiceKey> = cluster
            .services
            .keys()
            .filter(|k| sliceless(cluster, k))
            .cloned()
            .collect();
        Build {
            c: Compiler::staged(cfg, cluster, excluded, |k| !deferred.contains(k)),
            deferred,
        }
    }

    /// Compile what `changes` names against the updated `cluster` (a service compiled
    /// again replaces what it added before). A service without slices yet is deferred
    /// to the finish: it would be compiled once now and again when they come. Work in
    /// proportion to the services named.
    pub fn add(&mut self, cluster: &Cluster, changes: &Changes) {
        let mut now = BTreeSet::new();
        for k in &changes.services {
            if cluster.services.contains_key(k) && sliceless(cluster, k) {
                self.deferred.insert(k.clone());
            } else {
                self.deferred.remove(k);
                now.insert(k.clone());
            }
        }
        self.c.restage(cluster, &now);
    }

    /// Take the configuration `cfg`: when only the host's addresses or the service
    /// CIDRs changed, the services depending on them are compiled again; otherwise
    /// the build starts again from `cluster`.
    pub fn set_config(&mut self, cfg: &ParsedConfig, cluster: &Cluster) {
        let c = &mut self.c;
        if &c.cfg == cfg {
            return;
        }
        if !c.cfg.same_but_addresses(cfg) {
            let excluded = std::mem::take(&mut c.excluded);
            *self = Build::new(cfg.clone(), cluster, excluded);
            return;
        }
        c.cfg = cfg.clone();
        let dependent: BTreeSet<ServiceKey> = c
            .families
            .iter()
            .flat_map(|st| st.node_dependent.iter().cloned())
            .collect();
        c.restage(cluster, &dependent);
    }

    /// The compiler of the final `cluster`, with the configuration `cfg` and the
    /// changes since the last [`Build::add`]. Exclusions other than the build's start
    /// again from scratch.
    pub fn finish(
        mut self,
        cfg: &ParsedConfig,
        cluster: &Cluster,
        excluded: &BTreeSet<PortId>,
        changes: &Changes,
    ) -> Compiler {
        if &self.c.excluded != excluded {
            return Compiler::with_excluded(cfg.clone(), cluster, excluded.clone());
        }
        self.set_config(cfg, cluster);
        let mut rest = std::mem::take(&mut self.deferred);
        rest.extend(changes.services.iter().cloned());
        let mut c = self.c;
        c.restage(cluster, &rest);
        c.end_build();
        c
    }
}

/// Whether service `k` has no slice yet: a build defers such a service to its finish
/// (compiled now, it would be compiled again when its slices come: at a cold start the
/// Services usually arrive before the EndpointSlices).
fn sliceless(cluster: &Cluster, k: &ServiceKey) -> bool {
    cluster.slices_of(k).next().is_none()
}
