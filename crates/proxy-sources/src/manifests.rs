//! The manifests source: Service, EndpointSlice, Node and ServiceCIDR objects from a
//! YAML/JSON file or a directory of them (`kube_model::manifest`, the one parser),
//! watched over inotify (a slow poll as the fallback) and turned into engine events.
//!
//! Nothing of a Kubernetes object is kept after it is sent: per object only its key,
//! its file and a hash of its text (plus this node's Node object and the ServiceCIDRs'
//! `spec.cidrs`). Only entries whose text changed are decoded, one at a time. At a cold
//! start (nothing sent yet) each object is decoded and sent in the pass that names it
//! (a List's Services and EndpointSlices in one pass over their text,
//! `Documents::each_object`), once its file is known to parse, so the engine compiles
//! while the rest is read. The first file, when it is one JSON `kind: List`, is sent
//! item by item as it is parsed (`manifest::stream_list`); if its text turns out not to
//! be read that way, what it sent is taken back (deleted) in the same look.
//!
//! Never a torn read, never a prefix (see [`settle`] for the rules): a changed file is
//! taken when it was renamed into place, when its writer closed it (both seen over
//! inotify, [`watch`]), or else once it has stayed the same for a settle window (also
//! on the first read); and read again later if it changed while being read. A file that
//! does not parse (or cannot be read) keeps the objects read from it before, and is not
//! read again until it changes. A version that parses but lost objects sharply (a
//! prefix of a multi-document file parses; an emptied file) is held back until it has
//! stayed so for [`HOLD`], unless it was renamed into place. Removing a file removes
//! its objects at once.
//!
//! Problems are logged once each while they last: a path skipped (symlink loop, dangling
//! link, FIFO, socket, device, directory named like a manifest), a file that cannot be
//! read or parsed, an object that does not decode (file, document, kind, namespace/name,
//! reason), an object defined twice (the later file, or the later document, wins).

mod files;
pub mod settle;
pub mod watch;

pub use watch::{run, Follow};

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hasher;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use kube_model::manifest::{self, Entry, Object, Place};
use kube_model::ServiceKey;
use proxy_events::Event;
use tracing::{debug, info, warn};

use crate::events;
use files::Stamp;
use settle::{Ready, Timing, Version, Writes};

/// The longest settle window (with a longer poll fallback).
pub const SETTLE_MAX: Duration = Duration::from_secs(2);
/// How long a version that lost objects sharply is held back (it must stay the same).
pub const HOLD: Duration = Duration::from_secs(5);
/// How long a file a writer holds open is waited for without a change.
pub const OPEN_HOLD: Duration = Duration::from_secs(30);

/// The manifests path cannot be read at all.
#[derive(Debug, thiserror::Error)]
#[error("manifests {path}: {source}")]
pub struct ManifestsError {
    path: PathBuf,
    source: std::io::Error,
}

/// One object, by identity; the order is the order of the events (node first).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Key {
    Node(String),
    Service(ServiceKey),
    Slice(ServiceKey),
    ServiceCidr(String),
}

/// As an operator names it: `Service demo/web`, `Node node-a` (not Rust's `Debug`).
impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Node(n) => write!(f, "Node {n}"),
            Key::Service(k) => write!(f, "Service {k}"),
            Key::Slice(k) => write!(f, "EndpointSlice {k}"),
            Key::ServiceCidr(n) => write!(f, "ServiceCIDR {n}"),
        }
    }
}

impl Key {
    fn of(e: &Entry<'_>, node_name: &str) -> Option<Key> {
        match e.kind.as_str() {
            "Service" => Some(Key::Service(e.key())),
            "EndpointSlice" => Some(Key::Slice(e.key())),
            "Node" if e.name == node_name => Some(Key::Node(e.name.clone())),
            "ServiceCIDR" => Some(Key::ServiceCidr(e.name.clone())),
            _ => None,
        }
    }
}

fn hash(text: &str) -> u64 {
    let mut h = DefaultHasher::new();
    h.write(text.as_bytes());
    h.finish()
}

