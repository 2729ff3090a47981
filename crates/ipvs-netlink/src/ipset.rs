//! kube-proxy IPVS mode's ipsets over nfnetlink ipset (`linux/netfilter/ipset/ip_set.h`):
//! whether a set exists (IPSET_CMD_HEADER) and destroying it (IPSET_CMD_DESTROY), by
//! exact name. A set still referenced (by an iptables rule, a list:set) is busy and
//! stays: destroy the sets only after the rules using them are gone.

use crate::{socket, Error, OPTS};
use nl_core::{Control, NlSocket, NlaIter, NlaWriter, ReadError, NETLINK_NETFILTER};
use nl_core::{NLM_F_ACK, NLM_F_EXCL, NLM_F_REQUEST};

const NFNL_SUBSYS_IPSET: u16 = 6;
const IPSET_CMD_DESTROY: u16 = 3;
const IPSET_CMD_HEADER: u16 = 12;
const IPSET_ATTR_PROTOCOL: u16 = 1;
const IPSET_ATTR_SETNAME: u16 = 2;
const IPSET_ATTR_TYPENAME: u16 = 3;
/// Protocol 7, as the ipset tool of kernels since 4.17 speaks it (kube-nlproxy needs 5.13).
const IPSET_PROTOCOL: u8 = 7;
/// `IPSET_MAXNAMELEN` minus the NUL.
pub const MAX_NAME: usize = 31;

const AF_INET: u8 = 2;
const ENOENT: i32 = 2;
/// `IPSET_ERR_BUSY` (IPSET_ERR_PRIVATE 4096 + 4): the set is referenced.
const IPSET_ERR_BUSY: i32 = 4100;

/// The sets kube-proxy's IPVS proxier creates for IPv4 (upstream's `ipsetInfo`, with
/// the two SCTP names of releases before the `-HASH` sets).
pub const KUBE_PROXY_SETS_V4: [&str; 19] = [
    "KUBE-LOOP-BACK",
    "KUBE-CLUSTER-IP",
    "KUBE-EXTERNAL-IP",
    "KUBE-EXTERNAL-IP-LOCAL",
    "KUBE-LOAD-BALANCER",
    "KUBE-LOAD-BALANCER-FW",
    "KUBE-LOAD-BALANCER-LOCAL",
    "KUBE-LOAD-BALANCER-SOURCE-IP",
    "KUBE-LOAD-BALANCER-SOURCE-CIDR",
    "KUBE-NODE-PORT-TCP",
    "KUBE-NODE-PORT-LOCAL-TCP",
    "KUBE-NODE-PORT-UDP",
    "KUBE-NODE-PORT-LOCAL-UDP",
    "KUBE-NODE-PORT-SCTP-HASH",
    "KUBE-NODE-PORT-LOCAL-SCTP-HASH",
    "KUBE-NODE-PORT-SCTP",
    "KUBE-NODE-PORT-LOCAL-SCTP",
    "KUBE-HEALTH-CHECK-NODE-PORT",
    "KUBE-IPVS-IPS",
];

/// The IPv6 name upstream derives from an IPv4 one: `KUBE-` becomes `KUBE-6-`, cut to
/// 31 characters.
pub fn v6_name(v4: &str) -> String {
    let mut n = match v4.strip_prefix("KUBE-") {
        Some(rest) => format!("KUBE-6-{rest}"),
        None => v4.to_string(),
    };
    n.truncate(MAX_NAME);
    n
}

/// Every set name kube-proxy's IPVS mode may have created, IPv4 then IPv6. Exact
/// names: kube-router's `KUBE-SRC-*`/`KUBE-DST-*`/`kube-router-*` are never among them.
pub fn kube_proxy_sets() -> Vec<String> {
    let v4 = KUBE_PROXY_SETS_V4.iter().map(|s| s.to_string());
    let v6 = KUBE_PROXY_SETS_V4.iter().map(|s| v6_name(s));
    v4.chain(v6).collect()
}

fn request(seq: u32, cmd: u16, flags: u16, name: &str) -> Vec<u8> {
    let mut w = NlaWriter::new();
    let s = w.begin_nfnl((NFNL_SUBSYS_IPSET << 8) | cmd, flags, seq, AF_INET);
    w.u8(IPSET_ATTR_PROTOCOL, IPSET_PROTOCOL);
    w.str(IPSET_ATTR_SETNAME, name);
    w.end_msg(s);
    w.buf
}

/// IPSET_CMD_HEADER for `name`: answered with the set's header, or ENOENT.
pub fn header_request(seq: u32, name: &str) -> Vec<u8> {
    request(seq, IPSET_CMD_HEADER, NLM_F_REQUEST | NLM_F_ACK, name)
}

/// IPSET_CMD_DESTROY for `name`, with `NLM_F_EXCL` as the ipset tool sends it: without
/// it the kernel answers success for a set that does not exist.
pub fn destroy_request(seq: u32, name: &str) -> Vec<u8> {
    request(
        seq,
        IPSET_CMD_DESTROY,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_EXCL,
        name,
    )
}

