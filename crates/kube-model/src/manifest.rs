//! Multi-document YAML manifests (as `kubectl get -o yaml` or fixtures hold them).

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use serde::Deserialize;

use crate::ModelError;

/// The objects of a manifest, by kind; documents of other kinds are kept as YAML values.
#[derive(Debug, Clone, Default)]
pub struct Manifest {
    pub services: Vec<core::Service>,
    pub slices: Vec<discovery::EndpointSlice>,
    pub nodes: Vec<core::Node>,
    /// Documents of other kinds (e.g. a proxier configuration), in order.
    pub other: Vec<serde_yaml::Value>,
}

/// Parse a multi-document YAML text. A document that is not YAML, or that does not decode
/// as the kind it declares, is an error naming the document's index (from 0).
pub fn parse(text: &str) -> Result<Manifest, ModelError> {
    let mut m = Manifest::default();
    for (index, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let bad = |reason: String| ModelError::Manifest { index, reason };
        let v = serde_yaml::Value::deserialize(doc).map_err(|e| bad(e.to_string()))?;
        if v.is_null() {
            continue;
        }
        let kind = v
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or_default()
            .to_string();
        match kind.as_str() {
            "Service" => m
                .services
                .push(serde_yaml::from_value(v).map_err(|e| bad(e.to_string()))?),
            "EndpointSlice" => m
                .slices
                .push(serde_yaml::from_value(v).map_err(|e| bad(e.to_string()))?),
            "Node" => m
                .nodes
                .push(serde_yaml::from_value(v).map_err(|e| bad(e.to_string()))?),
            "List" => {
                let items = v
                    .get("items")
                    .and_then(|i| i.as_sequence())
                    .cloned()
                    .unwrap_or_default();
                let text = items
                    .iter()
                    .map(|i| serde_yaml::to_string(i).unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join("---\n");
                let inner = parse(&text).map_err(|e| bad(format!("in list: {e}")))?;
                m.services.extend(inner.services);
                m.slices.extend(inner.slices);
                m.nodes.extend(inner.nodes);
                m.other.extend(inner.other);
            }
            _ => m.other.push(v),
        }
    }
    Ok(m)
}
