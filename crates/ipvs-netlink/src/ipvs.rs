//! IPVS virtual services over generic netlink (family `IPVS`, version 1,
//! `linux/ip_vs.h`): dump them, delete one, and pick those kube-proxy's IPVS mode owns.

use crate::genl::open_family;
use crate::{Error, OPTS};
use netlink_packet_core::{
    DecodeError, Emitable, NetlinkHeader, NetlinkMessage, NetlinkPayload, ParseableParametrized,
};
use netlink_packet_generic::{GenlFamily, GenlHeader, GenlMessage};
use nl_core::{
    Control, NlSocket, NlaIter, NlaWriter, OnLoss, ReadError, ReadOpts, NLM_F_ACK, NLM_F_DUMP,
    NLM_F_REQUEST,
};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const IPVS_GENL_NAME: &str = "IPVS";
pub const IPVS_GENL_VERSION: u8 = 1;

const IPVS_CMD_NEW_SERVICE: u8 = 1;
const IPVS_CMD_DEL_SERVICE: u8 = 3;
const IPVS_CMD_GET_SERVICE: u8 = 4;
const IPVS_CMD_ATTR_SERVICE: u16 = 1;

const IPVS_SVC_ATTR_AF: u16 = 1;
const IPVS_SVC_ATTR_PROTOCOL: u16 = 2;
const IPVS_SVC_ATTR_ADDR: u16 = 3;
const IPVS_SVC_ATTR_PORT: u16 = 4;
const IPVS_SVC_ATTR_FWMARK: u16 = 5;
const IPVS_SVC_ATTR_SCHED_NAME: u16 = 6;

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;
/// The service is gone already.
const ESRCH: i32 = 3;

/// One IPVS message payload: the command and its attributes (raw, written and read
/// with nl-core); `netlink-packet-generic` frames it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpvsMsg {
    pub cmd: u8,
    pub attrs: Vec<u8>,
}

impl GenlFamily for IpvsMsg {
    fn family_name() -> &'static str {
        IPVS_GENL_NAME
    }
    fn command(&self) -> u8 {
        self.cmd
    }
    fn version(&self) -> u8 {
        IPVS_GENL_VERSION
    }
}

impl Emitable for IpvsMsg {
    fn buffer_len(&self) -> usize {
        self.attrs.len()
    }
    fn emit(&self, buffer: &mut [u8]) {
        buffer[..self.attrs.len()].copy_from_slice(&self.attrs);
    }
}

impl ParseableParametrized<[u8], GenlHeader> for IpvsMsg {
    fn parse_with_param(buf: &[u8], header: GenlHeader) -> Result<Self, DecodeError> {
        Ok(IpvsMsg {
            cmd: header.cmd,
            attrs: buf.to_vec(),
        })
    }
}

/// What identifies a virtual service.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    /// Protocol (6, 17, 132), address and port: what kube-proxy creates.
    Addr {
        protocol: u16,
        addr: IpAddr,
        port: u16,
    },
    /// A firewall-mark service (`ipvsadm -f`); kube-proxy never creates one.
    Fwmark { af: u16, mark: u32 },
}

/// A virtual service as the kernel lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VirtualService {
    pub key: Key,
    pub scheduler: Option<String>,
}

impl fmt::Display for VirtualService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Key::Addr {
                protocol,
                addr,
                port,
            } => {
                let p = match protocol {
                    6 => "TCP".to_string(),
                    17 => "UDP".to_string(),
                    132 => "SCTP".to_string(),
                    n => format!("protocol {n}"),
                };
                match addr {
                    IpAddr::V4(a) => write!(f, "{p} {a}:{port}"),
                    IpAddr::V6(a) => write!(f, "{p} [{a}]:{port}"),
                }
            }
            Key::Fwmark { af, mark } => {
                let fam = if *af == AF_INET6 { "IPv6" } else { "IPv4" };
                write!(f, "fwmark {mark} ({fam})")
            }
        }
    }
}

