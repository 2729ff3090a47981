//! The protobuf list+watch against canned responses of a mock API server (a tower service
//! under kube's `Client`): bytes encoded with `kube_proto`'s own messages (the end-to-end
//! check against upstream's encoding is the API double's).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::StreamExt;
use http_body::Frame;
use k8s_openapi::api::core::v1::Service;
use kube_proto::messages as pb;
use prost::Message;

use super::*;
use crate::kube_source::{list_config, LABEL_SELECTOR};

/// One canned response.
struct Reply {
    status: u16,
    content_type: &'static str,
    chunks: Vec<Vec<u8>>,
    /// After the chunks, the body stays open (a watch with nothing to say).
    hang: bool,
    /// After the chunks, the body fails with this.
    fail: Option<std::io::ErrorKind>,
}

fn proto(chunks: Vec<Vec<u8>>) -> Reply {
    Reply {
        status: 200,
        content_type: PROTOBUF,
        chunks,
        hang: false,
        fail: None,
    }
}

/// A response body of canned chunks.
struct Chunks {
    chunks: VecDeque<Bytes>,
    hang: bool,
    fail: Option<std::io::ErrorKind>,
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.chunks.pop_front() {
            Some(c) => Poll::Ready(Some(Ok(Frame::data(c)))),
            None if self.hang => Poll::Pending,
            None => match self.fail.take() {
                Some(kind) => Poll::Ready(Some(Err(std::io::Error::new(kind, "cut")))),
                None => Poll::Ready(None),
            },
        }
    }
}

/// The requests seen: path and query, Accept.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// A client whose server answers with `replies` in order, then with a silent watch.
fn server(replies: Vec<Reply>) -> (Api<Lenient<Service>>, Seen) {
    let (client, seen) = routed(vec![("", replies)]);
    (Api::all(client), seen)
}

