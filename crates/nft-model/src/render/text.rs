//! Values, verdicts and durations as nft prints them.

use crate::expr::*;
use crate::value::*;

/// A typed value as nft prints it.
pub fn value(v: &Value) -> String {
    match v {
        Value::Ipv4(a) => a.to_string(),
        Value::Ipv6(a) => a.to_string(),
        Value::Proto(p) => proto_name(*p),
        Value::Port(p) => p.to_string(),
        Value::Mark(m) => format!("0x{m:08x}"),
        Value::Int(i) => i.to_string(),
        Value::Ifname(n) => quote(n),
    }
}

/// A verdict as nft prints it.
pub fn verdict(v: &Verdict) -> String {
    match v {
        Verdict::Accept => "accept".into(),
        Verdict::Drop => "drop".into(),
        Verdict::Continue => "continue".into(),
        Verdict::Return => "return".into(),
        Verdict::Jump(c) => format!("jump {c}"),
        Verdict::Goto(c) => format!("goto {c}"),
    }
}

/// A duration in nft's spelling: `3h`, `1m30s`, `1s500ms`, `1d`.
pub fn duration(ms: u64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = ms;
    for (unit, name) in [
        (86_400_000u64, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1000, "s"),
        (1, "ms"),
    ] {
        let n = rest / unit;
        rest %= unit;
        if n > 0 {
            out.push_str(&format!("{n}{name}"));
        }
    }
    out
}

/// A quoted string (comments, interface names). The model refuses quotes in comments.
pub(super) fn quote(s: &str) -> String {
    format!("\"{s}\"")
}

/// Protocol names as nft prints them (`getprotobynumber`, Debian's `/etc/protocols`).
pub(super) fn proto_name(p: u8) -> String {
    let name = match p {
        0 => "ip",
        1 => "icmp",
        2 => "igmp",
        3 => "ggp",
        4 => "ipencap",
        5 => "st",
        6 => "tcp",
        8 => "egp",
        9 => "igp",
        12 => "pup",
        17 => "udp",
        20 => "hmp",
        22 => "xns-idp",
        27 => "rdp",
        29 => "iso-tp4",
        33 => "dccp",
        36 => "xtp",
        37 => "ddp",
        38 => "idpr-cmtp",
        41 => "ipv6",
        43 => "ipv6-route",
        44 => "ipv6-frag",
        45 => "idrp",
        46 => "rsvp",
        47 => "gre",
        50 => "esp",
        51 => "ah",
        57 => "skip",
        58 => "ipv6-icmp",
        59 => "ipv6-nonxt",
        60 => "ipv6-opts",
        73 => "rspf",
        81 => "vmtp",
        88 => "eigrp",
        89 => "ospf",
        93 => "ax.25",
        94 => "ipip",
        97 => "etherip",
        98 => "encap",
        103 => "pim",
        108 => "ipcomp",
        112 => "vrrp",
        115 => "l2tp",
        124 => "isis",
        132 => "sctp",
        133 => "fc",
        135 => "mobility-header",
        136 => "udplite",
        137 => "mpls-in-ip",
        138 => "manet",
        139 => "hip",
        140 => "shim6",
        141 => "wesp",
        142 => "rohc",
        143 => "ethernet",
        _ => return p.to_string(),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration(10_800_000), "3h");
        assert_eq!(duration(90_000), "1m30s");
        assert_eq!(duration(1500), "1s500ms");
        assert_eq!(duration(86_400_000 + 3_723_004), "1d1h2m3s4ms");
    }
}
