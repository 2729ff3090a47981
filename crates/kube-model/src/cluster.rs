//! The proxier's view of the cluster: services, endpoint slices and its own node.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;

pub use crate::convert::{
    node_from_k8s, service_from_k8s, slice_from_k8s, DEFAULT_AFFINITY_TIMEOUT,
};
use crate::model::*;
use crate::{Kind, ObjectError, ObjectRef};

/// Validated services and slices, keyed by identity (ordered, so everything derived from
/// a `Cluster` is deterministic). Slices are indexed by their service as well, so that
/// one service's slices are found without looking at the others ([`Cluster::slices_of`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cluster {
    pub services: BTreeMap<ServiceKey, Service>,
    /// Keyed by the slice's own namespace/name.
    slices: BTreeMap<ServiceKey, EndpointSlice>,
    /// Service -> keys of its slices, sorted (almost always one: a vector, not a set,
    /// whose node would cost ~0.5 KiB per service).
    by_service: BTreeMap<ServiceKey, Vec<ServiceKey>>,
    pub node: Option<Node>,
}

/// What an upsert did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upsert {
    /// Stored (replacing any previous version).
    Stored,
    /// Ignored on purpose (headless, ExternalName, another proxy's); any previous version removed.
    Ignored,
}

impl Cluster {
    pub fn new() -> Cluster {
        Cluster::default()
    }

    /// Build from lists of objects. Invalid objects are skipped; their errors (and the
    /// warnings of tolerated problems) are returned, along with an error for every slice
    /// that names a missing service.
    pub fn from_objects(
        services: &[core::Service],
        slices: &[discovery::EndpointSlice],
        node: Option<&core::Node>,
    ) -> (Cluster, Vec<ObjectError>) {
        let mut c = Cluster::new();
        let mut errors = Vec::new();
        for s in services {
            if let Err(e) = c.upsert_service(s, &mut errors) {
                errors.push(e);
            }
        }
        for s in slices {
            if let Err(e) = c.upsert_slice(s, &mut errors) {
                errors.push(e);
            }
        }
        if let Some(n) = node {
            if let Err(e) = c.set_node(n, &mut errors) {
                errors.push(e);
            }
        }
        errors.extend(c.orphan_slice_errors());
        (c, errors)
    }

    /// Add or replace a service. On error, any previous version stays removed: a service
    /// that became invalid is not proxied (its old rules would be wrong).
    pub fn upsert_service(
        &mut self,
        svc: &core::Service,
        warnings: &mut Vec<ObjectError>,
    ) -> Result<Upsert, ObjectError> {
        let key = crate::ns_key(&svc.metadata);
        self.services.remove(&key);
        match service_from_k8s(svc, warnings)? {
            Some(s) => {
                self.services.insert(s.key.clone(), s);
                Ok(Upsert::Stored)
            }
            None => Ok(Upsert::Ignored),
        }
    }

    pub fn remove_service(&mut self, key: &ServiceKey) -> Option<Service> {
        self.services.remove(key)
    }

    /// Add or replace an endpoint slice (same error discipline as services).
    pub fn upsert_slice(
        &mut self,
        slice: &discovery::EndpointSlice,
        warnings: &mut Vec<ObjectError>,
    ) -> Result<Upsert, ObjectError> {
        let key = crate::ns_key(&slice.metadata);
        self.remove_slice(&key);
        match slice_from_k8s(slice, warnings)? {
            Some(s) => {
                self.insert_slice(s);
                Ok(Upsert::Stored)
            }
            None => Ok(Upsert::Ignored),
        }
    }

    /// Add or replace a slice of the internal model (tests and benchmarks build these
    /// directly).
    pub fn insert_slice(&mut self, s: EndpointSlice) {
        self.remove_slice(&s.key);
        let keys = self.by_service.entry(s.service.clone()).or_default();
        if let Err(at) = keys.binary_search(&s.key) {
            keys.reserve_exact(1);
            keys.insert(at, s.key.clone());
        }
        self.slices.insert(s.key.clone(), s);
    }

    pub fn remove_slice(&mut self, key: &ServiceKey) -> Option<EndpointSlice> {
        let s = self.slices.remove(key)?;
        if let Some(keys) = self.by_service.get_mut(&s.service) {
            if let Ok(at) = keys.binary_search(key) {
                keys.remove(at);
            }
            if keys.is_empty() {
                self.by_service.remove(&s.service);
            }
        }
        Some(s)
    }

    /// Every slice, by its own key.
    pub fn slices(&self) -> &BTreeMap<ServiceKey, EndpointSlice> {
        &self.slices
    }

    pub fn slice(&self, key: &ServiceKey) -> Option<&EndpointSlice> {
        self.slices.get(key)
    }

    /// The slices naming `service` (whether or not the service exists), in key order.
    pub fn slices_of<'a>(
        &'a self,
        service: &ServiceKey,
    ) -> impl Iterator<Item = &'a EndpointSlice> + 'a {
        self.by_service
            .get(service)
            .into_iter()
            .flatten()
            .filter_map(|k| self.slices.get(k))
    }

    pub fn set_node(
        &mut self,
        node: &core::Node,
        warnings: &mut Vec<ObjectError>,
    ) -> Result<(), ObjectError> {
        self.node = Some(node_from_k8s(node, warnings)?);
        Ok(())
    }

    /// One error per slice whose service is not (or not validly) known. Such slices are
    /// skipped by [`Cluster::endpoint_index`]; they are used as soon as the service appears.
    pub fn orphan_slice_errors(&self) -> Vec<ObjectError> {
        self.slices
            .values()
            .filter(|s| !self.services.contains_key(&s.service))
            .map(|s| ObjectError::MissingService {
                object: ObjectRef::new(
                    Kind::EndpointSlice,
                    s.key.namespace.clone(),
                    s.key.name.clone(),
                ),
                service: s.service.to_string(),
            })
            .collect()
    }

    /// Slices grouped by service, built once per compilation (linear in the slices).
    pub fn endpoint_index(&self) -> BTreeMap<&ServiceKey, Vec<&EndpointSlice>> {
        let mut idx: BTreeMap<&ServiceKey, Vec<&EndpointSlice>> = BTreeMap::new();
        for s in self.slices.values() {
            if self.services.contains_key(&s.service) {
                idx.entry(&s.service).or_default().push(s);
            }
        }
        idx
    }
}