/// A client whose server answers each path ending in one of the names with its replies
/// in order (then with a silent watch).
fn routed(routes: Vec<(&'static str, Vec<Reply>)>) -> (Client, Seen) {
    let scripts: Vec<(&'static str, Mutex<VecDeque<Reply>>)> = routes
        .into_iter()
        .map(|(p, r)| (p, Mutex::new(VecDeque::from(r))))
        .collect();
    let scripts = Arc::new(scripts);
    let seen: Seen = Arc::default();
    let seen2 = seen.clone();
    let svc = tower::service_fn(move |req: http::Request<Body>| {
        let accept = req
            .headers()
            .get(http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let uri = req.uri().to_string();
        seen2.lock().unwrap().push((uri, accept));
        let path = req.uri().path();
        let r = scripts
            .iter()
            .find(|(p, _)| path.ends_with(p))
            .and_then(|(_, r)| r.lock().unwrap().pop_front())
            .unwrap_or(Reply {
                hang: true,
                ..proto(Vec::new())
            });
        async move {
            let body = Chunks {
                chunks: r.chunks.into_iter().map(Bytes::from).collect(),
                hang: r.hang,
                fail: r.fail,
            };
            let resp = http::Response::builder()
                .status(r.status)
                .header(http::header::CONTENT_TYPE, r.content_type)
                .body(body)
                .unwrap();
            Ok::<_, Infallible>(resp)
        }
    });
    (Client::new(svc, "default"), seen)
}

/// `runtime.Unknown`, as apimachinery writes it.
#[derive(Clone, PartialEq, prost::Message)]
struct Unknown {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<pb::TypeMeta>,
    #[prost(bytes = "vec", optional, tag = "2")]
    raw: Option<Vec<u8>>,
}

/// A list message: its metadata and items' bytes.
#[derive(Clone, PartialEq, prost::Message)]
struct List {
    #[prost(message, optional, tag = "1")]
    metadata: Option<pb::ListMeta>,
    #[prost(bytes = "vec", repeated, tag = "2")]
    items: Vec<Vec<u8>>,
}

fn enveloped(kind: &str, raw: Vec<u8>) -> Vec<u8> {
    enveloped_as("v1", kind, raw)
}

fn enveloped_as(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let mut out = b"k8s\0".to_vec();
    Unknown {
        type_meta: Some(pb::TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
    }
    .encode(&mut out)
    .unwrap();
    out
}

fn meta(name: &str, rv: &str) -> pb::ObjectMeta {
    pb::ObjectMeta {
        name: Some(name.into()),
        namespace: Some("default".into()),
        resource_version: Some(rv.into()),
        ..pb::ObjectMeta::default()
    }
}

/// A Service's message.
fn service(name: &str, rv: &str) -> Vec<u8> {
    pb::Service {
        metadata: Some(meta(name, rv)),
        spec: Some(pb::ServiceSpec {
            cluster_ip: Some("198.18.0.10".into()),
            ports: vec![pb::ServicePort {
                protocol: Some("TCP".into()),
                port: Some(80),
                ..pb::ServicePort::default()
            }],
            ..pb::ServiceSpec::default()
        }),
        status: None,
    }
    .encode_to_vec()
}

/// A Service whose metadata decodes and whose spec does not (a length past its end).
fn broken_service(name: &str, rv: &str) -> Vec<u8> {
    let mut m = pb::Service {
        metadata: Some(meta(name, rv)),
        spec: None,
        status: None,
    }
    .encode_to_vec();
    m.extend_from_slice(&[0x12, 2, 0x0a, 0x7f]);
    m
}

fn list(rv: &str, items: Vec<Vec<u8>>) -> Vec<u8> {
    list_of("v1", "ServiceList", rv, items)
}

fn list_of(api_version: &str, kind: &str, rv: &str, items: Vec<Vec<u8>>) -> Vec<u8> {
    let l = List {
        metadata: Some(pb::ListMeta {
            resource_version: Some(rv.into()),
            r#continue: None,
        }),
        items,
    };
    enveloped_as(api_version, kind, l.encode_to_vec())
}

fn frame(kind: &str, object: Vec<u8>) -> Vec<u8> {
    let e = pb::WatchEvent {
        r#type: Some(kind.into()),
        object: Some(pb::RawExtension { raw: Some(object) }),
    }
    .encode_to_vec();
    let mut out = u32::try_from(e.len()).unwrap().to_be_bytes().to_vec();
    out.extend(e);
    out
}

fn event(kind: &str, name: &str, rv: &str) -> Vec<u8> {
    frame(kind, enveloped("Service", service(name, rv)))
}

fn bookmark(rv: &str) -> Vec<u8> {
    let m = pb::Service {
        metadata: Some(pb::ObjectMeta {
            resource_version: Some(rv.into()),
            ..pb::ObjectMeta::default()
        }),
        spec: None,
        status: None,
    };
    frame("BOOKMARK", enveloped("Service", m.encode_to_vec()))
}

fn status(code: i32, reason: &str) -> Vec<u8> {
    let s = pb::Status {
        status: Some("Failure".into()),
        message: Some(format!("{reason} ({code})")),
        reason: Some(reason.into()),
        code: Some(code),
    };
    enveloped("Status", s.encode_to_vec())
}

fn pieces(bytes: &[u8], n: usize) -> Vec<Vec<u8>> {
    bytes.chunks(n).map(<[u8]>::to_vec).collect()
}

fn show(item: &Item<Service>) -> String {
    let o = |l: &Lenient<Service>| {
        let m = l.meta();
        let name = m.name.clone().unwrap_or_default();
        let rv = m.resource_version.clone().unwrap_or_default();
        match l.object() {
            Ok(s) => {
                assert_eq!(s.metadata.name.as_deref(), Some(name.as_str()));
                format!("{name}@{rv}")
            }
            Err(e) => format!("{name}@{rv} bad: {e}"),
        }
    };
    match item {
        Ok(WEvent::Init) => "Init".into(),
        Ok(WEvent::InitApply(l)) => format!("InitApply {}", o(l)),
        Ok(WEvent::InitDone) => "InitDone".into(),
        Ok(WEvent::Apply(l)) => format!("Apply {}", o(l)),
        Ok(WEvent::Delete(l)) => format!("Delete {}", o(l)),
        Err(e) => format!("Err {e}"),
    }
}

fn config() -> watcher::Config {
    list_config().labels(LABEL_SELECTOR).timeout(30)
}

/// The next `n` items (each within 5 s).
async fn take<S: Stream<Item = Item<Service>> + Unpin>(s: &mut S, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..n {
        match tokio::time::timeout(Duration::from_secs(5), s.next()).await {
            Ok(Some(item)) => out.push(show(&item)),
            _ => panic!("no item {} (after {out:?})", out.len() + 1),
        }
    }
    out
}

/// Nothing more for a while.
async fn quiet<S: Stream<Item = Item<Service>> + Unpin>(s: &mut S) {
    if let Ok(Some(item)) = tokio::time::timeout(Duration::from_millis(200), s.next()).await {
        panic!("unexpected {}", show(&item));
    }
}

/// The kind's list + watch (`streaming`: a streamed list tried first), remembering the
/// last version synced in `memory`: the set-up every test here watches with.
fn watching(
    api: &Api<Lenient<Service>>,
    memory: &Arc<Memory>,
    streaming: bool,
) -> impl Stream<Item = Item<Service>> + Unpin {
    Box::pin(watch(api, config(), memory.clone(), streaming))
}

/// List + watch, nothing remembered.
fn stream(api: &Api<Lenient<Service>>) -> impl Stream<Item = Item<Service>> + Unpin {
    watching(api, &Arc::default(), false)
}

fn uris(seen: &Seen) -> Vec<String> {
    seen.lock()
        .unwrap()
        .iter()
        .map(|(u, _)| u.clone())
        .collect()
}

#[tokio::test]
async fn a_list_in_pieces_yields_its_objects_then_the_watch_starts_from_its_version() {
    let body = list(
        "10",
        vec![service("a", "7"), service("b", "8"), service("c", "9")],
    );
    for n in [1, 2, 7, body.len()] {
        let (api, seen) = server(vec![proto(pieces(&body, n))]);
        let mut s = stream(&api);
        assert_eq!(
            take(&mut s, 5).await,
            [
                "Init",
                "InitApply a@7",
                "InitApply b@8",
                "InitApply c@9",
                "InitDone"
            ],
            "pieces of {n}"
        );
        quiet(&mut s).await;
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2, "{seen:?}");
        let (list_uri, accept) = &seen[0];
        assert_eq!(accept, ACCEPT_PROTOBUF);
        assert!(list_uri.starts_with("/api/v1/services?"), "{list_uri}");
        assert!(
            list_uri.contains("resourceVersion=0&resourceVersionMatch=NotOlderThan"),
            "{list_uri}"
        );
        assert!(
            list_uri.contains("labelSelector=%21service.kubernetes.io"),
            "{list_uri}"
        );
        assert!(!list_uri.contains("limit="), "{list_uri}");
        let (watch_uri, accept) = &seen[1];
        assert_eq!(accept, ACCEPT_PROTOBUF);
        for want in [
            "watch=true",
            "timeoutSeconds=30",
            "allowWatchBookmarks=true",
            "resourceVersion=10",
        ] {
            assert!(watch_uri.contains(want), "{want} in {watch_uri}");
        }
    }
}

/// A list of a@7, b@8 and c@9 answered with `reply`'s bytes of it: all but the last
/// item's last bytes, then nothing. a and b are out already.
async fn handed_on_before_the_list_ends(reply: Reply) {
    let (api, _) = server(vec![Reply {
        hang: true,
        ..reply
    }]);
    let mut s = stream(&api);
    assert_eq!(
        take(&mut s, 3).await,
        ["Init", "InitApply a@7", "InitApply b@8"]
    );
    quiet(&mut s).await;
}

#[tokio::test]
async fn items_are_handed_on_before_the_list_ends() {
    let body = list(
        "10",
        vec![service("a", "7"), service("b", "8"), service("c", "9")],
    );
    handed_on_before_the_list_ends(proto(vec![body[..body.len() - 3].to_vec()])).await;
}

#[tokio::test]
async fn watch_frames_are_applies_and_deletes_and_bookmarks_move_the_version() {
    let first: Vec<u8> = [
        event("ADDED", "a", "11"),
        event("MODIFIED", "a", "12"),
        bookmark("20"),
    ]
    .concat();
    let (api, seen) = server(vec![
        proto(vec![list("10", vec![])]),
        proto(pieces(&first, 3)),
        proto(vec![event("DELETED", "a", "21")]),
    ]);
    let mut s = stream(&api);
    assert_eq!(
        take(&mut s, 5).await,
        [
            "Init",
            "InitDone",
            "Apply a@11",
            "Apply a@12",
            "Delete a@21"
        ]
    );
    quiet(&mut s).await;
    let seen = seen.lock().unwrap().clone();
    let rvs: Vec<&str> = seen
        .iter()
        .filter_map(|(u, _)| u.split("resourceVersion=").nth(1))
        .map(|r| r.split('&').next().unwrap_or(""))
        .collect();
    // list, watch from the list, from the bookmark, from the deletion
    assert_eq!(rvs, ["0", "10", "20", "21"], "{seen:?}");
}

#[tokio::test]
async fn gone_relists() {
    let (api, seen) = server(vec![
        proto(vec![list("10", vec![service("a", "7")])]),
        proto(vec![frame("ERROR", status(410, "Expired"))]),
        proto(vec![list("30", vec![service("a", "29")])]),
        Reply {
            status: 410,
            ..proto(vec![status(410, "Gone")])
        },
        proto(vec![list("40", vec![])]),
    ]);
    let mut s = stream(&api);
    let got = take(&mut s, 10).await;
    assert_eq!(got[..3], ["Init", "InitApply a@7", "InitDone"]);
    assert!(
        got[3].starts_with("Err error returned by apiserver during watch")
            && got[3].contains("Expired"),
        "{got:?}"
    );
    assert_eq!(got[4..7], ["Init", "InitApply a@29", "InitDone"]);
    assert!(
        got[7].starts_with("Err failed to start watching object") && got[7].contains("Gone"),
        "{got:?}"
    );
    assert_eq!(got[8..], ["Init", "InitDone"]);
    quiet(&mut s).await;
    let uris: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(u, _)| u.clone())
        .collect();
    let watches: Vec<bool> = uris.iter().map(|u| u.contains("watch=true")).collect();
    assert_eq!(watches, [false, true, false, true, false, true], "{uris:?}");
}

#[tokio::test]
async fn a_refused_list_is_an_error_with_the_status() {
    let (api, _) = server(vec![
        Reply {
            status: 403,
            ..proto(vec![status(403, "Forbidden")])
        },
        proto(vec![list("5", vec![])]),
    ]);
    let mut s = stream(&api);
    let got = take(&mut s, 4).await;
    assert_eq!(got[0], "Init");
    assert!(
        got[1].starts_with("Err failed to perform initial object list")
            && got[1].contains("Forbidden"),
        "{got:?}"
    );
    assert_eq!(got[2..], ["Init", "InitDone"]);
}

#[tokio::test]
async fn a_malformed_object_is_named_with_its_error_and_the_others_delivered() {
    let (api, _) = server(vec![
        proto(pieces(
            &list(
                "10",
                vec![
                    service("a", "7"),
                    broken_service("bad", "8"),
                    service("c", "9"),
                ],
            ),
            5,
        )),
        proto(vec![[
            frame(
                "MODIFIED",
                enveloped("Service", broken_service("bad", "11")),
            ),
            event("ADDED", "d", "12"),
        ]
        .concat()]),
    ]);
    let mut s = stream(&api);
    let got = take(&mut s, 7).await;
    assert_eq!(got[..2], ["Init", "InitApply a@7"]);
    assert!(
        got[2].starts_with("InitApply bad@8 bad: protobuf: Service"),
        "{got:?}"
    );
    assert_eq!(got[3..5], ["InitApply c@9", "InitDone"]);
    assert!(
        got[5].starts_with("Apply bad@11 bad: protobuf: Service"),
        "{got:?}"
    );
    assert_eq!(got[6], "Apply d@12");
    quiet(&mut s).await;
}

/// JSON of a Service.
fn json_service(name: &str, rv: &str) -> String {
    format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"default","resourceVersion":"{rv}"}},"spec":{{"clusterIP":"198.18.0.11","ports":[{{"port":80,"protocol":"TCP"}}]}}}}"#
    )
}