/// The set type (`hash:ip,port`, ...) in a header answer's payload (after nlmsghdr).
/// Never panics.
pub fn parse_header_type(payload: &[u8]) -> Option<String> {
    let (_, _, attrs) = nl_core::split_nfgen(payload)?;
    NlaIter::new(attrs)
        .find(|a| a.kind == IPSET_ATTR_TYPENAME)
        .and_then(|a| a.str())
        .map(str::to_string)
}

/// What destroying a set did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetRemoval {
    Absent,
    Destroyed,
    /// Referenced by a rule or another set: left in place.
    Busy,
}

/// An nfnetlink socket for ipset requests, in the calling thread's namespace.
pub struct Ipset {
    sock: NlSocket,
}

impl Ipset {
    pub fn open() -> Result<Ipset, Error> {
        Ok(Ipset {
            sock: socket("nfnetlink ipset", NETLINK_NETFILTER)?,
        })
    }

    /// The type of the set named `name`, if it exists.
    pub fn find(&mut self, name: &str) -> Result<Option<String>, Error> {
        let mut ty = None;
        let r = self.sock.request(
            &OPTS,
            |w, seq| w.buf.extend_from_slice(&header_request(seq, name)),
            |m| {
                ty = parse_header_type(m.payload);
                Control::Continue
            },
        );
        match r {
            Ok(_) => Ok(Some(ty.unwrap_or_default())),
            Err(ReadError::Kernel(ENOENT)) => Ok(None),
            Err(source) => Err(Error::Read {
                op: format!("ipset header {name}"),
                source,
            }),
        }
    }

    /// Destroy the set named `name`.
    pub fn destroy(&mut self, name: &str) -> Result<SetRemoval, Error> {
        match self.sock.request(
            &OPTS,
            |w, seq| w.buf.extend_from_slice(&destroy_request(seq, name)),
            |_| Control::Continue,
        ) {
            Ok(_) => Ok(SetRemoval::Destroyed),
            Err(ReadError::Kernel(ENOENT)) => Ok(SetRemoval::Absent),
            Err(ReadError::Kernel(IPSET_ERR_BUSY)) => Ok(SetRemoval::Busy),
            Err(source) => Err(Error::Read {
                op: format!("ipset destroy {name}"),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_upstreams_exact_ones_in_both_families() {
        let all = kube_proxy_sets();
        assert_eq!(all.len(), 38);
        for n in &all {
            assert!(n.len() <= MAX_NAME, "{n}");
        }
        for n in [
            "KUBE-CLUSTER-IP",
            "KUBE-6-CLUSTER-IP",
            "KUBE-6-LOOP-BACK",
            // upstream cuts these two to 31 characters
            "KUBE-6-LOAD-BALANCER-SOURCE-CID",
            "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS",
            "KUBE-6-IPVS-IPS",
        ] {
            assert!(all.iter().any(|a| a == n), "{n}");
        }
        for n in [
            "KUBE-SRC-4N57TFCL4MD7ZTDA",
            "KUBE-DST-4N57TFCL4MD7ZTDA",
            "kube-router-pod-subnets",
            "inet6:kube-router-node-ips",
            "KUBE-CLUSTER-IP-BACKUP",
            "KUBE-6-LOAD-BALANCER-SOURCE-CIDR",
        ] {
            assert!(!all.iter().any(|a| a == n), "{n}");
        }
    }

    #[test]
    fn requests_carry_protocol_and_name() {
        let mut want = Vec::new();
        let body = [
            5, 0, 1, 0, 7, 0, 0, 0, // protocol 7
            20, 0, 2, 0, // setname, 16 bytes
        ];
        nl_core::msg::push_nfnl(
            &mut want,
            (6 << 8) | 3,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_EXCL,
            9,
            2,
            0,
            &[&body[..], b"KUBE-CLUSTER-IP\0"].concat(),
        );
        assert_eq!(destroy_request(9, "KUBE-CLUSTER-IP"), want);
        let h = header_request(9, "KUBE-CLUSTER-IP");
        assert_eq!(u16::from_ne_bytes([h[4], h[5]]), (6 << 8) | 12);
        assert_eq!(u16::from_ne_bytes([h[6], h[7]]), NLM_F_REQUEST | NLM_F_ACK);
        assert_eq!(h[16..], want[16..]);
    }

    #[test]
    fn header_answers_give_the_type() {
        let mut w = NlaWriter::new();
        w.buf.extend_from_slice(&[2, 0, 0, 0]);
        w.u8(IPSET_ATTR_PROTOCOL, 7);
        w.str(IPSET_ATTR_SETNAME, "KUBE-CLUSTER-IP");
        w.str(IPSET_ATTR_TYPENAME, "hash:ip,port");
        assert_eq!(parse_header_type(&w.buf).as_deref(), Some("hash:ip,port"));
        for cut in 0..w.buf.len() {
            let _ = parse_header_type(&w.buf[..cut]);
        }
    }
}
