//! JSON lists read item by item: the same objects as the whole body decoded at once
//! (kube's `ObjectList`, as the list path read it before), whatever the pieces the body
//! arrives in; items handed on before the body ends; bodies that are no list.

use kube::core::ObjectList;
use serde_json::{json, Value};

use super::*;

fn json_reply(chunks: Vec<Vec<u8>>) -> Reply {
    Reply {
        content_type: JSON,
        ..proto(chunks)
    }
}

/// A list's text: its members in the order given.
fn json_list(members: &[(&str, String)]) -> String {
    let m: Vec<String> = members
        .iter()
        .map(|(k, v)| format!("{}:{v}", Value::from(*k)))
        .collect();
    format!("{{{}}}", m.join(","))
}

fn items_text(items: &[String]) -> String {
    format!("[{}]", items.join(","))
}

#[tokio::test]
async fn a_json_list_in_pieces_yields_its_objects_with_metadata_first_or_last() {
    let items = items_text(&[
        json_service("a", "7"),
        r#"{"metadata":{"name":"bad","namespace":"default","resourceVersion":"8"},"spec":{"ports":"no"}}"#.into(),
        json_service("c]}\\\"", "9"),
    ]);
    let meta = r#"{"resourceVersion":"10"}"#.to_string();
    let kind = r#""ServiceList""#.to_string();
    for order in [
        [
            ("kind", kind.clone()),
            ("metadata", meta.clone()),
            ("items", items.clone()),
        ],
        [
            ("items", items.clone()),
            ("kind", kind.clone()),
            ("metadata", meta.clone()),
        ],
    ] {
        let body = json_list(&order);
        for n in [1, 7, body.len()] {
            let (api, seen) = server(vec![json_reply(pieces(body.as_bytes(), n))]);
            let mut s = stream(&api);
            let got = take(&mut s, 5).await;
            assert_eq!(
                got[..2],
                ["Init", "InitApply a@7"],
                "{body} in pieces of {n}"
            );
            assert!(got[2].starts_with("InitApply bad@8 bad: "), "{got:?}");
            assert_eq!(got[3..], ["InitApply c]}\"@9", "InitDone"], "{got:?}");
            quiet(&mut s).await;
            assert!(
                uris(&seen)[1].contains("resourceVersion=10"),
                "{:?}",
                uris(&seen)
            );
        }
    }
}

#[tokio::test]
async fn json_items_are_handed_on_before_the_list_ends() {
    let body = json_list(&[
        ("metadata", r#"{"resourceVersion":"10"}"#.into()),
        (
            "items",
            items_text(&[
                json_service("a", "7"),
                json_service("b", "8"),
                json_service("c", "9"),
            ]),
        ),
    ]);
    handed_on_before_the_list_ends(json_reply(vec![body.as_bytes()[..body.len() - 4].to_vec()]))
        .await;
}

#[tokio::test]
async fn a_truncated_or_broken_json_list_is_a_failed_list() {
    let whole = json_list(&[
        ("metadata", r#"{"resourceVersion":"10"}"#.into()),
        (
            "items",
            items_text(&[json_service("a", "7"), json_service("b", "8")]),
        ),
    ]);
    let broken = whole.replace(r#""name":"b""#, r#""name":b"#);
    for (body, want) in [
        (&whole[..whole.len() - 1], "the JSON list ended at byte"),
        (&whole[..whole.len() / 2], "the JSON list ended at byte"),
        (&broken, "JSON: expected value"),
        ("[]", "not a JSON list: no object at byte 0"),
    ] {
        let (api, _) = server(vec![
            json_reply(pieces(body.as_bytes(), 5)),
            json_reply(vec![json_list(&[
                ("items", "[]".into()),
                ("metadata", r#"{"resourceVersion":"20"}"#.into()),
            ])
            .into_bytes()]),
        ]);
        let mut s = stream(&api);
        let mut got = Vec::new();
        while !got.contains(&"InitDone".to_string()) {
            got.extend(take(&mut s, 1).await);
        }
        let failed = got
            .iter()
            .position(|g| g.starts_with("Err failed to perform initial object list"))
            .unwrap_or_else(|| panic!("{body}: {got:?}"));
        assert!(got[failed].contains(want), "{want} in {got:?}");
        assert!(!got[..failed].contains(&"InitDone".to_string()), "{got:?}");
        assert_eq!(got[failed + 1..], ["Init", "InitDone"], "{got:?}");
    }
}

/// splitmix64: a seed reproduces a case.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn text(&mut self) -> String {
        const POOL: &[&str] = &[
            "a", "b", "z", "0", "-", ".", "\"", "\\", "]", "}", "[", "{", ",", ":", " ", "é", "😀",
            "\n", "\u{1}", "/",
        ];
        (0..self.below(12))
            .map(|_| POOL[self.below(POOL.len() as u64) as usize])
            .collect()
    }
    /// Junk a decoder skips: nested arrays and objects of awkward strings.
    fn junk(&mut self, depth: u32) -> Value {
        match (self.below(5), depth) {
            (0, d) if d < 4 => Value::Array((0..self.below(4)).map(|_| self.junk(d + 1)).collect()),
            (1, d) if d < 4 => {
                let mut m = serde_json::Map::new();
                for _ in 0..self.below(4) {
                    m.insert(self.text(), self.junk(d + 1));
                }
                Value::Object(m)
            }
            (2, _) => json!(self.next() as f64 / 7.0),
            (3, _) => Value::Null,
            _ => Value::String(self.text()),
        }
    }
}

/// A random item: a Service (with junk), one that does not decode, one without
/// metadata, or a scalar.
fn random_item(r: &mut Rng, i: usize) -> Value {
    let mut svc = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": format!("s{i}{}", r.text()),
            "namespace": r.text(),
            "resourceVersion": r.below(1000).to_string(),
            "annotations": {r.text(): r.text()},
            "managedFields": r.junk(0),
        },
        "spec": {
            "clusterIP": format!("198.18.{}.{}", r.below(256), r.below(256)),
            "ports": [{"port": 1 + r.below(65535), "protocol": "TCP", "name": r.text()}],
            "selector": {r.text(): r.text()},
        },
        "status": {"loadBalancer": {}},
    });
    svc[r.text()] = r.junk(0);
    match r.below(10) {
        0 => svc["spec"]["ports"] = json!("no"),
        1 => svc["spec"]["ports"][0]["port"] = json!(r.text()),
        2 => {
            svc.as_object_mut().map(|o| o.remove("metadata"));
        }
        3 => return [Value::Null, json!(5), json!(r.text())][r.below(3) as usize].clone(),
        _ => {}
    }
    svc
}

