//! The deployment manifests in docs/deploy parse as valid Kubernetes objects with the
//! project's own types, read kubeadm's `kube-proxy` ConfigMap layout, and ask for what
//! the proxy needs and nothing more. (That config.conf is accepted by the configuration
//! loader and that the image answers to kube-proxy's entrypoint is checked in the
//! kube-nlproxy binary's `deploy_tests`.)

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube_model::manifest;

/// The objects of a file of docs/deploy, read by the project's one manifest parser, as
/// (kind, JSON text).
fn docs(name: &str) -> Vec<(String, String)> {
    let path = format!("{}/../../docs/deploy/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    yaml_objects(&text)
}

fn yaml_objects(text: &str) -> Vec<(String, String)> {
    let docs = manifest::documents(text).expect("valid YAML");
    docs.entries()
        .into_iter()
        .map(|e| {
            let e = e.expect("a Kubernetes object");
            let raw: serde_json::Value = e.decode().expect("JSON");
            (e.kind.clone(), raw.to_string())
        })
        .collect()
}

fn kind(v: &(String, String)) -> &str {
    &v.0
}

fn decode<T: serde::de::DeserializeOwned>(v: &(String, String)) -> Result<T, serde_json::Error> {
    serde_json::from_str(&v.1)
}

#[test]
fn deploy_manifests_are_valid_kubernetes_objects() {
    let docs = docs("kube-nlproxy.yaml");
    let kinds: Vec<&str> = docs.iter().map(kind).collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "DaemonSet"
        ]
    );
    for d in &docs {
        let r = match kind(d) {
            "ServiceAccount" => decode::<ServiceAccount>(d).map(|_| ()),
            "ClusterRole" => decode::<ClusterRole>(d).map(|_| ()),
            "ClusterRoleBinding" => decode::<ClusterRoleBinding>(d).map(|_| ()),
            "DaemonSet" => decode::<DaemonSet>(d).map(|_| ()),
            other => panic!("unexpected kind {other}"),
        };
        r.unwrap_or_else(|e| panic!("{} does not parse: {e}", kind(d)));
    }

    let role: ClusterRole = decode(&docs[1]).unwrap();
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

    let ds: DaemonSet = decode(&docs[3]).unwrap();
    let pod = ds.spec.template.spec.expect("pod spec");
    assert_eq!(pod.host_network, Some(true));
    assert_eq!(pod.dns_policy, None, "the node's resolver, not cluster DNS");

    // the proxy: unprivileged, NET_ADMIN only, kubeadm's ConfigMap and command line
    let c = &pod.containers[0];
    let sc = c.security_context.clone().unwrap();
    assert_eq!(sc.privileged, Some(false), "not privileged");
    let caps = sc.capabilities.unwrap();
    assert_eq!(caps.add.unwrap(), ["NET_ADMIN"]);
    assert_eq!(caps.drop.unwrap(), ["ALL"]);
    let cmd = c.command.clone().unwrap();
    assert!(cmd.contains(&"--config=/var/lib/kube-proxy/config.conf".to_string()));
    assert!(cmd.contains(&"--hostname-override=$(NODE_NAME)".to_string()));
    let mount = c.volume_mounts.clone().unwrap();
    assert_eq!(mount[0].mount_path, "/var/lib/kube-proxy");
    let vol = pod.volumes.clone().unwrap();
    let cm_name = vol
        .iter()
        .find(|v| v.name == mount[0].name)
        .and_then(|v| v.config_map.clone())
        .map(|c| c.name);
    assert_eq!(
        cm_name.as_deref(),
        Some("kube-proxy"),
        "kubeadm's ConfigMap"
    );

    // the sysctls: a privileged init container that runs --init-only and exits
    let init = &pod.init_containers.clone().expect("init container")[0];
    assert_eq!(
        init.security_context.clone().unwrap().privileged,
        Some(true)
    );
    assert!(init
        .command
        .clone()
        .unwrap()
        .contains(&"--init-only".to_string()));
}

#[test]
fn configmap_has_kubeadms_layout() {
    let docs = docs("kube-proxy-configmap.yaml");
    assert_eq!(docs.len(), 1);
    let cm: ConfigMap = decode(&docs[0]).unwrap();
    assert_eq!(cm.metadata.name.as_deref(), Some("kube-proxy"));
    let data = cm.data.unwrap();
    let mut keys: Vec<&String> = data.keys().collect();
    keys.sort();
    assert_eq!(keys, ["config.conf", "kubeconfig.conf"]);
    let conf = yaml_objects(&data["config.conf"]);
    assert_eq!(conf.len(), 1);
    assert_eq!(kind(&conf[0]), "KubeProxyConfiguration");
    let conf: serde_json::Value = decode(&conf[0]).unwrap();
    assert_eq!(
        conf["clientConnection"]["kubeconfig"].as_str(),
        Some("/var/lib/kube-proxy/kubeconfig.conf")
    );
}
