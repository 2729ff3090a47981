//! Who this build is: the Kubernetes version it implements (kube-proxy's behaviour at
//! [`proxy_config::gates::EMULATED_VERSION`]) and our own version, stamped at build time
//! by `build.rs`. `kubernetes_build_info` and `--version` report the Kubernetes version,
//! as kube-proxy's do, with ours as semver build metadata (`v1.38.0+kube-nlproxy.0.1.0-...`),
//! so that dashboards and kubernetes-mixin's `KubeVersionMismatch` read it as kube-proxy
//! 1.38's and an operator still sees which kube-nlproxy runs.

use proxy_config::flags::VersionRequest;

/// Our version: the tag or `CARGO_PKG_VERSION-gCOMMIT`, `-dirty` for a modified tree.
pub const OWN_VERSION: &str = env!("KUBE_NLPROXY_STAMP_VERSION");
const GIT_COMMIT: &str = env!("KUBE_NLPROXY_STAMP_COMMIT");
const GIT_TREE_STATE: &str = env!("KUBE_NLPROXY_STAMP_TREE_STATE");
const BUILD_DATE: &str = env!("KUBE_NLPROXY_STAMP_BUILD_DATE");

/// The Kubernetes version implemented, as a git version (`v1.38.0`).
pub fn kubernetes_version() -> String {
    format!("v{}.0", proxy_config::gates::EMULATED_VERSION)
}

/// `kubernetes_build_info`'s labels.
pub fn build_info() -> ops_server::BuildInfo {
    ops_server::BuildInfo::new(
        &kubernetes_version(),
        OWN_VERSION,
        GIT_COMMIT,
        GIT_TREE_STATE,
        BUILD_DATE,
    )
}

/// The git version reported everywhere (`v1.38.0+kube-nlproxy.0.1.0-g...`).
pub fn git_version() -> String {
    build_info().git_version
}

/// What `--version` prints, as component-base's verflag prints it: `Kubernetes
/// <gitVersion>`, or with `raw` the version information as Go's `%#v` writes the
/// `version.Info` struct (the emulation and minimum compatibility fields empty, as
/// `version.Get()` leaves them).
pub fn version_text(req: VersionRequest) -> String {
    let b = build_info();
    match req {
        VersionRequest::Line => format!("Kubernetes {}\n", b.git_version),
        VersionRequest::Raw => {
            let q = |s: &str| klog::go_quote(s);
            format!(
                "version.Info{{Major:{}, Minor:{}, EmulationMajor:\"\", EmulationMinor:\"\", \
                 MinCompatibilityMajor:\"\", MinCompatibilityMinor:\"\", GitVersion:{}, \
                 GitCommit:{}, GitTreeState:{}, BuildDate:{}, GoVersion:{}, Compiler:{}, \
                 Platform:{}}}\n",
                q(&b.major),
                q(&b.minor),
                q(&b.git_version),
                q(&b.git_commit),
                q(&b.git_tree_state),
                q(&b.build_date),
                q(&b.go_version),
                q(&b.compiler),
                q(&b.platform),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Kubernetes version is the one whose behaviour is followed, and our version is
    /// build metadata of it (kubernetes-mixin's `KubeVersionMismatch` compares
    /// `v<major>.<minor>` taken from `git_version`).
    #[test]
    fn git_version_is_kubernetes_with_ours_as_build_metadata() {
        let b = build_info();
        assert_eq!((b.major.as_str(), b.minor.as_str()), ("1", "38"));
        let v = git_version();
        assert!(v.starts_with("v1.38.0+kube-nlproxy."), "{v}");
        let meta = v.split_once('+').unwrap().1;
        assert!(
            meta.split('.')
                .all(|id| !id.is_empty()
                    && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')),
            "not semver build metadata: {meta}"
        );
        assert!(meta.contains(env!("CARGO_PKG_VERSION")), "{meta}");
    }
}
