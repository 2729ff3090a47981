//! Byte tests of the event parser, the flow's delete request and the BPF filter (run
//! by a small classic-BPF interpreter with the kernel's semantics for the
//! instructions it uses: a load past the end of the packet drops it).

use crate::bpf::*;
use crate::events::{parse_events_sysctl, EventsSysctl};
use crate::tests::hex;
use crate::wire::*;
use crate::*;
use nl_core::{NlaWriter, NLM_F_CREATE, NLM_F_EXCL};
use proptest::prelude::*;
use proptest::strategy::Strategy;
use std::net::IpAddr;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// An event as `ctnetlink_conntrack_event` lays it out.
#[derive(Debug, Clone)]
pub(crate) struct Ev {
    pub new: bool,
    pub proto: u8,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub reply_src: IpAddr,
    pub reply_sport: u16,
    pub zone: Option<u16>,
    pub tuple_zone: Option<u16>,
    pub id: Option<u32>,
}

impl Ev {
    pub fn udp4() -> Ev {
        Ev {
            new: true,
            proto: IPPROTO_UDP,
            src: ip("198.18.0.5"),
            dst: ip("198.18.0.10"),
            sport: 40000,
            dport: 53,
            reply_src: ip("198.18.1.7"),
            reply_sport: 5353,
            zone: None,
            tuple_zone: None,
            id: Some(0xdead_beef),
        }
    }

    pub fn udp6() -> Ev {
        Ev {
            src: ip("2001:db8::5"),
            dst: ip("2001:db8::10"),
            reply_src: ip("2001:db8:1::7"),
            ..Ev::udp4()
        }
    }

    fn tuple(&self, m: &mut NlaWriter, ty: u16, reply: bool) {
        let (src, dst, sport, dport) = if reply {
            (self.reply_src, self.src, self.reply_sport, self.sport)
        } else {
            (self.src, self.dst, self.sport, self.dport)
        };
        let t = m.begin(ty);
        let i = m.begin(CTA_TUPLE_IP);
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                m.bytes(CTA_IP_V4_SRC, &s.octets());
                m.bytes(CTA_IP_V4_DST, &d.octets());
            }
            (s, d) => {
                let o = |a: IpAddr| match a {
                    IpAddr::V6(v) => v.octets(),
                    IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
                };
                m.bytes(CTA_IP_V6_SRC, &o(s));
                m.bytes(CTA_IP_V6_DST, &o(d));
            }
        }
        m.end(i);
        let p = m.begin(CTA_TUPLE_PROTO);
        m.u8(CTA_PROTO_NUM, self.proto);
        m.be16(CTA_PROTO_SRC_PORT, sport);
        m.be16(CTA_PROTO_DST_PORT, dport);
        m.end(p);
        if let (Some(z), false) = (self.tuple_zone, reply) {
            m.be16(CTA_TUPLE_ZONE, z);
        }
        m.end(t);
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut m = NlaWriter::new();
        let (kind, flags) = if self.new {
            (MSG_CT_NEW, NLM_F_CREATE | NLM_F_EXCL)
        } else {
            (MSG_CT_DELETE, 0)
        };
        let s = m.begin_nfnl(kind, flags, 0, family_of(&self.src));
        self.tuple(&mut m, CTA_TUPLE_ORIG, false);
        self.tuple(&mut m, CTA_TUPLE_REPLY, true);
        if let Some(z) = self.zone {
            m.be16(CTA_ZONE, z);
        }
        if let Some(id) = self.id {
            m.be32(CTA_ID, id);
        }
        m.be32(3, 0x188); // CTA_STATUS
        m.be32(7, 30); // CTA_TIMEOUT
        m.be32(8, 0); // CTA_MARK
        m.end_msg(s);
        m.buf
    }

    pub fn flow(&self) -> Flow {
        Flow {
            proto: self.proto,
            src: self.src,
            dst: self.dst,
            sport: self.sport,
            dport: self.dport,
            reply_src: self.reply_src,
            reply_sport: self.reply_sport,
            zone: self.zone.or(self.tuple_zone).unwrap_or(0),
            id: self.id,
        }
    }
}

