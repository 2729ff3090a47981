//! component-base's z-pages as kube-proxy installs them on its metrics server:
//! `/statusz` (gate `ComponentStatusz`) and `/flagz` (gate `ComponentFlagz`), both beta
//! and on at 1.36+. The plain-text bodies byte for byte as `zpages/statusz` and
//! `zpages/flagz` write them (header, the delimiter drawn at random from `:`, `: `, `=`,
//! ` ` so nobody scrapes them), and the `Accept` negotiation of `zpages/httputil`
//! (none, `*/*`, `text/*`, `text/plain` give text; anything else 406 `not acceptable`).
//!
//! The structured form (1.35+, KEP-4827/4828): `Accept:
//! application/json;v=v1alpha1;g=config.k8s.io;as=Statusz` (or `v=v1beta1`, the beta
//! of 1.36; `as=Flagz` for `/flagz`) gives the versioned JSON object (`kind`,
//! `apiVersion: config.k8s.io/<v>`, `metadata.name`, then `startTime`, `uptimeSeconds`,
//! `goVersion`, `binaryVersion`, `emulationVersion` (and `paths`, none for kube-proxy);
//! or `flags`, name to value); `application/json` without all three parameters is 406.
//!
//! The formatting is pure ([`statusz_text`], [`flagz_text`], [`negotiate`]); the router
//! only reads the clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The delimiters upstream draws from.
pub const DELIMITERS: [&str; 4] = [":", ": ", "=", " "];

const WARNING: &str = "Warning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only.";

/// What `/statusz` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statusz {
    /// `kube-proxy`, as upstream names the component.
    pub component: String,
    /// When the process started.
    pub started: SystemTime,
    /// `Go version`: kube-nlproxy has none; what to print there.
    pub go_version: String,
    pub binary_version: String,
    /// The kube-proxy version whose behaviour is followed (upstream: the emulation
    /// version, major.minor).
    pub emulation_version: Option<String>,
}

/// The media type negotiated for a z-page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Media {
    TextPlain,
    /// The structured form, in this version of `config.k8s.io`.
    Json(&'static str),
}

/// The versions of the structured form served (upstream: v1alpha1 in 1.35, v1beta1
/// from 1.36).
pub const VERSIONS: [&str; 2] = ["v1alpha1", "v1beta1"];

struct Clause<'a> {
    ty: &'a str,
    sub: &'a str,
    q: f64,
    params: Vec<(&'a str, &'a str)>,
}

/// goautoneg's `ParseAccept`: clauses with their q, most preferred first (q, then
/// specificity), stable.
fn parse_accept(accept: &str) -> Vec<Clause<'_>> {
    let mut out: Vec<Clause> = Vec::new();
    for part in accept.split(',') {
        let mut it = part.split(';');
        let range = it.next().unwrap_or("").trim();
        let (ty, sub) = match range.split_once('/') {
            Some((t, s)) => (t.trim(), s.trim()),
            None if range == "*" => ("*", "*"),
            None => continue,
        };
        let mut q = 1.0;
        let mut params = Vec::new();
        for p in it {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            let (k, v) = (k.trim(), v.trim());
            if k == "q" {
                q = v.parse().unwrap_or(0.0);
            } else {
                params.push((k, v));
            }
        }
        out.push(Clause { ty, sub, q, params });
    }
    let rank = |c: &Clause| match (c.ty, c.sub) {
        ("*", "*") => 0,
        (_, "*") => 1,
        _ => 2,
    };
    out.sort_by(|a, b| {
        b.q.partial_cmp(&a.q)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(rank(b).cmp(&rank(a)))
    });
    out
}

/// `httputil`'s negotiation of a z-page's media type among text/plain and the structured
/// JSON: the clauses in preference order, the first that text/plain or a complete JSON
/// request (`v`, `g=config.k8s.io`, `as`) satisfies wins; a JSON clause without them is
/// passed over. `None` means 406 `not acceptable`.
pub fn negotiate(accept: Option<&str>, kind: &str) -> Option<Media> {
    let accept = accept.unwrap_or("");
    if accept.trim().is_empty() || accept == "*/*" {
        return Some(Media::TextPlain);
    }
    parse_accept(accept)
        .iter()
        .filter(|c| c.q > 0.0)
        .find_map(|c| {
            let text = (c.ty == "*" || c.ty == "text") && (c.sub == "*" || c.sub == "plain");
            if text {
                return Some(Media::TextPlain);
            }
            let json = c.ty == "application" && c.sub == "json";
            let param = |k: &str| c.params.iter().find(|(pk, _)| *pk == k).map(|(_, v)| *v);
            let version = VERSIONS.into_iter().find(|v| param("v") == Some(*v))?;
            (json && param("g") == Some("config.k8s.io") && param("as") == Some(kind))
                .then_some(Media::Json(version))
        })
}

