//! Go `time.Duration` strings (`30s`, `1m0s`, `1h30m`, `500ms`), as kube-proxy's flags
//! and KubeProxyConfiguration spell them.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration that reads and writes Go's notation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct GoDuration(pub Duration);

impl GoDuration {
    pub fn secs(s: u64) -> GoDuration {
        GoDuration(Duration::from_secs(s))
    }
}

/// Parse `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+` or `0`. Negative durations are refused.
pub fn parse(s: &str) -> Result<Duration, String> {
    let orig = s;
    let s = s.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.starts_with('-') {
        return Err(format!("negative duration {orig:?}"));
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(format!("invalid duration {orig:?}"));
    }
    let mut total: f64 = 0.0;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(format!("invalid duration {orig:?}"));
        }
        let num: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("invalid duration {orig:?}"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("missing unit in duration {orig:?}")),
            u => return Err(format!("unknown unit {u:?} in duration {orig:?}")),
        };
        total += num * scale;
    }
    if !total.is_finite() || total > 1e12 {
        return Err(format!("duration {orig:?} out of range"));
    }
    Ok(Duration::from_secs_f64(total))
}

/// Go's `Duration.String()`: `0s`, `500ms`, `30s`, `1m0s`, `24h0m0s`.
pub fn format(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000_000_000 {
        let (v, unit) = if nanos < 1_000 {
            (nanos as f64, "ns")
        } else if nanos < 1_000_000 {
            (nanos as f64 / 1e3, "µs")
        } else {
            (nanos as f64 / 1e6, "ms")
        };
        return format!("{}{unit}", trim_float(v));
    }
    let total_secs = d.as_secs();
    let frac = d.subsec_nanos();
    let h = total_secs / 3600;
    let m = (total_secs % 3600) / 60;
    let s = total_secs % 60;
    let secs = if frac == 0 {
        format!("{s}s")
    } else {
        format!("{}s", trim_float(s as f64 + f64::from(frac) / 1e9))
    };
    if h > 0 {
        format!("{h}h{m}m{secs}")
    } else if m > 0 {
        format!("{m}m{secs}")
    } else {
        secs
    }
}

fn trim_float(v: f64) -> String {
    let s = format!("{v:.9}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format(self.0))
    }
}

impl std::str::FromStr for GoDuration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s).map(GoDuration)
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(self.0))
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse(&s).map(GoDuration).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_notation() {
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("1m0s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert!(parse("").is_err());
        assert!(parse("10").is_err());
        assert!(parse("-1s").is_err());
        assert!(parse("3x").is_err());
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format(Duration::ZERO), "0s");
        assert_eq!(format(Duration::from_secs(30)), "30s");
        assert_eq!(format(Duration::from_secs(60)), "1m0s");
        assert_eq!(format(Duration::from_secs(86400)), "24h0m0s");
        assert_eq!(format(Duration::from_millis(500)), "500ms");
        assert_eq!(format(Duration::from_millis(1500)), "1.5s");
        for s in ["30s", "1m0s", "24h0m0s", "15m0s", "1h0m0s", "500ms"] {
            assert_eq!(format(parse(s).unwrap()), s);
        }
    }
}