/// Classic BPF, the instructions the filter uses, the kernel's semantics.
pub(crate) fn run(prog: &[libc::sock_filter], pkt: &[u8]) -> u32 {
    let mut a: u32 = 0;
    let mut pc = 0usize;
    for _ in 0..=prog.len() {
        let i = prog[pc];
        pc += 1;
        let k = i.k as usize;
        match i.code {
            LD_H_ABS => match pkt.get(k..k + 2) {
                Some(b) => a = u32::from(u16::from_be_bytes([b[0], b[1]])),
                None => return 0,
            },
            LD_B_ABS => match pkt.get(k) {
                Some(&b) => a = u32::from(b),
                None => return 0,
            },
            LD_W_LEN => a = pkt.len() as u32,
            ALU_AND_K => a &= i.k,
            JMP_JEQ_K => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
            JMP_JGE_K => pc += usize::from(if a >= i.k { i.jt } else { i.jf }),
            RET_K => return i.k,
            c => panic!("instruction {c:#x} not interpreted"),
        }
    }
    panic!("program did not return");
}

fn keeps(pkt: &[u8]) -> bool {
    run(&udp_only(), pkt) != DROP
}

/// Events captured from Linux 6.18 (`EventSocket::recv_raw`, unfiltered socket):
/// a UDP entry inserted with a DNAT'ed reply (198.18.1.7:5353) in zone 5, its DESTROY,
/// and a TCP entry over IPv6.
const CAPTURED_UDP4_NEW: &str = "c00000000001000600000000524f000002000000340001801400018008000100c612000508000200c612000a1c0002800500010011000000060002009c4000000600030000350000340002801400018008000100c612010708000200c61200051c00028005000100110000000600020014e90000060003009c400000060012000005000008000c00dc0be78d080003000000000808000700000002581c0018800800010000000000080002000000000008000300000000000800080000000000";
const CAPTURED_UDP4_DESTROY: &str = "9c0000000201000000000000d4fa8fb602000000340001801400018008000100c612000508000200c612000a1c0002800500010011000000060002009c4000000600030000350000340002801400018008000100c612010708000200c61200051c00028005000100110000000600020014e90000060003009c400000060012000005000008000c00dc0be78d08000300000002080800070000000257";
const CAPTURED_TCP6_NEW: &str = "180100000001000600000000524f00000a0000004c0001802c0001801400030020010db80000000000000000000000051400040020010db80000000000000000000000101c000280050001000600000006000200a028000006000300005000004c0002802c0001801400030020010db80000000000000000000000101400040020010db80000000000000000000000051c0002800500010006000000060002000050000006000300a028000008000c00e6fe4c1108000300000000080800070000000258300004802c000180050001000000000005000200000000000500030000000000060004000000000006000500000000001c0018800800010000000000080002000000000008000300000000000800080000000000";

#[test]
#[cfg(target_endian = "little")]
fn captured_kernel_events_parse_and_filter() {
    let udp = Flow {
        id: Some(0xdc0b_e78d),
        zone: 5,
        ..Ev::udp4().flow()
    };
    let new = hex(CAPTURED_UDP4_NEW);
    assert_eq!(parse_event(&new), Some(FlowEvent::New(udp)));
    assert!(keeps(&new));
    let destroy = hex(CAPTURED_UDP4_DESTROY);
    assert_eq!(parse_event(&destroy), Some(FlowEvent::Destroy(udp)));
    assert!(keeps(&destroy));
    let tcp = hex(CAPTURED_TCP6_NEW);
    assert_eq!(tcp[76], IPPROTO_TCP);
    match parse_event(&tcp) {
        Some(FlowEvent::New(f)) => assert_eq!(
            f.to_string(),
            "tcp [2001:db8::5]:41000 -> [2001:db8::10]:80 reply from [2001:db8::10]:80 id 3875425297"
        ),
        other => panic!("{other:?}"),
    }
    assert!(
        !keeps(&tcp),
        "the kernel's TCP event is dropped by the filter"
    );
    // Our hand-built events have the kernel's layout up to the protocol number.
    let ours = Ev {
        zone: Some(5),
        ..Ev::udp4()
    }
    .bytes();
    assert_eq!(ours[16..53], new[16..53]);
}

