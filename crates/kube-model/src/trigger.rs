//! The EndpointSlice controller's `endpoints.kubernetes.io/last-change-trigger-time`
//! annotation: when the change behind a slice update happened (a pod or service
//! change). kube-proxy's network programming latency runs from there to the sync that
//! applied the update.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The annotation's name.
pub const ANNOTATION_LAST_CHANGE_TRIGGER_TIME: &str =
    "endpoints.kubernetes.io/last-change-trigger-time";

/// The trigger time of an object, if it carries a valid annotation (RFC 3339, as the
/// controller writes it with Go's `time.RFC3339Nano`). A malformed value is no time.
pub fn last_change_trigger_time(meta: &ObjectMeta) -> Option<SystemTime> {
    meta.annotations
        .as_ref()?
        .get(ANNOTATION_LAST_CHANGE_TRIGGER_TIME)
        .and_then(|v| parse_rfc3339(v))
}

fn num(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`; times before the epoch are refused.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    if !s.is_ascii() || s.len() < 20 {
        return None;
    }
    let (date, rest) = s.split_at(10);
    let b = date.as_bytes();
    if b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (y, mo, d) = (num(&date[0..4])?, num(&date[5..7])?, num(&date[8..10])?);
    let rest = rest.strip_prefix(['T', 't'])?;
    if rest.len() < 9 {
        return None;
    }
    let (clock, mut zone) = rest.split_at(8);
    let c = clock.as_bytes();
    if c[2] != b':' || c[5] != b':' {
        return None;
    }
    let (h, mi, se) = (num(&clock[0..2])?, num(&clock[3..5])?, num(&clock[6..8])?);
    let mut nanos = 0u32;
    if let Some(f) = zone.strip_prefix('.') {
        let end = f.find(|c: char| !c.is_ascii_digit()).unwrap_or(f.len());
        let digits = &f[..end];
        if digits.is_empty() || digits.len() > 9 {
            return None;
        }
        nanos = u32::try_from(num(digits)?).ok()? * 10u32.pow(9 - digits.len() as u32);
        zone = &f[end..];
    }
    let offset = match zone {
        "Z" | "z" => 0,
        z if z.len() == 6 && (z.starts_with('+') || z.starts_with('-')) && &z[3..4] == ":" => {
            let secs = num(&z[1..3])? * 3600 + num(&z[4..6])? * 60;
            if z.starts_with('-') {
                -secs
            } else {
                secs
            }
        }
        _ => return None,
    };
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se - offset;
    let secs = u64::try_from(secs).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn at(secs: u64, nanos: u32) -> Option<SystemTime> {
        Some(UNIX_EPOCH + Duration::new(secs, nanos))
    }

    #[test]
    fn rfc3339_as_the_controller_writes_it() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), at(0, 0));
        assert_eq!(parse_rfc3339("2024-02-29T12:34:56Z"), at(1709210096, 0));
        assert_eq!(
            parse_rfc3339("2024-02-29T12:34:56.123456789Z"),
            at(1709210096, 123456789)
        );
        assert_eq!(
            parse_rfc3339("2024-02-29T12:34:56.5Z"),
            at(1709210096, 500_000_000)
        );
        assert_eq!(
            parse_rfc3339("2024-02-29T14:34:56+02:00"),
            at(1709210096, 0)
        );
        assert_eq!(
            parse_rfc3339("2024-02-29T10:04:56-02:30"),
            at(1709210096, 0)
        );
        for bad in [
            "",
            "2024-02-29",
            "2024-02-29 12:34:56Z",
            "2024-13-01T00:00:00Z",
            "2024-02-29T12:34:56",
            "2024-02-29T12:34:56.Z",
            "2024-02-29T12:34:56.1234567890Z",
            "2024-02-29T12:34:56+0200",
            "1969-12-31T23:59:59Z",
            "2024-02-29T1a:34:56Z",
            "2024-02-29T12:34:56Zjunk",
            "２０２４-02-29T12:34:56Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
    }

    proptest::proptest! {
        /// An annotation is input from outside: any text is a time or none, never a
        /// panic.
        #[test]
        fn any_text_parses_or_is_refused(s in "\\PC{0,40}", t in "[0-9T:.Z+-]{0,40}") {
            let _ = parse_rfc3339(&s);
            let _ = parse_rfc3339(&t);
        }
    }

    #[test]
    fn annotation_is_read_from_the_metadata() {
        let mut meta = ObjectMeta::default();
        assert_eq!(last_change_trigger_time(&meta), None);
        meta.annotations = Some(BTreeMap::from([(
            ANNOTATION_LAST_CHANGE_TRIGGER_TIME.to_string(),
            "2024-02-29T12:34:56Z".to_string(),
        )]));
        assert_eq!(last_change_trigger_time(&meta), at(1709210096, 0));
    }
}