/// What an item is, to compare the two readings.
fn described(l: &Lenient<Service>) -> String {
    let m = l.meta();
    let who = format!("{:?}/{:?}@{:?}", m.namespace, m.name, m.resource_version);
    match l.object() {
        Ok(s) => format!("{who} {s:?}"),
        Err(_) => format!("{who} bad"),
    }
}

/// Random JSON lists (compact or pretty, metadata anywhere, awkward strings, junk,
/// items that do not decode) fed in random pieces: the same items and metadata as the
/// whole body decoded at once.
#[test]
fn random_json_lists_give_what_the_whole_body_gives() {
    for seed in 0..300u64 {
        let mut r = Rng(seed);
        let items: Vec<Value> = (0..r.below(6))
            .map(|i| random_item(&mut r, i as usize))
            .collect();
        let pretty = r.below(2) == 0;
        let text = |v: &Value| {
            if pretty {
                serde_json::to_string_pretty(v).unwrap()
            } else {
                v.to_string()
            }
        };
        let mut meta = json!({"resourceVersion": r.below(1000).to_string()});
        if r.below(2) == 0 {
            meta["continue"] = json!(r.text());
        }
        let mut members = vec![
            ("kind", "\"ServiceList\"".to_string()),
            ("apiVersion", "\"v1\"".to_string()),
            ("metadata", text(&meta)),
            ("items", text(&Value::Array(items))),
        ];
        let k = r.below(4) as usize;
        members.swap(2, k);
        let k = r.below(4) as usize;
        members.swap(3, k);
        let body = json_list(&members);

        let whole: ObjectList<Lenient<Service>> = serde_json::from_slice(body.as_bytes())
            .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{body}"));
        let want: Vec<String> = whole.items.iter().map(described).collect();
        let want_meta = (whole.metadata.resource_version, whole.metadata.continue_);

        let mut reader = ListBody::<Service>::of(Answer::Json);
        let (mut got, mut got_meta) = (Vec::new(), (None, None));
        let mut at = 0;
        while at < body.len() {
            let n = (1 + r.below(40) as usize).min(body.len() - at);
            for item in reader.feed(&body.as_bytes()[at..at + n], "/x").unwrap() {
                match item {
                    Listed::Object(o) => got.push(described(&o)),
                    Listed::Meta {
                        resource_version,
                        r#continue,
                    } => got_meta = (resource_version, r#continue),
                }
            }
            at += n;
        }
        reader
            .finish("/x")
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(got, want, "seed {seed}:\n{body}");
        assert_eq!(got_meta, want_meta, "seed {seed}");
    }
}
