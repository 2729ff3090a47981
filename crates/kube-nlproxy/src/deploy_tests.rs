//! What can be checked here of docs/deploy without a container engine or a cluster: the
//! ConfigMap's config.conf is accepted by the configuration loader, its kubeconfig.conf
//! by the API client's, and both image build paths put the binary at kube-proxy's
//! entrypoint path. The image itself is built and run by tests/image_netns.rs.

use std::path::Path;

fn deploy(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/deploy")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn configmap() -> k8s_openapi::api::core::v1::ConfigMap {
    let v = kube_model::manifest::single_document(&deploy("kube-proxy-configmap.yaml"))
        .expect("one YAML document");
    serde_json::from_value(v).expect("a ConfigMap")
}

#[test]
fn configmap_config_conf_is_accepted() {
    let cm = configmap();
    assert_eq!(cm.metadata.name.as_deref(), Some("kube-proxy"));
    let data = cm.data.expect("data");
    let loaded = proxy_config::config::load_text(&data["config.conf"]).expect("config.conf loads");
    assert!(loaded.unknown.is_empty(), "{:?}", loaded.unknown);
    let mut c = loaded.config;
    c.apply_platform_defaults();
    proxy_config::config::validate::validate(&c).expect("valid");
    assert_eq!(
        c.client_connection.kubeconfig,
        "/var/lib/kube-proxy/kubeconfig.conf"
    );
    assert_eq!(c.healthz_bind_address, "0.0.0.0:10256");
}

#[test]
fn configmap_kubeconfig_names_the_control_plane() {
    let data = configmap().data.expect("data");
    let kc = kube::config::Kubeconfig::from_yaml(&data["kubeconfig.conf"]).expect("kubeconfig");
    let cluster = kc.clusters[0].cluster.clone().expect("cluster");
    let server = cluster.server.expect("server");
    assert!(server.starts_with("https://"), "{server}");
    assert!(
        !server.contains("kubernetes.default"),
        "not the Service: {server}"
    );
    assert_eq!(
        cluster.certificate_authority.as_deref(),
        Some("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
    );
    let user = kc.auth_infos[0].auth_info.clone().expect("user");
    assert_eq!(
        user.token_file.as_deref(),
        Some("/var/run/secrets/kubernetes.io/serviceaccount/token")
    );
}

#[test]
fn image_answers_to_kube_proxys_entrypoint() {
    let recipe = deploy("Containerfile");
    // online: compiled in the build stage, its debug info split off, laid out in /out
    assert!(recipe.contains(
        r#"--strip-debug --add-gnu-debuglink=/debug/kube-nlproxy.debug "target/$triple/release/kube-nlproxy" /out/usr/local/bin/kube-nlproxy"#
    ));
    assert!(recipe.contains("ln -s kube-nlproxy /out/usr/local/bin/kube-proxy"));
    assert!(recipe.contains("FROM scratch AS debug\nCOPY --from=build /debug/ /\n"));
    // offline: the same layout from the build context build-offline makes
    assert!(recipe.contains("FROM scratch AS prebuilt\nCOPY out/ /out/\n"));
    let offline = deploy("build-offline");
    assert!(offline.contains(
        r#""$objcopy" --strip-debug --add-gnu-debuglink="$debug_out" "$binary" "$ctx/out/usr/local/bin/kube-nlproxy""#
    ));
    assert!(offline.contains(r#"ln -s kube-nlproxy "$ctx/out/usr/local/bin/kube-proxy""#));
    assert!(offline.contains("--build-arg BINARY=prebuilt"));
    assert!(offline.contains(r#"max_bytes="${MAX_IMAGE_BYTES:-40000000}""#));
    // online by default; one final stage for both; cross-compiled, not emulated
    assert!(recipe.contains("ARG BASE=gcr.io/distroless/cc-debian12\n"));
    assert!(recipe.contains("FROM --platform=$BUILDPLATFORM ${BUILDER} AS build\n"));
    assert!(recipe.contains("ARG BINARY=build\n"));
    assert!(recipe.contains("FROM ${BINARY} AS binary\n"));
    let last = &recipe[recipe.rfind("\nFROM ").expect("a final stage")..];
    assert!(last.starts_with("\nFROM ${BASE}\n"), "{last}");
    assert!(last.contains("COPY --from=binary /out/ /"));
    assert!(last.contains("ENTRYPOINT [\"/usr/local/bin/kube-nlproxy\"]"));
}

/// kubeadm's DaemonSet command line is accepted as it is.
#[test]
fn kubeadm_daemonset_command_line_parses() {
    let args = [
        "/usr/local/bin/kube-proxy",
        "--config=/var/lib/kube-proxy/config.conf",
        "--hostname-override=node-a",
    ];
    match proxy_config::flags::Flags::parse_args(args.iter().map(|s| s.to_string()).collect()) {
        proxy_config::flags::Parsed::Run(f) => {
            assert_eq!(f.config.as_deref(), Some("/var/lib/kube-proxy/config.conf"))
        }
        proxy_config::flags::Parsed::Exit { text, .. } => panic!("{text}"),
    }
}
