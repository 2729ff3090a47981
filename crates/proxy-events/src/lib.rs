//! kube-nlproxy's events from the sources of desired state (the Kubernetes API
//! watchers, the manifests reader, the host's addresses) to the sync engine, and the
//! bounded channel they travel on. Plain data: the sources send them without knowing
//! the engine, the engine takes them without knowing the sources. (What the engine's
//! own threads tell it, nftables notifications and conntrack reports, stays inside the
//! engine.)

use std::time::Instant;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The k8s-openapi version the events carry.
pub use k8s_openapi;

/// An input of the engine from outside it: the sources' objects and lists, the host's
/// addresses, the service CIDRs, a resync, shutdown. (The objects are not boxed: this is the agreed API, and an
/// event is moved once through a channel.)
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum Event {
    ServiceApplied(Service),
    ServiceDeleted(Service),
    SliceApplied(EndpointSlice),
    SliceDeleted(EndpointSlice),
    NodeApplied(Node),
    /// The services source's initial list (or a relist) is complete.
    ServicesListed,
    /// The endpoint slices source's initial list (or a relist) is complete.
    SlicesListed,
    /// Ask for a full resync now (bypasses minSyncPeriod).
    Resync,
    /// The cluster's service CIDRs (`spec.cidrs` of every ServiceCIDR object, parsed by
    /// the source: a malformed object is refused there) changed: the whole list as it
    /// is now.
    ServiceCidrs(Vec<kube_model::Cidr>),
    /// The host's interface addresses changed (rtnetlink): the whole list as it is now
    /// (they select the NodePort addresses among `nodePortAddresses`).
    HostAddresses(Vec<std::net::IpAddr>),
    /// A source (e.g. `"service"`) has made no progress since `since`: what it last
    /// delivered may be stale. Kept in the status (`stalled_sources`) for information;
    /// it is no queued change and no health answer depends on it (upstream's rule).
    SourceStalled {
        source: String,
        since: Instant,
    },
    /// The source made progress again.
    SourceRecovered {
        source: String,
    },
    Shutdown,
}

/// The channel the sources send events on (bounded: a source waits when the engine is
/// behind), and the engine's end.
pub type EventSender = flume::Sender<Event>;
pub type EventReceiver = flume::Receiver<Event>;

/// A bounded event channel of `cap` events (sources on async runtimes use
/// `send_async`: it waits for room without polling).
pub fn channel(cap: usize) -> (EventSender, EventReceiver) {
    flume::bounded(cap)
}