#[test]
fn ipv4_new_event_with_id_parses() {
    let ev = Ev::udp4();
    let got = parse_event(&ev.bytes()).expect("parses");
    assert_eq!(got, FlowEvent::New(ev.flow()));
    let f = got.flow();
    assert_eq!(f.family(), Family::V4);
    assert!(!f.is_unnated());
    assert_eq!(f.id, Some(0xdead_beef));
    assert_eq!(f.zone, 0);
    assert_eq!(
        f.to_string(),
        "udp 198.18.0.5:40000 -> 198.18.0.10:53 reply from 198.18.1.7:5353 id 3735928559"
    );
}

#[test]
fn ipv6_destroy_event_with_zone_and_without_id_parses() {
    let ev = Ev {
        new: false,
        zone: Some(7),
        id: None,
        ..Ev::udp6()
    };
    let got = parse_event(&ev.bytes()).expect("parses");
    assert_eq!(got, FlowEvent::Destroy(ev.flow()));
    let f = got.flow();
    assert_eq!((f.family(), f.zone, f.id), (Family::V6, 7, None));
    assert_eq!(
        f.to_string(),
        "udp [2001:db8::5]:40000 -> [2001:db8::10]:53 reply from [2001:db8:1::7]:5353 zone 7"
    );
}

#[test]
fn a_direction_zone_is_the_zone_when_ctazone_is_absent() {
    let ev = Ev {
        tuple_zone: Some(9),
        ..Ev::udp4()
    };
    assert_eq!(parse_event(&ev.bytes()).unwrap().flow().zone, 9);
    let both = Ev {
        zone: Some(4),
        tuple_zone: Some(9),
        ..Ev::udp4()
    };
    assert_eq!(parse_event(&both.bytes()).unwrap().flow().zone, 4);
}

#[test]
fn unnated_means_the_reply_comes_from_the_original_destination() {
    let ev = Ev {
        reply_src: ip("198.18.0.10"),
        reply_sport: 53,
        ..Ev::udp4()
    };
    assert!(parse_event(&ev.bytes()).unwrap().flow().is_unnated());
    let other_port = Ev {
        reply_src: ip("198.18.0.10"),
        ..Ev::udp4()
    };
    assert!(!parse_event(&other_port.bytes())
        .unwrap()
        .flow()
        .is_unnated());
}

#[test]
fn other_messages_and_incomplete_entries_are_none() {
    let mut b = Ev::udp4().bytes();
    b[4..6].copy_from_slice(&MSG_CT_GET.to_ne_bytes());
    assert_eq!(parse_event(&b), None, "not an event type");
    // NLMSG_ERROR
    let mut e = Ev::udp4().bytes();
    e[4..6].copy_from_slice(&2u16.to_ne_bytes());
    assert_eq!(parse_event(&e), None);
    // Mixed families (IPv4 message, IPv6 reply): not a flow.
    let mixed = Ev {
        reply_src: ip("2001:db8::7"),
        ..Ev::udp4()
    };
    assert_eq!(parse_event(&mixed.bytes()), None);
    assert_eq!(parse_event(&[]), None);
    assert_eq!(parse_event(&[0xff; 3]), None);
}

#[test]
fn every_truncation_of_an_event_is_none_or_the_same_flow() {
    for ev in [Ev::udp4(), Ev::udp6()] {
        let b = ev.bytes();
        for cut in 0..b.len() {
            let mut t = b[..cut].to_vec();
            // keep the header's length consistent with the cut as well as not
            if cut >= 4 && cut % 2 == 0 {
                t[0..4].copy_from_slice(&(cut as u32).to_ne_bytes());
            }
            if let Some(got) = parse_event(&t) {
                // cut after the tuples: only optional attributes (id...) may be lost
                let f = got.flow();
                assert_eq!(
                    (f.src, f.dst, f.sport, f.dport),
                    (ev.src, ev.dst, 40000, 53)
                );
            }
        }
    }
}

