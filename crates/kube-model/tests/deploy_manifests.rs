//! The deployment manifests in docs/deploy parse as valid Kubernetes objects with the
//! project's own types, and ask for what the proxy needs and nothing more.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube_model::manifest;

fn text() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/deploy/kube-nlproxy.yaml"
    );
    std::fs::read_to_string(path).expect("read docs/deploy/kube-nlproxy.yaml")
}

#[test]
fn deploy_manifests_are_valid_kubernetes_objects() {
    let text = text();
    let docs = manifest::documents(&text).expect("valid YAML");
    let entries: Vec<manifest::Entry> = docs
        .entries()
        .into_iter()
        .map(|e| e.expect("a Kubernetes object"))
        .collect();
    let kinds: Vec<&str> = entries.iter().map(|e| e.kind.as_str()).collect();
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
    for e in &entries {
        let r = match e.kind.as_str() {
            "ServiceAccount" => e.decode::<ServiceAccount>().map(|_| ()),
            "ClusterRole" => e.decode::<ClusterRole>().map(|_| ()),
            "ClusterRoleBinding" => e.decode::<ClusterRoleBinding>().map(|_| ()),
            "ConfigMap" => e.decode::<ConfigMap>().map(|_| ()),
            "DaemonSet" => e.decode::<DaemonSet>().map(|_| ()),
            other => panic!("unexpected kind {other}"),
        };
        r.unwrap_or_else(|err| panic!("{err}"));
    }

    let role: ClusterRole = entries[1].decode().unwrap();
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

    let ds: DaemonSet = entries[4].decode().unwrap();
    let pod = ds.spec.template.spec.expect("pod spec");
    assert_eq!(pod.host_network, Some(true));
    let sc = pod.containers[0].security_context.clone().unwrap();
    assert_eq!(sc.privileged, Some(false), "not privileged");
    let caps = sc.capabilities.unwrap();
    assert_eq!(caps.add.unwrap(), ["NET_ADMIN"]);
    assert_eq!(caps.drop.unwrap(), ["ALL"]);

    let cm: ConfigMap = entries[3].decode().unwrap();
    let conf = cm.data.unwrap()["config.conf"].clone();
    let conf = manifest::documents(&conf).expect("config.conf is YAML");
    let kinds: Vec<String> = conf
        .entries()
        .into_iter()
        .map(|e| e.expect("an object").kind)
        .collect();
    assert_eq!(kinds, ["KubeProxyConfiguration"]);
}
