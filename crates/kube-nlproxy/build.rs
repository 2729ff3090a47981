//! Stamps the build's identity (read by `src/identity.rs`): our version, the commit, the
//! tree state and the build date. Each comes from the environment when set (the image
//! build passes them: docs/deploy/Containerfile), else from git when the sources are a
//! git checkout (`git describe`, `git rev-parse`, `git status`, the commit's date),
//! else an unstamped default (the crate version, empty, `1970-01-01T00:00:00Z`, as
//! upstream's unstamped builds). This runs at build time only; the daemon itself never
//! runs a program.

use std::process::Command;

const VARS: &[&str] = &[
    "KUBE_NLPROXY_VERSION",
    "KUBE_NLPROXY_GIT_COMMIT",
    "KUBE_NLPROXY_GIT_TREE_STATE",
    "KUBE_NLPROXY_BUILD_DATE",
];

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Semver build metadata allows [0-9A-Za-z-] in dot-separated identifiers.
fn metadata_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

fn main() {
    for v in VARS {
        println!("cargo:rerun-if-env-changed={v}");
    }
    // a new commit or checkout restamps the build (the tree state is the one seen when
    // this script last ran)
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
                println!("cargo:rerun-if-changed={common}/{r}");
            }
        }
    }
    let pkg = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    // `git describe --tags --always --dirty` output, from the environment (the image
    // build has no .git) or from git
    let version = env("KUBE_NLPROXY_VERSION")
        .or_else(|| git(&["describe", "--tags", "--always", "--dirty", "--abbrev=12"]))
        .map(|d| match d.strip_prefix('v') {
            // a tag of ours: v0.1.0[-N-gHASH][-dirty]
            Some(tagged) if tagged.starts_with(|c: char| c.is_ascii_digit()) => tagged.to_string(),
            // a version as is (1.2.3...; a bare commit hash has no dots)
            _ if d.contains('.') && d.starts_with(|c: char| c.is_ascii_digit()) => d,
            // no tag, only the commit: the crate version and the commit
            _ => format!("{pkg}-g{d}"),
        })
        .unwrap_or(pkg);
    let commit = env("KUBE_NLPROXY_GIT_COMMIT")
        .or_else(|| git(&["rev-parse", "HEAD"]))
        .unwrap_or_default();
    let tree = env("KUBE_NLPROXY_GIT_TREE_STATE")
        .or_else(|| {
            let out = Command::new("git")
                .args(["status", "--porcelain", "--untracked-files=no"])
                .output()
                .ok()
                .filter(|o| o.status.success())?;
            Some(
                if out.stdout.is_empty() {
                    "clean"
                } else {
                    "dirty"
                }
                .to_string(),
            )
        })
        .unwrap_or_default();
    let date = env("KUBE_NLPROXY_BUILD_DATE")
        .or_else(|| {
            // the commit's date, in UTC: the same sources give the same stamp
            let out = Command::new("git")
                .args([
                    "log",
                    "-1",
                    "--format=%cd",
                    "--date=format-local:%Y-%m-%dT%H:%M:%SZ",
                ])
                .env("TZ", "UTC")
                .output()
                .ok()
                .filter(|o| o.status.success())?;
            let d = String::from_utf8(out.stdout).ok()?.trim().to_string();
            (!d.is_empty()).then_some(d)
        })
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".into());
    println!(
        "cargo:rustc-env=KUBE_NLPROXY_STAMP_VERSION={}",
        metadata_safe(&version)
    );
    println!("cargo:rustc-env=KUBE_NLPROXY_STAMP_COMMIT={commit}");
    println!("cargo:rustc-env=KUBE_NLPROXY_STAMP_TREE_STATE={tree}");
    println!("cargo:rustc-env=KUBE_NLPROXY_STAMP_BUILD_DATE={date}");
}
