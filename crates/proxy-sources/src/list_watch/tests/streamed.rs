//! Streamed lists (`sendInitialEvents`) and the versions relists resume from, against
//! the same mock server as the list + watch tests.

use super::*;

/// The stream with streamed lists tried first.
fn streamed(api: &Api<Lenient<Service>>) -> impl Stream<Item = Item<Service>> + Unpin {
    Box::pin(watch(api, config(), Arc::default(), true))
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
        for want in [
            "watch=true",
            "allowWatchBookmarks=true",
            "sendInitialEvents=true",
            "resourceVersionMatch=NotOlderThan",
            "resourceVersion=&",
        ] {
            assert!(format!("{}&", uris[0]).contains(want), "{want} in {uris:?}");
        }
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