#[test]
fn a_flow_deletes_by_its_tuple_zone_and_id() {
    let f = Ev {
        zone: Some(3),
        ..Ev::udp4()
    }
    .flow();
    let mut m = NlaWriter::new();
    f.put_delete(&mut m, 42);
    let msg = nl_core::NlMsgIter::new(&m.buf).next().unwrap();
    assert_eq!(msg.kind, MSG_CT_DELETE);
    assert_eq!(msg.seq, 42);
    assert_eq!(msg.flags, nl_core::NLM_F_REQUEST | nl_core::NLM_F_ACK);
    let e = parse_entry(msg.payload).unwrap();
    assert_eq!(e.family, AF_INET);
    assert_eq!(
        (
            e.orig.src,
            e.orig.dst,
            e.orig.proto,
            e.orig.sport,
            e.orig.dport
        ),
        (Some(f.src), Some(f.dst), Some(17), Some(40000), Some(53))
    );
    assert_eq!((e.zone, e.id), (Some(3), Some(0xdead_beef)));
    assert!(e.reply.src.is_none(), "no reply tuple in a delete");
    // zone 0 and no id: neither attribute
    let plain = Flow {
        zone: 0,
        id: None,
        ..f
    };
    let mut m = NlaWriter::new();
    plain.put_delete(&mut m, 1);
    let msg = nl_core::NlMsgIter::new(&m.buf).next().unwrap();
    let e = parse_entry(msg.payload).unwrap();
    assert_eq!((e.zone, e.id), (None, None));
}

#[test]
fn events_sysctl_values() {
    assert_eq!(parse_events_sysctl(Some("0\n")), EventsSysctl::Off);
    assert_eq!(parse_events_sysctl(Some("1\n")), EventsSysctl::On);
    assert_eq!(parse_events_sysctl(Some("2\n")), EventsSysctl::Auto);
    assert_eq!(parse_events_sysctl(Some("3\n")), EventsSysctl::Unreadable);
    assert_eq!(parse_events_sysctl(None), EventsSysctl::Unreadable);
}

// ---------------------------------------------------------------------------------
// The BPF filter.

#[test]
fn the_filter_program_is_well_formed() {
    let p = udp_only();
    assert!(p.len() < 100, "{} instructions", p.len());
    assert_eq!(p.last().unwrap().code, RET_K);
    for (i, ins) in p.iter().enumerate() {
        if ins.code & 0x07 == libc::BPF_JMP as u16 {
            for off in [ins.jt, ins.jf] {
                assert!(i + 1 + usize::from(off) < p.len(), "jump out of {i}");
            }
        }
    }
}

#[test]
fn the_filter_keeps_udp_and_drops_other_protocols_in_both_families() {
    for base in [Ev::udp4(), Ev::udp6()] {
        for new in [true, false] {
            for (zone, tuple_zone, id) in [(None, None, None), (Some(5), Some(6), Some(1))] {
                let ev = Ev {
                    new,
                    zone,
                    tuple_zone,
                    id,
                    ..base.clone()
                };
                assert!(keeps(&ev.bytes()), "udp dropped: {ev:?}");
                for proto in [IPPROTO_TCP, IPPROTO_SCTP, 1, 136, 0, 255] {
                    let other = Ev {
                        proto,
                        ..ev.clone()
                    };
                    assert!(!keeps(&other.bytes()), "proto {proto} kept: {other:?}");
                }
            }
        }
    }
}

