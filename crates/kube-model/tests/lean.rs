//! The lean decoder ([`kube_model::lean`]) against the full `k8s-openapi` one: for every
//! Service and EndpointSlice of the repository's manifests (the ruleset golden inputs,
//! docs/examples), generated ones (`integration::scale`) and hand-written edge cases, lean
//! decode + convert == full decode + convert (the same model, warnings, errors and
//! trigger time; the same decode error text), from JSON text and from a JSON value.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_model::{lean, manifest, Cluster};
use serde::de::DeserializeOwned;

/// What the proxy makes of a decoded object, as comparable text.
trait Outcome {
    fn outcome(&self) -> String;
}

impl Outcome for Service {
    fn outcome(&self) -> String {
        let mut c = Cluster::new();
        let mut w = Vec::new();
        let r = c.upsert_service(self, &mut w);
        format!(
            "{r:?} {w:?} {:?} {:?}",
            c.services,
            kube_model::ns_key(&self.metadata)
        )
    }
}

impl Outcome for EndpointSlice {
    fn outcome(&self) -> String {
        let mut c = Cluster::new();
        let mut w = Vec::new();
        let r = c.upsert_slice(self, &mut w);
        let key = kube_model::ns_key(&self.metadata);
        format!(
            "{r:?} {w:?} {:?} {key:?} {:?}",
            c.slice(&key),
            kube_model::last_change_trigger_time(&self.metadata)
        )
    }
}

/// Full and lean outcomes, from JSON text (the manifests path) and, when the text is
/// JSON, also from a JSON value (the API path) after a newline.
fn both<T: DeserializeOwned + lean::Decode + Outcome>(raw: &str) -> (String, String) {
    let shown = |r: Result<T, serde_json::Error>| match r {
        Ok(o) => format!("ok {}", o.outcome()),
        Err(e) => format!("error {e}"),
    };
    let mut full = shown(serde_json::from_str::<T>(raw));
    let mut lean = shown(lean::from_str::<T>(raw));
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(raw) {
        full = format!("{full}\n{}", shown(T::deserialize(v.clone())));
        lean = format!("{lean}\n{}", shown(T::decode(v)));
    }
    (full, lean)
}

