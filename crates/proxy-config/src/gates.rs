//! kube-proxy's feature gates as kube-proxy 1.38 resolves them: upstream's gate set
//! (`pkg/features/kube_features.go`, which kube-proxy registers whole), `featureGates` /
//! `--feature-gates` applied as component-base's `featuregate.SetFromMap` applies them
//! (the `AllAlpha` / `AllBeta` keys, its error for an unknown gate or a locked one, its
//! warning for a deprecated or GA one), and one lookup, [`FeatureGates::enabled`].
//!
//! [`PROXY_GATES`] are the gates that change kube-proxy between 1.33 and 1.38, each with
//! what it does here (docs/feature-gates.md is the same table in prose). Every other gate
//! upstream knows is accepted and changes nothing ([`known-1.38.txt`](gates/known-1.38.txt)).
//!
//! Pure: no I/O.

use std::collections::BTreeMap;

/// The version whose defaults we follow (upstream's emulation version).
pub const EMULATED_VERSION: &str = "1.38";

/// A gate's maturity (`featuregate.prerelease`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Alpha,
    Beta,
    Ga,
    Deprecated,
}

impl Stage {
    fn parse(s: &str) -> Option<Stage> {
        match s {
            "alpha" => Some(Stage::Alpha),
            "beta" => Some(Stage::Beta),
            "ga" => Some(Stage::Ga),
            "deprecated" => Some(Stage::Deprecated),
            _ => None,
        }
    }

    /// As upstream prints it (`ALPHA`, `BETA`, GA is empty, `DEPRECATED`).
    pub fn upstream(self) -> &'static str {
        match self {
            Stage::Alpha => "ALPHA",
            Stage::Beta => "BETA",
            Stage::Ga => "",
            Stage::Deprecated => "DEPRECATED",
        }
    }
}

/// One gate at [`EMULATED_VERSION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    pub name: &'static str,
    pub stage: Stage,
    pub default: bool,
    /// `LockToDefault`: setting it to the other value is an error.
    pub locked: bool,
    /// The release since which `stage` / `default` hold.
    pub since: &'static str,
    /// What it changes in kube-proxy, and what kube-nlproxy does with it.
    pub here: &'static str,
}

const fn gate(
    name: &'static str,
    stage: Stage,
    default: bool,
    locked: bool,
    since: &'static str,
    here: &'static str,
) -> Gate {
    Gate {
        name,
        stage,
        default,
        locked,
        since,
        here,
    }
}

pub const ALLOW_SERVICE_EXTERNAL_IPS: &str = "AllowServiceExternalIPs";
pub const KUBE_PROXY_NFTABLES_LOCALHOST_NODE_PORTS: &str = "KubeProxyNFTablesLocalhostNodePorts";
pub const COMPONENT_STATUSZ: &str = "ComponentStatusz";
pub const COMPONENT_FLAGZ: &str = "ComponentFlagz";
pub const WATCH_LIST_CLIENT: &str = "WatchListClient";
pub const NFTABLES_NETLINK: &str = "NFTablesNetlink";
pub const KUBE_PROXY_IPVS: &str = "KubeProxyIPVS";

/// The gates that change kube-proxy's behaviour between 1.33 and 1.38 (read in
/// `pkg/proxy/...` or `cmd/kube-proxy`), at 1.38.
pub const PROXY_GATES: &[Gate] = &[
    gate(
        ALLOW_SERVICE_EXTERNAL_IPS,
        Stage::Deprecated,
        true,
        false,
        "1.36",
        "KEP-5707. Off: Services' spec.externalIPs are not programmed. Honoured \
         (ruleset allowExternalIPs).",
    ),
    gate(
        KUBE_PROXY_NFTABLES_LOCALHOST_NODE_PORTS,
        Stage::Beta,
        true,
        false,
        "1.38",
        "nftables mode serves NodePorts on localhost (a userspace TCP proxy) when \
         nodePortAddresses holds `localhost`. Alpha (off) in 1.37. Resolved here; read by \
         the localhost NodePort proxy.",
    ),
    gate(
        WATCH_LIST_CLIENT,
        Stage::Beta,
        true,
        false,
        "1.35",
        "client-go's gate (kube-proxy registers client-go's gates into its own): the \
         initial list streamed as watch events (sendInitialEvents, KEP-3157), falling back \
         to list + watch. Off (beta since 1.30) before 1.35. Honoured (proxy-sources \
         list_watch).",
    ),
    gate(
        COMPONENT_STATUSZ,
        Stage::Beta,
        true,
        false,
        "1.36",
        "/statusz on the metrics server. Honoured.",
    ),
    gate(
        COMPONENT_FLAGZ,
        Stage::Beta,
        true,
        false,
        "1.36",
        "/flagz on the metrics server. Honoured.",
    ),
    gate(
        NFTABLES_NETLINK,
        Stage::Beta,
        true,
        false,
        "1.37",
        "kubernetes PR #137536: nftables mode reads its table back over netlink \
         (knftables) instead of running and parsing `nft`. kube-nlproxy always speaks \
         netlink and never runs `nft`, so off changes nothing here; accepted either way.",
    ),
    gate(
        KUBE_PROXY_IPVS,
        Stage::Deprecated,
        true,
        false,
        "1.37",
        "Allows `mode: ipvs` (KEP-5495: off in 1.40, locked in 1.43). Honoured: off, \
         ipvs mode is refused at validation; on, ipvs mode runs the nftables backend \
         with the iptables proxier's behaviour, and says so.",
    ),
    gate(
        "PreferSameTrafficDistribution",
        Stage::Ga,
        true,
        true,
        "1.35",
        "trafficDistribution PreferSameZone / PreferSameNode. Always on here, as the \
         locked gate is upstream.",
    ),
    gate(
        "TopologyAwareHints",
        Stage::Ga,
        true,
        true,
        "1.33",
        "EndpointSlice zone hints. Always on here, as the locked gate is upstream.",
    ),
    gate(
        "NFTablesProxyMode",
        Stage::Ga,
        true,
        true,
        "1.33",
        "Allows `mode: nftables`. Always on.",
    ),
    gate(
        "MultiCIDRServiceAllocator",
        Stage::Ga,
        true,
        true,
        "1.34",
        "kube-proxy watches ServiceCIDRs (traffic to unallocated service IPs is \
         rejected). kube-nlproxy always watches them.",
    ),
];

