//! The same objects in both encodings: every Service, EndpointSlice, Node and
//! ServiceCIDR of the repository's manifests (the ruleset golden inputs, docs/examples)
//! and of a generated cluster is decoded from its JSON by the proxy's JSON decoder
//! (`kube_model::lean`), and encoded to protobuf by `k8s-pb` (upstream's generated types,
//! no code of ours) with fields the proxy does not read added, then decoded by
//! `kube-proto`. Both must give the same object (protobuf has no empty vs absent list: an
//! empty list or map compares as absent, as the API server's JSON omits it). Lists are
//! then read in pieces of every size, and watch streams with every event type.

use integration::proto;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::api::networking::v1 as networking;
use k8s_pb::api::core::v1 as pcore;
use k8s_pb::api::discovery::v1 as pdisc;
use k8s_pb::api::networking::v1 as pnet;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pmeta;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use kube_model::{lean, manifest};
use kube_proto::{envelope, FromProto, ListItem, ListReader, WatchEvent, WatchReader};
use prost::Message;
use serde_json::Value;

// ------------------------------------------------------------------ k8s-openapi -> k8s-pb

// The API double's encoders (integration::proto, k8s-pb), with fields the proxy does not
// read added, and the resourceVersion set.

fn noisy(m: &mut pmeta::ObjectMeta, rv: &str) {
    m.resource_version = Some(rv.into());
    m.uid = Some("5f0c6b7e-0000-4000-8000-000000000001".into());
    m.generation = Some(3);
    m.creation_timestamp = Some(pmeta::Time {
        seconds: Some(1_700_000_000),
        nanos: Some(0),
    });
    m.annotations.insert(
        "kubectl.kubernetes.io/last-applied-configuration".into(),
        "{\"big\":true}".into(),
    );
    m.finalizers.push("example.com/keep".into());
    m.managed_fields.push(pmeta::ManagedFieldsEntry {
        manager: Some("kubectl".into()),
        operation: Some("Apply".into()),
        api_version: Some("v1".into()),
        fields_type: Some("FieldsV1".into()),
        ..Default::default()
    });
}

fn pb_service(o: &core::Service, rv: &str) -> pcore::Service {
    let mut p = proto::service(o);
    noisy(p.metadata.get_or_insert_with(Default::default), rv);
    if let Some(s) = p.spec.as_mut() {
        s.selector.insert("app".into(), "x".into());
        s.load_balancer_ip = Some("198.19.255.1".into());
        s.publish_not_ready_addresses = Some(false);
        for port in &mut s.ports {
            port.app_protocol = Some("http".into());
            port.target_port = Some(IntOrString {
                r#type: Some(0),
                int_val: Some(8080),
                str_val: None,
            });
        }
    }
    if let Some(st) = p.status.as_mut() {
        st.conditions.push(pmeta::Condition {
            r#type: Some("Ready".into()),
            status: Some("True".into()),
            ..Default::default()
        });
        for i in st
            .load_balancer
            .iter_mut()
            .flat_map(|lb| lb.ingress.iter_mut())
        {
            i.hostname = Some("lb.example.com".into());
        }
    }
    p
}

fn pb_slice(o: &discovery::EndpointSlice, rv: &str) -> pdisc::EndpointSlice {
    let mut p = proto::slice(o);
    noisy(p.metadata.get_or_insert_with(Default::default), rv);
    for e in &mut p.endpoints {
        e.hostname = Some("pod-0".into());
        e.target_ref = Some(pcore::ObjectReference {
            kind: Some("Pod".into()),
            name: Some("pod-0".into()),
            ..Default::default()
        });
        e.deprecated_topology.insert("a".into(), "b".into());
    }
    for port in &mut p.ports {
        port.app_protocol = Some("http".into());
    }
    p
}

fn pb_node(o: &core::Node, rv: &str) -> pcore::Node {
    let mut p = proto::node(o);
    noisy(p.metadata.get_or_insert_with(Default::default), rv);
    if let Some(s) = p.spec.as_mut() {
        s.provider_id = Some("kind://node".into());
    }
    if let Some(st) = p.status.as_mut() {
        st.phase = Some("Running".into());
        st.volumes_in_use.push("kubernetes.io/csi/x".into());
    }
    p
}

fn pb_cidr(o: &networking::ServiceCIDR, rv: &str) -> pnet::ServiceCIDR {
    let mut p = proto::service_cidr(o);
    noisy(p.metadata.get_or_insert_with(Default::default), rv);
    p.status = Some(pnet::ServiceCIDRStatus { conditions: vec![] });
    p
}