/// Compare every Service and EndpointSlice of `text`; returns how many were compared.
fn check_text(name: &str, text: &str) -> usize {
    let docs = manifest::documents(text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut n = 0;
    for e in docs.entries().into_iter().flatten() {
        let (full, lean) = match e.kind.as_str() {
            "Service" => both::<Service>(e.raw),
            "EndpointSlice" => both::<EndpointSlice>(e.raw),
            _ => continue,
        };
        assert_eq!(full, lean, "{name}: {}", e.raw);
        n += 1;
    }
    n
}

#[test]
fn lean_equals_full_on_the_repository_manifests() {
    let mut n = 0;
    for (name, text) in integration::testdata::repo_manifests() {
        n += check_text(&name, &text);
    }
    assert!(n >= 100, "only {n} objects compared");
}

#[test]
fn lean_equals_full_on_generated_manifests() {
    let text = integration::scale::scale_manifest("node-a", 200, 7);
    assert_eq!(check_text("scale", &text), 400);
}

/// Edge cases of the fields that are read: each decodes (or fails) as before.
#[test]
fn lean_equals_full_on_edge_cases() {
    let services = [
        r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","namespace":"n"},"spec":{"clusterIP":"198.18.0.1","ports":[{"port":80}]}}"#,
        r#"{"kind":"Service","metadata":null,"spec":null,"status":null}"#,
        r#"{"apiVersion":"v2","kind":"Service"}"#,
        r#"{"apiVersion":"v1","kind":"Endpoints"}"#,
        r#"{"apiVersion":7}"#,
        r#"[]"#,
        r#""text""#,
        r#"{"metadata":{"name":"a","name":"b"},"spec":{"clusterIP":"198.18.0.1","ports":[{"port":80,"port":81}]}}"#,
        r#"{"metadata":{"name":"a","labels":{"x":1}}}"#,
        r#"{"metadata":{"name":"a","labels":null,"annotations":null,"namespace":null}}"#,
        r#"{"metadata":{"name":"a"},"spec":{"clusterIP":"198.18.0.1","ports":[{"port":"80"}]}}"#,
        r#"{"metadata":{"name":"a"},"spec":{"clusterIP":"198.18.0.1","ports":[{"port":null,"nodePort":null}]}}"#,
        r#"{"metadata":{"name":"a"},"spec":{"clusterIP":"198.18.0.1","ports":{"port":80}}}"#,
        r#"{"metadata":{"name":"a"},"spec":{"type":"LoadBalancer","clusterIPs":["198.18.0.1"],"ports":[{"port":80,"nodePort":30080}],"sessionAffinity":"ClientIP","sessionAffinityConfig":{"clientIP":{"timeoutSeconds":"x"}}}}"#,
        r#"{"metadata":{"name":"a"},"spec":{"type":"LoadBalancer","clusterIPs":["198.18.0.1"],"ports":[{"port":80}],"externalTrafficPolicy":"Local","healthCheckNodePort":30000},"status":{"loadBalancer":{"ingress":[{"ip":"198.18.9.9","ipMode":"Proxy"},{"ip":"198.18.9.8"},{"ip":5}]}}}"#,
        r#"{"metadata":{"name":"a"},"spec":{"clusterIP":"198.18.0.1","ports":[{"port":80}],"trafficDistribution":"PreferClose","internalTrafficPolicy":"Local","externalIPs":["198.18.3.3","bad"],"ipFamilies":["IPv4"],"loadBalancerSourceRanges":["198.18.0.0/16"]}}"#,
        r#"{"metadata":{"name":"a"},"spec":{"clusterIP":"198.18.0.1","ports":[{"port":80}]}"#,
    ];
    let slices = [
        r#"{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"a-1","namespace":"n","labels":{"kubernetes.io/service-name":"a"},"annotations":{"endpoints.kubernetes.io/last-change-trigger-time":"2030-01-01T00:00:00Z","other":"x"}},"addressType":"IPv4","ports":[{"port":80,"protocol":"TCP","name":"http"}],"endpoints":[{"addresses":["198.18.1.1"],"conditions":{"ready":false,"serving":true,"terminating":true},"nodeName":"node-a","zone":"z","hints":{"forZones":[{"name":"z"}],"forNodes":[{"name":"node-a"}]}}]}"#,
        r#"{"apiVersion":"discovery.k8s.io/v1beta1","kind":"EndpointSlice"}"#,
        r#"{"metadata":{"name":"a-1","labels":{"kubernetes.io/service-name":"a"},"annotations":{"endpoints.kubernetes.io/last-change-trigger-time":5}},"addressType":"IPv4"}"#,
        r#"{"metadata":{"name":"a-1","labels":{"kubernetes.io/service-name":"a"}},"addressType":"IPv4","endpoints":[{"addresses":null},{"addresses":["198.18.1.1"],"conditions":{"ready":"yes"}}]}"#,
        r#"{"metadata":{"name":"a-1","labels":{"kubernetes.io/service-name":"a"}},"addressType":null,"endpoints":null,"ports":null}"#,
        r#"{"metadata":{"name":"a-1","labels":{"kubernetes.io/service-name":"a"}},"addressType":"IPv6","ports":[{"port":80,"protocol":"SCTP"},{"port":70000},{"port":null}],"endpoints":[{"addresses":["2001:db8::1","2001:db8::2"]},{"addresses":["198.18.0.1"]}]}"#,
        r#"{"metadata":{"name":"a-1","labels":{"kubernetes.io/service-name":"a"}},"addressType":"IPv4","endpoints":[{"addresses":["198.18.1.1"],"zone":7}]}"#,
    ];
    for raw in services {
        let (full, lean) = both::<Service>(raw);
        assert_eq!(full, lean, "{raw}");
    }
    for raw in slices {
        let (full, lean) = both::<EndpointSlice>(raw);
        assert_eq!(full, lean, "{raw}");
    }
}

/// The documented difference: a type error in a field the proxy does not read no longer
/// refuses the object (and the fields it reads are used).
#[test]
fn fields_not_read_are_not_checked() {
    let svc = r#"{"metadata":{"name":"a","uid":5,"annotations":{"x":1}},"spec":{"clusterIP":"198.18.0.1","selector":[],"ports":[{"port":80,"targetPort":{}}]},"status":{"conditions":7}}"#;
    let (full, lean) = both::<Service>(svc);
    assert!(
        full.starts_with("error ") && full.contains("\nerror "),
        "{full}"
    );
    assert!(
        lean.starts_with("ok Ok(") && lean.contains("\nok Ok("),
        "{lean}"
    );
    let slice = r#"{"metadata":{"name":"a-1","labels":{"kubernetes.io/service-name":"a"}},"addressType":"IPv4","endpoints":[{"addresses":["198.18.1.1"],"targetRef":"x","hostname":1}],"ports":[{"port":80,"appProtocol":2}]}"#;
    let (full, lean) = both::<EndpointSlice>(slice);
    assert!(
        full.starts_with("error ") && full.contains("\nerror "),
        "{full}"
    );
    assert!(lean.matches("addr: 198.18.1.1").count() == 2, "{lean}");
}