/// The endpoints of one service port in one family, from its slices: the slice port with
/// the same name and protocol gives the target port. Sorted, one per address and port.
///
/// The same address may be listed more than once (an endpoint the EndpointSlice controller
/// is moving between slices, a pod address reused while the old pod is still
/// terminating). As kube-proxy 1.36+ does, a copy that is not terminating is preferred to
/// a terminating one. Where kube-proxy leaves the choice to Go's map order (two copies
/// both terminating or both not), the copy on `node_name` is preferred, as kube-proxy did
/// before 1.36, then the first slice in name order (decision 0016).
pub fn resolve_endpoints(
    slices: &[&EndpointSlice],
    port: &ServicePort,
    family: IpFamily,
    node_name: &str,
) -> Vec<ResolvedEndpoint> {
    // Lower is preferred: (terminating, not on this node).
    let rank = |terminating: bool, node: Option<&str>| {
        let local = !node_name.is_empty() && node == Some(node_name);
        (terminating, !local)
    };
    let mut out: BTreeMap<(std::net::IpAddr, u16), ResolvedEndpoint> = BTreeMap::new();
    for s in slices.iter().filter(|s| s.family == family) {
        let Some(sp) = s
            .ports
            .iter()
            .find(|p| p.name == port.name && p.protocol == port.protocol)
        else {
            continue;
        };
        for ep in &s.endpoints {
            let key = (ep.addr, sp.port);
            if let Some(have) = out.get(&key) {
                let new = rank(ep.terminating, ep.node_name.as_deref());
                if new >= rank(have.terminating, have.node_name.as_deref()) {
                    continue;
                }
            }
            out.insert(
                key,
                ResolvedEndpoint {
                    addr: ep.addr,
                    port: sp.port,
                    ready: ep.ready,
                    serving: ep.serving,
                    terminating: ep.terminating,
                    node_name: ep.node_name.as_deref().map(str::to_string),
                    zone_hints: ep.zone_hints().clone(),
                    node_hints: ep.node_hints().clone(),
                },
            );
        }
    }
    out.into_values().collect()
}

/// Endpoint selection for one service port, as kube-proxy categorises endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Categorized {
    /// For cluster-wide traffic: ready endpoints (filtered by topology hints when usable);
    /// when none is ready, the serving-and-terminating ones.
    pub cluster: Vec<ResolvedEndpoint>,
    /// Endpoints on this node: ready ones, else serving-and-terminating local ones.
    pub local: Vec<ResolvedEndpoint>,
    /// Whether any endpoint at all is usable (ready, or serving and terminating).
    pub any_usable: bool,
}

/// Categorise endpoints for `node_name` in `zone`.
///
/// Topology: when every ready endpoint carries node hints and one names this node, only
/// those endpoints are used (PreferSameNode); otherwise, when the node has a zone, every
/// ready endpoint carries zone hints and one names this zone, only those are used
/// (PreferSameZone / PreferClose / topology-mode Auto). Otherwise all ready endpoints.
pub fn categorize(eps: &[ResolvedEndpoint], node_name: &str, zone: Option<&str>) -> Categorized {
    let ready: Vec<&ResolvedEndpoint> = eps.iter().filter(|e| e.ready).collect();
    let serving_terminating: Vec<&ResolvedEndpoint> = eps
        .iter()
        .filter(|e| !e.ready && e.serving && e.terminating)
        .collect();
    let any_usable = !ready.is_empty() || !serving_terminating.is_empty();

    let topo: Vec<&ResolvedEndpoint> = {
        let node_ok = !ready.is_empty()
            && ready.iter().all(|e| !e.node_hints.is_empty())
            && ready.iter().any(|e| e.node_hints.contains(node_name));
        let zone_ok = zone.is_some_and(|z| {
            !z.is_empty()
                && !ready.is_empty()
                && ready.iter().all(|e| !e.zone_hints.is_empty())
                && ready.iter().any(|e| e.zone_hints.contains(z))
        });
        if node_ok {
            ready
                .iter()
                .copied()
                .filter(|e| e.node_hints.contains(node_name))
                .collect()
        } else if zone_ok {
            let z = zone.unwrap_or_default();
            ready
                .iter()
                .copied()
                .filter(|e| e.zone_hints.contains(z))
                .collect()
        } else {
            ready.clone()
        }
    };
    let cluster: Vec<ResolvedEndpoint> = if topo.is_empty() {
        serving_terminating.iter().map(|e| (*e).clone()).collect()
    } else {
        topo.into_iter().cloned().collect()
    };
    let is_local =
        |e: &&&ResolvedEndpoint| e.node_name.as_deref() == Some(node_name) && !node_name.is_empty();
    let local_ready: Vec<ResolvedEndpoint> = ready
        .iter()
        .filter(is_local)
        .map(|e| (*e).clone())
        .collect();
    let local = if local_ready.is_empty() {
        serving_terminating
            .iter()
            .filter(is_local)
            .map(|e| (*e).clone())
            .collect()
    } else {
        local_ready
    };
    Categorized {
        cluster,
        local,
        any_usable,
    }
}
