//! Endpoint selection by elements only: an endpoint list of N endpoints, keyed by the
//! destination it serves, is N elements `dest . i : addr . port` (i = 0..N-1) of the map
//! of its *class*, the modulus m(N) (see [`modulus`]), plus the element `dest` in the
//! class's membership set. A fixed chain per class draws `numgen random mod m` and looks
//! `dest . slot` up: a list changing its endpoints, its size or its class changes
//! elements only, never a rule (a rule or a `goto` element makes the kernel re-validate
//! the whole table at commit; see docs/ruleset.md).
//!
//! m(N) = N for N <= [`EXACT_MAX`] (one draw, exactly uniform); above, the next power
//! of two: a draw misses (no element at that slot) with probability 1 - N/m < 1/2 and is
//! repeated, up to [`DRAWS`] times, then a last draw `mod m/2` always hits. The choice is
//! uniform except after [`DRAWS`] misses in a row (probability q < 2^-DRAWS), so each
//! endpoint's share is within a factor 1 ± 2^-DRAWS of 1/N (see [`share`]).

use std::net::IpAddr;

use kube_model::ResolvedEndpoint;
use nft_model::build::{self, KeyField};
use nft_model::*;

use super::packed::{Packed, SetName};
use crate::rules::{addr_type, DST_KEY, PORT_KEY};

/// Lists up to this size get their own modulus (exact uniform choice in one draw).
pub const EXACT_MAX: u32 = 8;
/// Draws before the fallback draw, for moduli above [`EXACT_MAX`].
pub const DRAWS: u32 = 10;
/// The largest list (moduli are u32 powers of two).
pub const MAX_LIST: u32 = 1 << 31;

/// Protocols a class chain has rules for (`meta l4proto` lets nft map the port).
const PROTOCOLS: [u8; 3] = [6, 17, 132];

/// Which endpoints, keyed by what.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Space {
    /// Cluster-wide endpoints, keyed by destination (`addr . proto . port`).
    Cluster,
    /// Node-local endpoints, keyed by destination.
    Local,
    /// Cluster-wide endpoints, keyed by NodePort (`proto . port`).
    NpCluster,
    /// Node-local endpoints, keyed by NodePort.
    NpLocal,
}

impl Space {
    pub const ALL: [Space; 4] = [
        Space::Cluster,
        Space::Local,
        Space::NpCluster,
        Space::NpLocal,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Space::Cluster => "cluster",
            Space::Local => "local",
            Space::NpCluster => "np-cluster",
            Space::NpLocal => "np-local",
        }
    }

    /// Whether keys are NodePorts (`proto . port`) rather than destinations.
    pub fn nodeport(self) -> bool {
        matches!(self, Space::NpCluster | Space::NpLocal)
    }

    /// The chain dispatching a key of this space to its class chain.
    pub fn pick_chain(self) -> String {
        format!("pick-{}", self.name())
    }

    /// The key as loaded from the packet.
    pub fn key_fields(self) -> &'static [KeyField] {
        if self.nodeport() {
            &PORT_KEY
        } else {
            &DST_KEY
        }
    }

    /// The key's data types in `family`.
    pub fn key_types(self, family: Family) -> Vec<DataType> {
        self.key_fields()
            .iter()
            .map(|f| f.data_type(family))
            .collect()
    }
}

/// The modulus of a list of `n` endpoints (`n >= 1`, at most [`MAX_LIST`]).
pub fn modulus(n: u32) -> u32 {
    if n <= EXACT_MAX {
        n.max(1)
    } else {
        n.next_power_of_two()
    }
}

/// One class: a space and a modulus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Class {
    pub space: Space,
    pub modulus: u32,
}

impl Class {
    /// Membership set: the keys of the lists of this class.
    pub fn dests_set(self) -> String {
        format!("dests-{}-{}", self.space.name(), self.modulus)
    }
    /// Map `key . slot : addr . port`.
    pub fn endpoints_map(self) -> String {
        format!("endpoints-{}-{}", self.space.name(), self.modulus)
    }
    /// Chain drawing a slot.
    pub fn chain(self) -> String {
        format!("pick-{}-{}", self.space.name(), self.modulus)
    }

    /// The membership set's declaration.
    pub fn dests_decl(self, family: Family) -> Set {
        Set::set(self.dests_set(), self.space.key_types(family))
    }

    /// The map's declaration.
    pub fn endpoints_decl(self, family: Family) -> Set {
        let mut key = self.space.key_types(family);
        key.push(DataType::HostInt32);
        Set::map(
            self.endpoints_map(),
            key,
            SetData::Values(vec![addr_type(family), DataType::InetService]),
        )
    }

    /// The pick chain's rule sending a key of this class to [`Class::chain`].
    pub fn dispatch_rule(self, family: Family) -> Rule {
        build::rule(vec![
            build::set_lookup(family, self.space.key_fields(), &self.dests_set(), false),
            vec![build::goto(&self.chain())],
        ])
    }