fn message(seq: u32, family: u16, flags: u16, cmd: u8, attrs: Vec<u8>) -> Vec<u8> {
    let mut hdr = NetlinkHeader::default();
    hdr.flags = flags;
    hdr.sequence_number = seq;
    let mut payload = GenlMessage::from_payload(IpvsMsg { cmd, attrs });
    payload.set_resolved_family_id(family);
    let mut msg = NetlinkMessage::new(hdr, NetlinkPayload::from(payload));
    msg.finalize();
    let mut buf = vec![0; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

/// IPVS_CMD_GET_SERVICE as a dump: every virtual service of the namespace.
pub fn dump_request(seq: u32, family: u16) -> Vec<u8> {
    message(
        seq,
        family,
        NLM_F_REQUEST | NLM_F_DUMP,
        IPVS_CMD_GET_SERVICE,
        Vec::new(),
    )
}

/// IPVS_CMD_DEL_SERVICE for `s` (address family, then protocol, address and port, or
/// the firewall mark), asking for an ACK.
pub fn delete_request(seq: u32, family: u16, s: &VirtualService) -> Vec<u8> {
    let mut w = NlaWriter::new();
    let n = w.begin(IPVS_CMD_ATTR_SERVICE);
    match &s.key {
        Key::Addr {
            protocol,
            addr,
            port,
        } => {
            let (af, bytes) = match addr {
                IpAddr::V4(a) => {
                    let mut b = [0u8; 16];
                    b[..4].copy_from_slice(&a.octets());
                    (AF_INET, b)
                }
                IpAddr::V6(a) => (AF_INET6, a.octets()),
            };
            w.bytes(IPVS_SVC_ATTR_AF, &af.to_ne_bytes());
            w.bytes(IPVS_SVC_ATTR_PROTOCOL, &protocol.to_ne_bytes());
            w.bytes(IPVS_SVC_ATTR_ADDR, &bytes);
            w.be16(IPVS_SVC_ATTR_PORT, *port);
        }
        Key::Fwmark { af, mark } => {
            w.bytes(IPVS_SVC_ATTR_AF, &af.to_ne_bytes());
            w.ne32(IPVS_SVC_ATTR_FWMARK, *mark);
        }
    }
    w.end(n);
    message(
        seq,
        family,
        NLM_F_REQUEST | NLM_F_ACK,
        IPVS_CMD_DEL_SERVICE,
        w.buf,
    )
}

fn u16_ne(d: &[u8]) -> Option<u16> {
    Some(u16::from_ne_bytes(d.get(..2)?.try_into().ok()?))
}

/// The virtual service in one IPVS_CMD_NEW_SERVICE message (a whole netlink message,
/// header included). Anything else, or anything malformed, gives `None`. Never panics.
pub fn parse_service(bytes: &[u8]) -> Option<VirtualService> {
    let msg = NetlinkMessage::<GenlMessage<IpvsMsg>>::deserialize(bytes).ok()?;
    let NetlinkPayload::InnerMessage(m) = msg.payload else {
        return None;
    };
    if m.payload.cmd != IPVS_CMD_NEW_SERVICE {
        return None;
    }
    let svc = NlaIter::new(&m.payload.attrs).find(|a| a.kind == IPVS_CMD_ATTR_SERVICE)?;
    let (mut af, mut protocol, mut addr, mut port, mut mark, mut sched) =
        (None, None, None, None, None, None);
    for a in svc.nested() {
        match a.kind {
            IPVS_SVC_ATTR_AF => af = u16_ne(a.data),
            IPVS_SVC_ATTR_PROTOCOL => protocol = u16_ne(a.data),
            IPVS_SVC_ATTR_ADDR => addr = Some(a.data),
            IPVS_SVC_ATTR_PORT => port = a.be16(),
            IPVS_SVC_ATTR_FWMARK => mark = a.ne32(),
            IPVS_SVC_ATTR_SCHED_NAME => sched = a.str().map(str::to_string),
            _ => {}
        }
    }
    let af = af?;
    let key = match mark.filter(|m| *m != 0) {
        Some(mark) => Key::Fwmark { af, mark },
        None => {
            let raw = addr?;
            let addr = match af {
                AF_INET => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(raw.get(..4)?).ok()?)),
                AF_INET6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(raw.get(..16)?).ok()?)),
                _ => return None,
            };
            Key::Addr {
                protocol: protocol?,
                addr,
                port: port?,
            }
        }
    };
    Some(VirtualService {
        key,
        scheduler: sched,
    })
}

