//! A small metrics registry and its two text expositions, written the way Go's
//! client_golang (which kube-proxy uses through component-base) writes them, so that
//! scrapers and `promtool` read the same bytes from us as from kube-proxy:
//!
//! - Prometheus text format 0.0.4 (the default): `# HELP`, then `# TYPE` with the full
//!   name (a counter's `_total` included), samples; no end marker.
//! - OpenMetrics 1.0 (when the `Accept` header asks for it): a counter's family name
//!   without `_total` in `# HELP`/`# TYPE`, floats with a decimal point, integer bucket
//!   counts, `# EOF` at the end.
//!
//! Families come out sorted by name, series sorted by label values, families without
//! series are left out, and a family's HELP carries component-base's stability prefix
//! (`[ALPHA] `, ...) unless it is a raw client_golang collector's (`process_*`).
//! Pure: no I/O; [`Registry::encode`] is tested byte for byte.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use klog::go_float;

/// The metric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// component-base's stability level, printed before the HELP text; `Raw` for metrics
/// registered without one (client_golang's own collectors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stability {
    Alpha,
    Beta,
    Stable,
    Raw,
}

impl Stability {
    fn prefix(self) -> &'static str {
        match self {
            Stability::Alpha => "[ALPHA] ",
            Stability::Beta => "[BETA] ",
            Stability::Stable => "[STABLE] ",
            Stability::Raw => "",
        }
    }
}

/// What a family is: its full name (a counter's with `_total`), HELP text, type,
/// label names (sorted by name), and for a histogram its bucket upper bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Desc {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub stability: Stability,
    pub labels: &'static [&'static str],
    pub buckets: Vec<f64>,
}

impl Desc {
    pub fn counter(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Desc {
        Desc::new(name, help, Kind::Counter, labels, Vec::new())
    }
    pub fn gauge(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Desc {
        Desc::new(name, help, Kind::Gauge, labels, Vec::new())
    }
    pub fn histogram(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
        buckets: Vec<f64>,
    ) -> Desc {
        Desc::new(name, help, Kind::Histogram, labels, buckets)
    }
    fn new(
        name: &'static str,
        help: &'static str,
        kind: Kind,
        labels: &'static [&'static str],
        buckets: Vec<f64>,
    ) -> Desc {
        Desc {
            name,
            help,
            kind,
            stability: Stability::Alpha,
            labels,
            buckets,
        }
    }
    /// The same with another stability level.
    pub fn stability(mut self, s: Stability) -> Desc {
        self.stability = s;
        self
    }
}

/// `count` buckets from `start`, each `factor` times the previous (client_golang's
/// `ExponentialBuckets`).
pub fn exponential_buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(count);
    let mut b = start;
    for _ in 0..count {
        out.push(b);
        b *= factor;
    }
    out
}

/// `count` buckets from `start`, `width` apart (client_golang's `LinearBuckets`).
pub fn linear_buckets(start: f64, width: f64, count: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(count);
    let mut b = start;
    for _ in 0..count {
        out.push(b);
        b += width;
    }
    out
}

/// The value of one series.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Counter(f64),
    Gauge(f64),
    /// Observations per bucket (not cumulative; one more than the bounds: +Inf), their
    /// sum and count.
    Histogram {
        counts: Vec<u64>,
        sum: f64,
        count: u64,
    },
}

/// A family and its series at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub desc: Desc,
    /// Label values (in the order of `desc.labels`) and the value.
    pub series: Vec<(Vec<String>, Value)>,
}

/// One metric family with its series, keyed by label values.
#[derive(Debug)]
pub struct Family {
    desc: Desc,
    series: Mutex<BTreeMap<Vec<String>, Value>>,
}

fn key(labels: &[&str]) -> Vec<String> {
    labels.iter().map(|s| s.to_string()).collect()
}

