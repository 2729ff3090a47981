//! The deployment manifests in docs/deploy parse as valid Kubernetes objects with the
//! project's own types, and ask for what the proxy needs and nothing more.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use serde::Deserialize;

fn docs() -> Vec<serde_yaml::Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/deploy/kube-nlproxy.yaml"
    );
    let text = std::fs::read_to_string(path).expect("read docs/deploy/kube-nlproxy.yaml");
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde_yaml::Value::deserialize(d).expect("valid YAML"))
        .collect()
}

fn kind(v: &serde_yaml::Value) -> &str {
    v.get("kind").and_then(|k| k.as_str()).unwrap_or("")
}

#[test]
fn deploy_manifests_are_valid_kubernetes_objects() {
    let docs = docs();
    let kinds: Vec<&str> = docs.iter().map(kind).collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "DaemonSet"
        ]
    );
    for d in &docs {
        let r = match kind(d) {
            "ServiceAccount" => serde_yaml::from_value::<ServiceAccount>(d.clone()).map(|_| ()),
            "ClusterRole" => serde_yaml::from_value::<ClusterRole>(d.clone()).map(|_| ()),
            "ClusterRoleBinding" => {
                serde_yaml::from_value::<ClusterRoleBinding>(d.clone()).map(|_| ())
            }
            "ConfigMap" => serde_yaml::from_value::<ConfigMap>(d.clone()).map(|_| ()),
            "DaemonSet" => serde_yaml::from_value::<DaemonSet>(d.clone()).map(|_| ()),
            other => panic!("unexpected kind {other}"),
        };
        r.unwrap_or_else(|e| panic!("{} does not parse: {e}", kind(d)));
    }

    let role: ClusterRole = serde_yaml::from_value(docs[1].clone()).unwrap();
    let rules = role.rules.unwrap_or_default();
    let grants = |res: &str| -> Vec<String> {
        rules
            .iter()
            .filter(|r| r.resources.iter().flatten().any(|x| x == res))
            .flat_map(|r| r.verbs.clone())
            .collect()
    };
    for res in ["services", "endpointslices", "nodes", "servicecidrs"] {
        let mut v = grants(res);
        v.sort();
        assert_eq!(v, ["get", "list", "watch"], "{res}");
    }
    let ev = grants("events");
    assert!(ev.contains(&"create".to_string()) && ev.contains(&"patch".to_string()));

    let ds: DaemonSet = serde_yaml::from_value(docs[4].clone()).unwrap();
    let pod = ds.spec.template.spec.expect("pod spec");
    assert_eq!(pod.host_network, Some(true));
    let sc = pod.containers[0].security_context.clone().unwrap();
    assert_eq!(sc.privileged, Some(false), "not privileged");
    let caps = sc.capabilities.unwrap();
    assert_eq!(caps.add.unwrap(), ["NET_ADMIN"]);
    assert_eq!(caps.drop.unwrap(), ["ALL"]);

    let cm: ConfigMap = serde_yaml::from_value(docs[3].clone()).unwrap();
    let conf = cm.data.unwrap()["config.conf"].clone();
    let conf: serde_yaml::Value = serde_yaml::from_str(&conf).expect("config.conf is YAML");
    assert_eq!(conf["kind"].as_str(), Some("KubeProxyConfiguration"));
}
