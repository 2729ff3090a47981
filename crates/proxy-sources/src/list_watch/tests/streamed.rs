//! Streamed lists (`sendInitialEvents`) and the versions relists resume from, against
//! the same mock server as the list + watch tests.

use super::*;

/// The stream with streamed lists tried first.
fn streamed(api: &Api<Lenient<Service>>) -> impl Stream<Item = Item<Service>> + Unpin {
    watching(api, &Arc::default(), true)
}

/// The request `uri` has every one of the `params` (each `name=value`; one that ends
/// in `&` ends there).
fn asks(uri: &str, params: &[&str]) {
    let uri = format!("{uri}&");
    for want in params {
        assert!(uri.contains(want), "{want} in {uri}");
    }
}

/// The bookmark that ends a streamed list's initial events.
fn initial_events_end(rv: &str) -> Vec<u8> {
    let m = pb::Service {
        metadata: Some(pb::ObjectMeta {
            resource_version: Some(rv.into()),
            annotations: [("k8s.io/initial-events-end".to_string(), "true".to_string())].into(),
            ..pb::ObjectMeta::default()
        }),
        spec: None,
        status: None,
    };
    frame("BOOKMARK", enveloped("Service", m.encode_to_vec()))
}

#[tokio::test]
async fn a_streamed_list_yields_its_objects_until_the_bookmark_then_watches() {
    let body = [
        event("ADDED", "a", "7"),
        event("ADDED", "b", "8"),
        bookmark("9"),
        initial_events_end("10"),
        event("MODIFIED", "a", "11"),
    ]
    .concat();
    for n in [1, 5, body.len()] {
        let (api, seen) = server(vec![Reply {
            hang: true,
            ..proto(pieces(&body, n))
        }]);
        let mut s = streamed(&api);
        assert_eq!(
            take(&mut s, 5).await,
            [
                "Init",
                "InitApply a@7",
                "InitApply b@8",
                "InitDone",
                "Apply a@11"
            ],
            "pieces of {n}"
        );
        quiet(&mut s).await;
        let uris = uris(&seen);
        assert_eq!(uris.len(), 1, "one request, no list: {uris:?}");
        asks(
            &uris[0],
            &[
                "watch=true",
                "allowWatchBookmarks=true",
                "sendInitialEvents=true",
                "resourceVersionMatch=NotOlderThan",
                "resourceVersion=&",
            ],
        );
    }
}

#[tokio::test]
async fn a_refused_streamed_list_falls_back_to_list_and_watch_and_is_tried_again() {
    let (api, seen) = server(vec![
        Reply {
            status: 422,
            ..proto(vec![status(422, "Invalid")])
        },
        proto(vec![list("10", vec![service("a", "7")])]),
        proto(vec![frame("ERROR", status(410, "Expired"))]),
        // the relist: a streamed list again, from the last version
        Reply {
            hang: true,
            ..proto(vec![event("ADDED", "a", "12"), initial_events_end("13")])
        },
    ]);
    let mut s = streamed(&api);
    let got = take(&mut s, 7).await;
    assert_eq!(got[..3], ["Init", "InitApply a@7", "InitDone"], "{got:?}");
    assert!(got[3].contains("Expired"), "{got:?}");
    assert_eq!(
        got[4..],
        ["Init", "InitApply a@12", "InitDone"][..],
        "{got:?}"
    );
    let uris = uris(&seen);
    let kinds: Vec<&str> = uris
        .iter()
        .map(|u| {
            match (
                u.contains("sendInitialEvents=true"),
                u.contains("watch=true"),
            ) {
                (true, _) => "stream",
                (false, true) => "watch",
                (false, false) => "list",
            }
        })
        .collect();
    assert_eq!(kinds, ["stream", "list", "watch", "stream"], "{uris:?}");
    assert!(uris[3].contains("resourceVersion=10"), "{uris:?}");
}

#[tokio::test]
async fn relists_resume_from_the_last_version_and_from_the_most_recent_when_it_is_gone() {
    let (api, seen) = server(vec![
        proto(vec![list("10", vec![service("a", "7")])]),
        proto(vec![
            event("MODIFIED", "a", "20"),
            frame("ERROR", status(410, "Expired")),
        ]),
        Reply {
            status: 410,
            ..proto(vec![status(410, "Expired")])
        },
        proto(vec![list("40", vec![service("a", "30")])]),
    ]);
    let mut s = stream(&api);
    let got = take(&mut s, 9).await;
    assert_eq!(
        got[..4],
        ["Init", "InitApply a@7", "InitDone", "Apply a@20"],
        "{got:?}"
    );
    assert!(got[4].contains("Expired"), "{got:?}");
    assert_eq!(got[5], "Init", "{got:?}");
    assert!(got[6].contains("Expired"), "the refused relist: {got:?}");
    assert_eq!(got[7..], ["Init", "InitApply a@30"][..], "{got:?}");
    let uris = uris(&seen);
    assert!(uris[0].contains("resourceVersion=0&"), "{uris:?}");
    // client-go's relistResourceVersion: the last version seen, not paged
    assert!(
        uris[2].contains("resourceVersion=20&resourceVersionMatch=NotOlderThan"),
        "{uris:?}"
    );
    // ... and after it was refused as expired, the most recent state
    assert!(!uris[3].contains("resourceVersion="), "{uris:?}");
}