impl Family {
    pub fn new(desc: Desc) -> Family {
        Family {
            desc,
            series: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn desc(&self) -> &Desc {
        &self.desc
    }

    fn with<R>(&self, labels: &[&str], f: impl FnOnce(&mut Value) -> R) -> R {
        let mut s = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let v = s
            .entry(key(labels))
            .or_insert_with(|| match self.desc.kind {
                Kind::Counter => Value::Counter(0.0),
                Kind::Gauge => Value::Gauge(0.0),
                Kind::Histogram => Value::Histogram {
                    counts: vec![0; self.desc.buckets.len() + 1],
                    sum: 0.0,
                    count: 0,
                },
            });
        f(v)
    }

    /// Create the series (at zero) if it does not exist yet.
    pub fn touch(&self, labels: &[&str]) {
        self.with(labels, |_| ());
    }

    /// Add to a counter (negative amounts are ignored: counters only go up) or a gauge.
    pub fn add(&self, labels: &[&str], by: f64) {
        self.with(labels, |v| match v {
            Value::Counter(c) if by >= 0.0 => *c += by,
            Value::Gauge(g) => *g += by,
            _ => {}
        });
    }

    pub fn inc(&self, labels: &[&str]) {
        self.add(labels, 1.0);
    }

    /// Set a gauge.
    pub fn set(&self, labels: &[&str], to: f64) {
        self.with(labels, |v| {
            if let Value::Gauge(g) = v {
                *g = to;
            }
        });
    }

    /// Set a counter to a value counted elsewhere (a count read at scrape time).
    pub fn set_counter(&self, labels: &[&str], to: f64) {
        self.with(labels, |v| {
            if let Value::Counter(c) = v {
                *c = to;
            }
        });
    }

    /// Record one observation in a histogram.
    pub fn observe(&self, labels: &[&str], x: f64) {
        let i = self
            .desc
            .buckets
            .iter()
            .position(|b| x <= *b)
            .unwrap_or(self.desc.buckets.len());
        self.with(labels, |v| {
            if let Value::Histogram { counts, sum, count } = v {
                if let Some(c) = counts.get_mut(i) {
                    *c += 1;
                }
                *sum += x;
                *count += 1;
            }
        });
    }

    /// The current value of one series (tests, and gauges derived from others).
    pub fn get(&self, labels: &[&str]) -> Option<Value> {
        let s = self.series.lock().unwrap_or_else(|e| e.into_inner());
        s.get(&key(labels)).cloned()
    }

    pub fn snapshot(&self) -> Snapshot {
        let s = self.series.lock().unwrap_or_else(|e| e.into_inner());
        Snapshot {
            desc: self.desc.clone(),
            series: s.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        }
    }
}

type Collect = Box<dyn Fn() -> Vec<Snapshot> + Send + Sync>;

/// The families served on one endpoint, and collectors read at scrape time.
#[derive(Default)]
pub struct Registry {
    families: Mutex<Vec<Arc<Family>>>,
    collectors: Mutex<Vec<Collect>>,
    /// component-base's meta metrics, when registered ([`Registry::register_meta_metrics`]).
    meta: Mutex<Option<Meta>>,
}

/// component-base's `RegisterMetaMetrics`: the registry's bookkeeping of itself.
struct Meta {
    registered: Arc<Family>,
}

const REGISTERED: &str = "registered_metrics_total";

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Registry {
    /// Register a family (the one already registered under that name, if any).
    pub fn register(&self, desc: Desc) -> Arc<Family> {
        let mut fams = self.families.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = fams.iter().find(|f| f.desc.name == desc.name) {
            return f.clone();
        }
        let f = Arc::new(Family::new(desc));
        fams.push(f.clone());
        f
    }

    /// component-base's meta metrics (`RegisterMetaMetrics`, BETA but the last):
    /// `registered_metrics_total{stability_level, deprecated_version}`, the families
    /// registered with a stability level (counted at each scrape; a raw collector's, as
    /// `process_*`, are not, as upstream's `RawMustRegister` does not count them; none of
    /// ours is deprecated), `disabled_metrics_total` and `hidden_metrics_total` (no
    /// metric is disabled (`--disabled-metrics` does not exist in kube-proxy) or hidden
    /// (none is deprecated)), `cardinality_enforcement_unexpected_categorizations_total`
    /// (ALPHA; no label allow-list is configured). The last three are 0, as upstream's
    /// are in kube-proxy.
    pub fn register_meta_metrics(&self) {
        let registered = self.register(
            Desc::counter(
                REGISTERED,
                "The count of registered metrics broken by stability level and deprecation version.",
                &["deprecated_version", "stability_level"],
            )
            .stability(Stability::Beta),
        );
        for (name, help, stability) in [
            (
                "disabled_metrics_total",
                "The count of disabled metrics.",
                Stability::Beta,
            ),
            (
                "hidden_metrics_total",
                "The count of hidden metrics.",
                Stability::Beta,
            ),
            (
                "cardinality_enforcement_unexpected_categorizations_total",
                "The count of unexpected categorizations during cardinality enforcement.",
                Stability::Alpha,
            ),
        ] {
            self.register(Desc::counter(name, help, &[]).stability(stability))
                .touch(&[]);
        }
        *self.meta.lock().unwrap_or_else(|e| e.into_inner()) = Some(Meta { registered });
    }

    /// A collector called at every scrape (for values read from the system).
    pub fn collector(&self, f: impl Fn() -> Vec<Snapshot> + Send + Sync + 'static) {
        self.collectors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Box::new(f));
    }

    /// Every family with at least one series, sorted by name.
    pub fn gather(&self) -> Vec<Snapshot> {
        if let Some(m) = self.meta.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            let fams = self.families.lock().unwrap_or_else(|e| e.into_inner());
            let mut by: BTreeMap<&'static str, f64> = BTreeMap::new();
            for f in fams.iter() {
                let level = match f.desc.stability {
                    Stability::Alpha => "ALPHA",
                    Stability::Beta => "BETA",
                    Stability::Stable => "STABLE",
                    Stability::Raw => continue,
                };
                *by.entry(level).or_default() += 1.0;
            }
            drop(fams);
            for (level, n) in by {
                m.registered.set_counter(&["", level], n);
            }
        }
        let mut out: Vec<Snapshot> = self
            .families
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|f| f.snapshot())
            .collect();
        for c in self
            .collectors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            out.extend(c());
        }
        out.retain(|s| !s.series.is_empty());
        out.sort_by(|a, b| a.desc.name.cmp(b.desc.name));
        out
    }

    /// The exposition in `format`.
    pub fn encode(&self, format: Format) -> String {
        encode(&self.gather(), format)
    }
}

