//! The API-server double in protobuf, read by a client of its own: raw HTTP/1.1 over a
//! TCP stream, the chunking and the watch's 4-byte length framing undone by hand, the
//! messages decoded by `k8s-pb` with `prost` (no code of the proxy's decoder,
//! `kube-proto`). Lists equal their JSON, watches resume and see changes, 410 and
//! errors are Status messages, the json-only knob answers JSON, and the traffic counts
//! are what the client received.

mod protobuf_client;

use std::net::IpAddr;
use std::time::Duration;

use integration::{node, proto, scale, service, slice, ApiServer};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_pb::api::core::v1 as pcore;
use k8s_pb::api::discovery::v1 as pdisc;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pmeta;
use prost::Message;
use protobuf_client::*;
use serde_json::Value;

/// What client-go sends for `contentType: application/vnd.kubernetes.protobuf`.
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf, */*";
const JSON: &str = "application/json";

fn seeded() -> ApiServer {
    let s = ApiServer::start();
    s.apply(node("node-a", "198.18.0.10"));
    s.apply(service("demo", "web", "198.18.100.1", 80));
    for i in 0..5 {
        s.apply(scale::scale_service(i));
        s.apply(scale::scale_slice(i, 3));
    }
    s.apply(slice(
        "demo",
        "web",
        "web-1",
        &["198.18.64.11"],
        8080,
        "node-a",
    ));
    let mut foreign = slice(
        "demo",
        "web",
        "web-foreign",
        &["198.18.64.99"],
        8080,
        "node-a",
    );
    foreign["metadata"]["labels"]["service.kubernetes.io/service-proxy-name"] = "other".into();
    s.apply(foreign);
    s
}

/// Lists of services and slices (whole, by label selector, in pages) decode from
/// protobuf to the objects of the same list in JSON, in the same order, with the same
/// resourceVersion and continue token.
#[test]
fn a_list_in_protobuf_equals_the_list_in_json() {
    let server = seeded();
    let selector = "labelSelector=%21service.kubernetes.io%2Fservice-proxy-name";
    for path in [
        "/api/v1/services".to_string(),
        "/api/v1/services?limit=3".to_string(),
        "/api/v1/services?limit=3&continue=3".to_string(),
        format!("/apis/discovery.k8s.io/v1/endpointslices?{selector}"),
        "/apis/discovery.k8s.io/v1/endpointslices?fieldSelector=metadata.namespace%3Ddemo"
            .to_string(),
    ] {
        let j = get(&server, &path, Some(JSON));
        let p = get(&server, &path, Some(PROTOBUF));
        assert_eq!((j.code, p.code), (200, 200), "{path}");
        assert_eq!(j.content_type, "application/json", "{path}");
        assert_eq!(
            p.content_type, "application/vnd.kubernetes.protobuf",
            "{path}"
        );
        let j: Value = serde_json::from_slice(&j.body).expect("a JSON list");
        let u = unknown(&p.body);
        let items = j["items"].as_array().expect("items");
        assert!(!items.is_empty(), "{path}");
        let list_meta = |m: Option<pmeta::ListMeta>| {
            let m = m.unwrap_or_default();
            (
                m.resource_version.unwrap_or_default(),
                m.r#continue.unwrap_or_default(),
            )
        };
        let json_meta = (
            j["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            j["metadata"]["continue"].as_str().unwrap_or("").to_string(),
        );
        if path.starts_with("/api/v1/services") {
            assert_eq!(type_of(&u), ("v1".into(), "ServiceList".into()));
            let list = pcore::ServiceList::decode(raw(&u)).expect("a ServiceList");
            assert_eq!(list_meta(list.metadata), json_meta, "{path}");
            assert_eq!(list.items.len(), items.len(), "{path}");
            for (pb, js) in list.items.iter().zip(items) {
                let (ns, name, rv) = meta_of(&pb.metadata);
                let m = &js["metadata"];
                assert_eq!(
                    (ns.as_str(), name.as_str(), rv.as_str()),
                    (
                        m["namespace"].as_str().unwrap_or(""),
                        m["name"].as_str().unwrap_or(""),
                        m["resourceVersion"].as_str().unwrap_or("")
                    )
                );
                let spec = pb.spec.clone().unwrap_or_default();
                assert_eq!(spec.cluster_ip.as_deref(), js["spec"]["clusterIP"].as_str());
                assert_eq!(
                    spec.ports[0].port.map(i64::from),
                    js["spec"]["ports"][0]["port"].as_i64()
                );
                // every field: the JSON item through upstream's types
                let o: core::Service = serde_json::from_value(js.clone()).expect("a Service");
                assert_eq!(*pb, proto::service(&o), "{path}: {name}");
            }
        } else {
            assert_eq!(
                type_of(&u),
                ("discovery.k8s.io/v1".into(), "EndpointSliceList".into())
            );
            let list = pdisc::EndpointSliceList::decode(raw(&u)).expect("an EndpointSliceList");
            assert_eq!(list_meta(list.metadata), json_meta, "{path}");
            assert_eq!(list.items.len(), items.len(), "{path}");
            for (pb, js) in list.items.iter().zip(items) {
                let (ns, name, _) = meta_of(&pb.metadata);
                assert_eq!(Some(name.as_str()), js["metadata"]["name"].as_str());
                assert_eq!(Some(ns.as_str()), js["metadata"]["namespace"].as_str());
                let addrs: Vec<&str> = pb
                    .endpoints
                    .iter()
                    .map(|e| e.addresses[0].as_str())
                    .collect();
                let jaddrs: Vec<&str> = js["endpoints"]
                    .as_array()
                    .expect("endpoints")
                    .iter()
                    .map(|e| e["addresses"][0].as_str().unwrap_or(""))
                    .collect();
                assert_eq!(addrs, jaddrs);
                let o: discovery::EndpointSlice =
                    serde_json::from_value(js.clone()).expect("a slice");
                assert_eq!(*pb, proto::slice(&o), "{path}: {name}");
            }
        }
    }
}

/// A protobuf watch from a list's resourceVersion: an apply is a MODIFIED frame, a
/// delete a DELETED one, an object the selector leaves out never comes, and a bookmark
/// is an object with only a resourceVersion; `sent_at` knows the events' send times.
#[test]
fn a_watch_from_a_lists_resource_version_sees_changes_as_frames() {
    let server = seeded();
    server.set_bookmark_every(None);
    let p = get(&server, "/api/v1/services", Some(PROTOBUF));
    let list = pcore::ServiceList::decode(raw(&unknown(&p.body))).expect("a ServiceList");
    let rv = list
        .metadata
        .and_then(|m| m.resource_version)
        .expect("a resourceVersion");
    let mut w = Watch::open(
        &server,
        &format!("/api/v1/services?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&fieldSelector=metadata.namespace%3Ddemo"),
        Some(PROTOBUF),
    );
    assert_eq!(
        w.content_type,
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    server.apply(service("elsewhere", "skipped", "198.18.100.3", 80));
    let changed = server.apply(service("demo", "web", "198.18.100.2", 81));
    let (ty, u) = event(&w.frame(WAIT).expect("the MODIFIED frame"));
    assert_eq!(
        (ty.as_str(), type_of(&u)),
        ("MODIFIED", ("v1".into(), "Service".into()))
    );
    let svc = pcore::Service::decode(raw(&u)).expect("a Service");
    assert_eq!(
        meta_of(&svc.metadata),
        ("demo".into(), "web".into(), changed.to_string())
    );
    assert_eq!(
        svc.spec.and_then(|s| s.cluster_ip).as_deref(),
        Some("198.18.100.2")
    );
    assert!(server.sent_at(changed, WAIT).is_some());
    let gone = server.delete("Service", "demo", "web");
    let (ty, u) = event(&w.frame(WAIT).expect("the DELETED frame"));
    let svc = pcore::Service::decode(raw(&u)).expect("a Service");
    assert_eq!(
        (ty.as_str(), meta_of(&svc.metadata)),
        ("DELETED", ("demo".into(), "web".into(), gone.to_string()))
    );
    server.set_bookmark_every(Some(Duration::from_millis(100)));
    let (ty, u) = event(&w.frame(WAIT).expect("a BOOKMARK frame"));
    assert_eq!(
        (ty.as_str(), type_of(&u)),
        ("BOOKMARK", ("v1".into(), "Service".into()))
    );
    let bm = pcore::Service::decode(raw(&u)).expect("a Service");
    assert_eq!(
        bm,
        pcore::Service {
            metadata: Some(pmeta::ObjectMeta {
                resource_version: Some(gone.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        }
    );
    // dropped: the stream stops without its last chunk
    server.drop_connections();
    assert!(!w.until_closed(), "a dropped watch ended cleanly");
}

/// A watch from a compacted resourceVersion gets one ERROR frame with a 410 Expired
/// Status, then the stream's end, in protobuf as in JSON.
#[test]
fn a_compacted_resource_version_gets_an_expired_status_frame() {
    let server = seeded();
    server.compact();
    let path = "/api/v1/services?watch=true&resourceVersion=101";
    let mut w = Watch::open(&server, path, Some(PROTOBUF));
    let (ty, u) = event(&w.frame(WAIT).expect("the ERROR frame"));
    let st = status(&u);
    assert_eq!(
        (
            ty.as_str(),
            st.code,
            st.reason.as_deref(),
            st.status.as_deref()
        ),
        ("ERROR", Some(410), Some("Expired"), Some("Failure"))
    );
    assert!(st
        .message
        .unwrap_or_default()
        .contains("too old resource version: 101"));
    assert!(w.frame(Duration::from_millis(200)).is_none());
    assert!(w.until_closed(), "no last chunk");
    let mut w = Watch::open(&server, path, Some(JSON));
    let e = w.line(WAIT).expect("the ERROR event");
    assert_eq!(
        (e["type"].as_str(), e["object"]["code"].as_i64()),
        (Some("ERROR"), Some(410))
    );
}

/// Errors are Status messages in the encoding asked for: 404 for an unknown path, 500
/// for an object that has no protobuf (its JSON is no Service), 422 for initial events
/// without `resourceVersionMatch=NotOlderThan`.
#[test]
fn errors_are_status_messages_in_protobuf() {
    let server = seeded();
    let r = get(&server, "/api/v1/pods", Some(PROTOBUF));
    assert_eq!(
        (r.code, r.content_type.as_str()),
        (404, "application/vnd.kubernetes.protobuf")
    );
    let st = status(&unknown(&r.body));
    assert_eq!(
        (st.code, st.reason.as_deref()),
        (Some(404), Some("NotFound"))
    );
    let r = get(&server, "/api/v1/pods", None);
    assert_eq!((r.code, r.content_type.as_str()), (404, "application/json"));
    let r = get(
        &server,
        "/api/v1/nodes?watch=true&sendInitialEvents=true&allowWatchBookmarks=true",
        Some(PROTOBUF),
    );
    assert_eq!(r.code, 422);
    assert_eq!(status(&unknown(&r.body)).reason.as_deref(), Some("Invalid"));
    // an object with no protobuf encoding: the list fails, a watch ends with an ERROR
    let mut w = Watch::open(
        &server,
        "/api/v1/services?watch=true&resourceVersion=101",
        Some(PROTOBUF),
    );
    let mut bad = service("demo", "bad", "198.18.100.7", 80);
    bad["spec"]["ports"][0]["port"] = "eighty".into();
    server.apply(bad);
    let r = get(&server, "/api/v1/services", Some(PROTOBUF));
    let st = status(&unknown(&r.body));
    assert_eq!(
        (r.code, st.code, st.reason.as_deref()),
        (500, Some(500), Some("InternalError"))
    );
    assert!(st.message.unwrap_or_default().contains("demo/bad"));
    let st = loop {
        let (ty, u) = event(&w.frame(WAIT).expect("frames up to the ERROR"));
        if ty == "ERROR" {
            break status(&u);
        }
    };
    assert_eq!(st.code, Some(500));
    // JSON still serves it
    assert_eq!(get(&server, "/api/v1/services", Some(JSON)).code, 200);
}

/// `sendInitialEvents`: the current objects (selected) as ADDED frames, a bookmark
/// annotated `k8s.io/initial-events-end`, then the changes; in JSON the same events.
#[test]
fn initial_events_end_with_an_annotated_bookmark() {
    let server = seeded();
    server.set_bookmark_every(None);
    let path = "/apis/discovery.k8s.io/v1/endpointslices?watch=true&sendInitialEvents=true\
                &resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true\
                &labelSelector=%21service.kubernetes.io%2Fservice-proxy-name";
    let expected: Vec<String> = {
        let j: Value = serde_json::from_slice(
            &get(&server, "/apis/discovery.k8s.io/v1/endpointslices?labelSelector=%21service.kubernetes.io%2Fservice-proxy-name", None).body,
        )
        .expect("a list");
        j["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_string())
            .collect()
    };
    let rv = (server.apply(node("node-b", "198.18.0.11"))).to_string();
    let mut w = Watch::open(&server, path, Some(PROTOBUF));
    let mut names = Vec::new();
    let bookmark = loop {
        let (ty, u) = event(&w.frame(WAIT).expect("initial events"));
        let s = pdisc::EndpointSlice::decode(raw(&u)).expect("an EndpointSlice");
        match ty.as_str() {
            "ADDED" => names.push(meta_of(&s.metadata).1),
            "BOOKMARK" => break s,
            t => panic!("a {t} frame among the initial events"),
        }
    };
    assert_eq!(names, expected);
    let m = bookmark.metadata.unwrap_or_default();
    assert_eq!(m.resource_version.as_deref(), Some(rv.as_str()));
    assert_eq!(
        m.annotations
            .get("k8s.io/initial-events-end")
            .map(String::as_str),
        Some("true")
    );
    let added = server.apply(slice(
        "demo",
        "web",
        "web-2",
        &["198.18.64.12"],
        8080,
        "node-a",
    ));
    let (ty, u) = event(&w.frame(WAIT).expect("the change"));
    let s = pdisc::EndpointSlice::decode(raw(&u)).expect("an EndpointSlice");
    assert_eq!(
        (ty.as_str(), meta_of(&s.metadata).2),
        ("ADDED", added.to_string())
    );
    let mut w = Watch::open(&server, path, Some(JSON));
    let mut events = 0;
    let bm = loop {
        let e = w.line(WAIT).expect("initial events");
        if e["type"] == "BOOKMARK" {
            break e;
        }
        events += 1;
    };
    assert_eq!(events, expected.len() + 1);
    assert_eq!(
        bm["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
}

/// `set_json_only(true)`: a protobuf Accept gets JSON (list and watch), as from a
/// server without protobuf for the type; `false` negotiates again.
#[test]
fn json_only_answers_json_to_a_protobuf_accept() {
    let server = seeded();
    server.set_json_only(true);
    let r = get(&server, "/api/v1/services", Some(PROTOBUF));
    assert_eq!(r.content_type, "application/json");
    let j: Value = serde_json::from_slice(&r.body).expect("JSON");
    assert_eq!(j["kind"], "ServiceList");
    let mut w = Watch::open(
        &server,
        "/api/v1/services?watch=true&resourceVersion=101",
        Some(PROTOBUF),
    );
    assert_eq!(w.content_type, "application/json");
    let e = w.line(WAIT).expect("a JSON event");
    assert_eq!(e["type"], "ADDED");
    server.set_json_only(false);
    let r = get(&server, "/api/v1/services", Some(PROTOBUF));
    assert_eq!(r.content_type, "application/vnd.kubernetes.protobuf");
    assert_eq!(type_of(&unknown(&r.body)).1, "ServiceList");
}

/// Accept headers as clients send them: the first type the server serves wins,
/// `*/*` alone is JSON.
#[test]
fn the_accept_header_picks_the_encoding() {
    let server = seeded();
    for (accept, expected) in [
        (Some(PROTOBUF), "application/vnd.kubernetes.protobuf"),
        (
            Some("application/vnd.kubernetes.protobuf"),
            "application/vnd.kubernetes.protobuf",
        ),
        (
            Some("application/json, application/vnd.kubernetes.protobuf"),
            "application/json",
        ),
        (
            Some("application/json;q=0.5, application/vnd.kubernetes.protobuf"),
            "application/vnd.kubernetes.protobuf",
        ),
        (Some("*/*"), "application/json"),
        (None, "application/json"),
    ] {
        let r = get(&server, "/api/v1/nodes", accept);
        assert_eq!(r.content_type, expected, "Accept: {accept:?}");
    }
}

/// The traffic counts, per client address and content type: each response once, its
/// body's bytes and every byte on the wire exactly as the clients read them; the
/// request log names each request's client.
#[test]
fn traffic_counts_what_each_client_received() {
    let server = seeded();
    server.set_bookmark_every(Some(Duration::from_millis(100)));
    let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
    let l1 = get_from(&server, Some(a), "/api/v1/services", Some(PROTOBUF));
    let l2 = get_from(
        &server,
        Some(a),
        "/apis/discovery.k8s.io/v1/endpointslices",
        Some(PROTOBUF),
    );
    let l3 = get_from(&server, Some(b), "/api/v1/services", Some(JSON));
    let mut w = Watch::open_from(
        &server,
        Some(b),
        "/api/v1/services?watch=true&resourceVersion=101&allowWatchBookmarks=true&timeoutSeconds=1",
        Some(PROTOBUF),
    );
    let mut frames = 0;
    while w.frame(WAIT).is_some() {
        frames += 1;
    }
    assert!(w.until_closed(), "the watch did not end cleanly");
    assert!(frames >= 7, "{frames} frames");
    let t = server.traffic();
    let pb = "application/vnd.kubernetes.protobuf";
    let watch = "application/vnd.kubernetes.protobuf;stream=watch";
    let counts = |requests, body: usize, wire: usize| integration::Counts {
        requests,
        body_bytes: body as u64,
        wire_bytes: wire as u64,
    };
    assert_eq!(
        t.get(a, pb),
        counts(2, l1.body.len() + l2.body.len(), l1.wire + l2.wire)
    );
    assert_eq!(
        t.get(b, "application/json"),
        counts(1, l3.body.len(), l3.wire)
    );
    // the watch's body: every frame the client took apart
    let consumed = w.d.payload.len();
    assert_eq!(consumed, 0, "bytes left after the last frame");
    assert_eq!(t.get(b, watch), counts(1, w.d.taken, w.wire));
    assert_eq!(t.of_client(b).wire_bytes, (l3.wire + w.wire) as u64);
    assert_eq!(t.total().requests, 4);
    assert_eq!(t.by_client.len(), 3);
    assert_eq!(t.of_content_type(pb), t.get(a, pb));
    assert!(t.get(a, watch) == integration::Counts::default());
    // the request log tells the clients apart too
    let peers: Vec<(IpAddr, bool)> = server
        .requests_by_peer()
        .into_iter()
        .map(|(ip, line)| (ip, line.contains("watch=true")))
        .collect();
    assert_eq!(peers, [(a, false), (a, false), (b, false), (b, true)]);
}

/// The faults are the same in protobuf: silent watches send nothing until they speak
/// again, a hang leaves a request unanswered, an outage closes connections unanswered.
#[test]
fn faults_are_the_same_in_protobuf() {
    let server = seeded();
    server.set_bookmark_every(None);
    server.set_silent_watches(true);
    let rv = server.apply(node("node-b", "198.18.0.11"));
    let mut w = Watch::open(
        &server,
        &format!("/api/v1/nodes?watch=true&resourceVersion={}", rv - 1),
        Some(PROTOBUF),
    );
    assert!(
        w.frame(Duration::from_millis(300)).is_none(),
        "a silent watch spoke"
    );
    server.set_silent_watches(false);
    let (ty, u) = event(&w.frame(WAIT).expect("the event after the silence"));
    let n = pcore::Node::decode(raw(&u)).expect("a Node");
    assert_eq!(
        (ty.as_str(), meta_of(&n.metadata).1),
        ("ADDED", "node-b".into())
    );
    for (knob, what) in [
        (ApiServer::set_hang as fn(&ApiServer, bool), "hang"),
        (ApiServer::set_down, "outage"),
    ] {
        knob(&server, true);
        let mut conn = connect(addr(&server), None);
        conn.set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        // an outage may close the connection before the request is written
        let _ = std::io::Write::write_all(
            &mut conn,
            format!("GET /api/v1/nodes HTTP/1.1\r\nAccept: {PROTOBUF}\r\n\r\n").as_bytes(),
        );
        let mut buf = [0u8; 64];
        let got = std::io::Read::read(&mut conn, &mut buf);
        assert!(matches!(got, Ok(0) | Err(_)), "{what}: answered {got:?}");
        knob(&server, false);
    }
    let r = get(&server, "/api/v1/nodes", Some(PROTOBUF));
    assert_eq!(
        (r.code, type_of(&unknown(&r.body)).1.as_str()),
        (200, "NodeList")
    );
}

/// `apply_encoded`: the given message is what protobuf clients get (lists and watch
/// events); JSON clients get the object.
#[test]
fn apply_encoded_serves_the_given_message() {
    let server = seeded();
    let other = pcore::Service {
        metadata: Some(pmeta::ObjectMeta {
            name: Some("not-what-json-says".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec();
    let mut w = Watch::open(
        &server,
        "/api/v1/services?watch=true&fieldSelector=metadata.name%3Dodd&resourceVersion=101",
        Some(PROTOBUF),
    );
    server.apply_encoded(service("demo", "odd", "198.18.100.5", 80), other.clone());
    let (ty, u) = event(&w.frame(WAIT).expect("the event"));
    assert_eq!((ty.as_str(), raw(&u)), ("ADDED", other.as_slice()));
    let r = get(
        &server,
        "/api/v1/services?fieldSelector=metadata.name%3Dodd",
        Some(PROTOBUF),
    );
    let list = pcore::ServiceList::decode(raw(&unknown(&r.body))).expect("a ServiceList");
    assert_eq!(meta_of(&list.items[0].metadata).1, "not-what-json-says");
    let r = get(
        &server,
        "/api/v1/services?fieldSelector=metadata.name%3Dodd",
        Some(JSON),
    );
    let j: Value = serde_json::from_slice(&r.body).expect("JSON");
    assert_eq!(j["items"][0]["metadata"]["name"], "odd");
}
