//! Byte tests: messages written by hand (nl-core's writer, independent of
//! netlink-packet-route's encoder) parse as the kernel means them; random and
//! mutated bytes never panic the parser.

use super::*;
use nl_core::{NlaWriter, NLM_F_MULTI};
use std::net::{Ipv4Addr, Ipv6Addr};

const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_LABEL: u16 = 3;

/// An address message as the kernel sends it: ifaddrmsg + attributes.
fn addr_msg(kind: u16, family: u8, prefix: u8, index: u32, attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut w = NlaWriter::new();
    let s = w.begin_msg(kind, NLM_F_MULTI, 9);
    w.buf.extend_from_slice(&[family, prefix, 0x80, 0]); // family, prefixlen, flags, scope
    w.buf.extend_from_slice(&index.to_ne_bytes());
    for (k, v) in attrs {
        w.bytes(*k, v);
    }
    w.end_msg(s);
    w.buf
}

fn v4() -> Vec<u8> {
    addr_msg(
        RTM_NEWADDR,
        2,
        24,
        7,
        &[
            (IFA_ADDRESS, vec![198, 18, 0, 2]),
            (IFA_LOCAL, vec![198, 18, 0, 1]),
            (IFA_LABEL, b"veth0\0".to_vec()),
        ],
    )
}

fn v6_removed() -> Vec<u8> {
    let a = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)
        .octets()
        .to_vec();
    addr_msg(RTM_DELADDR, 10, 64, 3, &[(IFA_ADDRESS, a)])
}

#[test]
fn new_and_deleted_addresses_parse() {
    assert_eq!(
        parse_addr_message(&v4()),
        Some(AddrEvent::Added(IfAddr {
            index: 7,
            addr: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), // IFA_LOCAL wins
            prefix_len: 24,
        }))
    );
    assert_eq!(
        parse_addr_message(&v6_removed()),
        Some(AddrEvent::Removed(IfAddr {
            index: 3,
            addr: "2001:db8::1".parse().unwrap(),
            prefix_len: 64,
        }))
    );
}

#[test]
fn other_and_empty_messages_are_no_event() {
    // An address message without an address, a link message, nothing at all.
    assert_eq!(
        parse_addr_message(&addr_msg(RTM_NEWADDR, 2, 24, 7, &[])),
        None
    );
    assert_eq!(parse_addr_message(&addr_msg(16, 0, 0, 1, &[])), None);
    assert_eq!(parse_addr_message(&[]), None);
}

#[test]
fn dump_request_is_getaddr_for_every_family() {
    let b = dump_request(1);
    let mut want = Vec::new();
    want.extend_from_slice(&24u32.to_ne_bytes());
    want.extend_from_slice(&22u16.to_ne_bytes()); // RTM_GETADDR
    want.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    want.extend_from_slice(&1u32.to_ne_bytes());
    want.extend_from_slice(&0u32.to_ne_bytes());
    want.extend_from_slice(&[0; 8]); // ifaddrmsg, AF_UNSPEC
    assert_eq!(b, want);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

    #[test]
    fn random_and_mutated_bytes_never_panic(
        random in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
        flips in proptest::collection::vec((proptest::num::usize::ANY, proptest::num::u8::ANY), 1..6),
        cut in proptest::num::usize::ANY,
    ) {
        let _ = parse_addr_message(&random);
        let mut b = [v4(), v6_removed()].concat();
        for (at, v) in flips {
            let i = at % b.len();
            b[i] = v;
        }
        for m in NlMsgIter::new(&b) {
            let _ = parse_addr_message(m.bytes);
        }
        let _ = parse_addr_message(&b[..cut % (b.len() + 1)]);
    }
}