fn enveloped(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    proto::envelope(api_version, kind, &raw)
}

// ------------------------------------------------------------------ comparison

/// An object as JSON with nulls, empty lists and empty maps removed.
fn pruned<T: serde::Serialize>(o: &T) -> Value {
    fn prune(v: Value) -> Option<Value> {
        match v {
            Value::Null => None,
            Value::Array(a) if a.is_empty() => None,
            Value::Object(m) => {
                let m: serde_json::Map<String, Value> = m
                    .into_iter()
                    .filter_map(|(k, v)| prune(v).map(|v| (k, v)))
                    .collect();
                (!m.is_empty()).then_some(Value::Object(m))
            }
            Value::Array(a) => Some(Value::Array(a.into_iter().filter_map(prune).collect())),
            v => Some(v),
        }
    }
    prune(serde_json::to_value(o).expect("serialize")).unwrap_or(Value::Null)
}

/// What the proxy reads of a Node (fully decoded from JSON).
fn node_read(n: &core::Node) -> core::Node {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    core::Node {
        metadata: ObjectMeta {
            name: n.metadata.name.clone(),
            namespace: n.metadata.namespace.clone(),
            labels: n.metadata.labels.clone(),
            annotations: n.metadata.annotations.clone(),
            deletion_timestamp: n.metadata.deletion_timestamp.clone(),
            ..ObjectMeta::default()
        },
        spec: n.spec.as_ref().map(|s| core::NodeSpec {
            pod_cidr: s.pod_cidr.clone(),
            pod_cidrs: s.pod_cidrs.clone(),
            taints: s.taints.as_ref().map(|t| {
                t.iter()
                    .map(|t| core::Taint {
                        time_added: None,
                        ..t.clone()
                    })
                    .collect()
            }),
            ..core::NodeSpec::default()
        }),
        status: n.status.as_ref().map(|s| core::NodeStatus {
            addresses: s.addresses.clone(),
            ..core::NodeStatus::default()
        }),
    }
}

fn with_noise_annotation<T: serde::Serialize>(o: &T) -> Value {
    // Nodes and ServiceCIDRs keep every annotation, the added one included.
    let mut v = pruned(o);
    if let Some(m) = v.pointer_mut("/metadata").and_then(Value::as_object_mut) {
        let a = m
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        a["kubectl.kubernetes.io/last-applied-configuration"] = Value::from("{\"big\":true}");
    }
    v
}

fn check<K: FromProto + serde::Serialize>(name: &str, want: Value, pb: Vec<u8>, rv: &str) {
    let (got, got_rv) = envelope::object::<K>(&pb).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(pruned(&got), want, "{name}");
    assert_eq!(got_rv.as_deref(), Some(rv), "{name}: resourceVersion");
}

/// Compare every object of `text`; how many were compared.
fn check_text(name: &str, text: &str) -> usize {
    let docs = manifest::documents(text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut n = 0;
    for e in docs.entries().into_iter().flatten() {
        let rv = format!("{}", 1000 + n);
        let what = format!("{name}: {} {}", e.kind, e.name);
        match e.kind.as_str() {
            "Service" => {
                let Ok(want) = lean::from_str::<core::Service>(e.raw) else {
                    continue;
                };
                let full: core::Service = serde_json::from_str(e.raw).expect("full decode");
                let pb = enveloped("v1", "Service", pb_service(&full, &rv).encode_to_vec());
                check::<core::Service>(&what, pruned(&want), pb, &rv);
            }
            "EndpointSlice" => {
                let Ok(want) = lean::from_str::<discovery::EndpointSlice>(e.raw) else {
                    continue;
                };
                let full: discovery::EndpointSlice =
                    serde_json::from_str(e.raw).expect("full decode");
                let pb = enveloped(
                    "discovery.k8s.io/v1",
                    "EndpointSlice",
                    pb_slice(&full, &rv).encode_to_vec(),
                );
                check::<discovery::EndpointSlice>(&what, pruned(&want), pb, &rv);
            }
            "Node" => {
                let Ok(full) = serde_json::from_str::<core::Node>(e.raw) else {
                    continue;
                };
                let pb = enveloped("v1", "Node", pb_node(&full, &rv).encode_to_vec());
                check::<core::Node>(&what, with_noise_annotation(&node_read(&full)), pb, &rv);
            }
            "ServiceCIDR" => {
                let Ok(full) = serde_json::from_str::<networking::ServiceCIDR>(e.raw) else {
                    continue;
                };
                let want = networking::ServiceCIDR {
                    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        name: full.metadata.name.clone(),
                        labels: full.metadata.labels.clone(),
                        annotations: full.metadata.annotations.clone(),
                        ..Default::default()
                    },
                    spec: full.spec.clone(),
                    status: None,
                };
                let pb = enveloped(
                    "networking.k8s.io/v1",
                    "ServiceCIDR",
                    pb_cidr(&full, &rv).encode_to_vec(),
                );
                check::<networking::ServiceCIDR>(&what, with_noise_annotation(&want), pb, &rv);
            }
            _ => continue,
        }
        n += 1;
    }
    n
}