#[tokio::test]
async fn a_json_answer_is_read_as_json_and_json_is_asked_from_then_on() {
    let list = format!(
        r#"{{"kind":"ServiceList","apiVersion":"v1","metadata":{{"resourceVersion":"5"}},"items":[{},{{"metadata":{{"name":"bad","namespace":"default","resourceVersion":"4"}},"spec":{{"ports":"no"}}}}]}}"#,
        json_service("j", "3")
    );
    let events = format!(
        "{{\"type\":\"ADDED\",\"object\":{}}}\n{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"Service\",\"apiVersion\":\"v1\",\"metadata\":{{\"resourceVersion\":\"9\"}}}}}}\n{{\"type\":\"DELETED\",\"object\":{}}}\n",
        json_service("k", "6"),
        json_service("j", "10")
    );
    let json = |chunks| Reply {
        content_type: "application/json",
        ..proto(chunks)
    };
    let (api, seen) = server(vec![
        json(pieces(list.as_bytes(), 7)),
        json(pieces(events.as_bytes(), 4)),
    ]);
    let mut s = stream(&api);
    let got = take(&mut s, 6).await;
    assert_eq!(got[..2], ["Init", "InitApply j@3"]);
    assert!(got[2].starts_with("InitApply bad@4 bad: "), "{got:?}");
    assert_eq!(got[3..], ["InitDone", "Apply k@6", "Delete j@10"]);
    quiet(&mut s).await;
    let seen = seen.lock().unwrap().clone();
    let accepts: Vec<&str> = seen.iter().map(|(_, a)| a.as_str()).collect();
    assert_eq!(accepts, [ACCEPT_PROTOBUF, JSON, JSON], "{seen:?}");
    assert!(seen[2].0.contains("resourceVersion=10"), "{seen:?}");
}

