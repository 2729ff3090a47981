//! The double's state: the objects it serves ([`Res`], each [`Stored`] with its
//! serializations), their event history and the knobs ([`State`], [`Shared`] by the
//! handle and the connections), and the selectors that pick objects for a list or a
//! watch ([`selected`]). Held by `api_server`'s handle, read by `serve`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::proto;

/// The resources the double serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Res {
    Services,
    EndpointSlices,
    Nodes,
    ServiceCidrs,
}

impl Res {
    pub(crate) fn from_path(p: &str) -> Option<Res> {
        match p {
            "/api/v1/services" => Some(Res::Services),
            "/apis/discovery.k8s.io/v1/endpointslices" => Some(Res::EndpointSlices),
            "/api/v1/nodes" => Some(Res::Nodes),
            "/apis/networking.k8s.io/v1/servicecidrs" => Some(Res::ServiceCidrs),
            _ => None,
        }
    }
    pub(crate) fn of(obj: &Value) -> Res {
        match obj["kind"].as_str() {
            Some("Service") => Res::Services,
            Some("EndpointSlice") => Res::EndpointSlices,
            Some("Node") => Res::Nodes,
            Some("ServiceCIDR") => Res::ServiceCidrs,
            k => panic!("the double does not serve kind {k:?}"),
        }
    }
    /// The list's kind and the resource's apiVersion.
    pub(crate) fn list_kind(self) -> (&'static str, &'static str) {
        match self {
            Res::Services => ("ServiceList", "v1"),
            Res::EndpointSlices => ("EndpointSliceList", "discovery.k8s.io/v1"),
            Res::Nodes => ("NodeList", "v1"),
            Res::ServiceCidrs => ("ServiceCIDRList", "networking.k8s.io/v1"),
        }
    }
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Res::Services => "Service",
            Res::EndpointSlices => "EndpointSlice",
            Res::Nodes => "Node",
            Res::ServiceCidrs => "ServiceCIDR",
        }
    }
}

pub(crate) type ObjKey = (Res, String, String);

pub(crate) fn key_of(obj: &Value) -> ObjKey {
    (
        Res::of(obj),
        obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        obj["metadata"]["name"].as_str().unwrap_or("").to_string(),
    )
}

/// An object with its serializations, made once when it is stored (the API server's
/// watch cache also keeps each object's serialization per encoding, so serving a list
/// or an event is copying bytes).
#[derive(Debug)]
pub(crate) struct Stored {
    pub value: Value,
    /// Its JSON text.
    pub json: String,
    /// Its protobuf message (not enveloped); None for JSON that is no valid object of
    /// its kind (such an object cannot exist in protobuf).
    pub proto: Option<Vec<u8>>,
}

impl Stored {
    pub(crate) fn new(value: Value, proto: Option<Vec<u8>>) -> Arc<Stored> {
        let proto = proto.or_else(|| proto::message(&value).map(|(_, _, raw)| raw));
        Arc::new(Stored {
            json: value.to_string(),
            proto,
            value,
        })
    }
}

#[derive(Debug, Clone)]
pub(crate) struct WatchEvent {
    pub rv: u64,
    pub res: Res,
    pub kind: &'static str,
    pub object: Arc<Stored>,
}

#[derive(Default)]
pub(crate) struct State {
    pub rv: u64,
    pub objects: BTreeMap<ObjKey, Arc<Stored>>,
    pub events: Vec<WatchEvent>,
    /// Watches from a resourceVersion older than this get 410 Gone.
    pub compacted: u64,
    /// Outage: connections are accepted and closed at once.
    pub down: bool,
    /// Bumped to drop every open watch connection.
    pub epoch: u64,
    /// Request lines received, with the address of the client that sent each.
    pub requests: Vec<(IpAddr, String)>,
    /// Bodies of the POST requests received, with their paths.
    pub posts: Vec<(String, Value)>,
    pub bookmark_every: Option<Duration>,
    /// A dead peer: requests are read and never answered, open watches go silent.
    pub hang: bool,
    /// Watches answer their headers, then send nothing at all (no event, no bookmark,
    /// no end) while this is set; lists are answered.
    pub silent_watches: bool,
    /// When each event (by resourceVersion) was first written to a watch.
    pub sent: BTreeMap<u64, Instant>,
    /// Answer JSON whatever the client accepts (a server without protobuf).
    pub json_only: bool,
    /// Refuse streamed lists (`sendInitialEvents`), as a server without the WatchList
    /// feature does.
    pub no_watch_list: bool,
}

/// The state shared by the handle and the connections' threads.
pub(crate) type Shared = Arc<(Mutex<State>, Condvar)>;

/// Whether `obj` matches `labelSelector` (terms `k`, `!k`, `k=v`, `k!=v`) and
/// `fieldSelector` (`metadata.name=x`, `metadata.namespace=x`).
pub(crate) fn selected(obj: &Value, labels: &str, fields: &str) -> bool {
    let l = &obj["metadata"]["labels"];
    for term in labels.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let ok = if let Some(k) = term.strip_prefix('!') {
            l.get(k).is_none()
        } else if let Some((k, v)) = term.split_once("!=") {
            l.get(k).and_then(Value::as_str) != Some(v)
        } else if let Some((k, v)) = term.split_once('=') {
            l.get(k.trim_end_matches('=')).and_then(Value::as_str) == Some(v)
        } else {
            l.get(term).is_some()
        };
        if !ok {
            return false;
        }
    }
    for term in fields.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let Some((k, v)) = term.split_once('=') else {
            continue;
        };
        let (k, v) = (k.trim_end_matches('='), v);
        let actual = match k {
            "metadata.name" => obj["metadata"]["name"].as_str(),
            "metadata.namespace" => obj["metadata"]["namespace"].as_str(),
            _ => None,
        };
        if actual != Some(v) {
            return false;
        }
    }
    true
}