/// What is known of one file.
#[derive(Debug, Default)]
struct FileState {
    /// The version whose objects are in use.
    used: Option<Stamp>,
    /// Its objects (only the kinds the proxy reads), by key: the hash of their text.
    /// (Keys are shared with `Reader::sent` and a read's entries: one allocation each.)
    objects: HashMap<Arc<Key>, u64>,
    /// A version that could not be read or parsed: not read again until it changes.
    failed: Option<Stamp>,
    /// A new version, and when it was first seen: read once it stays the same.
    seen: Option<(Stamp, Instant)>,
}

/// One file parsed in this round: its text, decoded entry by entry afterwards (and
/// dropped once its objects are decoded).
struct Parsed {
    text: String,
    /// The entries `read_file` found, where the text is JSON: it is parsed once. None
    /// for YAML (its documents are JSON made while parsing): parsed again to decode.
    entries: Option<Vec<Spanned>>,
}

/// Where a cold start's objects go as they are read: the engine, whether it is still
/// there, and how many events were sent.
struct Streamed<'s> {
    send: &'s mut dyn FnMut(Event) -> bool,
    ok: bool,
    events: usize,
}

impl Streamed<'_> {
    /// Send `ev` (nothing once the engine is gone) and count it.
    fn emit(&mut self, ev: Option<Event>) {
        if let Some(ev) = ev {
            self.ok = self.ok && (self.send)(ev);
            self.events += 1;
        }
    }
}

/// What one entry decodes to ([`Reader::decode`]). Returned once per entry and taken
/// apart at once, never stored: the event inside is not boxed (as `applied`'s isn't).
#[allow(clippy::large_enum_variant)]
enum Decoded {
    /// An object: the event it makes, if any.
    Object(Option<Event>),
    /// Nothing the reader keeps.
    Nothing,
    /// It does not decode (noted).
    Invalid,
}

/// An entry of a file read this round: its key, the hash and place of its text, and
/// what names it.
struct Spanned {
    key: Arc<Key>,
    hash: u64,
    place: Place,
    kind: String,
    api_version: String,
    namespace: Option<String>,
    name: String,
    span: Range<usize>,
}

