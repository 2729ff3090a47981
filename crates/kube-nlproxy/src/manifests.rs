//! The manifests source: Service, EndpointSlice and Node objects from a YAML/JSON file or
//! a directory of them, watched for changes (polled), turned into engine events.
//!
//! A document that does not decode is reported (file, document, kind, namespace/name
//! when readable, reason) and skipped; the rest of the file is used. A file that cannot
//! be read or is not YAML at all keeps its previous objects (it may be mid-write).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use serde::Deserialize;
use sync_engine::Event;
use tracing::{debug, info, warn};

/// One object, by identity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    Node(String),
    Service(String, String),
    Slice(String, String),
}

#[derive(Debug, Clone)]
pub enum Object {
    Node(Box<core::Node>),
    Service(Box<core::Service>),
    Slice(Box<discovery::EndpointSlice>),
}

impl Object {
    fn json(&self) -> String {
        match self {
            Object::Node(o) => serde_json::to_string(o),
            Object::Service(o) => serde_json::to_string(o),
            Object::Slice(o) => serde_json::to_string(o),
        }
        .unwrap_or_default()
    }
}

/// The objects of all files, with the text they were read from (to detect changes).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub objects: BTreeMap<Key, (Object, String)>,
}

/// The files under `path`: the file itself, or the `.yaml`, `.yml` and `.json` files of
/// the directory (not recursive, hidden files skipped), sorted.
pub fn files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    for e in std::fs::read_dir(path)? {
        let p = e?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
        if !name.starts_with('.') && matches!(ext, "yaml" | "yml" | "json") && p.is_file() {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

fn meta_name(v: &serde_yaml::Value) -> (String, String) {
    let m = v.get("metadata");
    let s = |k: &str| {
        m.and_then(|m| m.get(k))
            .and_then(|x| x.as_str())
            .unwrap_or("")
            .to_string()
    };
    (s("namespace"), s("name"))
}

/// Parse one file's text into objects; problems are returned as messages.
pub fn parse_text(file: &str, text: &str) -> Result<(Vec<Object>, Vec<String>), String> {
    let mut objects = Vec::new();
    let mut problems = Vec::new();
    let mut docs = Vec::new();
    for (index, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let v = serde_yaml::Value::deserialize(doc)
            .map_err(|e| format!("{file}: document {index}: not YAML: {e}"))?;
        if v.is_null() {
            continue;
        }
        if v.get("kind").and_then(|k| k.as_str()) == Some("List") {
            let items = v
                .get("items")
                .and_then(|i| i.as_sequence())
                .cloned()
                .unwrap_or_default();
            for (j, item) in items.into_iter().enumerate() {
                docs.push((format!("document {index} item {j}"), item));
            }
        } else {
            docs.push((format!("document {index}"), v));
        }
    }
    for (place, v) in docs {
        let kind = v
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or_default()
            .to_string();
        let (ns, name) = meta_name(&v);
        let who = if ns.is_empty() {
            format!("{kind} {name}")
        } else {
            format!("{kind} {ns}/{name}")
        };
        let decoded = match kind.as_str() {
            "Service" => {
                serde_yaml::from_value::<core::Service>(v).map(|o| Object::Service(Box::new(o)))
            }
            "EndpointSlice" => serde_yaml::from_value::<discovery::EndpointSlice>(v)
                .map(|o| Object::Slice(Box::new(o))),
            "Node" => serde_yaml::from_value::<core::Node>(v).map(|o| Object::Node(Box::new(o))),
            _ => {
                debug!(file, place, kind, "document of another kind ignored");
                continue;
            }
        };
        match decoded {
            Ok(o) => objects.push(o),
            Err(e) => problems.push(format!("{file}: {place}: {who}: invalid: {e}")),
        }
    }
    Ok((objects, problems))
}

fn key_of(o: &Object) -> Key {
    let ns = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.namespace.clone().unwrap_or_else(|| "default".into())
    };
    match o {
        Object::Node(n) => Key::Node(n.metadata.name.clone().unwrap_or_default()),
        Object::Service(s) => {
            Key::Service(ns(&s.metadata), s.metadata.name.clone().unwrap_or_default())
        }
        Object::Slice(s) => {
            Key::Slice(ns(&s.metadata), s.metadata.name.clone().unwrap_or_default())
        }
    }
}

/// Reads the manifests and remembers what it saw per file.
pub struct Reader {
    path: PathBuf,
    node_name: String,
    /// Per file: its mtime and length when last read, and its objects.
    per_file: BTreeMap<PathBuf, (Option<SystemTime>, u64, Vec<Object>)>,
    /// Problems already reported (each is logged once while it persists).
    reported: HashSet<String>,
    warned_no_node: bool,
}

impl Reader {
    pub fn new(path: impl Into<PathBuf>, node_name: &str) -> Reader {
        Reader {
            path: path.into(),
            node_name: node_name.to_string(),
            per_file: BTreeMap::new(),
            reported: HashSet::new(),
            warned_no_node: false,
        }
    }

    /// Re-read changed files and return the current snapshot. Fails only when the path
    /// itself cannot be read.
    pub fn read(&mut self) -> Result<Snapshot, String> {
        let list = files(&self.path).map_err(|e| format!("{}: {e}", self.path.display()))?;
        let mut problems = Vec::new();
        let mut keep = BTreeMap::new();
        for f in list {
            let meta = std::fs::metadata(&f).ok();
            let mtime = meta.as_ref().and_then(|m| m.modified().ok());
            let len = meta.as_ref().map_or(0, |m| m.len());
            if let Some(prev) = self.per_file.remove(&f) {
                if prev.0 == mtime && prev.1 == len && mtime.is_some() {
                    keep.insert(f, prev);
                    continue;
                }
                let name = f.display().to_string();
                match std::fs::read_to_string(&f)
                    .map_err(|e| format!("{name}: {e}"))
                    .and_then(|t| parse_text(&name, &t))
                {
                    Ok((objs, p)) => {
                        problems.extend(p);
                        keep.insert(f, (mtime, len, objs));
                    }
                    Err(e) => {
                        problems.push(format!("{e}; keeping the objects read before"));
                        keep.insert(f, prev);
                    }
                }
            } else {
                let name = f.display().to_string();
                match std::fs::read_to_string(&f)
                    .map_err(|e| format!("{name}: {e}"))
                    .and_then(|t| parse_text(&name, &t))
                {
                    Ok((objs, p)) => {
                        problems.extend(p);
                        keep.insert(f, (mtime, len, objs));
                    }
                    Err(e) => problems.push(e),
                }
            }
        }
        self.per_file = keep;
        // Persisting problems of unchanged files stay reported; new ones are logged.
        let now: HashSet<String> = problems.into_iter().collect();
        for p in &now {
            if !self.reported.contains(p) {
                warn!(problem = %p, "invalid manifest object skipped");
            }
        }
        // Only forget problems of files that were re-read (others keep theirs).
        self.reported.retain(|p| now.contains(p));
        self.reported.extend(now);

        let mut snap = Snapshot::default();
        for (f, (_, _, objs)) in &self.per_file {
            for o in objs {
                let k = key_of(o);
                if let Key::Node(n) = &k {
                    if *n != self.node_name {
                        continue;
                    }
                }
                if snap.objects.contains_key(&k) {
                    let msg = format!("{}: {k:?} defined twice; the last one wins", f.display());
                    if self.reported.insert(msg.clone()) {
                        warn!(problem = %msg, "duplicate manifest object");
                    }
                }
                snap.objects.insert(k, (o.clone(), o.json()));
            }
        }
        let has_node = snap.objects.keys().any(|k| matches!(k, Key::Node(_)));
        if !has_node && !self.warned_no_node {
            self.warned_no_node = true;
            warn!(
                node = %self.node_name,
                "no Node object of this name in the manifests: no node addresses, labels or podCIDRs"
            );
        }
        Ok(snap)
    }
}

fn applied(o: &Object) -> Event {
    match o {
        Object::Node(n) => Event::NodeApplied((**n).clone()),
        Object::Service(s) => Event::ServiceApplied((**s).clone()),
        Object::Slice(s) => Event::SliceApplied((**s).clone()),
    }
}

fn deleted(o: &Object) -> Option<Event> {
    match o {
        Object::Node(n) => {
            // No NodeDeleted event: the engine sees a node being deleted.
            let mut n = (**n).clone();
            if n.metadata.deletion_timestamp.is_none() {
                n.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::now(),
                    ));
            }
            Some(Event::NodeApplied(n))
        }
        Object::Service(s) => Some(Event::ServiceDeleted((**s).clone())),
        Object::Slice(s) => Some(Event::SliceDeleted((**s).clone())),
    }
}