/// A known gate: one of [`PROXY_GATES`] or one from the rest of upstream's set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Known {
    stage: Stage,
    default: bool,
    locked: bool,
}

const ALL_ALPHA: &str = "AllAlpha";
const ALL_BETA: &str = "AllBeta";

const OTHER_GATES: &str = include_str!("gates/known-1.38.txt");

fn lookup(name: &str) -> Option<Known> {
    if let Some(g) = PROXY_GATES.iter().find(|g| g.name == name) {
        return Some(Known {
            stage: g.stage,
            default: g.default,
            locked: g.locked,
        });
    }
    match name {
        ALL_ALPHA => {
            return Some(Known {
                stage: Stage::Alpha,
                default: false,
                locked: false,
            })
        }
        ALL_BETA => {
            return Some(Known {
                stage: Stage::Beta,
                default: false,
                locked: false,
            })
        }
        _ => {}
    }
    OTHER_GATES
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let mut f = l.split_whitespace();
            if f.next()? != name {
                return None;
            }
            Some(Known {
                stage: Stage::parse(f.next()?)?,
                default: f.next()? == "true",
                // upstream's lock of these gates is not recorded here; none changes us
                locked: false,
            })
        })
}

/// Whether upstream knows the gate (at 1.38).
pub fn is_known(name: &str) -> bool {
    lookup(name).is_some()
}

/// The resolved gates: what was set (`AllAlpha` / `AllBeta` included), over the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeatureGates {
    set: BTreeMap<String, bool>,
}

/// Upstream's `utilerrors.NewAggregate(errs).Error()`: one message as is, several in
/// brackets joined by ", ".
fn aggregate(errs: &[String]) -> String {
    match errs {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

impl FeatureGates {
    /// Apply `featureGates` as `SetFromMap` does. `Ok` carries the warnings upstream logs
    /// (`Setting deprecated feature gate ...`), `Err` the error it returns (fatal:
    /// kube-proxy exits with "failed complete: <it>"). Upstream walks a Go map (random
    /// order); we walk the keys sorted.
    pub fn resolve(m: &BTreeMap<String, bool>) -> Result<(FeatureGates, Vec<String>), String> {
        let mut errs = Vec::new();
        let mut warnings = Vec::new();
        for (k, &v) in m {
            let Some(spec) = lookup(k) else {
                // upstream returns at the first unknown gate
                errs.push(format!("unrecognized feature gate: {k}"));
                return Err(aggregate(&errs));
            };
            if spec.locked && spec.default != v {
                errs.push(format!(
                    "cannot set feature gate {k} to {v}, feature is locked to {}",
                    spec.default
                ));
                continue;
            }
            if k == ALL_ALPHA || k == ALL_BETA {
                continue;
            }
            match spec.stage {
                Stage::Deprecated => warnings.push(format!(
                    "Setting deprecated feature gate {k}={v}. It will be removed in a future release."
                )),
                Stage::Ga => warnings.push(format!(
                    "Setting GA feature gate {k}={v}. It will be removed in a future release."
                )),
                _ => {}
            }
        }
        if !errs.is_empty() {
            return Err(aggregate(&errs));
        }
        Ok((FeatureGates { set: m.clone() }, warnings))
    }

    /// Whether the gate is on: set explicitly, else by `AllAlpha` / `AllBeta` for a gate
    /// of that stage, else its default. A gate upstream does not know is off (upstream
    /// panics; we never do).
    pub fn enabled(&self, name: &str) -> bool {
        if let Some(&v) = self.set.get(name) {
            return v;
        }
        let Some(spec) = lookup(name) else {
            return false;
        };
        let all = match spec.stage {
            Stage::Alpha => self.set.get(ALL_ALPHA),
            Stage::Beta => self.set.get(ALL_BETA),
            _ => None,
        };
        all.copied().unwrap_or(spec.default)
    }

    /// Every gate upstream knows with its stage (as upstream prints it) and whether it is
    /// on, `AllAlpha` / `AllBeta` included, sorted by name: `kubernetes_feature_enabled`.
    pub fn all(&self) -> Vec<(&'static str, &'static str, bool)> {
        let names = PROXY_GATES
            .iter()
            .map(|g| g.name)
            .chain([ALL_ALPHA, ALL_BETA])
            .chain(
                OTHER_GATES
                    .lines()
                    .filter(|l| !l.starts_with('#'))
                    .filter_map(|l| l.split_whitespace().next()),
            );
        let mut out: Vec<_> = names
            .filter_map(|n| Some((n, lookup(n)?.stage.upstream(), self.enabled(n))))
            .collect();
        out.sort();
        out
    }

    /// The gates that were set (the configuration's `featureGates`).
    pub fn set(&self) -> &BTreeMap<String, bool> {
        &self.set
    }
}

#[cfg(test)]
mod tests;
