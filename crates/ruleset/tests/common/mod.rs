//! Shared test support: load a fixture (multi-document YAML of Services, EndpointSlices,
//! a Node and an `NlproxyConfig` document) and compile it.
#![allow(dead_code)]

pub mod changes;

use std::net::IpAddr;
use std::path::Path;

use kube_model::{Cluster, ObjectError};
use ruleset::{compile, Compiled, Config};

pub struct Case {
    pub cluster: Cluster,
    pub config: Config,
    pub model_errors: Vec<ObjectError>,
    pub compiled: Compiled,
}

impl Case {
    /// The host's local addresses as the tracer should see them.
    pub fn local_addrs(&self) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = self
            .config
            .local_addresses
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        if let Some(n) = &self.cluster.node {
            v.extend(n.primary_ips.iter().copied());
        }
        v
    }
    pub fn trace(&self, p: &ruleset::Packet) -> ruleset::Trace {
        ruleset::trace(&self.compiled.tables, &self.local_addrs(), p)
    }
}

pub fn load_text(text: &str) -> Case {
    let f = ruleset::fixture::parse(text).expect("fixture parses");
    let compiled = compile(&f.cluster, &f.config).expect("config is valid");
    Case {
        cluster: f.cluster,
        config: f.config,
        model_errors: f.model_errors,
        compiled,
    }
}

pub fn load(dir: &Path) -> Case {
    let text = std::fs::read_to_string(dir.join("input.yaml")).expect("read input.yaml");
    load_text(&text)
}

pub fn golden_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

pub fn case(name: &str) -> Case {
    load(&golden_dir().join(name))
}

/// What a golden expectation holds: the errors as nft comments, then the tables (ip, ip6).
pub fn render(case: &Case) -> String {
    let mut out = String::new();
    for e in &case.model_errors {
        out.push_str(&format!("# model: {e}\n"));
    }
    for e in &case.compiled.errors {
        if !matches!(e, ruleset::RulesetError::Model(_)) {
            out.push_str(&format!("# compile: {e}\n"));
        }
    }
    for t in &case.compiled.tables {
        out.push_str(&nft_model::render::table(t));
    }
    out
}

/// Build model objects directly (no k8s types), for diff and property tests.
pub mod model {
    use std::net::IpAddr;

    use kube_model::*;

    pub fn service(i: u32) -> Service {
        Service::new_cluster_ip(
            ServiceKey::new("ns", format!("svc{i}")),
            IpAddr::from([198, 18, 100 + (i / 250) as u8, (i % 250) as u8 + 1]),
            ServicePort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 80,
                node_port: None,
            },
        )
    }

    pub fn endpoint(addr: IpAddr, node: &str, ready: bool, terminating: bool) -> Endpoint {
        let mut e = Endpoint::ready_on(addr, Some(node));
        (e.ready, e.serving, e.terminating) = (ready, ready || terminating, terminating);
        e
    }

    pub fn slice(i: u32, eps: Vec<Endpoint>) -> EndpointSlice {
        EndpointSlice {
            key: ServiceKey::new("ns", format!("svc{i}-slice")),
            service: ServiceKey::new("ns", format!("svc{i}")),
            family: IpFamily::V4,
            ports: vec![SlicePort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 8080,
            }],
            endpoints: eps,
        }
    }

    pub fn pod(i: u32) -> IpAddr {
        IpAddr::from([198, 18, 2 + (i / 250) as u8, (i % 250) as u8 + 1])
    }

    /// `n` services with one endpoint each, and this node.
    pub fn cluster(n: u32) -> Cluster {
        let mut c = Cluster::new();
        c.node = Some(Node {
            name: "node-a".into(),
            zone: None,
            pod_cidrs: vec![],
            primary_ips: vec!["198.18.200.1".parse().unwrap()],
        });
        for i in 0..n {
            add(&mut c, i, vec![endpoint(pod(i), "node-b", true, false)]);
        }
        c
    }

    pub fn add(c: &mut Cluster, i: u32, eps: Vec<Endpoint>) {
        let s = service(i);
        c.services.insert(s.key.clone(), s);
        let sl = slice(i, eps);
        c.insert_slice(sl);
    }

    pub fn config() -> ruleset::Config {
        ruleset::Config {
            node_name: "node-a".into(),
            families: vec!["IPv4".into()],
            cluster_cidrs: vec!["198.18.0.0/20".into()],
            ..Default::default()
        }
    }
}
