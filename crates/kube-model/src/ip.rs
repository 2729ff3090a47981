//! Lenient IP and CIDR parsing, as Kubernetes' "sloppy" parsers accept: surrounding
//! whitespace is trimmed, IPv4 octets and IPv6 groups with leading zeros are read as
//! decimal and hex (any number of zeros), and IPv4-mapped IPv6 addresses (and prefixes of
//! length 96 or more) are IPv4.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An IP family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    pub fn of(ip: &IpAddr) -> IpFamily {
        if ip.is_ipv4() {
            IpFamily::V4
        } else {
            IpFamily::V6
        }
    }
    /// Kubernetes' name (`IPv4`, `IPv6`).
    pub fn k8s_name(self) -> &'static str {
        match self {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        }
    }
    pub fn from_k8s_name(s: &str) -> Option<IpFamily> {
        match s {
            "IPv4" => Some(IpFamily::V4),
            "IPv6" => Some(IpFamily::V6),
            _ => None,
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.k8s_name())
    }
}

/// Parse an address the way Kubernetes' sloppy parser does (`ParseIPSloppy`, Go 1.16's
/// grammar): IPv4 components may carry any number of leading zeros (read as decimal),
/// IPv6 groups too (so a group may be longer than four digits), an IPv6 text may end in
/// such a dotted IPv4; an IPv4-mapped IPv6 address is IPv4. Surrounding whitespace is
/// trimmed. `None` when it is not an address.
pub fn parse_ip_sloppy(s: &str) -> Option<IpAddr> {
    let s = s.trim();
    if s.is_empty() || s.len() > 256 {
        return None;
    }
    if s.contains(':') {
        return sloppy_v6(s).map(|a| IpAddr::V6(a).to_canonical());
    }
    sloppy_v4(s).map(IpAddr::V4)
}

/// Dotted decimal IPv4, each component digits with any number of leading zeros.
fn sloppy_v4(s: &str) -> Option<Ipv4Addr> {
    if let Ok(a) = s.parse::<Ipv4Addr>() {
        return Some(a);
    }
    let mut o = [0u8; 4];
    let mut parts = s.split('.');
    for x in o.iter_mut() {
        let p = parts.next()?;
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let digits = p.trim_start_matches('0');
        if digits.len() > 3 {
            return None;
        }
        *x = if digits.is_empty() {
            0
        } else {
            u8::try_from(digits.parse::<u16>().ok()?).ok()?
        };
    }
    parts.next().is_none().then(|| Ipv4Addr::from(o))
}

/// IPv6 text with leading zeros in its groups (any number) and in the components of a
/// dotted IPv4 tail: the zeros are dropped and the rest parsed strictly.
fn sloppy_v6(s: &str) -> Option<Ipv6Addr> {
    if let Ok(a) = s.parse::<Ipv6Addr>() {
        return Some(a);
    }
    let (head, tail) = match s.rfind(':') {
        Some(i) if s[i + 1..].contains('.') => (&s[..=i], Some(sloppy_v4(&s[i + 1..])?)),
        _ => (s, None),
    };
    let mut out = String::with_capacity(s.len());
    for (k, g) in head.split(':').enumerate() {
        if k > 0 {
            out.push(':');
        }
        if g.is_empty() {
            continue;
        }
        if !g.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let digits = g.trim_start_matches('0');
        out.push_str(if digits.is_empty() { "0" } else { digits });
    }
    if let Some(t) = tail {
        out.push_str(&t.to_string());
    }
    out.parse().ok()
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

/// A text that is not a CIDR (for [`Cidr`]'s `FromStr`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a cidr: {0:?}")]
pub struct NotACidr(pub String);

impl std::str::FromStr for Cidr {
    type Err = NotACidr;
    /// As [`parse_cidr_sloppy`].
    fn from_str(s: &str) -> Result<Cidr, NotACidr> {
        parse_cidr_sloppy(s).ok_or_else(|| NotACidr(s.to_string()))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// An address as a number in its family's range (IPv4 in the low 32 bits).
fn ordinal(a: &IpAddr) -> (bool, u128) {
    match a {
        IpAddr::V4(a) => (false, u128::from(u32::from(*a))),
        IpAddr::V6(a) => (true, u128::from(*a)),
    }
}

fn from_ordinal(v6: bool, n: u128) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(n))
    } else {
        // an IPv4 ordinal came from a u32 (ordinal), so the cast keeps it whole
        IpAddr::V4(Ipv4Addr::from(n as u32))
    }
}

