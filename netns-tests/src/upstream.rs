//! kube-proxy's own rulesets, generated here in the shapes upstream writes, for the
//! live-migration test (kube-proxy's rules in place before the daemon takes over) and
//! for `daemon-bench` (the peers: `nft -f` of the nftables mode, `iptables-restore` of
//! the iptables mode, for the same cluster as the daemon's).
//!
//! (a) iptables mode, as `iptables-restore` input: KUBE-SERVICES, KUBE-SVC-/KUBE-SEP-/
//! KUBE-EXT- chains with upstream's hashes, DNAT, masquerade mark; (b) nftables mode, as
//! `nft -f` input: table `ip kube-proxy` with the service-ips and service-nodeports verdict
//! maps, per-service chains, numgen vmaps, per-endpoint DNAT chains.

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::cluster::{CLUSTER_CIDR4, NODE_A4, SERVICE_CIDR4};

/// One service port as kube-proxy sees it.
#[derive(Debug, Clone)]
pub struct Port {
    /// The service's namespace and name.
    pub ns: String,
    pub svc: String,
    /// The port's name and protocol (`tcp`, `udp`, lowercase as in upstream's names).
    pub name: String,
    pub proto: String,
    pub cluster_ip: String,
    pub port: u16,
    pub target: u16,
    pub node_port: Option<u16>,
    pub endpoints: Vec<IpAddr>,
}

impl Port {
    /// `ns/name:port`, upstream's ServicePortName.
    pub fn spn(&self) -> String {
        format!("{}/{}:{}", self.ns, self.svc, self.name)
    }
}

fn sha256_base32(s: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, s.as_bytes());
    const ALPHA: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut out = String::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for &b in d.as_ref() {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHA[((acc >> bits) & 31) as usize] as char);
        }
        acc &= (1 << bits) - 1;
    }
    out
}

/// Upstream's iptables-mode chain hash: base32(sha256(ServicePortName + protocol
/// [+ endpoint]))[:16].
pub fn hash16(s: &str) -> String {
    sha256_base32(s)[..16].to_string()
}

/// kube-proxy's iptables mode for `ports` (as `iptables-restore` input), in the shape
/// `pkg/proxy/iptables` writes: the fixed chains and jumps, per-service KUBE-SVC-, per
/// endpoint KUBE-SEP- (statistic random), KUBE-EXT- for NodePorts, masquerade by mark.
pub fn iptables_mode(ports: &[Port]) -> String {
    let mut nat_chains = vec![
        "KUBE-SERVICES".to_string(),
        "KUBE-POSTROUTING".into(),
        "KUBE-MARK-MASQ".into(),
        "KUBE-NODEPORTS".into(),
        "KUBE-PROXY-CANARY".into(),
    ];
    let mut nat = Vec::new();
    let mut nodeports = Vec::new();
    for p in ports {
        let spn = p.spn();
        let svc = format!("KUBE-SVC-{}", hash16(&format!("{spn}{}", p.proto)));
        nat_chains.push(svc.clone());
        nat.push(format!(
            "-A KUBE-SERVICES -d {}/32 -p {proto} -m comment --comment \"{spn} cluster IP\" -m {proto} --dport {} -j {svc}",
            p.cluster_ip, p.port, proto = p.proto
        ));
        nat.push(format!(
            "-A {svc} ! -s {CLUSTER_CIDR4} -d {}/32 -p {proto} -m comment --comment \"{spn} cluster IP\" -m {proto} --dport {} -j KUBE-MARK-MASQ",
            p.cluster_ip, p.port, proto = p.proto
        ));
        let n = p.endpoints.len();
        for (i, ep) in p.endpoints.iter().enumerate() {
            let epstr = format!("{ep}:{}", p.target);
            let sep = format!("KUBE-SEP-{}", hash16(&format!("{spn}{}{epstr}", p.proto)));
            nat_chains.push(sep.clone());
            let stat = if i + 1 < n {
                format!(
                    " -m statistic --mode random --probability {:.11}",
                    1.0 / (n - i) as f64
                )
            } else {
                String::new()
            };
            nat.push(format!(
                "-A {svc} -m comment --comment \"{spn} -> {epstr}\"{stat} -j {sep}"
            ));
            nat.push(format!(
                "-A {sep} -s {ep}/32 -m comment --comment \"{spn}\" -j KUBE-MARK-MASQ"
            ));
            nat.push(format!(
                "-A {sep} -p {proto} -m comment --comment \"{spn}\" -m {proto} -j DNAT --to-destination {epstr}",
                proto = p.proto
            ));
        }
        if let Some(np) = p.node_port {
            let ext = format!("KUBE-EXT-{}", hash16(&format!("{spn}{}", p.proto)));
            nat_chains.push(ext.clone());
            nodeports.push(format!(
                "-A KUBE-NODEPORTS -p {proto} -m comment --comment \"{spn}\" -m {proto} --dport {np} -j {ext}",
                proto = p.proto
            ));
            nodeports.push(format!(
                "-A {ext} -m comment --comment \"masquerade traffic for {spn} external destinations\" -j KUBE-MARK-MASQ"
            ));
            nodeports.push(format!("-A {ext} -j {svc}"));
        }
    }
    let mut out = String::from(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n",
    );
    for c in &nat_chains {
        out += &format!(":{c} - [0:0]\n");
    }
    out += "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
            -A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
            -A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\n\
            -A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n\
            -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n\
            -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000\n\
            -A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully\n";
    for l in nat.iter().chain(&nodeports) {
        out += l;
        out.push('\n');
    }
    out += &format!(
        "-A KUBE-SERVICES -d {NODE_A4}/32 -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -j KUBE-NODEPORTS\nCOMMIT\n"
    );
    out += "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
            :KUBE-SERVICES - [0:0]\n:KUBE-EXTERNAL-SERVICES - [0:0]\n:KUBE-FORWARD - [0:0]\n\
            :KUBE-NODEPORTS - [0:0]\n:KUBE-PROXY-FIREWALL - [0:0]\n:KUBE-PROXY-CANARY - [0:0]\n\
            -A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL\n\
            -A INPUT -m comment --comment \"kubernetes health check service ports\" -j KUBE-NODEPORTS\n\
            -A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES\n\
            -A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL\n\
            -A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD\n\
            -A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
            -A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES\n\
            -A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL\n\
            -A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
            -A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP\n\
            -A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT\n\
            -A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n\
            COMMIT\n*mangle\n:PREROUTING ACCEPT [0:0]\n:KUBE-PROXY-CANARY - [0:0]\nCOMMIT\n";
    out
}