/// The two text formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics text, with the version the scraper asked for (`1.0.0` or `0.0.1`).
    OpenMetrics { v1: bool },
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics { v1: true } => {
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
            }
            Format::OpenMetrics { v1: false } => {
                "application/openmetrics-text; version=0.0.1; charset=utf-8"
            }
        }
    }
}

/// The format to answer with for an `Accept` header, as client_golang negotiates it:
/// the accepted types by falling preference (`q`, then order), the first of
/// `application/openmetrics-text` (version 1.0.0, 0.0.1 or none) and `text/plain`
/// (version 0.0.4 or none) wins; anything else (or no header) gets text 0.0.4.
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Text;
    };
    let mut types: Vec<(f64, usize, String, Option<String>)> = Vec::new();
    for (i, part) in accept.split(',').enumerate() {
        let mut params = part.split(';');
        let media = params.next().unwrap_or("").trim().to_ascii_lowercase();
        let (mut q, mut version) = (1.0, None);
        for p in params {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            let v = v.trim().trim_matches('"');
            match k.trim().to_ascii_lowercase().as_str() {
                "q" => q = v.parse::<f64>().unwrap_or(0.0),
                "version" => version = Some(v.to_string()),
                _ => {}
            }
        }
        if q > 0.0 {
            types.push((q, i, media, version));
        }
    }
    types.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, _, media, version) in types {
        match (media.as_str(), version.as_deref()) {
            ("application/openmetrics-text", None | Some("1.0.0")) => {
                return Format::OpenMetrics { v1: true }
            }
            ("application/openmetrics-text", Some("0.0.1")) => {
                return Format::OpenMetrics { v1: false }
            }
            ("text/plain", None | Some("0.0.4")) => return Format::Text,
            _ => {}
        }
    }
    Format::Text
}

/// A float as client_golang writes it in the 0.0.4 text format.
fn text_float(f: f64) -> String {
    go_float(f)
}

/// A float as client_golang writes it in OpenMetrics: always with a decimal point or an
/// exponent (`1.0`, `0.25`, `1e+06`).
fn om_float(f: f64) -> String {
    let s = go_float(f);
    if f.is_finite() && !s.contains(['e', '.']) {
        format!("{s}.0")
    } else {
        s
    }
}

