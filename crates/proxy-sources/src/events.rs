//! The sources' end of the engine's event queue ([`EventSender`]): what must happen to
//! every event on its way to the engine happens as it is sent, with no relay thread in
//! between (one channel send and one wake-up per event).
//!
//! - Service and EndpointSlice changes are counted for the `*_changes_total` and
//!   `*_changes_pending` metrics before they are queued (so a change is counted before
//!   the engine can apply it, and the pending count never goes below what is queued).
//! - Node events carry the `bindAddress` override (see [`crate::node_ip`]).
//!
//! Also the one way each source tells of a deletion ([`service_deleted`],
//! [`slice_deleted`], [`node_deleted`]).

use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use proxy_events::Event;
use proxy_status::SourceObserver;

/// Sends events to the engine; cheap to clone, one per source.
#[derive(Clone)]
pub struct EventSender {
    tx: proxy_events::EventSender,
    metrics: Option<Arc<dyn SourceObserver>>,
    node_ip: Option<IpAddr>,
}

impl EventSender {
    /// Into `tx`, applying the `node_ip` override to Node events; nothing counted.
    pub fn new(tx: proxy_events::EventSender, node_ip: Option<IpAddr>) -> EventSender {
        EventSender {
            tx,
            metrics: None,
            node_ip,
        }
    }

    /// Also count Service and EndpointSlice changes in `metrics`.
    pub fn counting(mut self, metrics: Arc<dyn SourceObserver>) -> EventSender {
        self.metrics = Some(metrics);
        self
    }

    /// Count and adjust `ev`: done once per event, before its first send attempt.
    fn prepare(&self, ev: Event) -> Event {
        if let Some(m) = &self.metrics {
            match &ev {
                Event::ServiceApplied(_) | Event::ServiceDeleted(_) => m.service_change(),
                Event::SliceApplied(_) | Event::SliceDeleted(_) => m.endpoint_change(),
                _ => {}
            }
        }
        match (ev, self.node_ip) {
            (Event::NodeApplied(mut n), Some(ip)) => {
                crate::node_ip::override_primary(&mut n, ip);
                Event::NodeApplied(n)
            }
            (ev, _) => ev,
        }
    }

    /// Send, waiting while the queue is full. False when the engine is gone.
    pub fn send(&self, ev: Event) -> bool {
        self.tx.send(self.prepare(ev)).is_ok()
    }

    /// Send without blocking the async runtime: waits (without polling) while the
    /// queue is full. False when the engine is gone.
    pub async fn send_async(&self, ev: Event) -> bool {
        self.tx.send_async(self.prepare(ev)).await.is_ok()
    }
}

fn stub_meta(namespace: Option<&str>, name: &str) -> ObjectMeta {
    ObjectMeta {
        namespace: namespace.map(str::to_string),
        name: Some(name.to_string()),
        ..ObjectMeta::default()
    }
}

/// A Service was deleted: the engine needs only its namespace and name.
pub fn service_deleted(namespace: Option<&str>, name: &str) -> Event {
    Event::ServiceDeleted(Service {
        metadata: stub_meta(namespace, name),
        ..Default::default()
    })
}

/// An EndpointSlice was deleted: the engine needs only its namespace and name.
pub fn slice_deleted(namespace: Option<&str>, name: &str) -> Event {
    Event::SliceDeleted(EndpointSlice {
        metadata: stub_meta(namespace, name),
        ..Default::default()
    })
}

/// This node (its last version sent) was deleted. There is no NodeDeleted event: the
/// engine sees the node being deleted (a deletion timestamp), as during a drain.
pub fn node_deleted(mut node: Node) -> Event {
    node.metadata
        .deletion_timestamp
        .get_or_insert_with(|| Time(k8s_openapi::jiff::Timestamp::now()));
    Event::NodeApplied(node)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1 as core;
    use k8s_openapi::api::discovery::v1 as discovery;

    use ops_server::Metrics;

    use super::*;

    fn metric(m: &Metrics, name: &str) -> f64 {
        let text = m.encode(ops_server::expo::Format::Text);
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} not in {text}"))
    }

    #[test]
    fn changes_are_counted_once_before_they_are_queued_and_nodes_carry_the_override() {
        let metrics = Metrics::new(&["IPv4"], &ops_server::BuildInfo::ours());
        let (tx, rx) = proxy_events::channel(1);
        let ip: IpAddr = "198.18.0.9".parse().unwrap();
        let s = EventSender::new(tx, Some(ip)).counting(metrics.clone());
        assert!(s.send(Event::ServiceApplied(core::Service::default())));
        // Counted while the event waits in the queue (before the engine sees it).
        let svc = "kubeproxy_sync_proxy_rules_service_changes_pending";
        assert_eq!(metric(&metrics, svc), 1.0);
        // A full queue: the event waits, and is counted once.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let s2 = s.clone();
        let waiting = std::thread::spawn(move || {
            rt.block_on(s2.send_async(Event::SliceDeleted(discovery::EndpointSlice::default())))
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(matches!(rx.recv(), Ok(Event::ServiceApplied(_))));
        assert!(waiting.join().unwrap());
        assert!(matches!(rx.recv(), Ok(Event::SliceDeleted(_))));
        let ep = "kubeproxy_sync_proxy_rules_endpoint_changes_total";
        assert_eq!(metric(&metrics, ep), 1.0);
        // Other events are not counted; a Node carries the override.
        assert!(s.send(Event::NodeApplied(core::Node::default())));
        let Ok(Event::NodeApplied(n)) = rx.recv() else {
            panic!("not a node event")
        };
        let addrs = n.status.and_then(|s| s.addresses).unwrap_or_default();
        assert_eq!(addrs[0].address, "198.18.0.9");
        assert_eq!(metric(&metrics, svc), 1.0);
        assert_eq!(metric(&metrics, ep), 1.0);
        // The engine gone: false.
        drop(rx);
        assert!(!s.send(Event::ServicesListed));
    }
}
