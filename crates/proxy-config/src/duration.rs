//! Go `time.Duration` strings (`30s`, `1m0s`, `1h30m`, `500ms`, `-1s`), as kube-proxy's
//! flags and KubeProxyConfiguration spell them (`time.ParseDuration`, `Duration.String`).
//! Signed, like Go's: a negative value is read so that validation can refuse it by name.

use std::fmt;
use std::time::Duration;

use klog::go_quote;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration that reads and writes Go's notation; nanoseconds, signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct GoDuration(pub i64);

/// Why a duration string was refused (Go's `time.ParseDuration` wording).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("time: invalid duration {}", go_quote(.0))]
    Invalid(String),
    #[error("time: missing unit in duration {}", go_quote(.0))]
    MissingUnit(String),
    #[error("time: unknown unit {} in duration {}", go_quote(.unit), go_quote(.input))]
    UnknownUnit { unit: String, input: String },
}

impl GoDuration {
    pub fn secs(s: i64) -> GoDuration {
        GoDuration(s.saturating_mul(1_000_000_000))
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }

    pub fn is_negative(self) -> bool {
        self.0 < 0
    }

    /// As a `std::time::Duration`; negative values (refused by validation) give zero.
    pub fn std(self) -> Duration {
        Duration::from_nanos(u64::try_from(self.0).unwrap_or(0))
    }
}

impl From<Duration> for GoDuration {
    fn from(d: Duration) -> GoDuration {
        GoDuration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
    }
}

/// `time.ParseDuration`: `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`, or `0`.
pub fn parse(input: &str) -> Result<GoDuration, DurationError> {
    let invalid = || DurationError::Invalid(input.to_string());
    let mut s = input;
    let mut neg = false;
    if let Some(r) = s.strip_prefix('-') {
        neg = true;
        s = r;
    } else if let Some(r) = s.strip_prefix('+') {
        s = r;
    }
    if s == "0" {
        return Ok(GoDuration(0));
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !s.is_empty() {
        let int_len = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let int_part = &s[..int_len];
        s = &s[int_len..];
        let mut frac_part = "";
        if let Some(r) = s.strip_prefix('.') {
            let l = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
            frac_part = &r[..l];
            s = &r[l..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        let unit_len = s
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        let unit = &s[..unit_len];
        s = &s[unit_len..];
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(DurationError::MissingUnit(input.to_string())),
            u => {
                return Err(DurationError::UnknownUnit {
                    unit: u.to_string(),
                    input: input.to_string(),
                })
            }
        };
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| invalid())?
        };
        let mut v = whole.checked_mul(scale).ok_or_else(invalid)?;
        // fraction: digits beyond the unit's resolution are dropped, as Go does
        let mut frac_scale = scale;
        for d in frac_part.bytes() {
            frac_scale /= 10;
            if frac_scale == 0 {
                break;
            }
            v += u128::from(d - b'0') * frac_scale;
        }
        total = total.checked_add(v).ok_or_else(invalid)?;
        if total > i64::MAX as u128 + u128::from(neg) {
            return Err(invalid());
        }
    }
    let n = if neg {
        (total as i128).wrapping_neg() as i64
    } else {
        total as i64
    };
    Ok(GoDuration(n))
}

/// Go's `Duration.String()`: `0s`, `500ms`, `30s`, `1m0s`, `24h0m0s`, `-1s`.
pub fn format(d: GoDuration) -> String {
    if d.0 == 0 {
        return "0s".into();
    }
    let neg = d.0 < 0;
    let u = d.0.unsigned_abs();
    let sign = if neg { "-" } else { "" };
    if u < 1_000_000_000 {
        let (int, frac_digits, unit) = if u < 1_000 {
            (u, 0, "ns")
        } else if u < 1_000_000 {
            (u, 3, "µs")
        } else {
            (u, 6, "ms")
        };
        return format!("{sign}{}{unit}", fixed(int, frac_digits));
    }
    let secs = u / 1_000_000_000;
    let h = secs / 3600;
    let m = (secs % 3600) / 60;
    let s = fixed(u % 60_000_000_000, 9);
    if h > 0 {
        format!("{sign}{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{sign}{m}m{s}s")
    } else {
        format!("{sign}{s}s")
    }
}

/// `v / 10^digits` printed with the fraction's trailing zeros removed.
fn fixed(v: u64, digits: u32) -> String {
    if digits == 0 {
        return v.to_string();
    }
    let p = 10u64.pow(digits);
    let (int, frac) = (v / p, v % p);
    if frac == 0 {
        return int.to_string();
    }
    let f = format!("{frac:0width$}", width = digits as usize);
    format!("{int}.{}", f.trim_end_matches('0'))
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format(*self))
    }
}

impl std::str::FromStr for GoDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s)
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(*self))
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    /// As `metav1.Duration`: a string for `time.ParseDuration`; `null` reads as `""`, which
    /// Go refuses too.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Option::<String>::deserialize(d)?.unwrap_or_default();
        parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(s: &str) -> i64 {
        parse(s).unwrap().0
    }

    #[test]
    fn parses_go_notation() {
        assert_eq!(ns("30s"), 30_000_000_000);
        assert_eq!(ns("1m0s"), 60_000_000_000);
        assert_eq!(ns("1h30m"), 5_400_000_000_000);
        assert_eq!(ns("500ms"), 500_000_000);
        assert_eq!(ns("1.5s"), 1_500_000_000);
        assert_eq!(ns(".5s"), 500_000_000);
        assert_eq!(ns("0"), 0);
        assert_eq!(ns("-1s"), -1_000_000_000);
        assert_eq!(ns("+2m"), 120_000_000_000);
        assert_eq!(ns("1µs"), 1_000);
        assert_eq!(
            parse("").unwrap_err().to_string(),
            "time: invalid duration \"\""
        );
        assert_eq!(
            parse("10").unwrap_err().to_string(),
            "time: missing unit in duration \"10\""
        );
        assert_eq!(
            parse("3x").unwrap_err().to_string(),
            "time: unknown unit \"x\" in duration \"3x\""
        );
        assert!(parse(".s").is_err());
        assert!(parse("-").is_err());
        assert!(parse("9999999999999h").is_err());
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format(GoDuration(0)), "0s");
        assert_eq!(format(GoDuration::secs(30)), "30s");
        assert_eq!(format(GoDuration::secs(60)), "1m0s");
        assert_eq!(format(GoDuration::secs(86400)), "24h0m0s");
        assert_eq!(format(GoDuration(500_000_000)), "500ms");
        assert_eq!(format(GoDuration(1_500_000_000)), "1.5s");
        assert_eq!(format(GoDuration(-1_000_000_000)), "-1s");
        assert_eq!(format(GoDuration(1_500)), "1.5µs");
        assert_eq!(format(GoDuration(90_500_000_000)), "1m30.5s");
        for s in ["30s", "1m0s", "24h0m0s", "15m0s", "1h0m0s", "500ms", "-5s"] {
            assert_eq!(format(parse(s).unwrap()), s);
        }
    }

    #[test]
    fn null_is_refused_as_go_does() {
        let r: Result<GoDuration, _> = serde_json::from_str("null");
        assert!(r.unwrap_err().to_string().contains("invalid duration"));
    }
}
