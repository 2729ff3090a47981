use super::*;
use proptest::prelude::*;

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|o| Value::Ipv4(o.into())),
        any::<[u8; 16]>().prop_map(|o| Value::Ipv6(o.into())),
        any::<u8>().prop_map(Value::Proto),
        any::<u16>().prop_map(Value::Port),
        any::<u32>().prop_map(Value::Mark),
        any::<u32>().prop_map(Value::Int),
        "[a-z0-9]{0,20}".prop_map(|s| Value::Ifname(s.into())),
    ]
}

fn verdict() -> impl Strategy<Value = Verdict> {
    prop_oneof![
        Just(Verdict::Accept),
        Just(Verdict::Drop),
        Just(Verdict::Continue),
        Just(Verdict::Return),
        "[a-z/-]{1,40}".prop_map(Verdict::Jump),
        "[a-z/-]{1,40}".prop_map(Verdict::Goto),
    ]
}

/// Every part an element may have: key and key end (concatenations of every value
/// type, IPv6 and interface names included), data values or a verdict, a timeout, a
/// comment (up to past the 255 bytes userdata can hold).
fn element() -> impl Strategy<Value = Element> {
    (
        prop::collection::vec(value(), 0..5),
        prop::option::of(prop::collection::vec(value(), 0..5)),
        prop::option::of(prop_oneof![
            prop::collection::vec(value(), 0..3).prop_map(ElemData::Values),
            verdict().prop_map(ElemData::Verdict),
        ]),
        prop::option::of(any::<u64>()),
        prop::option::of("[ -~]{0,300}"),
    )
        .prop_map(|(key, key_end, data, timeout_ms, comment)| {
            let mut e = match data {
                Some(d) => Element::map(key, d),
                None => Element::key(key),
            };
            e.set_key_end(key_end);
            e.set_timeout_ms(timeout_ms);
            e.set_comment(comment);
            e
        })
}

fn encoded(op: &ElementOp<'_>, i: usize) -> Vec<u8> {
    let mut w = NlaWriter::new();
    op.encode(i, &mut w, &mut Vec::new());
    assert_eq!(
        w.len(),
        op.len_of(i),
        "the length told is the length written"
    );
    w.buf
}

proptest! {
    /// A packed element encodes into exactly the bytes of the element it packs, and
    /// every element's length is known before it is written.
    #[test]
    fn packed_elements_encode_as_the_elements_they_pack(
        es in prop::collection::vec(element(), 1..8)
    ) {
        let t = TableRef::new(Family::Ip, "t");
        let packed: Vec<PackedElement> = es.iter().map(PackedElement::new).collect();
        let plain = Op::AddElements { table: t.clone(), set: "s".into(), elements: es.clone() };
        let pk = Op::AddPackedElements { table: t.clone(), set: "s".into(), elements: packed };
        let del = Op::DeleteElements { table: t, set: "s".into(), elements: es.clone() };
        let (plain, pk, del) = (
            ElementOp::of(&plain).unwrap(),
            ElementOp::of(&pk).unwrap(),
            ElementOp::of(&del).unwrap(),
        );
        for i in 0..es.len() {
            prop_assert_eq!(encoded(&pk, i), encoded(&plain, i));
            encoded(&del, i);
        }
    }
}