/// Inclusive address ranges with every overlap merged: the fewest ranges covering the
/// same addresses such that no two overlap, sorted, IPv4 first. An interval set (an
/// nftables set with `flags interval`) refuses overlapping elements, so every list of
/// ranges that reaches one goes through here. Ranges that only touch are kept apart
/// (they do not overlap, and a prefix stays a prefix). A range whose start is after its
/// end, or whose ends are of two families, is left out.
pub fn merge_ranges(ranges: impl IntoIterator<Item = (IpAddr, IpAddr)>) -> Vec<(IpAddr, IpAddr)> {
    let mut v: Vec<(bool, u128, u128)> = ranges
        .into_iter()
        .filter_map(|(a, z)| {
            let ((fa, a), (fz, z)) = (ordinal(&a), ordinal(&z));
            (fa == fz && a <= z).then_some((fa, a, z))
        })
        .collect();
    v.sort_unstable();
    let mut out: Vec<(bool, u128, u128)> = Vec::with_capacity(v.len());
    for (f, a, z) in v {
        match out.last_mut() {
            Some((lf, _, lz)) if *lf == f && a <= *lz => *lz = (*lz).max(z),
            _ => out.push((f, a, z)),
        }
    }
    out.into_iter()
        .map(|(f, a, z)| (from_ordinal(f, a), from_ordinal(f, z)))
        .collect()
}

