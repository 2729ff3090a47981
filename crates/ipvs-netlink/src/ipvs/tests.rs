//! Byte tests: requests as `ipvsadm`/libnl send them and services as the kernel dumps
//! them (written here with nl-core's writer, independent of the code under test);
//! random and mutated bytes never panic the parser.

use super::*;

const FAMILY: u16 = 0x22;

/// nlmsghdr + genlmsghdr (cmd, version 1, reserved) + attributes.
fn genl(cmd: u8, flags: u16, seq: u32, attrs: &[u8]) -> Vec<u8> {
    let mut w = NlaWriter::new();
    let s = w.begin_msg(FAMILY, flags, seq);
    w.buf.extend_from_slice(&[cmd, 1, 0, 0]);
    w.buf.extend_from_slice(attrs);
    w.end_msg(s);
    w.buf
}

/// A service as `ip_vs_genl_fill_service` writes it.
fn kernel_service(af: u16, proto: u16, addr: &[u8], port: u16, mark: u32) -> Vec<u8> {
    let mut w = NlaWriter::new();
    let n = w.begin(IPVS_CMD_ATTR_SERVICE);
    w.bytes(IPVS_SVC_ATTR_AF, &af.to_ne_bytes());
    if mark != 0 {
        w.ne32(IPVS_SVC_ATTR_FWMARK, mark);
    } else {
        w.bytes(IPVS_SVC_ATTR_PROTOCOL, &proto.to_ne_bytes());
        let mut a = [0u8; 16];
        a[..addr.len()].copy_from_slice(addr);
        w.bytes(IPVS_SVC_ATTR_ADDR, &a);
        w.be16(IPVS_SVC_ATTR_PORT, port);
    }
    w.str(IPVS_SVC_ATTR_SCHED_NAME, "rr");
    w.bytes(7, &[0; 8]); // flags
    w.ne32(8, 0); // timeout
    w.ne32(9, 0xffff_ffff); // netmask
    let st = w.begin(10); // stats
    w.ne32(1, 5);
    w.end(st);
    w.end(n);
    genl(IPVS_CMD_NEW_SERVICE, nl_core::NLM_F_MULTI, 7, &w.buf)
}

fn v4(proto: u16, a: [u8; 4], port: u16) -> VirtualService {
    VirtualService {
        key: Key::Addr {
            protocol: proto,
            addr: IpAddr::from(a),
            port,
        },
        scheduler: Some("rr".into()),
    }
}

#[test]
fn dump_request_is_get_service_with_dump_flags() {
    assert_eq!(
        dump_request(4, FAMILY),
        genl(IPVS_CMD_GET_SERVICE, NLM_F_REQUEST | NLM_F_DUMP, 4, &[])
    );
}