/// A CIDR (`ipvs.excludeCIDRs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    /// `ADDR/PREFIX`; `None` if it is not one.
    pub fn parse(s: &str) -> Option<Cidr> {
        let (a, p) = s.trim().split_once('/')?;
        let addr: IpAddr = a.parse().ok()?;
        let prefix: u8 = p.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        (prefix <= max).then_some(Cidr { addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let bits = |a: IpAddr| match a {
            IpAddr::V4(v) => (u128::from(u32::from(v)) << 96, 32u32),
            IpAddr::V6(v) => (u128::from(v), 128u32),
        };
        let ((net, max), (x, xmax)) = (bits(self.addr), bits(ip));
        if max != xmax {
            return false;
        }
        let p = u32::from(self.prefix).min(max);
        let mask = if p == 0 { 0 } else { u128::MAX << (128 - p) };
        net & mask == x & mask
    }
}

/// The virtual services kube-proxy's IPVS mode owns, as its proxier decides on every
/// sync: every address-based service whose address is not inside `exclude`
/// (`ipvs.excludeCIDRs`, the setting that lets other IPVS users keep their services).
/// Firewall-mark services are never kube-proxy's. Returns (kube-proxy's, others').
pub fn kube_proxy_services(
    all: &[VirtualService],
    exclude: &[Cidr],
) -> (Vec<VirtualService>, Vec<VirtualService>) {
    all.iter().cloned().partition(|s| match &s.key {
        Key::Addr { addr, .. } => !exclude.iter().any(|c| c.contains(*addr)),
        Key::Fwmark { .. } => false,
    })
}

/// The IPVS family of the calling thread's network namespace.
pub struct Ipvs {
    sock: NlSocket,
    family: u16,
}

impl Ipvs {
    /// `None` when the kernel has no IPVS (module `ip_vs` not loaded: then no virtual
    /// service exists). Never loads a module.
    pub fn open() -> Result<Option<Ipvs>, Error> {
        Ok(open_family(IPVS_GENL_NAME)?.map(|(sock, family)| Ipvs { sock, family }))
    }

    /// Every virtual service (the dump is restarted when interrupted).
    pub fn services(&mut self) -> Result<Vec<VirtualService>, Error> {
        let family = self.family;
        let mut out = std::collections::BTreeSet::new();
        let opts = ReadOpts {
            on_loss: OnLoss::Drain,
            ..OPTS
        };
        let run = self
            .sock
            .dump(
                3,
                &opts,
                |w, seq| w.buf.extend_from_slice(&dump_request(seq, family)),
                |m| {
                    out.extend(parse_service(m.bytes));
                    Control::Continue
                },
            )
            .map_err(|source| Error::Read {
                op: "IPVS service dump".into(),
                source,
            })?;
        if run.incomplete {
            return Err(Error::Incomplete {
                op: "IPVS service dump".into(),
            });
        }
        Ok(out.into_iter().collect())
    }

    /// Delete one virtual service (with its real servers). `false` if it was gone.
    pub fn delete(&mut self, s: &VirtualService) -> Result<bool, Error> {
        let family = self.family;
        match self.sock.request(
            &OPTS,
            |w, seq| w.buf.extend_from_slice(&delete_request(seq, family, s)),
            |_| Control::Continue,
        ) {
            Ok(_) => Ok(true),
            Err(ReadError::Kernel(ESRCH)) => Ok(false),
            Err(source) => Err(Error::Read {
                op: format!("IPVS delete service {s}"),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests;
