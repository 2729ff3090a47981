use super::*;
use crate::object::Set;
use crate::value::{concat_into, DataType};
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
        "[a-z/-]{0,20}".prop_map(Verdict::Jump),
        "[a-z/-]{0,20}".prop_map(Verdict::Goto),
    ]
}

pub(crate) fn element() -> impl Strategy<Value = Element> {
    (
        prop::collection::vec(value(), 0..5),
        prop::option::of(prop::collection::vec(value(), 0..5)),
        prop::option::of(prop_oneof![
            prop::collection::vec(value(), 0..3).prop_map(ElemData::Values),
            verdict().prop_map(ElemData::Verdict),
        ]),
        prop::option::of(any::<u64>()),
        prop::option::of("[ -~]{0,20}"),
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

fn kernel(values: &[Value]) -> Vec<u8> {
    let mut out = vec![7];
    concat_into(values, &mut out);
    out
}

fn packed_kernel(v: PackedValues<'_>) -> Vec<u8> {
    let mut out = vec![7];
    v.put_concat(&mut out);
    assert_eq!(out.len() - 1, v.concat_len(), "the length told");
    out
}

proptest! {
    /// Packing keeps everything, and packed identities order exactly as the
    /// elements' (key, key end) do.
    #[test]
    fn packing_round_trips_and_keeps_the_order(a in element(), b in element()) {
        let (pa, pb) = (PackedElement::new(&a), PackedElement::new(&b));
        prop_assert_eq!(pa.element(), a.clone());
        // unpacked at their size (tables hold millions of these vectors)
        prop_assert_eq!(pa.element().key.capacity(), a.key.len());
        prop_assert_eq!(pb.element(), b.clone());
        let want = (&a.key, a.key_end()).cmp(&(&b.key, b.key_end()));
        prop_assert_eq!(pa.identity().cmp(&pb.identity()), want);
        prop_assert_eq!(pa == pb, a == b);
    }

    /// The kernel layout of every part read from the packed bytes is what the unpacked
    /// element's values give (what the wire layer encodes from either).
    #[test]
    fn the_kernel_layout_is_the_unpacked_elements(e in element()) {
        let p = PackedElement::new(&e);
        prop_assert_eq!(packed_kernel(p.key()), kernel(&e.key));
        prop_assert_eq!(p.key_end().map(packed_kernel), e.key_end().map(kernel));
        match (p.data(), &e.data) {
            (None, None) => {}
            (Some(PackedData::Values(v)), Some(ElemData::Values(want))) => {
                prop_assert_eq!(packed_kernel(v), kernel(want));
            }
            (Some(PackedData::Verdict(v)), Some(ElemData::Verdict(want))) => {
                prop_assert_eq!(&v, want);
            }
            (got, want) => prop_assert!(false, "data {:?} for {:?}", got, want),
        }
        prop_assert_eq!(p.timeout_ms(), e.timeout_ms());
        prop_assert_eq!(p.comment(), e.comment().map(str::to_string));
    }

    #[test]
    fn values_without_an_element_pack_the_same(
        key in prop::collection::vec(value(), 1..5),
        data in prop::option::of(prop::collection::vec(value(), 1..3)),
    ) {
        let e = match &data {
            Some(d) => Element::map(key.clone(), ElemData::Values(d.clone())),
            None => Element::key(key.clone()),
        };
        let k: Vec<&Value> = key.iter().collect();
        let d: Option<Vec<&Value>> = data.as_ref().map(|d| d.iter().collect());
        prop_assert_eq!(PackedElement::values(&k, d.as_deref()), PackedElement::new(&e));
    }

    /// Elements sorted by their packed identity are sorted by (key, key end).
    #[test]
    fn sorting_packed_sorts_the_elements(es in prop::collection::vec(element(), 0..20)) {
        let mut packed: Vec<PackedElement> = es.iter().map(PackedElement::new).collect();
        packed.sort_by(|a, b| a.identity().cmp(&b.identity()));
        let got: Vec<Element> = packed.iter().map(|p| p.element()).collect();
        let mut want = es.clone();
        want.sort_by(|a, b| (&a.key, a.key_end()).cmp(&(&b.key, b.key_end())));
        let ids = |v: &[Element]| -> Vec<(Vec<Value>, Option<Vec<Value>>)> {
            v.iter().map(|e| (e.key.clone(), e.key_end().map(<[Value]>::to_vec))).collect()
        };
        prop_assert_eq!(ids(&got), ids(&want));
    }
}

/// An interface name longer than a register is cut to 16 bytes, a short one padded,
/// alone or in a concatenation, as `Value::put_bytes` does.
#[test]
fn interface_names_take_sixteen_bytes() {
    for name in ["", "eth0", "a-very-long-interface-name"] {
        let alone = vec![Value::Ifname(name.into())];
        let concat = vec![Value::Ifname(name.into()), Value::Port(80)];
        for key in [alone, concat] {
            let p = PackedElement::new(&Element::key(key.clone()));
            assert_eq!(packed_kernel(p.key()), kernel(&key), "{name:?}");
        }
    }
}

#[test]
fn an_endpoint_element_is_small() {
    let e = Element::map(
        vec![
            Value::Ipv4([198, 18, 0, 1].into()),
            Value::Proto(6),
            Value::Port(80),
            Value::Int(3),
        ],
        ElemData::Values(vec![
            Value::Ipv4([198, 18, 128, 1].into()),
            Value::Port(8080),
        ]),
    );
    assert_eq!(PackedElement::new(&e).packed_len(), 27);
    // a hairpin pair: with the Arc's counts, 32 bytes (an allocator size class)
    let a = Value::Ipv4([198, 18, 128, 1].into());
    assert_eq!(PackedElement::values(&[&a, &a], None).packed_len(), 14);
}

/// Sections longer than 255 bytes (a long chain name, a long interface name) take the
/// wide trailer, and everything still round-trips.
#[test]
fn long_sections_take_the_wide_trailer() {
    let long = "c".repeat(300);
    let e = Element::map(
        vec![Value::Ifname("x".repeat(400).into())],
        ElemData::Verdict(Verdict::Goto(long)),
    )
    .with_timeout_ms(5)
    .with_comment("note");
    let p = PackedElement::new(&e);
    assert_eq!(p.element(), e);
    assert_eq!(p.identity().0.len(), 402);
}

/// A packed table unpacks to the table with its elements in place, and is visited
/// element by element.
#[test]
fn a_packed_table_unpacks_in_place() {
    let port = |p| Element::key(vec![Value::Port(p)]);
    let mut t = Table::new(crate::Family::Ip, "t");
    let mut plain = Set::set("plain", vec![DataType::InetService]);
    plain.elements = vec![port(1)];
    t.sets.push(plain);
    t.sets.push(Set::set("big", vec![DataType::InetService]));
    let mut want = t.clone();
    want.sets[1].elements = vec![port(2), port(3)];
    let packed = PackedTable {
        table: t,
        packed: BTreeMap::from([(
            "big".to_string(),
            vec![PackedElement::new(&port(2)), PackedElement::new(&port(3))],
        )]),
    };
    let mut seen = Vec::new();
    packed.each_element("big", |e| seen.push(e.clone()));
    packed.each_element("plain", |e| seen.push(e.clone()));
    assert_eq!(seen, vec![port(2), port(3), port(1)]);
    assert_eq!(packed.unpack(), want);
}