/// Upstream's nftables-mode chain name: prefix, the first 8 characters of
/// base32(sha256(base)), and the base `ns/name/proto/port`.
pub fn nft_chain(prefix: &str, base: &str) -> String {
    format!("{prefix}-{}-{base}", &sha256_base32(base)[..8])
}

/// kube-proxy's nftables mode for `ports` (as `nft -f` input), in the shape
/// `pkg/proxy/nftables` writes (`ip kube-proxy`).
pub fn nftables_mode(ports: &[Port]) -> String {
    let mut chains = String::new();
    let mut service_ips = Vec::new();
    let mut service_nodeports = Vec::new();
    let mut cluster_ips = BTreeSet::new();
    for p in ports {
        let base = format!("{}/{}/{}/{}", p.ns, p.svc, p.proto, p.name);
        let svc = nft_chain("service", &base);
        cluster_ips.insert(p.cluster_ip.as_str());
        service_ips.push(format!(
            "{} . {} . {} : goto {svc}",
            p.cluster_ip, p.proto, p.port
        ));
        let mut vmap = Vec::new();
        for (i, ep) in p.endpoints.iter().enumerate() {
            let epc = nft_chain("endpoint", &format!("{base}__{ep}/{}", p.target));
            vmap.push(format!("{i} : goto {epc}"));
            chains += &format!(
                "\tchain {epc} {{\n\t\tip saddr {ep} jump mark-for-masquerade\n\t\tmeta l4proto {} dnat to {ep}:{}\n\t}}\n",
                p.proto, p.target
            );
        }
        chains += &format!(
            "\tchain {svc} {{\n\t\tip daddr {} {} dport {} ip saddr != {CLUSTER_CIDR4} jump mark-for-masquerade\n\t\tnumgen random mod {} vmap {{ {} }}\n\t}}\n",
            p.cluster_ip,
            p.proto,
            p.port,
            p.endpoints.len(),
            vmap.join(", ")
        );
        if let Some(np) = p.node_port {
            let ext = nft_chain("external", &base);
            service_nodeports.push(format!("{} . {np} : goto {ext}", p.proto));
            chains +=
                &format!("\tchain {ext} {{\n\t\tjump mark-for-masquerade\n\t\tgoto {svc}\n\t}}\n");
        }
    }
    let ips: Vec<&str> = cluster_ips.into_iter().collect();
    format!(
        "table ip kube-proxy {{
\tcomment \"rules for kube-proxy\"
\tset cluster-ips {{
\t\ttype ipv4_addr
\t\tcomment \"Active ClusterIPs\"
\t\telements = {{ {ips} }}
\t}}
\tset nodeport-ips {{
\t\ttype ipv4_addr
\t\tcomment \"IPs that accept NodePort traffic\"
\t\telements = {{ {NODE_A4} }}
\t}}
\tmap no-endpoint-services {{
\t\ttype ipv4_addr . inet_proto . inet_service : verdict
\t\tcomment \"vmap to drop or reject packets to services with no endpoints\"
\t}}
\tmap no-endpoint-nodeports {{
\t\ttype inet_proto . inet_service : verdict
\t\tcomment \"vmap to drop or reject packets to service nodeports with no endpoints\"
\t}}
\tmap firewall-ips {{
\t\ttype ipv4_addr . inet_proto . inet_service : verdict
\t\tcomment \"destinations that are subject to LoadBalancerSourceRanges\"
\t}}
\tmap service-ips {{
\t\ttype ipv4_addr . inet_proto . inet_service : verdict
\t\tcomment \"ClusterIP, ExternalIP and LoadBalancer IP traffic\"
\t\telements = {{ {sips} }}
\t}}
\tmap service-nodeports {{
\t\ttype inet_proto . inet_service : verdict
\t\tcomment \"NodePort traffic\"
{snps}\t}}
\tchain filter-prerouting {{
\t\ttype filter hook prerouting priority dstnat - 10; policy accept;
\t\tct state new jump firewall-check
\t}}
\tchain filter-input {{
\t\ttype filter hook input priority -110; policy accept;
\t\tct state new jump nodeport-endpoints-check
\t\tct state new jump service-endpoints-check
\t}}
\tchain filter-forward {{
\t\ttype filter hook forward priority -110; policy accept;
\t\tct state new jump service-endpoints-check
\t\tct state new jump cluster-ips-check
\t}}
\tchain filter-output {{
\t\ttype filter hook output priority -110; policy accept;
\t\tct state new jump service-endpoints-check
\t\tct state new jump cluster-ips-check
\t}}
\tchain filter-output-post-dnat {{
\t\ttype filter hook output priority -90; policy accept;
\t\tct state new jump firewall-check
\t}}
\tchain nat-prerouting {{
\t\ttype nat hook prerouting priority dstnat; policy accept;
\t\tjump services
\t}}
\tchain nat-output {{
\t\ttype nat hook output priority -100; policy accept;
\t\tjump services
\t}}
\tchain nat-postrouting {{
\t\ttype nat hook postrouting priority srcnat; policy accept;
\t\tjump masquerading
\t}}
\tchain mark-for-masquerade {{
\t\tmeta mark set meta mark | 0x4000
\t}}
\tchain masquerading {{
\t\tmeta mark & 0x4000 == 0 return
\t\tmeta mark set meta mark ^ 0x4000
\t\tmasquerade fully-random
\t}}
\tchain services {{
\t\tip daddr . meta l4proto . th dport vmap @service-ips
\t\tip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports
\t}}
\tchain firewall-check {{
\t\tip daddr . meta l4proto . th dport vmap @firewall-ips
\t}}
\tchain reject-chain {{
\t\treject
\t}}
\tchain cluster-ips-check {{
\t\tip daddr @cluster-ips reject
\t\tip daddr {SERVICE_CIDR4} drop
\t}}
\tchain service-endpoints-check {{
\t\tip daddr . meta l4proto . th dport vmap @no-endpoint-services
\t}}
\tchain nodeport-endpoints-check {{
\t\tip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports
\t}}
{chains}}}
table ip6 kube-proxy {{
\tcomment \"rules for kube-proxy\"
\tchain nat-prerouting {{
\t\ttype nat hook prerouting priority dstnat; policy accept;
\t}}
}}
",
        ips = ips.join(", "),
        sips = service_ips.join(", "),
        // nft refuses an empty element list
        snps = if service_nodeports.is_empty() {
            String::new()
        } else {
            format!("\t\telements = {{ {} }}\n", service_nodeports.join(", "))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_hashes_are_upstreams() {
        // KUBE-SVC- names as kube-proxy's iptables mode writes them (base32 of SHA-256 of
        // the service port name and protocol, first 16 characters)
        assert_eq!(hash16("conf/web:tcptcp"), "B2Y6MZ3GXH44JJRM");
        assert_eq!(hash16("conf/np:udpudp198.18.2.11:8080"), "OYFQAE2JDSS333MM");
        assert!(nftables_mode(&[]).contains("table ip kube-proxy"));
    }
}