fn escape(s: &str, quote: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

fn labels(names: &[&str], values: &[String], extra: Option<(&str, &str)>) -> String {
    let mut pairs: Vec<String> = names
        .iter()
        .zip(values)
        .map(|(n, v)| format!("{n}=\"{}\"", escape(v, true)))
        .collect();
    if let Some((n, v)) = extra {
        pairs.push(format!("{n}=\"{v}\""));
    }
    if pairs.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", pairs.join(","))
    }
}

/// Encode families (already gathered and sorted) in `format`.
pub fn encode(families: &[Snapshot], format: Format) -> String {
    let om = matches!(format, Format::OpenMetrics { .. });
    let float = |f: f64| if om { om_float(f) } else { text_float(f) };
    let mut out = String::new();
    for fam in families {
        let d = &fam.desc;
        let family_name = if om && d.kind == Kind::Counter {
            d.name.strip_suffix("_total").unwrap_or(d.name)
        } else {
            d.name
        };
        let kind = match d.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let help = escape(&format!("{}{}", d.stability.prefix(), d.help), om);
        let _ = writeln!(out, "# HELP {family_name} {help}");
        let _ = writeln!(out, "# TYPE {family_name} {kind}");
        for (values, v) in &fam.series {
            match v {
                Value::Counter(c) | Value::Gauge(c) => {
                    let name = if om && d.kind == Kind::Counter {
                        format!("{family_name}_total")
                    } else {
                        d.name.to_string()
                    };
                    let _ = writeln!(
                        out,
                        "{name}{} {}",
                        labels(d.labels, values, None),
                        float(*c)
                    );
                }
                Value::Histogram { counts, sum, count } => {
                    let mut cum = 0u64;
                    for (i, n) in counts.iter().enumerate() {
                        cum += n;
                        let le = d
                            .buckets
                            .get(i)
                            .map_or_else(|| "+Inf".to_string(), |b| float(*b));
                        let _ = writeln!(
                            out,
                            "{}_bucket{} {}",
                            d.name,
                            labels(d.labels, values, Some(("le", &le))),
                            cum
                        );
                    }
                    let l = labels(d.labels, values, None);
                    let _ = writeln!(out, "{}_sum{l} {}", d.name, float(*sum));
                    let _ = writeln!(out, "{}_count{l} {count}", d.name);
                }
            }
        }
    }
    if om {
        out.push_str("# EOF\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_as_go_formats_them() {
        for (f, s) in [
            (0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (0.001, "0.001"),
            (16.384, "16.384"),
            (0.25, "0.25"),
            (60.0, "60"),
            (100000.0, "100000"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (1.7123456789e9, "1.7123456789e+09"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (0.000123, "0.000123"),
            (1.5e-7, "1.5e-07"),
            (u64::MAX as f64, "1.8446744073709552e+19"),
            (1048576.0, "1.048576e+06"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::NAN, "NaN"),
            (-0.5, "-0.5"),
            (123.456, "123.456"),
        ] {
            assert_eq!(go_float(f), s, "{f}");
        }
        assert_eq!(om_float(1.0), "1.0");
        assert_eq!(om_float(60.0), "60.0");
        assert_eq!(om_float(0.25), "0.25");
        assert_eq!(om_float(1e6), "1e+06");
        assert_eq!(om_float(f64::INFINITY), "+Inf");
    }

    fn sample() -> Registry {
        let r = Registry::default();
        let c = r.register(Desc::counter(
            "demo_requests_total",
            "Requests \"served\", by code.\nSecond line with a \\.",
            &["code"],
        ));
        c.add(&["200"], 3.0);
        c.inc(&["503"]);
        let g =
            r.register(Desc::gauge("demo_temperature", "A gauge.", &[]).stability(Stability::Raw));
        g.set(&[], 1.5e9);
        let h = r.register(Desc::histogram(
            "demo_seconds",
            "A histogram.",
            &["ip_family"],
            vec![0.5, 1.0],
        ));
        h.observe(&["IPv4"], 0.2);
        h.observe(&["IPv4"], 0.7);
        h.observe(&["IPv4"], 3.0);
        r.register(Desc::counter("demo_unused_total", "Never set.", &["x"]));
        let v = r.register(Desc::gauge("demo_escapes", "Label escapes.", &["v"]));
        v.set(&["a\"b\\c\nd"], 1.0);
        r
    }

    #[test]
    fn text_0_0_4_as_client_golang_writes_it() {
        let want = "\
# HELP demo_escapes [ALPHA] Label escapes.
# TYPE demo_escapes gauge
demo_escapes{v=\"a\\\"b\\\\c\\nd\"} 1
# HELP demo_requests_total [ALPHA] Requests \"served\", by code.\\nSecond line with a \\\\.
# TYPE demo_requests_total counter
demo_requests_total{code=\"200\"} 3
demo_requests_total{code=\"503\"} 1
# HELP demo_seconds [ALPHA] A histogram.
# TYPE demo_seconds histogram
demo_seconds_bucket{ip_family=\"IPv4\",le=\"0.5\"} 1
demo_seconds_bucket{ip_family=\"IPv4\",le=\"1\"} 2
demo_seconds_bucket{ip_family=\"IPv4\",le=\"+Inf\"} 3
demo_seconds_sum{ip_family=\"IPv4\"} 3.9
demo_seconds_count{ip_family=\"IPv4\"} 3
# HELP demo_temperature A gauge.
# TYPE demo_temperature gauge
demo_temperature 1.5e+09
";
        assert_eq!(sample().encode(Format::Text), want);
    }

    #[test]
    fn openmetrics_1_0_as_client_golang_writes_it() {
        let want = "\
# HELP demo_escapes [ALPHA] Label escapes.
# TYPE demo_escapes gauge
demo_escapes{v=\"a\\\"b\\\\c\\nd\"} 1.0
# HELP demo_requests [ALPHA] Requests \\\"served\\\", by code.\\nSecond line with a \\\\.
# TYPE demo_requests counter
demo_requests_total{code=\"200\"} 3.0
demo_requests_total{code=\"503\"} 1.0
# HELP demo_seconds [ALPHA] A histogram.
# TYPE demo_seconds histogram
demo_seconds_bucket{ip_family=\"IPv4\",le=\"0.5\"} 1
demo_seconds_bucket{ip_family=\"IPv4\",le=\"1.0\"} 2
demo_seconds_bucket{ip_family=\"IPv4\",le=\"+Inf\"} 3
demo_seconds_sum{ip_family=\"IPv4\"} 3.9
demo_seconds_count{ip_family=\"IPv4\"} 3
# HELP demo_temperature A gauge.
# TYPE demo_temperature gauge
demo_temperature 1.5e+09
# EOF
";
        assert_eq!(sample().encode(Format::OpenMetrics { v1: true }), want);
    }

    #[test]
    fn accept_header_negotiation() {
        let om = Format::OpenMetrics { v1: true };
        for (accept, want) in [
            (None, Format::Text),
            (Some("*/*"), Format::Text),
            (Some("text/plain"), Format::Text),
            (Some("application/json"), Format::Text),
            (Some("application/openmetrics-text"), om),
            (Some("application/openmetrics-text; version=1.0.0"), om),
            (
                Some("application/openmetrics-text; version=0.0.1"),
                Format::OpenMetrics { v1: false },
            ),
            (Some("application/openmetrics-text; version=2.0.0"), Format::Text),
            // Prometheus 2.x's scrape header
            (
                Some("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"),
                om,
            ),
            // preference by q, not by order
            (
                Some("text/plain;version=0.0.4;q=0.5,application/openmetrics-text;version=1.0.0;q=0.9"),
                om,
            ),
            (
                Some("application/openmetrics-text;q=0.2,text/plain;q=0.3"),
                Format::Text,
            ),
            (Some("application/openmetrics-text;q=0"), Format::Text),
            (Some(";;,=,;q=x"), Format::Text),
        ] {
            assert_eq!(negotiate(accept), want, "{accept:?}");
        }
    }

    #[test]
    fn bucket_helpers_match_client_golang() {
        assert_eq!(
            exponential_buckets(0.001, 2.0, 15).last().copied(),
            Some(16.384)
        );
        assert_eq!(
            linear_buckets(60.0, 5.0, 12),
            (0..12).map(|i| 60.0 + 5.0 * i as f64).collect::<Vec<_>>()
        );
    }
}