#[test]
fn the_repository_manifests_decode_the_same_from_json_and_protobuf() {
    let mut n = 0;
    for (name, text) in integration::testdata::repo_manifests() {
        n += check_text(&name, &text);
    }
    assert!(n >= 100, "only {n} objects compared");
}

// ------------------------------------------------------------------ lists and watches

fn services(n: usize) -> Vec<core::Service> {
    let text = kube_model_scale(n);
    manifest::documents(&text)
        .expect("scale manifest")
        .entries()
        .into_iter()
        .flatten()
        .filter(|e| e.kind == "Service")
        .map(|e| serde_json::from_str(e.raw).expect("service"))
        .collect()
}

fn kube_model_scale(n: usize) -> String {
    // a small cluster of the repository's golden inputs, repeated with other names
    let path = integration::testdata::workspace_root().join("docs/examples/cluster.yaml");
    let text = std::fs::read_to_string(path).expect("docs/examples/cluster.yaml");
    let docs = manifest::documents(&text).expect("cluster.yaml");
    let one: Vec<Value> = docs
        .entries()
        .into_iter()
        .flatten()
        .filter(|e| e.kind == "Service")
        .map(|e| serde_json::from_str(e.raw).expect("json"))
        .collect();
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let mut v = one[i % one.len()].clone();
            v["metadata"]["name"] = Value::from(format!("svc-{i}"));
            v
        })
        .collect();
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

fn service_list(items: &[core::Service], rv: &str) -> Vec<u8> {
    let list = pcore::ServiceList {
        metadata: Some(pmeta::ListMeta {
            resource_version: Some(rv.into()),
            ..Default::default()
        }),
        items: items
            .iter()
            .enumerate()
            .map(|(i, s)| pb_service(s, &format!("{i}")))
            .collect(),
    };
    enveloped("v1", "ServiceList", list.encode_to_vec())
}

fn read_list(body: &[u8], piece: usize) -> (Option<String>, Vec<core::Service>) {
    let mut r = ListReader::<core::Service>::new();
    let (mut rv, mut out) = (None, Vec::new());
    for chunk in body.chunks(piece) {
        for item in r.feed(chunk).expect("a valid list") {
            match item {
                ListItem::Meta {
                    resource_version, ..
                } => rv = resource_version,
                ListItem::Object(o) => out.push(o.expect("item decodes").0),
            }
        }
    }
    r.finish().expect("the list ended whole");
    (rv, out)
}

#[test]
fn a_list_is_read_item_by_item_in_pieces_of_any_size() {
    let svcs = services(40);
    let body = service_list(&svcs, "4242");
    // the API double's list (items spliced as bytes) is k8s-pb's ServiceList, byte for byte
    let items: Vec<Vec<u8>> = svcs
        .iter()
        .enumerate()
        .map(|(i, s)| pb_service(s, &format!("{i}")).encode_to_vec())
        .collect();
    let spliced = proto::list(
        "v1",
        "ServiceList",
        "4242",
        None,
        items.iter().map(Vec::as_slice),
    );
    assert_eq!(spliced, body);
    let want: Vec<Value> = svcs
        .iter()
        .map(|s| {
            let text = serde_json::to_string(s).expect("json");
            pruned(&lean::from_str::<core::Service>(&text).expect("lean"))
        })
        .collect();
    for piece in [1, 2, 3, 7, 64, 1000, body.len()] {
        let (rv, got) = read_list(&body, piece);
        assert_eq!(rv.as_deref(), Some("4242"), "piece {piece}");
        let got: Vec<Value> = got.iter().map(pruned).collect();
        assert_eq!(got, want, "piece {piece}");
    }
}

