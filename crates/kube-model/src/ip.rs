//! Lenient IP and CIDR parsing, as Kubernetes' "sloppy" parsers accept: surrounding
//! whitespace is trimmed, IPv4 octets with leading zeros are read as decimal, and
//! IPv4-mapped IPv6 addresses are IPv4.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::model::IpFamily;

/// Parse an address the way Kubernetes' sloppy parser does. `None` when it is not one.
pub fn parse_ip_sloppy(s: &str) -> Option<IpAddr> {
    let s = s.trim();
    if s.is_empty() || s.len() > 64 {
        return None;
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    // IPv4 with leading zeros: "010.020.030.041" is 10.20.30.41.
    let parts: Vec<&str> = s.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    let mut o = [0u8; 4];
    for (i, p) in parts.iter().enumerate() {
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        o[i] = p.parse::<u16>().ok().filter(|v| *v <= 255)? as u8;
    }
    Some(IpAddr::V4(Ipv4Addr::from(o)))
}

/// An address prefix; the address is always the network address (host bits cleared).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    /// A prefix of `addr`; host bits are cleared. `None` when the prefix is too long.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Cidr> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return None;
        }
        let first = match addr {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask32(prefix))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask128(prefix))),
        };
        Some(Cidr {
            addr: first,
            prefix,
        })
    }

    pub fn family(&self) -> IpFamily {
        IpFamily::of(&self.addr)
    }

    pub fn contains(&self, ip: &IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => u32::from(*a) & mask32(self.prefix) == u32::from(n),
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                u128::from(*a) & mask128(self.prefix) == u128::from(n)
            }
            _ => false,
        }
    }

    /// The last address of the prefix.
    pub fn last(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(n) => IpAddr::V4(Ipv4Addr::from(u32::from(n) | !mask32(self.prefix))),
            IpAddr::V6(n) => IpAddr::V6(Ipv6Addr::from(u128::from(n) | !mask128(self.prefix))),
        }
    }

    /// The netmask as bytes (4 or 16).
    pub fn mask_bytes(&self) -> Vec<u8> {
        match self.addr {
            IpAddr::V4(_) => mask32(self.prefix).to_be_bytes().to_vec(),
            IpAddr::V6(_) => mask128(self.prefix).to_be_bytes().to_vec(),
        }
    }

    /// Whether this prefix covers its whole family (`0.0.0.0/0`, `::/0`).
    pub fn is_all(&self) -> bool {
        self.prefix == 0
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn mask32(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix.min(32)))
    }
}

fn mask128(prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(prefix.min(128)))
    }
}

/// Parse `addr/prefix` leniently (see [`parse_ip_sloppy`]); a bare address is a host prefix.
/// Host bits are cleared.
pub fn parse_cidr_sloppy(s: &str) -> Option<Cidr> {
    let s = s.trim();
    let (a, p) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let addr = parse_ip_sloppy(a)?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = match p {
        Some(p) => {
            let p = p.trim();
            if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            p.parse::<u8>().ok()?
        }
        None => max,
    };
    Cidr::new(addr, prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sloppy_ips() {
        assert_eq!(
            parse_ip_sloppy(" 198.18.0.1 "),
            Some("198.18.0.1".parse().unwrap())
        );
        assert_eq!(
            parse_ip_sloppy("198.018.000.001"),
            Some("198.18.0.1".parse().unwrap())
        );
        assert_eq!(
            parse_ip_sloppy("::ffff:198.18.0.1"),
            Some("198.18.0.1".parse().unwrap())
        );
        assert_eq!(
            parse_ip_sloppy("2001:db8::1"),
            Some("2001:db8::1".parse().unwrap())
        );
        for bad in [
            "",
            "198.18.0",
            "198.18.0.256",
            "1.2.3.4.5",
            "x",
            "198.18.0.1/32",
            "1..2.3",
        ] {
            assert_eq!(parse_ip_sloppy(bad), None, "{bad}");
        }
    }

    #[test]
    fn cidrs() {
        let c = parse_cidr_sloppy("198.18.5.7/16").unwrap();
        assert_eq!(c.to_string(), "198.18.0.0/16");
        assert!(c.contains(&"198.18.200.1".parse().unwrap()));
        assert!(!c.contains(&"198.19.0.1".parse().unwrap()));
        assert_eq!(c.last().to_string(), "198.18.255.255");
        assert_eq!(parse_cidr_sloppy("198.18.0.1").unwrap().prefix, 32);
        assert_eq!(
            parse_cidr_sloppy("2001:db8::/32")
                .unwrap()
                .last()
                .to_string(),
            "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"
        );
        assert!(parse_cidr_sloppy("198.18.0.0/33").is_none());
        assert!(parse_cidr_sloppy("0.0.0.0/0").unwrap().is_all());
    }
}
