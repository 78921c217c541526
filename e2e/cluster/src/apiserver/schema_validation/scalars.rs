//! The scalar checks of the schema walk: strings (length, pattern, format) and numbers
//! (multipleOf, minimum, maximum), with kube-openapi's messages.

use serde_json::{Map, Number, Value};

use super::format;
use super::gofmt::{go_float, go_quote};
use super::walk::{Kind, Node, Walker, flag, int_kw, is_json_integer, num_kw, regex};

impl Walker {
    pub(super) fn string(&mut self, text: &str, s: &Map<String, Value>, path: &str, node: &Node) {
        let len = text.chars().count() as i64;
        let value = Some(Value::String(text.to_string()));
        if let Some(max) = int_kw(s, "maxLength", path)
            && len > max
        {
            let message = format!("{path} in body should be at most {max} chars long");
            return self.fail(Kind::TooLong(max), path, value, message, node);
        }
        if let Some(min) = int_kw(s, "minLength", path)
            && len < min
        {
            let message = format!("{path} in body should be at least {min} chars long");
            return self.fail(Kind::Invalid, path, value, message, node);
        }
        if let Some(pattern) = s.get("pattern").and_then(Value::as_str)
            && let Some(re) = regex(pattern)
            && !re.is_match(text)
        {
            let message = format!("{path} in body should match '{pattern}'");
            self.fail(Kind::Invalid, path, value, message, node);
        }
    }

    pub(super) fn format(&mut self, text: &str, s: &Map<String, Value>, path: &str, node: &Node) {
        let Some(name) = s.get("format").and_then(Value::as_str) else {
            return;
        };
        if format::check(name, text) == Some(false) {
            let message = format!("{path} in body must be of type {name}: {}", go_quote(text));
            self.fail(
                Kind::TypeInvalid,
                path,
                Some(Value::String(text.into())),
                message,
                node,
            );
        }
    }

    pub(super) fn number(&mut self, n: &Number, s: &Map<String, Value>, path: &str, node: &Node) {
        let value = Some(Value::Number(n.clone()));
        let int = n.as_i64();
        let data = n.as_f64().unwrap_or(f64::NAN);
        if let Some(factor) = num_kw(s, "multipleOf", path) {
            let int_factor = factor.trunc() as i64;
            if factor < 0.0 {
                let message = format!(
                    "factor MultipleOf declared for {path} must be positive: {}",
                    go_float(factor)
                );
                self.fail(Kind::Invalid, path, Some(Value::from(factor)), message, node);
            } else if let Some(i) = int.filter(|_| int_factor != 0) {
                if i % int_factor != 0 {
                    let message = format!("{path} in body should be a multiple of {int_factor}");
                    self.fail(Kind::Invalid, path, value.clone(), message, node);
                }
            } else if factor > 0.0 {
                let mult = if factor < 1.0 {
                    1.0 / factor * data
                } else {
                    data / factor
                };
                if !is_json_integer(mult) {
                    let message = format!("{path} in body should be a multiple of {}", go_float(factor));
                    self.fail(Kind::Invalid, path, value.clone(), message, node);
                }
            }
        }
        let exclusive_min = flag(s, "exclusiveMinimum");
        if let Some(min) = num_kw(s, "minimum", path) {
            let (below, shown) = match int {
                Some(i) => {
                    let m = min.trunc() as i64;
                    (if exclusive_min { i <= m } else { i < m }, m.to_string())
                }
                None => (
                    if exclusive_min { data <= min } else { data < min },
                    go_float(min),
                ),
            };
            if below {
                let op = if exclusive_min {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                let message = format!("{path} in body should be {op} {shown}");
                self.fail(Kind::Invalid, path, value.clone(), message, node);
            }
        }
        let exclusive_max = flag(s, "exclusiveMaximum");
        if let Some(max) = num_kw(s, "maximum", path) {
            let (above, shown) = match int {
                Some(i) => {
                    let m = max.trunc() as i64;
                    (if exclusive_max { i >= m } else { i > m }, m.to_string())
                }
                None => (
                    if exclusive_max { data >= max } else { data > max },
                    go_float(max),
                ),
            };
            if above {
                let op = if exclusive_max {
                    "less than"
                } else {
                    "less than or equal to"
                };
                let message = format!("{path} in body should be {op} {shown}");
                self.fail(Kind::Invalid, path, value, message, node);
            }
        }
    }
}