    /// The class chain: per protocol, the draws.
    pub fn chain_rules(self, family: Family) -> Vec<Rule> {
        let mut moduli = Vec::new();
        if self.modulus <= EXACT_MAX {
            moduli.push(self.modulus);
        } else {
            moduli.extend(std::iter::repeat_n(self.modulus, DRAWS as usize));
            moduli.push(self.modulus / 2);
        }
        let map = self.endpoints_map();
        let mut rules = Vec::new();
        for proto in PROTOCOLS {
            for m in &moduli {
                let mut key = self.space.key_fields().to_vec();
                key.push(KeyField::NumgenRandom(*m));
                rules.push(build::rule(vec![
                    build::l4proto_eq(proto),
                    build::dnat_map(family, &key, &map),
                ]));
            }
        }
        rules
    }

    /// The elements of a list of endpoints under `key`: the membership and one map
    /// element per endpoint, slot = position in the (sorted) list.
    pub fn elements(self, key: &[Value], eps: &[ResolvedEndpoint]) -> Vec<(SetName, Packed)> {
        let mut out = Vec::with_capacity(eps.len() + 1);
        let key: Vec<&Value> = key.iter().collect();
        out.push((self.dests_set().into(), Packed::values(&key, None)));
        let map: SetName = self.endpoints_map().into();
        for (i, e) in eps.iter().enumerate() {
            let slot = Value::Int(i as u32);
            let mut k = key.clone();
            k.push(&slot);
            let (addr, port) = (Value::from(e.addr), Value::Port(e.port));
            out.push((map.clone(), Packed::values(&k, Some(&[&addr, &port]))));
        }
        out
    }
}

/// The class of a list of `n` endpoints in `space` (`None` when too large).
pub fn class_of(space: Space, n: usize) -> Option<Class> {
    let n = u32::try_from(n)
        .ok()
        .filter(|n| (1..=MAX_LIST).contains(n))?;
    Some(Class {
        space,
        modulus: modulus(n),
    })
}

/// The probability of each of `n` endpoints being chosen by its class chain: exactly
/// 1/n for moduli up to [`EXACT_MAX`] and powers of two; otherwise (1-q)/n, plus q/(m/2)
/// for the first m/2 endpoints, q = (1 - n/m)^DRAWS the chance that every draw missed.
pub fn share(n: u32) -> Vec<f64> {
    let m = modulus(n);
    let nf = f64::from(n);
    if m == n {
        return vec![1.0 / nf; n as usize];
    }
    let q = (1.0 - nf / f64::from(m)).powi(DRAWS as i32);
    let half = m / 2;
    (0..n)
        .map(|i| {
            let base = (1.0 - q) / nf;
            if i < half {
                base + q / f64::from(half)
            } else {
                base
            }
        })
        .collect()
}

/// The endpoint addresses of lists, for the hairpin set.
pub fn hairpin_elements(addrs: impl IntoIterator<Item = IpAddr>) -> Vec<Packed> {
    addrs
        .into_iter()
        .map(|a| {
            let v = Value::from(a);
            Packed::values(&[&v, &v], None)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moduli() {
        assert_eq!(modulus(1), 1);
        assert_eq!(modulus(8), 8);
        assert_eq!(modulus(9), 16);
        assert_eq!(modulus(16), 16);
        assert_eq!(modulus(17), 32);
        assert_eq!(modulus(5000), 8192);
        assert_eq!(class_of(Space::Cluster, 0), None);
    }

    /// The spreading error stated in docs/ruleset.md: every endpoint's probability is
    /// within 2^-DRAWS (relative) of 1/n, for every list size up to 2,100 and around
    /// every power of two up to 2^17.
    #[test]
    fn spreading_error_is_bounded() {
        let bound = 0.5f64.powi(DRAWS as i32);
        let mut worst: f64 = 0.0;
        let sizes =
            (1..=2100u32).chain((11..=17).flat_map(|k| [(1 << k) - 1, 1 << k, (1 << k) + 1]));
        for n in sizes {
            let p = share(n);
            let total: f64 = p.iter().sum();
            assert!((total - 1.0).abs() < 1e-9, "n={n}: shares sum to {total}");
            for x in &p {
                let rel = (x * f64::from(n) - 1.0).abs();
                worst = worst.max(rel);
                assert!(rel <= bound, "n={n}: relative error {rel} > {bound}");
            }
            if n <= EXACT_MAX || n.is_power_of_two() {
                assert!(p.iter().all(|x| (x * f64::from(n) - 1.0).abs() < 1e-12));
            }
        }
        // the bound is nearly reached (n = 2^k + 1): it is the right bound
        assert!(worst > bound / 2.0, "worst {worst}");
    }

    #[test]
    fn draws_per_protocol() {
        let small = Class {
            space: Space::Cluster,
            modulus: 3,
        };
        assert_eq!(small.chain_rules(Family::Ip).len(), 3);
        let big = Class {
            space: Space::NpLocal,
            modulus: 16,
        };
        let rules = big.chain_rules(Family::Ip6);
        assert_eq!(rules.len(), 3 * (DRAWS as usize + 1));
        let text = nft_model::render::rule(Family::Ip6, &rules[DRAWS as usize]);
        assert_eq!(
            text,
            "dnat ip6 to meta l4proto . tcp dport . numgen random mod 8 map @endpoints-np-local-16"
        );
    }
}
