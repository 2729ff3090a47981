//! Lean decoding of Services and EndpointSlices: only the fields the conversion
//! ([`crate::Cluster`], `convert.rs`) and the engine read are decoded; the rest of the
//! object is skipped without being built. The result is the usual `k8s-openapi` object
//! with those fields filled, so everything downstream is unchanged.
//!
//! The fields that are read decode exactly as `k8s-openapi` decodes them (null is absent,
//! the last of duplicate keys wins, `apiVersion` and `kind` must match, the same error
//! messages); a type error in a field that is not read no longer refuses the object.
//! Nodes and ServiceCIDRs decode in full. One decoder for the manifests and the API
//! ([`Decode`]); `tests/lean.rs` checks lean == full on every manifest the repository has.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::api::networking::v1 as networking;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::Resource;
use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, Unexpected, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::ANNOTATION_LAST_CHANGE_TRIGGER_TIME;

/// How the proxy decodes an object of a kind it reads.
pub trait Decode: Sized {
    fn decode<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
}

/// Decode a `T` from JSON text (the whole text).
pub fn from_str<T: Decode>(text: &str) -> Result<T, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let v = T::decode(&mut de)?;
    de.end()?;
    Ok(v)
}

impl Decode for core::Service {
    fn decode<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        LeanService::deserialize(d).map(LeanService::into_k8s)
    }
}

impl Decode for discovery::EndpointSlice {
    fn decode<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        LeanSlice::deserialize(d).map(LeanSlice::into_k8s)
    }
}

impl Decode for core::Node {
    fn decode<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::deserialize(d)
    }
}

impl Decode for networking::ServiceCIDR {
    fn decode<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::deserialize(d)
    }
}

/// A map key: which of `self.0` it is (None: a key not read).
struct FieldOf(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for FieldOf {
    type Value = Option<&'static str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl Visitor<'_> for FieldOf {
    type Value = Option<&'static str>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field identifier")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.0.iter().find(|k| **k == v).copied())
    }
}

/// A struct of the fields read (each optional, as `k8s-openapi` decodes them), its
/// `Deserialize` skipping the others; `check` keys must hold the given string.
macro_rules! lean {
    (struct $name:ident as $expect:expr;
     $(check $ckey:literal == $cval:expr;)*
     { $($field:ident: $ty:ty = $key:literal,)* }) => {
        #[derive(Default)]
        struct $name {
            $($field: Option<$ty>,)*
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                const FIELDS: &[&str] = &[$($ckey,)* $($key,)*];
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expect)
                    }
                    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<$name, A::Error> {
                        let mut out = $name::default();
                        while let Some(k) = map.next_key_seed(FieldOf(FIELDS))? {
                            match k {
                                $(Some($ckey) => {
                                    let v: String = map.next_value()?;
                                    if v != $cval {
                                        return Err(A::Error::invalid_value(
                                            Unexpected::Str(&v),
                                            &$cval,
                                        ));
                                    }
                                })*
                                $(Some($key) => out.$field = map.next_value()?,)*
                                _ => {
                                    map.next_value::<IgnoredAny>()?;
                                }
                            }
                        }
                        Ok(out)
                    }
                }
                d.deserialize_struct($expect, FIELDS, V)
            }
        }
    };
}

lean! {
    struct LeanMeta as "ObjectMeta";
    {
        name: String = "name",
        namespace: String = "namespace",
        labels: BTreeMap<String, String> = "labels",
        annotations: Annotations = "annotations",
    }
}

/// Of the annotations, only the ones read (the trigger time); the others are skipped.
#[derive(Default)]
struct Annotations(BTreeMap<String, String>);

