//! Fixtures: a multi-document YAML manifest of Services, EndpointSlices, a Node and one
//! `kind: NlproxyConfig` document (the [`Config`] fields), as the golden tests hold them.

use kube_model::{manifest, Cluster, ModelError};

use crate::{Config, RulesetError};

/// A parsed fixture.
#[derive(Debug, Clone)]
pub struct Fixture {
    pub cluster: Cluster,
    pub config: Config,
    /// Objects refused or partly refused while building the cluster.
    pub model_errors: Vec<ModelError>,
}

/// Parse a fixture. The first Node is the proxier's own.
pub fn parse(text: &str) -> Result<Fixture, RulesetError> {
    let m = manifest::parse(text)?;
    let config = match m
        .other
        .iter()
        .find(|v| v.get("kind").and_then(|k| k.as_str()) == Some("NlproxyConfig"))
    {
        Some(v) => serde_yaml::from_value(v.clone()).map_err(|e| RulesetError::Config {
            field: "NlproxyConfig".into(),
            value: String::new(),
            reason: e.to_string(),
        })?,
        None => Config::default(),
    };
    let (cluster, model_errors) = Cluster::from_objects(&m.services, &m.slices, m.nodes.first());
    Ok(Fixture {
        cluster,
        config,
        model_errors,
    })
}