#[test]
fn delete_request_names_the_service_by_protocol_address_and_port() {
    let mut w = NlaWriter::new();
    let n = w.begin(IPVS_CMD_ATTR_SERVICE);
    w.bytes(IPVS_SVC_ATTR_AF, &2u16.to_ne_bytes());
    w.bytes(IPVS_SVC_ATTR_PROTOCOL, &6u16.to_ne_bytes());
    w.bytes(
        IPVS_SVC_ATTR_ADDR,
        &[198, 18, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    );
    w.bytes(IPVS_SVC_ATTR_PORT, &[0, 80]);
    w.end(n);
    let want = genl(IPVS_CMD_DEL_SERVICE, NLM_F_REQUEST | NLM_F_ACK, 9, &w.buf);
    assert_eq!(
        delete_request(9, FAMILY, &v4(6, [198, 18, 0, 10], 80)),
        want
    );

    let fw = VirtualService {
        key: Key::Fwmark { af: 10, mark: 7 },
        scheduler: None,
    };
    let mut w = NlaWriter::new();
    let n = w.begin(IPVS_CMD_ATTR_SERVICE);
    w.bytes(IPVS_SVC_ATTR_AF, &10u16.to_ne_bytes());
    w.bytes(IPVS_SVC_ATTR_FWMARK, &7u32.to_ne_bytes());
    w.end(n);
    assert_eq!(
        delete_request(1, FAMILY, &fw),
        genl(IPVS_CMD_DEL_SERVICE, NLM_F_REQUEST | NLM_F_ACK, 1, &w.buf)
    );
}

#[test]
fn dumped_services_parse() {
    assert_eq!(
        parse_service(&kernel_service(2, 17, &[198, 18, 0, 10], 53, 0)),
        Some(v4(17, [198, 18, 0, 10], 53))
    );
    let a6: Ipv6Addr = "2001:db8::10".parse().unwrap();
    let s = parse_service(&kernel_service(10, 6, &a6.octets(), 443, 0)).unwrap();
    assert_eq!(s.to_string(), "TCP [2001:db8::10]:443");
    let fw = parse_service(&kernel_service(2, 0, &[], 0, 9)).unwrap();
    assert_eq!(fw.key, Key::Fwmark { af: 2, mark: 9 });
    assert_eq!(fw.to_string(), "fwmark 9 (IPv4)");
    // another command, or no service attribute: nothing
    assert_eq!(parse_service(&genl(IPVS_CMD_GET_SERVICE, 0, 1, &[])), None);
    assert_eq!(parse_service(&genl(IPVS_CMD_NEW_SERVICE, 0, 1, &[])), None);
}

#[test]
fn excluded_cidrs_and_fwmark_services_are_not_kube_proxys() {
    let a = v4(6, [198, 18, 0, 10], 80);
    let b = v4(17, [198, 19, 7, 1], 53);
    let c = VirtualService {
        key: Key::Addr {
            protocol: 6,
            addr: "2001:db8:7::1".parse().unwrap(),
            port: 80,
        },
        scheduler: None,
    };
    let fw = VirtualService {
        key: Key::Fwmark { af: 2, mark: 1 },
        scheduler: None,
    };
    let all = vec![a.clone(), b.clone(), c.clone(), fw.clone()];
    let (ours, others) = kube_proxy_services(&all, &[]);
    assert_eq!((ours.len(), others), (3, vec![fw.clone()]));
    let ex = [
        Cidr::parse("198.19.0.0/16").unwrap(),
        Cidr::parse("2001:db8:7::/48").unwrap(),
    ];
    let (ours, others) = kube_proxy_services(&all, &ex);
    assert_eq!(ours, vec![a]);
    assert_eq!(others, vec![b, c, fw]);
}

#[test]
fn cidrs_parse_and_contain() {
    let c = Cidr::parse("198.18.0.0/15").unwrap();
    assert!(c.contains("198.19.255.1".parse().unwrap()));
    assert!(!c.contains("198.20.0.1".parse().unwrap()));
    assert!(!c.contains("2001:db8::1".parse().unwrap()));
    assert!(Cidr::parse("0.0.0.0/0")
        .unwrap()
        .contains("198.18.0.1".parse().unwrap()));
    assert!(Cidr::parse("2001:db8::1/128")
        .unwrap()
        .contains("2001:db8::1".parse().unwrap()));
    for bad in ["198.18.0.0", "198.18.0.0/33", "x/8", "2001:db8::/129", ""] {
        assert_eq!(Cidr::parse(bad), None, "{bad}");
    }
}

proptest::proptest! {
    #[test]
    fn random_and_mutated_bytes_never_panic(
        buf in proptest::collection::vec(proptest::num::u8::ANY, 0..256),
        at in 0usize..200, val in proptest::num::u8::ANY,
    ) {
        let _ = parse_service(&buf);
        let mut m = kernel_service(2, 17, &[198, 18, 0, 10], 53, 0);
        let i = at % m.len();
        m[i] = val;
        let _ = parse_service(&m);
        let _ = parse_service(&m[..i]);
    }
}