impl Spanned {
    fn of(key: Arc<Key>, hash: u64, e: Entry<'_>, text: &str) -> Option<Spanned> {
        // Where `e.raw` lies in `text` (None when it is not a slice of it).
        let start = (e.raw.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
        let span = start..start.checked_add(e.raw.len())?;
        if !text
            .get(span.clone())
            .is_some_and(|s| std::ptr::eq(s, e.raw))
        {
            return None;
        }
        Some(Spanned {
            key,
            hash,
            place: e.place,
            kind: e.kind,
            api_version: e.api_version,
            namespace: e.namespace,
            name: e.name,
            span,
        })
    }

    fn into_entry(self, text: &str) -> Option<(Arc<Key>, Entry<'_>)> {
        let raw = text.get(self.span)?;
        Some((
            self.key,
            Entry {
                place: self.place,
                kind: self.kind,
                api_version: self.api_version,
                namespace: self.namespace,
                name: self.name,
                raw,
            },
        ))
    }
}

/// One file being read: where its entries go.
struct Taking<'a, 's> {
    p: &'a Path,
    name: &'a str,
    file: Arc<Path>,
    text: &'a str,
    /// Its objects (the kinds the proxy reads) and the hash of their text.
    objects: HashMap<Arc<Key>, u64>,
    /// Where each entry is, to decode what changed (not at a cold start).
    entries: Option<Vec<Spanned>>,
    /// A cold start's sink: each object is sent as it is read.
    stream: Option<&'a mut Streamed<'s>>,
}

/// Reads the manifests and remembers what it told the engine.
pub struct Reader {
    path: PathBuf,
    node_name: String,
    /// When a changed file is taken (`settle::Timing`).
    timing: Timing,
    files: BTreeMap<PathBuf, FileState>,
    /// What the engine has been told: per key, the file it came from and its hash.
    sent: HashMap<Arc<Key>, (Arc<Path>, u64)>,
    /// This node's Node object as last sent (for its deletion event).
    node: Option<core::Node>,
    /// The ServiceCIDR objects (parsed; a malformed one refused and its last good value
    /// kept), and the list the engine has.
    cidr_objects: kube_model::ServiceCidrs,
    cidrs_sent: Option<Vec<kube_model::Cidr>>,
    /// Problems logged, per file (forgotten when the file is read again or goes), and
    /// the skipped paths: each is logged once while it lasts.
    logged: BTreeMap<PathBuf, BTreeSet<String>>,
    skipped: BTreeSet<String>,
    duplicates: BTreeSet<String>,
    warned_no_node: bool,
    /// Files read since start (for tests; each read is logged at debug level).
    parses: u64,
    /// Texts parsed since start (for tests: a JSON file read is parsed once).
    text_parses: u64,
}

impl Reader {
    /// A reader of `path` for the node `node_name`; a changed file whose writer is not
    /// known is taken once it has stayed the same for `settle` (at most [`SETTLE_MAX`]).
    pub fn new(path: impl Into<PathBuf>, node_name: &str, settle: Duration) -> Reader {
        Reader {
            path: path.into(),
            node_name: node_name.to_string(),
            timing: Timing {
                settle: settle.min(SETTLE_MAX),
                hold: HOLD,
                open_hold: OPEN_HOLD,
            },
            files: BTreeMap::new(),
            sent: HashMap::new(),
            node: None,
            cidr_objects: kube_model::ServiceCidrs::default(),
            cidrs_sent: None,
            logged: BTreeMap::new(),
            skipped: BTreeSet::new(),
            duplicates: BTreeSet::new(),
            warned_no_node: false,
            parses: 0,
            text_parses: 0,
        }
    }

    /// Check that the manifests path can be listed (at start: a wrong path is fatal).
    pub fn check(&self) -> Result<(), ManifestsError> {
        files::list(&self.path)
            .map(|_| ())
            .map_err(|source| ManifestsError {
                path: self.path.clone(),
                source,
            })
    }

    /// Log a problem of `file` unless it was logged since the file was last read.
    fn note(&mut self, file: &Path, msg: String, what: &str) {
        if self
            .logged
            .entry(file.to_path_buf())
            .or_default()
            .insert(msg.clone())
        {
            warn!(problem = %msg, "{what}");
        }
    }

    /// The path read (a file or a directory).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Look at the files without knowing who writes them (the poll fallback), read what
    /// may be taken and send its events (`send` returns false when the engine is gone).
    /// Returns the number of events sent.
    pub fn poll(&mut self, send: &mut dyn FnMut(Event) -> bool) -> Result<usize, ManifestsError> {
        self.look(&|_| Writes::default(), send).map(|l| l.events)
    }