/// Go's `html.EscapeString`.
fn html_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '&' => o.push_str("&amp;"),
            '\'' => o.push_str("&#39;"),
            '"' => o.push_str("&#34;"),
            c => o.push(c),
        }
    }
    o
}

/// A UTC time as (days since 1970, seconds into the day, year, month, day): civil from
/// days (Howard Hinnant's algorithm).
fn civil(t: SystemTime) -> (i64, u64, i64, i64, i64) {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (days, rem, year, month, day)
}

/// Go's `time.UnixDate` layout (`Mon Jan _2 15:04:05 MST 2006`) in UTC.
pub fn unix_date(t: SystemTime) -> String {
    let (days, rem, year, month, day) = civil(t);
    const WD: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MO: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{} {} {:>2} {:02}:{:02}:{:02} UTC {}",
        WD[days.rem_euclid(7) as usize],
        MO[(month - 1) as usize],
        day,
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        year
    )
}

/// Upstream's uptime: `%d hr %02d min %02d sec`.
pub fn uptime(up: Duration) -> String {
    let s = up.as_secs();
    format!("{} hr {:02} min {:02} sec", s / 3600, (s / 60) % 60, s % 60)
}

/// The text `/statusz` body at `now`, with delimiter `delim`.
pub fn statusz_text(s: &Statusz, now: SystemTime, delim: &str) -> String {
    let d = html_escape(delim);
    let up = now.duration_since(s.started).unwrap_or(Duration::ZERO);
    let emulation = s
        .emulation_version
        .as_ref()
        .map(|v| format!("Emulation version{d} {}", html_escape(v)))
        .unwrap_or_default();
    // kube-proxy registers no listed paths: the Paths line is empty
    format!(
        "\n{} statusz\n{WARNING}\n\nStarted{d} {}\nUp{d} {}\nGo version{d} {}\nBinary version{d} {}\n{emulation}\n\n",
        s.component,
        html_escape(&unix_date(s.started)),
        html_escape(&uptime(up)),
        html_escape(&s.go_version),
        html_escape(&s.binary_version),
    )
}

/// RFC 3339 in UTC to the second, as `metav1.Time` marshals.
fn rfc3339_seconds(t: SystemTime) -> String {
    let (_, rem, year, month, day) = civil(t);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The structured `/statusz` body (`config.k8s.io/<version>`, kind `Statusz`) at `now`.
pub fn statusz_json(s: &Statusz, now: SystemTime, version: &str) -> String {
    let up = now.duration_since(s.started).unwrap_or(Duration::ZERO);
    let mut o = serde_json::json!({
        "kind": "Statusz",
        "apiVersion": format!("config.k8s.io/{version}"),
        "metadata": {"name": s.component},
        "startTime": rfc3339_seconds(s.started),
        "uptimeSeconds": up.as_secs(),
        "goVersion": s.go_version,
        "binaryVersion": s.binary_version,
    });
    if let Some(e) = &s.emulation_version {
        o["emulationVersion"] = serde_json::Value::String(e.clone());
    }
    o.to_string()
}

/// The structured `/flagz` body (`config.k8s.io/<version>`, kind `Flagz`): every flag,
/// name to value.
pub fn flagz_json(component: &str, flags: &[(String, String)], version: &str) -> String {
    let flags: serde_json::Map<String, serde_json::Value> = flags
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    serde_json::json!({
        "kind": "Flagz",
        "apiVersion": format!("config.k8s.io/{version}"),
        "metadata": {"name": component},
        "flags": flags,
    })
    .to_string()
}

/// The text `/flagz` body: every flag `name<sep>value`, sorted by name.
pub fn flagz_text(component: &str, flags: &[(String, String)], sep: &str) -> String {
    let mut sorted: Vec<&(String, String)> = flags.iter().collect();
    sorted.sort();
    let mut out = format!("\n{component} flags\n{WARNING}\n\n");
    for (k, v) in sorted {
        out.push_str(&format!("{k}{sep}{v}\n"));
    }
    out
}

/// A delimiter drawn from [`DELIMITERS`] (upstream: `rand.Intn`; here the clock's
/// nanoseconds, enough to stop scrapers relying on one).
pub fn random_delimiter() -> &'static str {
    let n = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    DELIMITERS[(n as usize) % DELIMITERS.len()]
}

#[cfg(test)]
mod tests;