#[test]
fn a_truncated_or_foreign_list_is_an_error_never_a_panic() {
    let body = service_list(&services(5), "7");
    for cut in [0, 3, 4, 10, body.len() / 2, body.len() - 1] {
        let mut r = ListReader::<core::Service>::new();
        let fed = r.feed(&body[..cut]);
        assert!(fed.is_ok(), "a prefix is not an error yet (cut {cut})");
        assert!(r.finish().is_err(), "cut {cut}: a prefix must not finish");
    }
    // an EndpointSliceList read as Services
    let slices = pdisc::EndpointSliceList::default().encode_to_vec();
    let foreign = enveloped("discovery.k8s.io/v1", "EndpointSliceList", slices);
    let e = ListReader::<core::Service>::new()
        .feed(&foreign)
        .unwrap_err();
    assert!(e.to_string().contains("ServiceList"), "{e}");
    // JSON sent where protobuf was asked
    assert!(ListReader::<core::Service>::new()
        .feed(b"{\"kind\":\"ServiceList\"}")
        .is_err());
    // random bytes after the magic: errors or waits, never panics
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..2000 {
        let mut b = b"k8s\0".to_vec();
        for _ in 0..64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.push(x as u8);
        }
        let mut r = ListReader::<core::Service>::new();
        let _ = r.feed(&b);
        let mut w = WatchReader::<core::Service>::new();
        let _ = w.feed(&b[4..]);
    }
}

fn frame(ty: &str, object: Vec<u8>) -> Vec<u8> {
    proto::watch_frame(ty, &object)
}

#[test]
fn a_watch_stream_yields_every_event_type_in_pieces_of_any_size() {
    let svcs = services(3);
    let mut stream = Vec::new();
    stream.extend(frame(
        "ADDED",
        enveloped("v1", "Service", pb_service(&svcs[0], "11").encode_to_vec()),
    ));
    stream.extend(frame(
        "MODIFIED",
        enveloped("v1", "Service", pb_service(&svcs[1], "12").encode_to_vec()),
    ));
    stream.extend(frame(
        "DELETED",
        enveloped("v1", "Service", pb_service(&svcs[2], "13").encode_to_vec()),
    ));
    let bookmark = pcore::Service {
        metadata: Some(pmeta::ObjectMeta {
            resource_version: Some("14".into()),
            annotations: [("k8s.io/initial-events-end".to_string(), "true".to_string())].into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    stream.extend(frame(
        "BOOKMARK",
        enveloped("v1", "Service", bookmark.encode_to_vec()),
    ));
    let status = pmeta::Status {
        status: Some("Failure".into()),
        message: Some("too old resource version: 1 (14)".into()),
        reason: Some("Expired".into()),
        code: Some(410),
        ..Default::default()
    };
    stream.extend(frame(
        "ERROR",
        enveloped("v1", "Status", status.encode_to_vec()),
    ));
    // a Pod where Services are watched: the event carries the error, the stream goes on
    stream.extend(frame("ADDED", enveloped("v1", "Pod", vec![])));
    for piece in [1, 5, 17, stream.len()] {
        let mut r = WatchReader::<core::Service>::new();
        let mut events = Vec::new();
        for c in stream.chunks(piece) {
            events.extend(r.feed(c).expect("a valid stream"));
        }
        assert_eq!(r.pending(), 0);
        let shown: Vec<String> = events
            .iter()
            .map(|e| match e {
                WatchEvent::Object { deleted, object } => match object {
                    Ok((o, rv)) => format!(
                        "{deleted} {} {}",
                        o.metadata.name.clone().unwrap_or_default(),
                        rv.clone().unwrap_or_default()
                    ),
                    Err(e) => format!("{deleted} error {e}"),
                },
                WatchEvent::Bookmark {
                    resource_version,
                    initial_events_end,
                } => {
                    format!("bookmark {resource_version:?} {initial_events_end}")
                }
                WatchEvent::Error {
                    code,
                    reason,
                    message,
                } => format!("error {code:?} {reason:?} {message:?}"),
            })
            .collect();
        let names: Vec<String> = svcs
            .iter()
            .map(|s| s.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(
            shown,
            vec![
                format!("false {} 11", names[0]),
                format!("false {} 12", names[1]),
                format!("true {} 13", names[2]),
                "bookmark Some(\"14\") true".to_string(),
                "error Some(410) Some(\"Expired\") Some(\"too old resource version: 1 (14)\")"
                    .to_string(),
                "false error expected Service, got apiVersion \"v1\" kind \"Pod\"".to_string(),
            ],
            "piece {piece}"
        );
    }
}

#[test]
fn a_frame_over_the_limit_fails_at_once() {
    let mut r = WatchReader::<core::Service>::new();
    let e = r.feed(&u32::MAX.to_be_bytes()).unwrap_err();
    assert!(matches!(e, kube_proto::Error::FrameTooLarge { .. }), "{e}");
}
