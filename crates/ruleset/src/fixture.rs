//! Fixtures: a multi-document YAML manifest of Services, EndpointSlices, a Node and one
//! `kind: NlproxyConfig` document (the [`Config`] fields), as the golden tests hold them.

use kube_model::{manifest, Cluster, ObjectError};

use serde::Deserialize;

use crate::config::Config;
use crate::error::RulesetError;

/// A parsed fixture.
#[derive(Debug, Clone)]
pub struct Fixture {
    pub cluster: Cluster,
    pub config: Config,
    /// Objects refused or partly refused while building the cluster.
    pub model_errors: Vec<ObjectError>,
}

/// Parse a fixture. The first Node is the proxier's own.
pub fn parse(text: &str) -> Result<Fixture, RulesetError> {
    let m = manifest::parse(text)?;
    let config = match m.other_of_kind("NlproxyConfig") {
        Some(v) => Config::deserialize(v).map_err(|e| RulesetError::Config {
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
