//! YAML as upstream writes its configuration (`sigs.k8s.io/yaml` over go-yaml v2): keys
//! sorted, two-space indentation, sequences at their key's indentation, `null` for nil,
//! a string quoted only when its plain form would read as something else (`""`, `"0"`)
//! or cannot be written plain (`'[::]:10256'`).

use serde_json::Value;

/// The document for `value` (an object).
pub fn to_string(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(_) => emit_map(value, 0, &mut out),
        other => {
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
    out
}

fn emit_map(v: &Value, indent: usize, out: &mut String) {
    let Value::Object(m) = v else { return };
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    for k in keys {
        let val = &m[k];
        out.push_str(&" ".repeat(indent));
        out.push_str(&string(k));
        out.push(':');
        match val {
            Value::Object(o) if !o.is_empty() => {
                out.push('\n');
                emit_map(val, indent + 2, out);
            }
            Value::Array(a) if !a.is_empty() => {
                out.push('\n');
                for item in a {
                    out.push_str(&" ".repeat(indent));
                    out.push_str("- ");
                    match item {
                        Value::Object(o) if !o.is_empty() => {
                            let mut sub = String::new();
                            emit_map(item, indent + 2, &mut sub);
                            out.push_str(sub.trim_start());
                        }
                        _ => {
                            out.push_str(&scalar(item));
                            out.push('\n');
                        }
                    }
                }
            }
            _ => {
                out.push(' ');
                out.push_str(&scalar(val));
                out.push('\n');
            }
        }
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number(n),
        Value::String(s) => string(s),
        Value::Array(_) => "[]".into(),
        Value::Object(_) => "{}".into(),
    }
}

fn number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    if f.fract() == 0.0 && f.abs() < 1e21 {
        format!("{f:.0}")
    } else {
        f.to_string()
    }
}

/// A string scalar in go-yaml v2's style.
pub fn string(s: &str) -> String {
    if s.contains('\n') || resolves_to_non_string(s) {
        return double_quoted(s);
    }
    if plain_allowed(s) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "''"))
    }
}

fn double_quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Whether go-yaml v2 would read the plain scalar as null, a bool, a number, a
/// timestamp or a base-60 float (then it writes the string double-quoted).
fn resolves_to_non_string(s: &str) -> bool {
    const WORDS: &[&str] = &[
        "", "~", "null", "Null", "NULL", "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
        "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF",
        ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", ".nan",
        ".NaN", ".NAN",
    ];
    if WORDS.contains(&s) {
        return true;
    }
    let t = s.strip_prefix(['+', '-']).unwrap_or(s);
    let clean: String = t.chars().filter(|c| *c != '_').collect();
    if clean.is_empty() {
        return false;
    }
    let lower = clean.to_ascii_lowercase();
    if let Some(h) = lower.strip_prefix("0x") {
        return !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit());
    }
    if let Some(b) = lower.strip_prefix("0b") {
        return !b.is_empty() && b.chars().all(|c| c == '0' || c == '1');
    }
    if clean.parse::<f64>().is_ok()
        && clean
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit() || c == '.')
    {
        return true;
    }
    // base 60: 1:20, 190:20:30.15
    let parts: Vec<&str> = clean.split(':').collect();
    if parts.len() > 1
        && parts[0].chars().all(|c| c.is_ascii_digit())
        && !parts[0].is_empty()
        && parts[1..].iter().all(|p| {
            let p = p.split('.').next().unwrap_or("");
            !p.is_empty() && p.len() <= 2 && p.chars().all(|c| c.is_ascii_digit())
        })
    {
        return true;
    }
    // timestamps: 2001-12-14...
    let b = s.as_bytes();
    b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5].is_ascii_digit()
        && (b[6] == b'-' || (b[6].is_ascii_digit() && b[7] == b'-'))
}

/// libyaml's analysis for a plain scalar in block context.
fn plain_allowed(s: &str) -> bool {
    let chars: Vec<char> = s.chars().collect();
    if chars.is_empty() {
        return false;
    }
    if chars[0] == ' ' || chars[chars.len() - 1] == ' ' {
        return false;
    }
    for (i, &c) in chars.iter().enumerate() {
        let next_ws = chars.get(i + 1).is_none_or(|n| *n == ' ' || *n == '\t');
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => return false,
                '?' | ':' | '-' if next_ws => return false,
                _ => {}
            }
        } else {
            if c == ':' && next_ws {
                return false;
            }
            if c == '#' && chars[i - 1] == ' ' {
                return false;
            }
        }
        if c.is_control() {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_yaml_quoting() {
        assert_eq!(string(""), "\"\"");
        assert_eq!(string("0"), "\"0\"");
        assert_eq!(string("true"), "\"true\"");
        assert_eq!(string("1.5"), "\"1.5\"");
        assert_eq!(string("0.0.0.0:10256"), "0.0.0.0:10256");
        assert_eq!(
            string("application/vnd.kubernetes.protobuf"),
            "application/vnd.kubernetes.protobuf"
        );
        assert_eq!(string("15m0s"), "15m0s");
        assert_eq!(string("[::]:10256"), "'[::]:10256'");
        assert_eq!(string("::/0"), "::/0");
        assert_eq!(string("primary"), "primary");
        assert_eq!(string("1:20"), "\"1:20\"");
        assert_eq!(string("y"), "\"y\"");
    }

    #[test]
    fn sorted_nested_document() {
        let v = serde_json::json!({
            "b": {"z": null, "x": 5.0},
            "a": ["198.18.0.0/15"],
            "c": [],
            "d": "",
        });
        assert_eq!(
            to_string(&v),
            "a:\n- 198.18.0.0/15\nb:\n  x: 5\n  z: null\nc: []\nd: \"\"\n"
        );
    }
}