impl<'de> Deserialize<'de> for Annotations {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        const READ: &[&str] = &[ANNOTATION_LAST_CHANGE_TRIGGER_TIME];
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Annotations;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Annotations, A::Error> {
                let mut out = BTreeMap::new();
                while let Some(k) = map.next_key_seed(FieldOf(READ))? {
                    match k {
                        Some(k) => {
                            out.insert(k.to_string(), map.next_value::<String>()?);
                        }
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(Annotations(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl LeanMeta {
    fn into_k8s(self) -> ObjectMeta {
        ObjectMeta {
            name: self.name,
            namespace: self.namespace,
            labels: self.labels,
            annotations: self.annotations.map(|a| a.0),
            ..ObjectMeta::default()
        }
    }
}

lean! {
    struct LeanService as core::Service::KIND;
    check "apiVersion" == core::Service::API_VERSION;
    check "kind" == core::Service::KIND;
    {
        metadata: LeanMeta = "metadata",
        spec: LeanServiceSpec = "spec",
        status: LeanServiceStatus = "status",
    }
}

lean! {
    struct LeanServiceSpec as "ServiceSpec";
    {
        cluster_ip: String = "clusterIP",
        cluster_ips: Vec<String> = "clusterIPs",
        external_ips: Vec<String> = "externalIPs",
        external_traffic_policy: String = "externalTrafficPolicy",
        health_check_node_port: i32 = "healthCheckNodePort",
        internal_traffic_policy: String = "internalTrafficPolicy",
        ip_families: Vec<String> = "ipFamilies",
        load_balancer_source_ranges: Vec<String> = "loadBalancerSourceRanges",
        ports: Vec<LeanServicePort> = "ports",
        session_affinity: String = "sessionAffinity",
        session_affinity_config: core::SessionAffinityConfig = "sessionAffinityConfig",
        traffic_distribution: String = "trafficDistribution",
        type_: String = "type",
    }
}

lean! {
    struct LeanServicePort as "ServicePort";
    {
        name: String = "name",
        node_port: i32 = "nodePort",
        port: i32 = "port",
        protocol: String = "protocol",
    }
}

lean! {
    struct LeanServiceStatus as "ServiceStatus";
    { load_balancer: LeanLbStatus = "loadBalancer", }
}

lean! {
    struct LeanLbStatus as "LoadBalancerStatus";
    { ingress: Vec<LeanIngress> = "ingress", }
}

lean! {
    struct LeanIngress as "LoadBalancerIngress";
    {
        ip: String = "ip",
        ip_mode: String = "ipMode",
    }
}

impl LeanService {
    fn into_k8s(self) -> core::Service {
        core::Service {
            metadata: self.metadata.map(LeanMeta::into_k8s).unwrap_or_default(),
            spec: self.spec.map(|s| core::ServiceSpec {
                cluster_ip: s.cluster_ip,
                cluster_ips: s.cluster_ips,
                external_ips: s.external_ips,
                external_traffic_policy: s.external_traffic_policy,
                health_check_node_port: s.health_check_node_port,
                internal_traffic_policy: s.internal_traffic_policy,
                ip_families: s.ip_families,
                load_balancer_source_ranges: s.load_balancer_source_ranges,
                ports: s.ports.map(|v| {
                    v.into_iter()
                        .map(|p| core::ServicePort {
                            name: p.name,
                            node_port: p.node_port,
                            port: p.port.unwrap_or_default(),
                            protocol: p.protocol,
                            ..core::ServicePort::default()
                        })
                        .collect()
                }),
                session_affinity: s.session_affinity,
                session_affinity_config: s.session_affinity_config,
                traffic_distribution: s.traffic_distribution,
                type_: s.type_,
                ..core::ServiceSpec::default()
            }),
            status: self.status.map(|s| core::ServiceStatus {
                load_balancer: s.load_balancer.map(|lb| core::LoadBalancerStatus {
                    ingress: lb.ingress.map(|v| {
                        v.into_iter()
                            .map(|i| core::LoadBalancerIngress {
                                ip: i.ip,
                                ip_mode: i.ip_mode,
                                ..core::LoadBalancerIngress::default()
                            })
                            .collect()
                    }),
                }),
                ..core::ServiceStatus::default()
            }),
        }
    }
}

lean! {
    struct LeanSlice as discovery::EndpointSlice::KIND;
    check "apiVersion" == discovery::EndpointSlice::API_VERSION;
    check "kind" == discovery::EndpointSlice::KIND;
    {
        address_type: String = "addressType",
        endpoints: Vec<LeanEndpoint> = "endpoints",
        metadata: LeanMeta = "metadata",
        ports: Vec<LeanEndpointPort> = "ports",
    }
}

lean! {
    struct LeanEndpoint as "Endpoint";
    {
        addresses: Vec<String> = "addresses",
        conditions: discovery::EndpointConditions = "conditions",
        hints: discovery::EndpointHints = "hints",
        node_name: String = "nodeName",
        zone: String = "zone",
    }
}

lean! {
    struct LeanEndpointPort as "EndpointPort";
    {
        name: String = "name",
        port: i32 = "port",
        protocol: String = "protocol",
    }
}

impl LeanSlice {
    fn into_k8s(self) -> discovery::EndpointSlice {
        discovery::EndpointSlice {
            address_type: self.address_type.unwrap_or_default(),
            endpoints: self.endpoints.map(|v| {
                v.into_iter()
                    .map(|e| discovery::Endpoint {
                        addresses: e.addresses.unwrap_or_default(),
                        conditions: e.conditions,
                        hints: e.hints,
                        node_name: e.node_name,
                        zone: e.zone,
                        ..discovery::Endpoint::default()
                    })
                    .collect()
            }),
            metadata: self.metadata.map(LeanMeta::into_k8s).unwrap_or_default(),
            ports: self.ports.map(|v| {
                v.into_iter()
                    .map(|p| discovery::EndpointPort {
                        name: p.name,
                        port: p.port,
                        protocol: p.protocol,
                        ..discovery::EndpointPort::default()
                    })
                    .collect()
            }),
        }
    }
}

/// A Service or an EndpointSlice read in one pass over its text ([`one_pass`]): what
/// names it (`apiVersion` and `metadata` as written; its kind is the object's) and the
/// object.
pub(crate) struct OnePass<'a> {
    pub api_version: Option<String>,
    pub metadata: Option<&'a RawValue>,
    pub object: Known,
}

/// An object of a kind [`one_pass`] reads.
pub(crate) enum Known {
    Service(Box<core::Service>),
    Slice(Box<discovery::EndpointSlice>),
}

/// Read one object's text (a manifest's list item) in one pass: its head and, for a
/// Service or an EndpointSlice, its lean object, the same as reading the head and then
/// decoding ([`from_str`]) make of it. None when the text is anything else, or not
/// certainly read the same way (a duplicate head key, a type error anywhere, another
/// kind): the caller then reads it in two passes, which give the error.
pub(crate) fn one_pass(text: &str) -> Option<OnePass<'_>> {
    let mut de = serde_json::Deserializer::from_str(text);
    let top = de.deserialize_map(TopVisitor).ok()?;
    de.end().ok()?;
    top.finish()
}

/// A Service field: its texts met before the object's `kind` (decoded once the kind is
/// known, each of them, as the lean decoder decodes every occurrence), then its value.
struct Slot<'a, T> {
    raw: Vec<&'a RawValue>,
    value: Option<Option<T>>,
}

impl<T> Default for Slot<'_, T> {
    fn default() -> Self {
        Slot {
            raw: Vec::new(),
            value: None,
        }
    }
}

impl<'a, T: Deserialize<'a>> Slot<'a, T> {
    /// The last occurrence's value; None when an occurrence does not decode.
    fn value(self) -> Option<Option<T>> {
        let mut last = None;
        for r in self.raw {
            last = serde_json::from_str::<Option<T>>(r.get()).ok()?;
        }
        Some(self.value.unwrap_or(last))
    }

    fn read<A: MapAccess<'a>>(&mut self, known: bool, map: &mut A) -> Result<(), A::Error> {
        if known {
            self.value = Some(map.next_value()?);
        } else {
            self.raw.push(map.next_value()?);
        }
        Ok(())
    }
}