    /// Look at the files with what inotify saw of them (`writes`), read what may be
    /// taken and send its events.
    pub fn look(
        &mut self,
        writes: &dyn Fn(&Path) -> Writes,
        send: &mut dyn FnMut(Event) -> bool,
    ) -> Result<Looked, ManifestsError> {
        let listing = files::list(&self.path).map_err(|source| ManifestsError {
            path: self.path.clone(),
            source,
        })?;
        let skipped: BTreeSet<String> = listing
            .skipped
            .iter()
            .map(|(p, why)| format!("{}: skipped: {why}", p.display()))
            .collect();
        for msg in skipped.difference(&self.skipped) {
            warn!(problem = %msg, "manifest path skipped");
        }
        self.skipped = skipped;
        // Files gone (or no longer regular files) take their objects with them.
        let present: BTreeSet<&PathBuf> = listing.files.iter().map(|(p, _)| p).collect();
        let known = self.files.len();
        self.files.retain(|p, _| present.contains(p));
        let removed = self.files.len() < known;
        self.logged.retain(|p, _| present.contains(p));

        let now = Instant::now();
        let mut looked = Looked::default();
        let mut parsed: BTreeMap<PathBuf, Parsed> = BTreeMap::new();
        // A cold start (nothing sent, no file read): objects are sent as they are read.
        let cold = self.sent.is_empty() && self.files.values().all(|st| st.used.is_none());
        let mut streamed = Streamed {
            send,
            ok: true,
            events: 0,
        };
        for (p, stamp) in &listing.files {
            let st = self.files.entry(p.clone()).or_default();
            if st.used == Some(*stamp) || st.failed == Some(*stamp) {
                continue;
            }
            let (since, seen_before) = match st.seen {
                Some((s, t)) if s == *stamp => (t, true),
                _ => {
                    st.seen = Some((*stamp, now));
                    (now, false)
                }
            };
            let version = Version {
                since,
                seen_before,
                age: stamp.age(),
                first_read: st.used.is_none(),
                replaced: st.used.is_some_and(|u| !u.same_file(stamp)),
            };
            let whole = match settle::ready(&version, &writes(p), &self.timing, now) {
                Ready::Now { whole } => whole,
                Ready::At(t) => {
                    looked.wait(t);
                    continue;
                }
            };
            let stream = cold.then_some(&mut streamed);
            match self.read_file(p, *stamp, &version, whole, now, stream) {
                Ok(pf) => {
                    parsed.insert(p.clone(), pf);
                    looked.taken.push(p.clone());
                }
                Err(Some(t)) => looked.wait(t),
                Err(None) => {}
            }
        }
        // Nothing read and no file gone: nothing to compare (an idle look costs a stat
        // per file, not a pass over every object).
        looked.events = streamed.events;
        if !parsed.is_empty() || removed {
            let send = streamed.send;
            looked.events += self.apply(parsed, send);
        }
        if self.node.is_none() && !self.warned_no_node && looked.pending == 0 {
            self.warned_no_node = true;
            warn!(
                node = %self.node_name,
                "no Node object of this name in the manifests: no node addresses, labels or podCIDRs"
            );
        }
        Ok(looked)
    }