/// The events that turn `old` into `new`: node first, then services, then slices.
pub fn diff(old: &Snapshot, new: &Snapshot) -> Vec<Event> {
    let mut out = Vec::new();
    for (k, (o, text)) in &new.objects {
        match old.objects.get(k) {
            Some((_, t)) if t == text => {}
            _ => out.push(applied(o)),
        }
    }
    for (k, (o, _)) in &old.objects {
        if !new.objects.contains_key(k) {
            if let Some(ev) = deleted(o) {
                out.push(ev);
            }
        }
    }
    out
}

/// The events of an initial list: every object, then both "listed" markers.
pub fn initial(snap: &Snapshot) -> Vec<Event> {
    let mut out = diff(&Snapshot::default(), snap);
    out.push(Event::ServicesListed);
    out.push(Event::SlicesListed);
    out
}

/// Watch the manifests: send the initial list, then the changes, until the receiver is
/// gone. Runs on its own thread.
pub fn watch(mut reader: Reader, mut last: Snapshot, poll: Duration, tx: Sender<Event>) {
    loop {
        std::thread::sleep(poll);
        let snap = match reader.read() {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "cannot read the manifests; keeping the rules as they are");
                continue;
            }
        };
        let events = diff(&last, &snap);
        if !events.is_empty() {
            info!(changes = events.len(), "manifests changed");
        }
        for ev in events {
            if tx.send(ev).is_err() {
                return;
            }
        }
        last = snap;
    }
}