#[tokio::test]
async fn a_watch_cut_short_resumes_without_an_error_and_a_broken_one_is_reported() {
    let cut = |kind, rv: &str| Reply {
        fail: Some(kind),
        ..proto(vec![event("ADDED", "a", rv)])
    };
    let (api, seen) = server(vec![
        proto(vec![list("10", vec![])]),
        cut(std::io::ErrorKind::UnexpectedEof, "11"),
        cut(std::io::ErrorKind::ConnectionReset, "12"),
    ]);
    let mut s = stream(&api);
    let got = take(&mut s, 5).await;
    assert_eq!(got[..4], ["Init", "InitDone", "Apply a@11", "Apply a@12"]);
    assert!(got[4].starts_with("Err watch stream failed"), "{got:?}");
    quiet(&mut s).await;
    let seen = seen.lock().unwrap().clone();
    assert!(seen[2].0.contains("resourceVersion=11"), "{seen:?}");
    assert!(seen[3].0.contains("resourceVersion=12"), "{seen:?}");
}

/// kube_source's whole source (its pumps on list_watch, in protobuf) against node n1,
/// no ServiceCIDR, no EndpointSlice and `services`' replies, with timing `t`: the
/// engine events it sends, named, until `enough` holds for them; the requests seen.
async fn source_events(
    services: Vec<Reply>,
    t: crate::api_client::Timing,
    enough: impl Fn(&[String]) -> bool,
) -> (Vec<String>, Seen) {
    use crate::api_client::Progress;
    use crate::kube_source::run;
    use proxy_events::Event;

    let node = pb::Node {
        metadata: Some(pb::ObjectMeta {
            name: Some("n1".into()),
            resource_version: Some("3".into()),
            ..pb::ObjectMeta::default()
        }),
        ..pb::Node::default()
    }
    .encode_to_vec();
    let empty = |api_version, kind, rv| vec![proto(vec![list_of(api_version, kind, rv, vec![])])];
    let (client, seen) = routed(vec![
        (
            "/nodes",
            vec![proto(vec![list_of("v1", "NodeList", "3", vec![node])])],
        ),
        (
            "/servicecidrs",
            empty("networking.k8s.io/v1", "ServiceCIDRList", "4"),
        ),
        ("/services", services),
        (
            "/endpointslices",
            empty("discovery.k8s.io/v1", "EndpointSliceList", "11"),
        ),
    ]);
    let (tx, rx) = proxy_events::channel(64);
    let tx = crate::events::EventSender::new(tx, None);
    let reading = Reading {
        wire: Wire::Protobuf,
        streaming: false,
    };
    let progress = Arc::new(Progress::default());
    let source = tokio::spawn(run(client, reading, "n1".into(), t, progress, tx));
    let mut got = Vec::new();
    while !enough(&got) {
        let ev = rx
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{e} after {got:?}"));
        got.push(match ev {
            Event::NodeApplied(n) => format!("Node {}", n.metadata.name.unwrap_or_default()),
            Event::ServiceApplied(s) => format!("Service {}", s.metadata.name.unwrap_or_default()),
            Event::ServicesListed => "ServicesListed".into(),
            Event::SlicesListed => "SlicesListed".into(),
            Event::SourceStalled { source, .. } => format!("Stalled {source}"),
            other => format!("{other:?}").chars().take(40).collect(),
        });
    }
    source.abort();
    (got, seen)
}