/// The prefixes of `cidrs` that no other one contains (duplicates once), in order: the
/// same addresses, each covered once. Two prefixes either nest or are disjoint, so this
/// is [`merge_ranges`] for prefixes; a rule per prefix (service CIDRs, cluster CIDRs,
/// nodePortAddresses) then never tests an address twice.
pub fn outermost(cidrs: &[Cidr]) -> Vec<Cidr> {
    let mut out: Vec<Cidr> = Vec::with_capacity(cidrs.len());
    for c in cidrs {
        let covered = cidrs
            .iter()
            .any(|o| o.prefix < c.prefix && o.contains(&c.addr))
            || out.contains(c);
        if !covered {
            out.push(*c);
        }
    }
    out
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

/// Parse `addr/prefix` leniently, as `ParseCIDRSloppy`: the address as
/// [`parse_ip_sloppy`], the length decimal with any number of leading zeros, at most the
/// width of the address as written (32 for dotted IPv4, 128 for IPv6 text); host bits
/// are cleared. An IPv4-mapped IPv6 prefix is the IPv4 prefix of length - 96 when the
/// length is at least 96; a shorter one masks the mapping away and is the IPv6 prefix
/// (`::ffff:198.19.0.0/120` is 198.19.0.0/24, `::ffff:198.19.0.0/64` is `::/64`).
/// A bare address is a host prefix.
pub fn parse_cidr_sloppy(s: &str) -> Option<Cidr> {
    let s = s.trim();
    let (a, p) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let prefix = match p {
        Some(p) => {
            let p = p.trim();
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let digits = p.trim_start_matches('0');
            if digits.len() > 3 {
                return None;
            }
            Some(if digits.is_empty() {
                0
            } else {
                digits.parse::<u8>().ok()?
            })
        }
        None => None,
    };
    let a = a.trim();
    if a.contains(':') {
        let v6 = sloppy_v6(a)?;
        let prefix = prefix.unwrap_or(128);
        return match v6.to_ipv4_mapped() {
            Some(v4) if prefix >= 96 => Cidr::new(IpAddr::V4(v4), prefix - 96),
            _ if prefix > 128 => None,
            _ => Cidr::new(IpAddr::V6(v6), prefix),
        };
    }
    let v4 = sloppy_v4(a)?;
    Cidr::new(IpAddr::V4(v4), prefix.unwrap_or(32))
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
            "2001:db8:10000::1",
            "2001:db8::5::1",
            "0x1.2.3.4",
        ] {
            assert_eq!(parse_ip_sloppy(bad), None, "{bad}");
        }
    }

    /// Legacy texts the API server stored (and still serves for old objects) as
    /// kube-proxy's `ParseIPSloppy` reads them; each failed before the parser learnt it.
    #[test]
    fn legacy_ips() {
        for (text, want) in [
            ("0198.018.0000.00010", "198.18.0.10"),
            ("::FFFF:198.018.001.005", "198.18.1.5"),
            ("::ffff:c612:105", "198.18.1.5"),
            ("2001:00db8:0::00005", "2001:db8::5"),
            ("2001:DB8:251:0:0:0:000.000.001.005", "2001:db8:251::105"),
            ("2001:db8:251::0.0.1.5", "2001:db8:251::105"),
        ] {
            assert_eq!(parse_ip_sloppy(text), Some(text_ip(want)), "{text}");
        }
    }

    #[test]
    fn legacy_cidrs() {
        for (text, want) in [
            ("198.019.000.000/0024", "198.19.0.0/24"),
            ("198.19.7.9/16", "198.19.0.0/16"),
            ("::ffff:198.19.0.0/120", "198.19.0.0/24"),
            ("::ffff:198.019.0.9/96", "0.0.0.0/0"),
            ("::ffff:198.19.0.0/64", "::/64"),
            ("::ffff:198.19.0.0/24", "::/24"),
            ("2001:00DB8:300:0:0:0:0:1/048", "2001:db8:300::/48"),
        ] {
            assert_eq!(
                parse_cidr_sloppy(text).map(|c| c.to_string()).as_deref(),
                Some(want),
                "{text}"
            );
        }
        for bad in [
            "198.19.0.0/33",
            "::ffff:198.19.0.0/129",
            "2001:db8::/129",
            "198.19.0.0/2a",
        ] {
            assert_eq!(parse_cidr_sloppy(bad), None, "{bad}");
        }
    }

    fn text_ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn range(a: &str, z: &str) -> (IpAddr, IpAddr) {
        (a.parse().unwrap(), z.parse().unwrap())
    }

    #[test]
    fn overlapping_ranges_merge_touching_ones_stay_apart() {
        let all4 = range("0.0.0.0", "255.255.255.255");
        let all6 = range("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");
        let net = range("198.18.0.0", "198.18.255.255");
        let sub = range("198.18.1.0", "198.18.1.255");
        let host = range("198.18.250.4", "198.18.250.4");
        let next = range("198.19.0.0", "198.19.0.255");
        // nested, duplicated, a host inside: one range
        assert_eq!(merge_ranges([sub, net, host, net]), vec![net]);
        // everything: one range per family, IPv4 first
        assert_eq!(merge_ranges([all6, host, all4, net]), vec![all4, all6]);
        // touching (198.18.255.255 then 198.19.0.0): two
        assert_eq!(merge_ranges([next, net]), vec![net, next]);
        // partial overlap of two ranges
        assert_eq!(
            merge_ranges([
                range("198.18.0.10", "198.18.0.20"),
                range("198.18.0.15", "198.18.0.30")
            ]),
            vec![range("198.18.0.10", "198.18.0.30")]
        );
        // the end of the family does not overflow
        assert_eq!(
            merge_ranges([range("255.255.255.255", "255.255.255.255"), all4]),
            vec![all4]
        );
        // reversed or mixed ends are left out
        assert!(merge_ranges([range("198.18.0.2", "198.18.0.1")]).is_empty());
        assert!(merge_ranges([range("198.18.0.1", "2001:db8::1")]).is_empty());
    }

    #[test]
    fn outermost_prefixes() {
        let c = |s: &str| parse_cidr_sloppy(s).unwrap();
        assert_eq!(
            outermost(&[
                c("198.18.1.0/24"),
                c("198.18.0.0/16"),
                c("2001:db8::/64"),
                c("198.18.0.0/16"),
                c("198.19.0.0/16"),
                c("2001:db8::/32"),
            ]),
            vec![c("198.18.0.0/16"), c("198.19.0.0/16"), c("2001:db8::/32")]
        );
        assert_eq!(
            outermost(&[c("198.18.0.0/15"), c("0.0.0.0/0")]),
            vec![c("0.0.0.0/0")]
        );
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
