//! Values printed as the real API server (Go) prints them in validation messages, so a 422 from
//! the embedded server reads byte for byte like one from kube-apiserver: `%q` for strings, `%v`
//! for numbers, `%#v` for objects and lists held in `interface{}`.

use serde_json::Value;

/// Go's `strconv.Quote` (also `%q`): double quotes, Go escapes for control characters.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%v` of a float64: shortest representation, exponent form below 1e-4 and from 1e21.
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-4..1e21).contains(&abs) {
        // Rust: "1e-5" / "1.5e21"; Go: "1e-05" / "1.5e+21".
        let e = format!("{f:e}");
        let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
        let (sign, digits) = match exp.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exp),
        };
        return format!("{mantissa}e{sign}{digits:0>2}");
    }
    format!("{f}")
}

/// A JSON number as Go holds it after decoding into `interface{}`: int64 when it is an integer
/// literal in range, float64 otherwise.
pub fn go_number(n: &serde_json::Number) -> String {
    match n.as_i64() {
        Some(i) => i.to_string(),
        None => go_float(n.as_f64().unwrap_or(f64::NAN)),
    }
}

/// How `field.Error.ErrorBody` prints a bad value: `null`, `%q` for strings, `%v` for numbers
/// and booleans, `%#v` for everything else.
pub fn go_value(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::String(s) => go_quote(s),
        Value::Number(n) => go_number(n),
        Value::Bool(b) => b.to_string(),
        other => go_sharp(other),
    }
}

/// Go's `%#v` of a value held in `interface{}`.
fn go_sharp(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".into(),
        Value::String(s) => go_quote(s),
        Value::Number(n) => go_number(n),
        Value::Bool(b) => b.to_string(),
        Value::Array(items) => format!(
            "[]interface {{}}{{{}}}",
            items.iter().map(go_sharp).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let entries: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", go_quote(k), map.get(k).map(go_sharp).unwrap_or_default()))
                .collect();
            format!("map[string]interface {{}}{{{}}}", entries.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_print_as_go_prints_them() {
        assert_eq!(go_quote("a\"b\\\n\u{1}"), r#""a\"b\\\n\x01""#);
        assert_eq!(go_float(150.0), "150");
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(-2.5e-7), "-2.5e-07");
        assert_eq!(go_value(&json!(3)), "3");
        assert_eq!(go_value(&json!(3.25)), "3.25");
        assert_eq!(go_value(&json!("x")), "\"x\"");
        assert_eq!(go_value(&json!(null)), "null");
        assert_eq!(
            go_value(&json!({"b": [1, "x"], "a": true})),
            r#"map[string]interface {}{"a":true, "b":[]interface {}{1, "x"}}"#
        );
    }
}