/// The whole source in protobuf: kube_source's pumps on list_watch, engine events out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_turns_protobuf_lists_into_engine_events() {
    let services = vec![proto(pieces(
        &list("10", vec![service("a", "7"), broken_service("bad", "8")]),
        3,
    ))];
    let t = crate::api_client::Timing::from_watch(Duration::from_secs(30));
    let (got, seen) = source_events(services, t, |got| {
        got.iter().any(|e| e == "ServicesListed") && got.iter().any(|e| e == "SlicesListed")
    })
    .await;
    assert_eq!(got[0], "Node n1", "{got:?}");
    let services: Vec<&String> = got.iter().filter(|e| e.starts_with("Service ")).collect();
    assert_eq!(services, ["Service a"], "the bad one is skipped: {got:?}");
    let seen = seen.lock().unwrap().clone();
    let node_list = seen.iter().find(|(u, _)| u.contains("/nodes")).unwrap();
    assert!(
        node_list.0.contains("fieldSelector=metadata.name%3Dn1"),
        "{seen:?}"
    );
    assert!(seen.iter().all(|(_, a)| a == ACCEPT_PROTOBUF), "{seen:?}");
}

#[test]
fn the_configured_content_type_chooses_the_wire() {
    assert_eq!(Wire::from_content_type(PROTOBUF), Wire::Protobuf);
    assert_eq!(
        Wire::from_content_type("Application/vnd.kubernetes.protobuf; x=y"),
        Wire::Protobuf
    );
    assert_eq!(Wire::from_content_type("application/json"), Wire::Json);
    assert_eq!(Wire::from_content_type("application/yaml"), Wire::Json);
}

mod json_list;
mod streamed;
