//! KubeProxyConfiguration read, defaulted, converted and validated as upstream kube-proxy
//! does (`cmd/kube-proxy/app/options.go`, `pkg/proxy/apis/config/...`):
//! - [`v1alpha1`]: the file's schema, lenient decoding (unknown fields collected by
//!   path), upstream's defaulting of null, zero and empty values;
//! - [`internal`]: the effective configuration and the conversions both ways;
//! - [`validate`]: upstream's validation, field paths and error texts;
//! - [`yaml`]: upstream's YAML output, for `--write-config-to`.
//!
//! Watching the file (exit when it changes, as upstream) is `proxy_sources::config_watch`.

pub mod internal;
pub mod v1alpha1;
pub mod validate;
pub mod yaml;

use std::net::{IpAddr, Ipv4Addr};

pub use internal::KubeProxyConfig;

/// Why a configuration file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("open {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("failed to decode: {source}")]
    Decode { source: v1alpha1::DecodeError },
}

/// A configuration file as upstream's `loadConfigFromFile` returns it: decoded
/// leniently, defaulted, converted. `unknown` names the fields the schema does not have.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: KubeProxyConfig,
    pub unknown: Vec<String>,
}

/// Read and decode `text` (YAML or JSON).
pub fn load_text(text: &str) -> Result<Loaded, ConfigError> {
    let d = v1alpha1::decode(text).map_err(|source| ConfigError::Decode { source })?;
    let mut v = d.config;
    v.set_defaults();
    Ok(Loaded {
        config: KubeProxyConfig::from_v1alpha1(v),
        unknown: d.unknown,
    })
}

/// Read, decode, default and convert the file at `path`.
pub fn load_file(path: &str) -> Result<Loaded, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_string(),
        source,
    })?;
    load_text(&text)
}

/// Upstream's message for the lenient fallback, naming every unknown field
/// (`strict decoding error: unknown field "a", unknown field "b.c"`).
pub fn strict_decoding_error(unknown: &[String]) -> String {
    let fields: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field {}", klog::go_quote(f)))
        .collect();
    format!("strict decoding error: {}", fields.join(", "))
}

/// The configuration in upstream's v1alpha1 YAML (`--write-config-to`).
pub fn to_yaml(c: &KubeProxyConfig) -> String {
    let v = serde_json::to_value(c.to_v1alpha1()).unwrap_or_default();
    yaml::to_string(&v)
}

/// `netutils.ParseIPSloppy`: an IP address; IPv4 octets may carry leading zeros (read as
/// decimal).
pub fn parse_ip_sloppy(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    let parts: Vec<&str> = s.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    let mut o = [0u8; 4];
    for (i, p) in parts.iter().enumerate() {
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        o[i] = p.parse().ok()?;
    }
    Some(IpAddr::V4(Ipv4Addr::from(o)))
}

/// `netutils.ParseCIDRSloppy`: `IP/prefix` (host bits may be set); the address and the
/// prefix length.
pub fn parse_cidr_sloppy(s: &str) -> Option<(IpAddr, u8)> {
    let (ip, len) = s.split_once('/')?;
    let ip = parse_ip_sloppy(ip)?;
    if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let len: u32 = len.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (len <= max).then_some((ip, len as u8))
}

/// Why `host:port` did not split (Go's `net.SplitHostPort` wording).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    #[error("address {0}: missing port in address")]
    MissingPort(String),
    #[error("address {0}: too many colons in address")]
    TooManyColons(String),
    #[error("address {0}: missing ']' in address")]
    MissingBracket(String),
    #[error("address {0}: unexpected '[' in address")]
    UnexpectedOpen(String),
    #[error("address {0}: unexpected ']' in address")]
    UnexpectedClose(String),
}

/// Go's `net.SplitHostPort`: `host:port` or `[host]:port` (the port may be empty).
pub fn split_host_port(s: &str) -> Result<(&str, &str), AddrError> {
    let owned = || s.to_string();
    let Some(i) = s.rfind(':') else {
        return Err(AddrError::MissingPort(owned()));
    };
    let (host, j, k);
    if s.starts_with('[') {
        let Some(end) = s.find(']') else {
            return Err(AddrError::MissingBracket(owned()));
        };
        if end + 1 == s.len() {
            return Err(AddrError::MissingPort(owned()));
        }
        if end + 1 != i {
            return Err(if s.as_bytes()[end + 1] == b':' {
                AddrError::TooManyColons(owned())
            } else {
                AddrError::MissingPort(owned())
            });
        }
        host = &s[1..end];
        (j, k) = (1, end + 1);
    } else {
        host = &s[..i];
        if host.contains(':') {
            return Err(AddrError::TooManyColons(owned()));
        }
        (j, k) = (0, 0);
    }
    if s[j..].contains('[') {
        return Err(AddrError::UnexpectedOpen(owned()));
    }
    if s[k..].contains(']') {
        return Err(AddrError::UnexpectedClose(owned()));
    }
    Ok((host, &s[i + 1..]))
}

#[cfg(test)]
mod tests;
