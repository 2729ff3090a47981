//! Stamps the build's identity (read by `src/identity.rs`): our version, the commit, the
//! tree state and the build date. Each comes from the environment when set (the image
//! build passes them: docs/deploy/Containerfile). Otherwise the commit is read from the
//! checkout's git files (HEAD, the branch's ref or `packed-refs`; no program is run, here
//! or in the daemon), the version is the crate version and that commit
//! (`0.1.0-g<12 hex>`), and the tree state and date are upstream's unstamped defaults
//! (empty, `1970-01-01T00:00:00Z`): telling a dirty tree or a commit's date needs git
//! itself, which only the image build's environment brings.

use std::path::{Path, PathBuf};

const VARS: &[&str] = &[
    "KUBE_NLPROXY_VERSION",
    "KUBE_NLPROXY_GIT_COMMIT",
    "KUBE_NLPROXY_GIT_TREE_STATE",
    "KUBE_NLPROXY_BUILD_DATE",
];

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The git directory of the checkout holding `dir` and its common directory (they
/// differ in a worktree: `.git` is then a file naming the worktree's directory).
fn git_dirs(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    for d in dir.ancestors() {
        let dot = d.join(".git");
        let git = if dot.is_dir() {
            dot
        } else if let Some(line) = read(&dot) {
            let g = PathBuf::from(line.strip_prefix("gitdir:")?.trim());
            if g.is_absolute() {
                g
            } else {
                d.join(g)
            }
        } else {
            continue;
        };
        let common = match read(&git.join("commondir")) {
            Some(c) if Path::new(&c).is_absolute() => PathBuf::from(c),
            Some(c) => git.join(c),
            None => git.clone(),
        };
        return Some((git, common));
    }
    None
}

fn is_hash(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// HEAD's commit, and the files to watch for a new one.
fn head_commit(git: &Path, common: &Path) -> (Option<String>, Vec<PathBuf>) {
    let mut watch = vec![git.join("HEAD")];
    let Some(head) = read(&git.join("HEAD")) else {
        return (None, watch);
    };
    let Some(r) = head.strip_prefix("ref:").map(str::trim) else {
        return (Some(head).filter(|h| is_hash(h)), watch);
    };
    watch.push(common.join(r));
    watch.push(common.join("packed-refs"));
    let loose = read(&common.join(r)).filter(|h| is_hash(h));
    let packed = || {
        read(&common.join("packed-refs"))?.lines().find_map(|l| {
            let (h, name) = l.split_once(' ')?;
            (name == r && is_hash(h)).then(|| h.to_string())
        })
    };
    (loose.or_else(packed), watch)
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
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let (found, watch) = match git_dirs(&manifest) {
        Some((git, common)) => head_commit(&git, &common),
        None => (None, Vec::new()),
    };
    // a new commit or checkout restamps the build
    for w in watch {
        println!("cargo:rerun-if-changed={}", w.display());
    }
    let pkg = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    // `git describe --tags --always --dirty` output from the environment, else the crate
    // version and the commit
    let version = match env("KUBE_NLPROXY_VERSION") {
        Some(d) => match d.strip_prefix('v') {
            // a tag of ours: v0.1.0[-N-gHASH][-dirty]
            Some(tagged) if tagged.starts_with(|c: char| c.is_ascii_digit()) => tagged.to_string(),
            // a version as is (1.2.3...; a bare commit hash has no dots)
            _ if d.contains('.') && d.starts_with(|c: char| c.is_ascii_digit()) => d,
            // no tag, only the commit: the crate version and the commit
            _ => format!("{pkg}-g{d}"),
        },
        None => match &found {
            Some(h) => format!("{pkg}-g{}", &h[..12]),
            None => pkg,
        },
    };
    let commit = env("KUBE_NLPROXY_GIT_COMMIT").or(found).unwrap_or_default();
    let tree = env("KUBE_NLPROXY_GIT_TREE_STATE").unwrap_or_default();
    let date = env("KUBE_NLPROXY_BUILD_DATE").unwrap_or_else(|| "1970-01-01T00:00:00Z".into());
    println!(
        "cargo:rustc-env=KUBE_NLPROXY_STAMP_VERSION={}",
        metadata_safe(&version)
    );
    println!("cargo:rustc-env=KUBE_NLPROXY_STAMP_COMMIT={commit}");
    println!("cargo:rustc-env=KUBE_NLPROXY_STAMP_TREE_STATE={tree}");
    println!("cargo:rustc-env=KUBE_NLPROXY_STAMP_BUILD_DATE={date}");
}
