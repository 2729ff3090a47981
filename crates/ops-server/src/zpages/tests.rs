//! Byte-level checks against upstream's formats as data (component-base
//! zpages/statusz/statusz_test.go and zpages/flagz/flagz_test.go templates, and their
//! Accept cases).

use super::*;

/// upstream's `wantTmplWithoutEmulation`-style body for a component without listed
/// paths, with the `:` delimiter (Go `%v` fields filled in).
const STATUSZ_WANT: &str = "
kube-proxy statusz
Warning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only.

Started: Wed Dec  2 03:08:42 UTC 2026
Up: 1 hr 01 min 05 sec
Go version: n/a
Binary version: 0.1.0
Emulation version: 1.38

";

fn status() -> Statusz {
    Statusz {
        component: "kube-proxy".into(),
        // 2026-12-02T03:08:42Z
        started: UNIX_EPOCH + Duration::from_secs(1_796_180_922),
        go_version: "n/a".into(),
        binary_version: "0.1.0".into(),
        emulation_version: Some("1.38".into()),
    }
}

#[test]
fn statusz_body_is_upstreams() {
    let s = status();
    let now = s.started + Duration::from_secs(3665);
    assert_eq!(statusz_text(&s, now, ":"), STATUSZ_WANT);
    // each delimiter as upstream prints it
    for d in DELIMITERS {
        let got = statusz_text(&s, now, d);
        assert!(
            got.contains(&format!("\nUp{d} 1 hr 01 min 05 sec\n")),
            "{got:?}"
        );
        assert!(
            got.contains(&format!("\nBinary version{d} 0.1.0\n")),
            "{got:?}"
        );
    }
    // no emulation version: the line is empty, as upstream's template
    let mut s2 = status();
    s2.emulation_version = None;
    assert!(statusz_text(&s2, now, ":").ends_with("Binary version: 0.1.0\n\n\n"));
}

#[test]
fn unix_date_is_gos() {
    // Go: time.Unix(0,0).UTC().Format(time.UnixDate)
    assert_eq!(unix_date(UNIX_EPOCH), "Thu Jan  1 00:00:00 UTC 1970");
    assert_eq!(
        unix_date(UNIX_EPOCH + Duration::from_secs(951_782_400)),
        "Tue Feb 29 00:00:00 UTC 2000"
    );
    assert_eq!(
        unix_date(UNIX_EPOCH + Duration::from_secs(1_796_180_922)),
        "Wed Dec  2 03:08:42 UTC 2026"
    );
    assert_eq!(
        uptime(Duration::from_secs(100 * 3600 + 59)),
        "100 hr 00 min 59 sec"
    );
}

/// upstream flagz_test's shape: header, blank line, sorted `name<sep>value` lines.
#[test]
fn flagz_body_is_upstreams() {
    let flags = vec![
        ("v".to_string(), "4".to_string()),
        ("hostname-override".to_string(), "node-a".to_string()),
        (
            "config".to_string(),
            "/var/lib/kube-proxy/config.conf".to_string(),
        ),
    ];
    let want = "
kube-proxy flags
Warning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only.

config=/var/lib/kube-proxy/config.conf
hostname-override=node-a
v=4
";
    assert_eq!(flagz_text("kube-proxy", &flags, "="), want);
}

/// upstream's Accept cases (statusz_test.go), as data.
#[test]
fn accept_negotiation_is_upstreams() {
    use Media::*;
    let cases: &[(Option<&str>, Option<Media>)] = &[
        (None, Some(TextPlain)),
        (Some(""), Some(TextPlain)),
        (Some("text/plain"), Some(TextPlain)),
        (Some("*/*"), Some(TextPlain)),
        (Some("text/*"), Some(TextPlain)),
        (Some("text/plain; charset=utf-8"), Some(TextPlain)),
        (Some("application/xml"), None),
        (Some("text/html"), None),
        (Some("application/json"), None),
        (Some("application/json;v=v1alpha1;g=config.k8s.io"), None),
        (
            Some("application/json;v=v1alpha1;g=config.k8s.io;as=Statusz"),
            Some(Json("v1alpha1")),
        ),
        (
            Some("application/json;v=v1beta1;g=config.k8s.io;as=Statusz"),
            Some(Json("v1beta1")),
        ),
        (
            Some("application/json;v=v1beta1;g=config.k8s.io;as=Flagz"),
            None,
        ),
        (
            Some("application/json;v=foo;g=config.k8s.io;as=Statusz,*/*"),
            Some(TextPlain),
        ),
        (Some("text/plain;q=0"), None),
        (Some("application/xml, text/plain;q=0.5"), Some(TextPlain)),
    ];
    for (accept, want) in cases {
        assert_eq!(negotiate(*accept, "Statusz"), *want, "{accept:?}");
    }
}
