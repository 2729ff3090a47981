//! The scanner alone: parts out of bodies fed in pieces, and bodies that are no list.

use super::*;

/// What a part is, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Got {
    Item(String),
    Meta(String),
}

/// The parts of `body` fed in pieces of the sizes `sizes` gives (cycled), and how the
/// body ended.
fn scan(body: &[u8], sizes: &[usize], max: usize) -> (Vec<Got>, Result<(), JsonListError>) {
    let mut s = Scanner::new(max);
    let mut got = Vec::new();
    let mut at = 0;
    let mut k = 0;
    while at < body.len() {
        let n = sizes[k % sizes.len()].clamp(1, body.len() - at);
        k += 1;
        let r = s.feed(&body[at..at + n], |p: Part<'_>| {
            got.push(match p {
                Part::Item(b) => Got::Item(String::from_utf8_lossy(b).into_owned()),
                Part::Meta(b) => Got::Meta(String::from_utf8_lossy(b).into_owned()),
            });
            Ok::<(), JsonListError>(())
        });
        if let Err(e) = r {
            return (got, Err(e));
        }
        at += n;
    }
    (got, s.finish())
}

const TRICKY: &str = r#" {"kind" : "ServiceList", "apiVersion":"v1",
  "items" : [ {"metadata":{"name":"a]}\"\\","annotations":{"x":"{[\\\"]"}},"spec":{"ports":[{"port":80}],"e":[[],[{}]]}} ,
    null, 5 ,true,"s,]}",-1.5e3, [1,[2]], {}
  ],
  "metadata":{"resourceVersion":"10","continue":""},
  "x\u0069tems": {"items":[1]} }
"#;

fn tricky_parts() -> Vec<Got> {
    vec![
        Got::Item(
            r#"{"metadata":{"name":"a]}\"\\","annotations":{"x":"{[\\\"]"}},"spec":{"ports":[{"port":80}],"e":[[],[{}]]}}"#
                .into(),
        ),
        Got::Item("null".into()),
        Got::Item("5".into()),
        Got::Item("true".into()),
        Got::Item(r#""s,]}""#.into()),
        Got::Item("-1.5e3".into()),
        Got::Item("[1,[2]]".into()),
        Got::Item("{}".into()),
        Got::Meta(r#"{"resourceVersion":"10","continue":""}"#.into()),
    ]
}

#[test]
fn items_and_metadata_come_out_whatever_the_pieces() {
    let body = TRICKY.as_bytes();
    for sizes in [
        &[1][..],
        &[7],
        &[2, 3, 1, 13, 5],
        &[64, 1, 1],
        &[body.len()],
    ] {
        let (got, end) = scan(body, sizes, 1 << 20);
        assert_eq!(end, Ok(()), "pieces {sizes:?}");
        assert_eq!(got, tricky_parts(), "pieces {sizes:?}");
    }
}

#[test]
fn metadata_first_or_last_and_empty_or_null_items() {
    for (body, want) in [
        (
            r#"{"metadata":{"resourceVersion":"3"},"items":[{"a":1}]}"#,
            vec![
                Got::Meta(r#"{"resourceVersion":"3"}"#.into()),
                Got::Item(r#"{"a":1}"#.into()),
            ],
        ),
        (
            r#"{"items":[{"a":1}],"metadata":{"resourceVersion":"3"}}"#,
            vec![
                Got::Item(r#"{"a":1}"#.into()),
                Got::Meta(r#"{"resourceVersion":"3"}"#.into()),
            ],
        ),
        (
            r#"{"items":[],"metadata":{}}"#,
            vec![Got::Meta("{}".into())],
        ),
        (r#"{"items":null}"#, vec![]),
        (r#"{"\u0069tems":[1]}"#, vec![Got::Item("1".into())]),
        ("{}", vec![]),
        ("\n{ }\r\n", vec![]),
    ] {
        for n in [1, 3, body.len()] {
            assert_eq!(
                scan(body.as_bytes(), &[n], 1 << 20),
                (want.clone(), Ok(())),
                "{body} in pieces of {n}"
            );
        }
    }
}

#[test]
fn a_truncated_body_is_an_error_at_its_end() {
    let body = TRICKY.trim_end().as_bytes();
    for cut in 0..body.len() {
        let (got, end) = scan(&body[..cut], &[3], 1 << 20);
        assert_eq!(
            end,
            Err(JsonListError::Truncated { at: cut as u64 }),
            "cut at {cut}: {got:?}"
        );
        // what came out is a prefix of the whole list's parts
        assert_eq!(got[..], tricky_parts()[..got.len()], "cut at {cut}");
    }
}

#[test]
fn a_body_that_is_no_list_is_an_error_naming_where() {
    for (body, what, at) in [
        ("[1]", "no object", 0),
        (r#"{"items":[1,]}"#, "an item expected", 12),
        (r#"{"items":[,1]}"#, "an item expected", 10),
        (r#"{"items":{}}"#, "items is not an array", 9),
        (r#"{"items":[],"items":[]}"#, "a second items array", 20),
        (
            r#"{"items":[{]}]}"#,
            "a closing bracket that does not match",
            11,
        ),
        (r#"{"items":[1 2]}"#, "a comma or ] expected", 12),
        (
            r#"{"items":[tru"e"]}"#,
            "a scalar runs into a bracket, quote or colon",
            13,
        ),
        (r#"{"a":1,}"#, "a key expected", 7),
        (r#"{"a" 1}"#, "a colon expected", 5),
        (r#"{"a":}"#, "a value expected", 5),
        (r#"{"a":1 "b":2}"#, "a comma or } expected", 7),
        (r#"{} {}"#, "bytes after the list", 3),
    ] {
        for n in [1, body.len()] {
            let (_, end) = scan(body.as_bytes(), &[n], 1 << 20);
            assert_eq!(
                end,
                Err(JsonListError::Syntax { what, at }),
                "{body} in pieces of {n}"
            );
        }
    }
}

#[test]
fn an_item_or_metadata_over_the_bound_is_refused() {
    let body = br#"{"metadata":{"resourceVersion":"1"},"items":[{"b":1},{"a":"01234567890123456789"},{"c":1}]}"#;
    let big = body.windows(4).position(|w| w == br#"{"a""#).unwrap() as u64;
    for n in [1, 4, body.len()] {
        let (got, end) = scan(body, &[n], 24);
        assert_eq!(
            end,
            Err(JsonListError::TooLarge { max: 24, at: big }),
            "pieces of {n}"
        );
        assert_eq!(
            got,
            [
                Got::Meta(r#"{"resourceVersion":"1"}"#.into()),
                Got::Item(r#"{"b":1}"#.into())
            ]
        );
    }
    // a skipped value is not kept: any size
    let body = br#"{"kind":"a very long kind of list, longer than the bound","items":[]}"#;
    assert_eq!(scan(body, &[5], 24), (vec![], Ok(())));
}