    /// Read and parse one file (`listed`: the version decided on); on success its new
    /// objects are recorded and the text is returned for decoding. Otherwise the file
    /// keeps its objects; `Err(Some(t))`: look again at `t` (held back, or changed
    /// meanwhile).
    ///
    /// With `stream` (a cold start: nothing sent yet, no file read before), each object
    /// is decoded and sent as soon as the text is known to parse, in the pass that names
    /// it, and nothing is left to decode.
    fn read_file(
        &mut self,
        p: &Path,
        listed: Stamp,
        version: &Version,
        whole: bool,
        now: Instant,
        stream: Option<&mut Streamed<'_>>,
    ) -> Result<Parsed, Option<Instant>> {
        let name = p.display().to_string();
        self.logged.remove(p);
        self.parses += 1;
        debug!(file = %name, "reading");
        let (text, stamp) = match files::read(p) {
            Ok(r) => r,
            Err(e) => {
                let msg = format!("{name}: {e}; keeping the objects read from it before");
                self.note(p, msg, "manifest file not read");
                if let Some(s) = files::stamp(p) {
                    self.files.entry(p.to_path_buf()).or_default().failed = Some(s);
                }
                return Err(None);
            }
        };
        if stamp != listed || files::stamp(p) != Some(stamp) {
            // Written while we looked or read: take it once it has settled.
            debug!(file = %name, "changed while being read; reading it again later");
            self.files.entry(p.to_path_buf()).or_default().seen = Some((stamp, now));
            return Err(Some(now + self.timing.settle));
        }
        self.text_parses += 1;
        let mut t = Taking {
            p,
            name: &name,
            file: Arc::from(p),
            text: &text,
            objects: HashMap::new(),
            entries: Some(Vec::new()),
            stream,
        };
        // The first file of a cold start that is one JSON List: each item is sent as
        // it is parsed, before the rest of the text is (the engine compiles meanwhile).
        // Nothing was sent before it, so what it sent is taken back whole when the text
        // turns out not to be read that way.
        let whole_list = if t.stream.is_some() && self.sent.is_empty() {
            manifest::stream_list(&text, |e, pre| {
                self.take(&mut t, e, pre);
                true
            })
        } else {
            manifest::Streamed::No { given: false }
        };
        if let manifest::Streamed::No { given } = whole_list {
            if given {
                self.take_back(&mut t);
                self.text_parses += 1;
            }
            let docs = match manifest::documents(&text) {
                Ok(d) => d,
                Err(e) => {
                    let msg = format!("{name}: {e}; keeping the objects read from it before");
                    self.note(p, msg, "manifest file not parsed");
                    self.files.entry(p.to_path_buf()).or_default().failed = Some(stamp);
                    return Err(None);
                }
            };
            // At a cold start, a list's Services and EndpointSlices are decoded in the
            // pass that names them.
            let decode = t.stream.is_some();
            docs.each_object(decode, |e, pre| {
                self.take(&mut t, e, pre);
                true
            });
        }
        let Taking {
            objects,
            entries,
            stream,
            ..
        } = t;
        let had = self.files.get(p).map_or(0, |st| st.objects.len());
        if !whole && settle::sharp_drop(had, objects.len()) {
            if let Ready::At(t) = settle::stable_for(version, self.timing.hold, now) {
                let msg = format!(
                    "{name}: holds {} of its {had} objects now; keeping them unless it stays so for {:?}",
                    objects.len(),
                    self.timing.hold
                );
                self.note(p, msg, "manifest file lost objects");
                return Err(Some(t));
            }
        }
        let st = self.files.entry(p.to_path_buf()).or_default();
        st.used = Some(stamp);
        st.failed = None;
        st.seen = None;
        st.objects = objects;
        if stream.is_some() {
            // Every object was sent as it was read: nothing left to decode.
            return Ok(Parsed {
                text: String::new(),
                entries: Some(Vec::new()),
            });
        }
        Ok(Parsed { text, entries })
    }

    /// One entry of the file `t` reads: noted when it is no object; recorded with its
    /// hash; at a cold start decoded and sent at once, else kept to decode what changed.
    fn take(
        &mut self,
        t: &mut Taking<'_, '_>,
        e: Result<Entry<'_>, manifest::ManifestError>,
        pre: Option<Object>,
    ) {
        let e = match e {
            Ok(e) => e,
            Err(err) => {
                let msg = format!("{}: {err}", t.name);
                self.note(t.p, msg, "invalid manifest object skipped");
                return;
            }
        };
        let Some(k) = Key::of(&e, &self.node_name).map(Arc::new) else {
            return;
        };
        let h = hash(e.raw);
        if t.objects.insert(k.clone(), h).is_some() {
            let msg = format!("{}: {k} defined twice; the last one wins", t.name);
            self.note(t.p, msg, "duplicate manifest object");
        }
        if let Some(out) = t.stream.as_mut() {
            self.stream_entry(&t.file, k, h, (&e, pre), &mut t.objects, out);
        } else {
            let text = t.text;
            t.entries = t.entries.take().and_then(|mut v| {
                v.push(Spanned::of(k, h, e, text)?);
                Some(v)
            });
        }
    }

    /// Take back what a streamed List sent (the first file of a cold start: everything
    /// sent), as if it had never been read: its objects deleted in the engine.
    fn take_back(&mut self, t: &mut Taking<'_, '_>) {
        let mut sent: Vec<Arc<Key>> = self.sent.drain().map(|(k, _)| k).collect();
        sent.sort();
        for k in sent {
            let ev = self.deleted(&k);
            if let Some(out) = t.stream.as_mut() {
                out.emit(ev);
            }
        }
        t.objects.clear();
        t.entries = Some(Vec::new());
    }