/// A stream that synced a@7, then a@20, given up (as kube_source's pump gives up on a
/// stalled kind); then a new one sharing its memory (as the pump starts one), whose
/// list brings a@25: the requests.
async fn restarted(api: &Api<Lenient<Service>>, seen: &Seen, streaming: bool) -> Vec<String> {
    let memory = Arc::new(Memory::default());
    let mut s = watching(api, &memory, streaming);
    assert_eq!(
        take(&mut s, 4).await,
        ["Init", "InitApply a@7", "InitDone", "Apply a@20"]
    );
    drop(s);
    assert_eq!(memory.last_synced().as_deref(), Some("20"));
    let mut s = watching(api, &memory, streaming);
    assert_eq!(
        take(&mut s, 3).await,
        ["Init", "InitApply a@25", "InitDone"]
    );
    uris(seen)
}

#[tokio::test]
async fn a_restarted_list_and_watch_resumes_from_the_version_the_last_one_synced() {
    let (api, seen) = server(vec![
        proto(vec![list("10", vec![service("a", "7")])]),
        Reply {
            hang: true,
            ..proto(vec![event("MODIFIED", "a", "20")])
        },
        proto(vec![list("30", vec![service("a", "25")])]),
    ]);
    let uris = restarted(&api, &seen, false).await;
    assert!(uris[0].contains("resourceVersion=0&"), "{uris:?}");
    assert!(
        uris[2].contains("resourceVersion=20&resourceVersionMatch=NotOlderThan")
            && !uris[2].contains("watch=true")
            && !uris[2].contains("limit="),
        "the relist resumes from the last version synced: {uris:?}"
    );
}

#[tokio::test]
async fn a_restarted_streamed_list_resumes_from_the_version_the_last_one_synced() {
    let (api, seen) = server(vec![
        Reply {
            hang: true,
            ..proto(vec![
                event("ADDED", "a", "7"),
                initial_events_end("10"),
                event("MODIFIED", "a", "20"),
            ])
        },
        Reply {
            hang: true,
            ..proto(vec![event("ADDED", "a", "25"), initial_events_end("30")])
        },
    ]);
    let uris = restarted(&api, &seen, true).await;
    asks(&uris[0], &["resourceVersion=&"]);
    asks(
        &uris[1],
        &[
            "sendInitialEvents=true",
            "resourceVersion=20&",
            "resourceVersionMatch=NotOlderThan",
        ],
    );
}

#[tokio::test]
async fn a_restarted_stream_lists_the_most_recent_state_when_the_last_version_was_refused() {
    let (api, seen) = server(vec![
        proto(vec![list("10", vec![service("a", "7")])]),
        proto(vec![frame("ERROR", status(410, "Expired"))]),
        Reply {
            status: 410,
            ..proto(vec![status(410, "Expired")])
        },
        proto(vec![list("40", vec![service("a", "30")])]),
    ]);
    let memory = Arc::new(Memory::default());
    let mut s = watching(&api, &memory, false);
    let got = take(&mut s, 6).await;
    assert!(got[5].contains("Expired"), "the refused relist: {got:?}");
    drop(s);
    let mut s = watching(&api, &memory, false);
    assert_eq!(
        take(&mut s, 3).await,
        ["Init", "InitApply a@30", "InitDone"]
    );
    let uris = uris(&seen);
    assert!(uris[2].contains("resourceVersion=10&"), "{uris:?}");
    assert!(!uris[3].contains("resourceVersion="), "{uris:?}");
}

/// Through kube_source's pump: a watch that goes silent stalls the kind, and the
/// relist the stall starts asks for the last version synced (an event's), not the
/// watch cache's `0`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_kind_relists_from_the_last_version_synced() {
    let services = vec![
        proto(vec![list("10", vec![service("a", "7")])]),
        // an event, then silence: no byte, no bookmark, no end
        Reply {
            hang: true,
            ..proto(vec![event("MODIFIED", "a", "20")])
        },
        proto(vec![list("30", vec![service("b", "25")])]),
    ];
    let t = crate::api_client::Timing {
        stall_after: Duration::from_millis(400),
        ..crate::api_client::Timing::from_watch(Duration::from_secs(30))
    };
    let (got, seen) = source_events(services, t, |got| got.iter().any(|e| e == "Service b")).await;
    assert!(got.contains(&"Stalled service".to_string()), "{got:?}");
    let services: Vec<String> = uris(&seen)
        .into_iter()
        .filter(|u| u.starts_with("/api/v1/services?"))
        .collect();
    assert!(services.len() >= 3, "{services:?}");
    assert!(services[0].contains("resourceVersion=0&"), "{services:?}");
    assert!(services[1].contains("watch=true"), "{services:?}");
    assert!(
        services[2].contains("resourceVersion=20&resourceVersionMatch=NotOlderThan")
            && !services[2].contains("watch=true"),
        "the stall's relist resumes from the last version synced: {services:?}"
    );
}