#[test]
fn the_filter_accepts_what_it_cannot_confirm() {
    let tcp = Ev {
        proto: IPPROTO_TCP,
        ..Ev::udp4()
    };
    let b = tcp.bytes();
    assert!(!keeps(&b));
    // Every prefix of a TCP event: too short to confirm the protocol -> kept, unless
    // the protocol byte is in it.
    for cut in 0..b.len() {
        assert_eq!(keeps(&b[..cut]), cut <= 52, "cut at {cut}");
    }
    // Another message type or family.
    let mut other = b.clone();
    other[4..6].copy_from_slice(&MSG_CT_GET.to_ne_bytes());
    assert!(keeps(&other));
    let mut fam = b.clone();
    fam[16] = 7; // AF_BRIDGE
    assert!(keeps(&fam));
    // Another layout: an attribute before CTA_TUPLE_IP inside the original tuple, or
    // CTA_TUPLE_PROTO first, or an unexpected length or type anywhere on the path.
    for (at, v) in [
        (22usize, 5u16), // orig tuple type
        (24, 24),        // IP nest length
        (26, 2),         // IP nest type
        (28, 12),        // src attr length
        (30, 3),         // src attr type (an IPv6 src in an IPv4 message)
        (36, 9),         // dst attr length
        (38, 1),         // dst attr type
        (46, 1),         // proto nest type
        (48, 8),         // proto num length
        (50, 2),         // proto num type
    ] {
        let mut x = b.clone();
        x[at..at + 2].copy_from_slice(&v.to_ne_bytes());
        assert!(keeps(&x), "changed u16 at {at} to {v}: dropped");
    }
    // Types are compared without the NESTED/BYTEORDER flags.
    let mut flagless = b.clone();
    flagless[22..24].copy_from_slice(&CTA_TUPLE_ORIG.to_ne_bytes());
    assert!(!keeps(&flagless));
    // The constants are host-endian: a byte-swapped header is not confirmed.
    let mut swapped = b.clone();
    swapped[24..26].copy_from_slice(&20u16.to_be_bytes());
    assert_eq!(keeps(&swapped), cfg!(target_endian = "little"));
}

#[test]
fn ipv6_layout_offsets() {
    let tcp = Ev {
        proto: IPPROTO_TCP,
        ..Ev::udp6()
    };
    let b = tcp.bytes();
    assert_eq!(b[76], IPPROTO_TCP, "protocol number at 76");
    for cut in 0..b.len() {
        assert_eq!(keeps(&b[..cut]), cut <= 76, "cut at {cut}");
    }
    assert_eq!(Ev::udp4().bytes()[52], IPPROTO_UDP, "protocol number at 52");
}

fn arb_ip(v6: bool) -> BoxedStrategy<IpAddr> {
    if v6 {
        any::<[u8; 16]>().prop_map(IpAddr::from).boxed()
    } else {
        any::<[u8; 4]>().prop_map(IpAddr::from).boxed()
    }
}

fn arb_ev() -> impl Strategy<Value = Ev> {
    any::<bool>().prop_flat_map(|v6| {
        (
            (
                any::<bool>(),
                prop_oneof![Just(17u8), Just(6u8), Just(132u8), any::<u8>()],
            ),
            (arb_ip(v6), arb_ip(v6), arb_ip(v6)),
            (any::<u16>(), any::<u16>(), any::<u16>()),
            (
                proptest::option::of(1u16..),
                proptest::option::of(1u16..),
                proptest::option::of(any::<u32>()),
            ),
        )
            .prop_map(
                |(
                    (new, proto),
                    (src, dst, reply_src),
                    (sport, dport, reply_sport),
                    (zone, tuple_zone, id),
                )| Ev {
                    new,
                    proto,
                    src,
                    dst,
                    sport,
                    dport,
                    reply_src,
                    reply_sport,
                    zone,
                    tuple_zone,
                    id,
                },
            )
    })
}

proptest! {
    #[test]
    fn events_round_trip_and_the_filter_drops_exactly_non_udp(ev in arb_ev()) {
        let b = ev.bytes();
        let want = if ev.new { FlowEvent::New(ev.flow()) } else { FlowEvent::Destroy(ev.flow()) };
        prop_assert_eq!(parse_event(&b), Some(want));
        prop_assert_eq!(keeps(&b), ev.proto == IPPROTO_UDP);
    }

    /// Whatever is changed in an event, the filter never drops a message the parser
    /// reads as a UDP entry, and nothing panics.
    #[test]
    fn the_filter_never_drops_what_parses_as_udp(
        ev in arb_ev(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
        do_cut in any::<bool>(),
    ) {
        let mut b = ev.bytes();
        for (at, v) in edits {
            let i = at.index(b.len());
            b[i] = v;
        }
        if do_cut {
            b.truncate(cut.index(b.len() + 1));
        }
        if !keeps(&b) {
            let parsed = parse_event(&b);
            prop_assert!(parsed.is_none_or(|e| e.flow().proto != IPPROTO_UDP), "{:?}", parsed);
        }
    }

    #[test]
    fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = parse_event(&b);
        let _ = keeps(&b);
    }
}