/// The `spec.cidrs` of every `ServiceCIDR` object (networking.k8s.io/v1) in the manifests
/// under `path`, read once at start (a change needs a restart).
pub fn service_cidrs(path: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for f in files(path).unwrap_or_default() {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let Ok(v) = serde_yaml::Value::deserialize(doc) else {
                break;
            };
            let items: Vec<serde_yaml::Value> =
                if v.get("kind").and_then(|k| k.as_str()) == Some("List") {
                    v.get("items")
                        .and_then(|i| i.as_sequence())
                        .cloned()
                        .unwrap_or_default()
                } else {
                    vec![v]
                };
            for item in items {
                if item.get("kind").and_then(|k| k.as_str()) != Some("ServiceCIDR") {
                    continue;
                }
                let cidrs = item
                    .get("spec")
                    .and_then(|s| s.get("cidrs"))
                    .and_then(|c| c.as_sequence());
                out.extend(
                    cidrs
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c.as_str().map(str::to_string)),
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: a, namespace: ns}
spec: {clusterIP: 198.18.100.1, ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: bad, namespace: ns}
spec: {clusterIP: 198.18.100.2, ports: [{port: "eighty"}]}
---
kind: List
apiVersion: v1
items:
- apiVersion: v1
  kind: Node
  metadata: {name: node-a}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: a-1, namespace: ns, labels: {kubernetes.io/service-name: a}}
  addressType: IPv4
  endpoints: [{addresses: [198.18.1.1]}]
---
kind: ConfigMap
apiVersion: v1
metadata: {name: other}
"#;

    #[test]
    fn bad_documents_are_reported_and_skipped() {
        let (objs, problems) = parse_text("f.yaml", TEXT).unwrap();
        assert_eq!(objs.len(), 3);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("Service ns/bad"), "{}", problems[0]);
        assert!(parse_text("f.yaml", "a: [").is_err());
    }

    #[test]
    fn diff_emits_changes_only() {
        let dir = std::env::temp_dir().join(format!("nlp-man-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("m.yaml");
        std::fs::write(&f, TEXT).unwrap();
        let mut r = Reader::new(&dir, "node-a");
        let s1 = r.read().unwrap();
        let ev = initial(&s1);
        assert_eq!(ev.len(), 5);
        assert!(matches!(ev[0], Event::NodeApplied(_)));
        let s2 = r.read().unwrap();
        assert!(diff(&s1, &s2).is_empty());
        std::fs::write(&f, TEXT.replace("198.18.1.1", "198.18.1.2") + "\n").unwrap();
        let s3 = r.read().unwrap();
        let d = diff(&s2, &s3);
        assert_eq!(d.len(), 1);
        assert!(matches!(d[0], Event::SliceApplied(_)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