    /// Decode one entry of a file read at a cold start and send it at once (the engine
    /// compiles while the rest is read). A later definition of the same key is sent
    /// after it, so the last one wins as in [`Reader::apply`]; one that does not decode
    /// leaves the file's objects, and a version sent before is deleted by `apply`.
    fn stream_entry(
        &mut self,
        file: &Arc<Path>,
        k: Arc<Key>,
        h: u64,
        (e, pre): (&Entry<'_>, Option<Object>),
        objects: &mut HashMap<Arc<Key>, u64>,
        out: &mut Streamed<'_>,
    ) {
        match self.decode(file, e, pre) {
            Decoded::Object(ev) => {
                out.emit(ev);
                self.sent.insert(k, (file.clone(), h));
            }
            Decoded::Nothing => {}
            Decoded::Invalid => {
                objects.remove(&k);
            }
        }
    }

    /// Decode one entry of `file` (the one step of a cold start's stream and of
    /// [`Reader::apply`]): the event its object makes, or that it did not decode (noted
    /// here; the caller drops its key from what the file holds). `pre`: its object when
    /// it was decoded in the pass that named it.
    fn decode(&mut self, file: &Path, e: &Entry<'_>, pre: Option<Object>) -> Decoded {
        match pre.map_or_else(|| e.object(), |o| Ok(Some(o))) {
            Ok(Some(o)) => Decoded::Object(self.applied(o)),
            Ok(None) => Decoded::Nothing,
            Err(err) => {
                let msg = format!("{}: {err}", file.display());
                self.note(file, msg, "invalid manifest object skipped");
                Decoded::Invalid
            }
        }
    }

    /// Compare what the files hold with what was sent; send the difference: changed
    /// objects as they are decoded (file by file, in file order), then deletions, then
    /// the service CIDR list when it changed. Returns the number of events.
    fn apply(
        &mut self,
        mut parsed: BTreeMap<PathBuf, Parsed>,
        send: &mut dyn FnMut(Event) -> bool,
    ) -> usize {
        // The objects in effect: the last file (in name order) defining a key wins.
        // (Hash maps: at 100,000 objects, ordered maps spent more time comparing keys
        // than decoding; the order of events comes from the files.)
        let total = self.files.values().map(|st| st.objects.len()).sum();
        let mut want: HashMap<Arc<Key>, (Arc<Path>, u64)> = HashMap::with_capacity(total);
        let mut dups = Vec::new();
        for (p, st) in &self.files {
            let p: Arc<Path> = Arc::from(p.as_path());
            for (k, h) in &st.objects {
                if let Some((other, _)) = want.insert(k.clone(), (p.clone(), *h)) {
                    dups.push(format!(
                        "{}: {k} also defined in {}; the last file wins",
                        p.display(),
                        other.display()
                    ));
                }
            }
        }
        let dups: BTreeSet<String> = dups.into_iter().collect();
        for msg in dups.difference(&self.duplicates) {
            warn!(problem = %msg, "duplicate manifest object");
        }
        self.duplicates = dups;
        // Decode the changed objects, file by file. A file whose object now wins without
        // having been read this round (a duplicate's file changed) is read again.
        let changed: BTreeSet<Arc<Path>> = want
            .iter()
            .filter(|(k, v)| self.sent.get(*k) != Some(*v))
            .map(|(_, v)| v.0.clone())
            .collect();
        let mut n = 0;
        let mut ok = true;
        let mut emit = |ev: Option<Event>, n: &mut usize| {
            if let Some(ev) = ev {
                ok = ok && send(ev);
                *n += 1;
            }
        };
        for p in changed {
            // The entries to decode: those of the changed keys (not an earlier
            // duplicate). The file's text is dropped once they are decoded.
            let (text, entries) = match parsed.remove(&*p) {
                Some(pf) => (pf.text, pf.entries),
                None => match files::read(&p) {
                    Ok((t, s)) if self.files.get(&*p).and_then(|st| st.used) == Some(s) => {
                        (t, None)
                    }
                    _ => continue, // changed meanwhile: a later poll reads it
                },
            };
            // Wins from this file with this text, and is not what was sent.
            let sent = &self.sent;
            let wanted = |k: &Key, h: u64| {
                want.get(k)
                    .is_some_and(|v| Arc::ptr_eq(&v.0, &p) && v.1 == h && sent.get(k) != Some(v))
            };
            let docs;
            let todo: Vec<(Arc<Key>, Entry<'_>)> = match entries {
                Some(entries) => entries
                    .into_iter()
                    .filter(|s| wanted(&s.key, s.hash))
                    .filter_map(|s| s.into_entry(&text))
                    .collect(),
                None => {
                    self.text_parses += 1;
                    let Ok(d) = manifest::documents(&text) else {
                        continue;
                    };
                    docs = d;
                    docs.entries()
                        .into_iter()
                        .flatten()
                        .filter_map(|e| Some((Arc::new(Key::of(&e, &self.node_name)?), e)))
                        .filter(|(k, e)| wanted(k, hash(e.raw)))
                        .collect()
                }
            };
            for (k, e) in todo {
                match self.decode(&p, &e, None) {
                    Decoded::Object(ev) => {
                        self.sent.insert(k.clone(), want[&k].clone());
                        emit(ev, &mut n);
                    }
                    Decoded::Nothing => {}
                    Decoded::Invalid => {
                        // Skipped until its file changes; a version sent before is
                        // deleted, as an invalid object is.
                        if let Some(st) = self.files.get_mut(&*p) {
                            st.objects.remove(&k);
                        }
                        want.remove(&k);
                    }
                }
            }
        }
        let mut gone: Vec<Arc<Key>> = self
            .sent
            .keys()
            .filter(|k| !want.contains_key(*k))
            .cloned()
            .collect();
        gone.sort();
        for k in gone {
            self.sent.remove(&k);
            let ev = self.deleted(&k);
            emit(ev, &mut n);
        }
        let cidrs = self.cidr_objects.all();
        if self.cidrs_sent.as_ref() != Some(&cidrs)
            && (self.cidrs_sent.is_some() || !cidrs.is_empty())
        {
            let list: Vec<String> = cidrs.iter().map(ToString::to_string).collect();
            info!(cidrs = %list.join(","), "service CIDRs");
            if ok {
                send(Event::ServiceCidrs(cidrs.clone()));
            }
            self.cidrs_sent = Some(cidrs);
            n += 1;
        }
        n
    }

    fn applied(&mut self, o: Object) -> Option<Event> {
        Some(match o {
            Object::Service(s) => Event::ServiceApplied(*s),
            Object::EndpointSlice(s) => Event::SliceApplied(*s),
            Object::Node(n) => {
                self.node = Some((*n).clone());
                Event::NodeApplied(*n)
            }
            Object::ServiceCidr(c) => {
                if let Some(e) = self.cidr_objects.apply(&c).refused {
                    warn!(object = %e.object(), error = %e,
                        "Invalid ServiceCIDR ignored; its last good value is kept");
                }
                return None;
            }
        })
    }

    fn deleted(&mut self, k: &Key) -> Option<Event> {
        match k {
            Key::Service(key) => Some(events::service_deleted(Some(&key.namespace), &key.name)),
            Key::Slice(key) => Some(events::slice_deleted(Some(&key.namespace), &key.name)),
            Key::Node(_) => self.node.take().map(events::node_deleted),
            Key::ServiceCidr(name) => {
                self.cidr_objects.delete(name);
                None
            }
        }
    }
}

/// What a look at the files found.
#[derive(Debug, Default)]
pub struct Looked {
    /// Events sent.
    pub events: usize,
    /// Files whose new version was taken.
    pub taken: Vec<PathBuf>,
    /// Files with a new version not taken yet, and the earliest instant one may be.
    pub pending: usize,
    pub next: Option<Instant>,
}

impl Looked {
    fn wait(&mut self, t: Instant) {
        self.pending += 1;
        self.next = Some(self.next.map_or(t, |n| n.min(t)));
    }
}

#[cfg(test)]
mod tests;
