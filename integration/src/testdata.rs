//! The repository's manifests that tests decode: every ruleset golden input and the
//! documented example cluster, as `(path, text)`, sorted by path.

use std::path::{Path, PathBuf};

/// The workspace root (this crate is one level below it).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `crates/ruleset/tests/golden/*/input.yaml` and `docs/examples/cluster.yaml`.
pub fn repo_manifests() -> Vec<(String, String)> {
    let root = workspace_root();
    let golden = root.join("crates/ruleset/tests/golden");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&golden)
        .unwrap_or_else(|e| panic!("{}: {e}", golden.display()))
        .map(|d| d.expect("golden entry").path().join("input.yaml"))
        .filter(|p| p.exists())
        .collect();
    paths.push(root.join("docs/examples/cluster.yaml"));
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let t = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.display().to_string(), t)
        })
        .collect()
}