/// The top-level keys of one object, as far as [`one_pass`] reads them.
#[derive(Default)]
struct Top<'a> {
    kind: Option<Kind>,
    api_version: Option<String>,
    metadata: Option<Option<&'a RawValue>>,
    items: bool,
    spec: Slot<'a, LeanServiceSpec>,
    status: Slot<'a, LeanServiceStatus>,
    address_type: Option<String>,
    endpoints: Option<Vec<LeanEndpoint>>,
    ports: Option<Vec<LeanEndpointPort>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Service,
    Slice,
}

const TOP: &[&str] = &[
    "kind",
    "apiVersion",
    "metadata",
    "items",
    "spec",
    "status",
    "addressType",
    "endpoints",
    "ports",
];

struct TopVisitor;

impl<'de> Visitor<'de> for TopVisitor {
    type Value = Top<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top<'de>, A::Error> {
        let mut t = Top::default();
        // A head key twice: the head reader refuses the object (serde's duplicate field).
        let twice = || A::Error::custom("a head key twice");
        let svc = |t: &Top<'_>| t.kind.is_none_or(|k| k == Kind::Service);
        let slice = |t: &Top<'_>| t.kind.is_none_or(|k| k == Kind::Slice);
        while let Some(k) = map.next_key_seed(FieldOf(TOP))? {
            match k {
                Some("kind") if t.kind.is_none() => {
                    t.kind = Some(match map.next_value::<String>()?.as_str() {
                        core::Service::KIND => Kind::Service,
                        discovery::EndpointSlice::KIND => Kind::Slice,
                        _ => return Err(A::Error::custom("another kind")),
                    });
                }
                Some("apiVersion") if t.api_version.is_none() => {
                    t.api_version = Some(map.next_value()?);
                }
                Some("metadata") if t.metadata.is_none() => {
                    t.metadata = Some(map.next_value()?);
                }
                Some("items") if !t.items => {
                    t.items = true;
                    map.next_value::<IgnoredAny>()?;
                }
                Some("kind" | "apiVersion" | "metadata" | "items") => return Err(twice()),
                // Service fields: decoded when the object is known to be a Service,
                // kept as text until its kind is known.
                Some("spec") if svc(&t) => t.spec.read(t.kind.is_some(), &mut map)?,
                Some("status") if svc(&t) => t.status.read(t.kind.is_some(), &mut map)?,
                // EndpointSlice fields (kubectl writes them before `kind`): decoded at
                // once; one that does not decode as such is read again in two passes.
                Some("addressType") if slice(&t) => t.address_type = map.next_value()?,
                Some("endpoints") if slice(&t) => t.endpoints = map.next_value()?,
                Some("ports") if slice(&t) => t.ports = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(t)
    }
}

impl<'a> Top<'a> {
    fn finish(self) -> Option<OnePass<'a>> {
        let kind = self.kind?;
        let api_version = match kind {
            Kind::Service => core::Service::API_VERSION,
            Kind::Slice => discovery::EndpointSlice::API_VERSION,
        };
        if self
            .api_version
            .as_deref()
            .is_some_and(|v| v != api_version)
        {
            return None;
        }
        let metadata = self.metadata.flatten();
        let meta = match metadata {
            None => None,
            Some(m) => Some(serde_json::from_str::<LeanMeta>(m.get()).ok()?),
        };
        let object = match kind {
            Kind::Service => Known::Service(Box::new(
                LeanService {
                    metadata: meta,
                    spec: self.spec.value()?,
                    status: self.status.value()?,
                }
                .into_k8s(),
            )),
            Kind::Slice => Known::Slice(Box::new(
                LeanSlice {
                    address_type: self.address_type,
                    endpoints: self.endpoints,
                    metadata: meta,
                    ports: self.ports,
                }
                .into_k8s(),
            )),
        };
        Some(OnePass {
            api_version: self.api_version,
            metadata,
            object,
        })
    }
}
