//! The engine's inputs: the sources' events (the model updated, the change recorded
//! for the next sync; work proportional to the object), the watcher's notifications,
//! and the compile ahead of the first sync while the initial lists arrive.

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_model::ns_key;

use crate::engine::Engine;
use crate::kernel::{Clock, ConntrackKernel, NftKernel};
use crate::{Event, NodeHealth};

impl<N: NftKernel, C: ConntrackKernel + 'static, K: Clock> Engine<N, C, K> {
    /// Notifications from nftables (the loop's own watcher thread): the transactions
    /// that touched our tables, and whether notifications were lost.
    pub fn nftables(&mut self, p: crate::watch::Poll) {
        self.foreign_change(&p.touches, p.overflow);
    }

    /// Take one input. Changes that leave the model as it was are dropped. Work
    /// proportional to the object, never to the cluster.
    pub fn handle(&mut self, ev: Event) {
        match ev {
            Event::ServiceApplied(svc) => self.service_applied(svc),
            Event::ServiceDeleted(svc) => {
                let key = ns_key(&svc.metadata);
                self.model_errors.remove(&format!("service {key}"));
                if self.cluster.remove_service(&key).is_some() {
                    self.skipped_service_changed(&key, true);
                    self.touched(&key);
                    self.queue();
                }
            }
            Event::SliceApplied(slice) => self.slice_applied(slice),
            Event::SliceDeleted(slice) => {
                let key = ns_key(&slice.metadata);
                self.model_errors.remove(&format!("endpointslice {key}"));
                if let Some(old) = self.cluster.remove_slice(&key) {
                    self.endpoints -= old.endpoints.len();
                    self.touched(&old.service);
                    self.queue();
                }
            }
            Event::NodeApplied(node) => self.node_applied(&node),
            Event::ServicesListed => self.schedule.services_listed(),
            Event::SlicesListed => self.schedule.slices_listed(),
            Event::Resync => self.request_repair(),
            Event::ServiceCidrs(cidrs) => {
                if self.cfg.ruleset.service_cidrs != cidrs {
                    self.cfg.ruleset.service_cidrs = cidrs;
                    self.queue();
                }
            }
            Event::HostAddresses(addrs) => {
                if self.cfg.ruleset.local_addresses != addrs {
                    let text: Vec<String> = addrs.iter().map(ToString::to_string).collect();
                    tracing::info!(addresses = %text.join(","), "host addresses changed");
                    self.cfg.ruleset.local_addresses = addrs;
                    self.queue();
                }
            }
            Event::SourceStalled { source, since } => self.status.update(|s| {
                s.stalled_sources.insert(source, since);
            }),
            Event::SourceRecovered { source } => self.status.update(|s| {
                s.stalled_sources.remove(&source);
            }),
            Event::Shutdown => {}
        }
    }

    fn service_applied(&mut self, svc: Service) {
        let key = ns_key(&svc.metadata);
        let before = self.cluster.services.get(&key).cloned();
        let mut warnings = Vec::new();
        let r = self.cluster.upsert_service(&svc, &mut warnings);
        drop(svc);
        self.note_errors(
            format!("service {key}"),
            warnings.iter().map(ToString::to_string).collect(),
            r.err().map(|e| e.to_string()),
        );
        if self.cluster.services.get(&key) != before.as_ref() {
            self.skipped_service_changed(&key, false);
            self.touched(&key);
            self.queue();
        }
    }

    fn slice_applied(&mut self, slice: EndpointSlice) {
        let key = ns_key(&slice.metadata);
        let before = self.cluster.slice(&key).cloned();
        let mut warnings = Vec::new();
        let r = self.cluster.upsert_slice(&slice, &mut warnings);
        let trigger = kube_model::last_change_trigger_time(&slice.metadata);
        drop(slice);
        self.note_errors(
            format!("endpointslice {key}"),
            warnings.iter().map(ToString::to_string).collect(),
            r.err().map(|e| e.to_string()),
        );
        let after = self.cluster.slice(&key);
        if after != before.as_ref() {
            // kube-proxy's network programming latency starts at the change
            // behind this update (not for deletions)
            if let (Some(t), Some(s)) = (trigger, after) {
                if t > self.started_wall {
                    self.trigger_times.push((s.family, t));
                }
            }
            let (n_after, svc_after) =
                after.map_or((0, None), |s| (s.endpoints.len(), Some(s.service.clone())));
            self.endpoints += n_after;
            if let Some(b) = &before {
                self.endpoints -= b.endpoints.len();
                self.touched(&b.service);
            }
            if let Some(k) = svc_after {
                self.touched(&k);
            }
            self.queue();
        }
    }

    fn node_applied(&mut self, node: &Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let ours = &self.cfg.ruleset.node_name;
        if !ours.is_empty() && &name != ours {
            tracing::debug!(node = %name, "ignoring another node");
            return;
        }
        let health = NodeHealth {
            name: name.clone(),
            deleting: node.metadata.deletion_timestamp.is_some(),
            to_be_deleted_taint: node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == "ToBeDeletedByClusterAutoscaler")),
        };
        self.status.update(|s| s.node = Some(health));
        let before = self.cluster.node.clone();
        let mut warnings = Vec::new();
        let r = self.cluster.set_node(node, &mut warnings);
        self.note_errors(
            format!("node {name}"),
            warnings.iter().map(ToString::to_string).collect(),
            r.err().map(|e| e.to_string()),
        );
        let primary = self
            .cluster
            .node
            .as_ref()
            .map(|n| n.primary_ips.clone())
            .unwrap_or_default();
        self.status.update(|s| s.node_primary_ips = primary);
        if self.cluster.node != before {
            self.changes.node = true;
            self.queue();
        }
    }

    /// Before the first sync, while the initial lists still arrive: compile the
    /// services that arrived, so that the first sync only finishes the build (called
    /// by the loop when no event is waiting; the compile then overlaps the sources'
    /// reading and decoding). Returns whether it compiled anything.
    pub fn build_ahead(&mut self) -> bool {
        if self.compiler.is_some() || self.listed() {
            return false;
        }
        crate::compile::build_ahead(
            &mut self.building,
            &self.cluster,
            &self.cfg.ruleset,
            &self.skips.excluded(),
            &mut self.changes,
        )
    }
}
