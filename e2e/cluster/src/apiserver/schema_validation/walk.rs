//! The schema walk: the checks of kube-openapi's `SchemaValidator`, in its order per node
//! (type, allOf/anyOf/oneOf/not, string, format, number, array, enum, object), with its paths
//! (`spec.x`, `spec.list[0]`, `spec.map.key`) and messages (`... in body must be of type
//! integer: "string"`). A keyword whose value we cannot read is skipped with a log line.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use regex::Regex;
use serde_json::{Map, Value};

use super::gofmt::{go_quote, go_value};

/// Which `field.Error` the real server turns a failure into.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// `Required value`.
    Required,
    /// `Unsupported value: ...: supported values: ...` (the enum).
    NotSupported(Vec<Value>),
    /// `Too long: ...` (maxLength).
    TooLong(i64),
    /// `Too many: <actual>: must have at most <max> items` (maxItems, maxProperties).
    TooMany {
        /// Items or properties present.
        actual: i64,
        /// The limit.
        max: i64,
    },
    /// `Invalid value` with reason `FieldValueTypeInvalid` (type, format).
    TypeInvalid,
    /// `Invalid value` with reason `FieldValueInvalid` (everything else).
    Invalid,
    /// allOf/anyOf/oneOf/not: reported without a field (`<nil>`).
    Composite,
}

/// One failed check.
#[derive(Debug, Clone)]
pub struct Failure {
    /// How it is reported.
    pub kind: Kind,
    /// kube-openapi's path (`""` at the root).
    pub path: String,
    /// The bad value, when the check reports one.
    pub value: Option<Value>,
    /// kube-openapi's message (`<path> in body ...`).
    pub message: String,
    /// Where ratcheting compares old and new: the checked node, cut at the first list item
    /// (items of a list are not correlated with the old list).
    pub node: Vec<String>,
}

/// The checked node for ratcheting.
#[derive(Debug, Clone, Default)]
pub struct Node {
    segments: Vec<String>,
    frozen: bool,
}

impl Node {
    fn child(&self, key: &str) -> Node {
        let mut n = self.clone();
        if !n.frozen {
            n.segments.push(key.to_string());
        }
        n
    }

    fn item(&self) -> Node {
        Node {
            segments: self.segments.clone(),
            frozen: true,
        }
    }
}

/// Collects the failures of one value against one schema.
#[derive(Debug, Default)]
pub struct Walker {
    /// Failures in the order the real validator reports them.
    pub failures: Vec<Failure>,
}

pub(super) fn malformed(keyword: &str, path: &str) {
    tracing::warn!(keyword, path, "CRD schema keyword not understood; skipped");
}

pub(super) fn int_kw(s: &Map<String, Value>, key: &str, path: &str) -> Option<i64> {
    let v = s.get(key)?;
    let n = v.as_i64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
            .map(|f| f as i64)
    });
    if n.is_none() && !v.is_null() {
        malformed(key, path);
    }
    n
}

pub(super) fn num_kw(s: &Map<String, Value>, key: &str, path: &str) -> Option<f64> {
    let v = s.get(key)?;
    if v.as_f64().is_none() && !v.is_null() {
        malformed(key, path);
    }
    v.as_f64()
}

pub(super) fn flag(s: &Map<String, Value>, key: &str) -> bool {
    s.get(key).and_then(Value::as_bool) == Some(true)
}

/// The JSON type and Go format of a decoded value (an integer literal in int64 range is an
/// `integer`, every other number a `number`).
fn json_type(v: &Value) -> (&'static str, &'static str) {
    match v {
        Value::Null => ("null", ""),
        Value::Bool(_) => ("boolean", ""),
        Value::String(_) => ("string", ""),
        Value::Number(n) if n.is_i64() => ("integer", "int64"),
        Value::Number(_) => ("number", "float64"),
        Value::Array(_) => ("array", ""),
        Value::Object(_) => ("object", ""),
    }
}

/// go-openapi's `IsFloat64AJSONInteger`.
pub(super) fn is_json_integer(f: f64) -> bool {
    const MAX: f64 = 9_007_199_254_740_991.0;
    if !f.is_finite() || !(-MAX..=MAX).contains(&f) {
        return false;
    }
    let g = f.trunc();
    f == g || (f - g).abs() / (f.abs() + g.abs()).min(f64::MAX) < 1e-9
}

pub(super) fn regex(pattern: &str) -> Option<Arc<Regex>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Option<Arc<Regex>>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut cache = cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(hit) = cache.get(pattern) {
        return hit.clone();
    }
    if cache.len() > 1024 {
        cache.clear();
    }
    let compiled = match Regex::new(pattern) {
        Ok(re) => Some(Arc::new(re)),
        Err(e) => {
            tracing::warn!(pattern, error = %e, "CRD schema pattern does not compile; not checked");
            None
        }
    };
    cache.insert(pattern.to_string(), compiled.clone());
    compiled
}

fn enum_matches(v: &Value, allowed: &Value) -> bool {
    if v == allowed {
        return true;
    }
    // Go converts the value to the enum entry's type before comparing.
    match (v.as_f64(), allowed) {
        (Some(f), Value::Number(a)) if a.is_i64() => f.is_finite() && a.as_i64() == Some(f.trunc() as i64),
        (Some(f), Value::Number(a)) => a.as_f64() == Some(f),
        _ => false,
    }
}

impl Walker {
    pub(super) fn fail(
        &mut self,
        kind: Kind,
        path: &str,
        value: Option<Value>,
        message: String,
        node: &Node,
    ) {
        self.failures.push(Failure {
            kind,
            path: path.to_string(),
            value,
            message,
            node: node.segments.clone(),
        });
    }

    /// Validate `v` against `s` at `path`.
    pub fn validate(&mut self, v: &Value, s: &Value, path: &str, node: &Node) {
        let Some(s) = s.as_object() else {
            if !s.is_null() && s != &Value::Bool(true) {
                malformed("schema", path);
            }
            return;
        };
        self.check_type(v, s, path, node);
        if v.is_null() {
            self.check_enum(v, s, path, node);
            return;
        }
        self.combinators(v, s, path, node);
        if let Value::String(text) = v {
            self.string(text, s, path, node);
            self.format(text, s, path, node);
        }
        if let Value::Number(n) = v {
            self.number(n, s, path, node);
        }
        if let Value::Array(items) = v {
            self.array(items, s, path, node);
        }
        self.check_enum(v, s, path, node);
        if let Value::Object(map) = v {
            self.object(map, s, path, node);
        }
    }

    fn type_error(&mut self, path: &str, type_name: &str, got: &str, node: &Node) {
        let message = format!("{path} in body must be of type {type_name}: {}", go_quote(got));
        self.fail(
            Kind::TypeInvalid,
            path,
            Some(Value::String(got.into())),
            message,
            node,
        );
    }

    fn check_type(&mut self, v: &Value, s: &Map<String, Value>, path: &str, node: &Node) {
        let mut types: Vec<&str> = match s.get("type") {
            Some(Value::String(t)) if !t.is_empty() => vec![t.as_str()],
            Some(Value::String(_)) | None => Vec::new(),
            Some(_) => {
                malformed("type", path);
                Vec::new()
            }
        };
        if flag(s, "x-kubernetes-int-or-string") {
            types = vec!["integer", "string"];
        }
        let format = s.get("format").and_then(Value::as_str).unwrap_or("");
        if types.is_empty() && format.is_empty() {
            return;
        }
        if v.is_null() {
            if !types.is_empty() && !types.contains(&"null") && !flag(s, "nullable") {
                self.type_error(path, &types.join(","), "null", node);
            }
            return;
        }
        let (sch_type, data_format) = json_type(v);
        let float_int =
            sch_type == "number" && v.as_f64().is_some_and(is_json_integer) && types.contains(&"integer");
        let int_float = sch_type == "integer" && types.contains(&"number");
        let string_or_list = v.is_string() || v.is_array();
        let type_matches = types.contains(&sch_type) || float_int || int_float;
        if !(string_or_list || format.is_empty() || type_matches || data_format == format) {
            return self.type_error(path, format, data_format, node);
        }
        let numeric = types.contains(&"number") || types.contains(&"integer");
        if string_or_list && !(numeric || format.is_empty()) {
            return;
        }
        if !type_matches {
            self.type_error(path, &types.join(","), sch_type, node);
        }
    }

    fn branches<'s>(s: &'s Map<String, Value>, key: &str, path: &str) -> &'s [Value] {
        match s.get(key) {
            Some(Value::Array(list)) => list,
            Some(_) => {
                malformed(key, path);
                &[]
            }
            None => &[],
        }
    }

    fn sub(v: &Value, s: &Value, path: &str, node: &Node) -> Vec<Failure> {
        let mut w = Walker::default();
        w.validate(v, s, path, node);
        w.failures
    }

    /// The failing branch reported with a combinator error. kube-openapi picks the branch with
    /// the most passed checks; the one with the fewest failures is our approximation.
    fn best(results: Vec<Vec<Failure>>) -> Vec<Failure> {
        results.into_iter().min_by_key(Vec::len).unwrap_or_default()
    }

    fn composite(&mut self, path: &str, message: String, node: &Node) {
        self.fail(Kind::Composite, path, None, message, node);
    }

    fn combinators(&mut self, v: &Value, s: &Map<String, Value>, path: &str, node: &Node) {
        let any_of = Self::branches(s, "anyOf", path);
        if !any_of.is_empty() {
            let results: Vec<Vec<Failure>> = any_of.iter().map(|b| Self::sub(v, b, path, node)).collect();
            if !results.iter().any(Vec::is_empty) {
                let q = go_quote(path);
                self.composite(
                    path,
                    format!("{q} must validate at least one schema (anyOf)"),
                    node,
                );
                self.failures.extend(Self::best(results));
            }
        }
        let one_of = Self::branches(s, "oneOf", path);
        if !one_of.is_empty() {
            let results: Vec<Vec<Failure>> = one_of.iter().map(|b| Self::sub(v, b, path, node)).collect();
            let valid = results.iter().filter(|r| r.is_empty()).count();
            if valid != 1 {
                let q = go_quote(path);
                let why = if valid == 0 {
                    "Found none valid".to_string()
                } else {
                    format!("Found {valid} valid alternatives")
                };
                self.composite(
                    path,
                    format!("{q} must validate one and only one schema (oneOf). {why}"),
                    node,
                );
                if valid == 0 {
                    self.failures.extend(Self::best(results));
                }
            }
        }
        let all_of = Self::branches(s, "allOf", path);
        if !all_of.is_empty() {
            let mut valid = 0;
            for branch in all_of {
                let failures = Self::sub(v, branch, path, node);
                valid += usize::from(failures.is_empty());
                self.failures.extend(failures);
            }
            if valid != all_of.len() {
                let none = if valid == 0 { ". None validated" } else { "" };
                let q = go_quote(path);
                self.composite(
                    path,
                    format!("{q} must validate all the schemas (allOf){none}"),
                    node,
                );
            }
        }
        if let Some(not) = s.get("not")
            && Self::sub(v, not, path, node).is_empty()
        {
            let q = go_quote(path);
            self.composite(path, format!("{q} must not validate the schema (not)"), node);
        }
    }

    fn array(&mut self, items: &[Value], s: &Map<String, Value>, path: &str, node: &Node) {
        match s.get("items") {
            Some(item_schema @ Value::Object(_)) => {
                for (i, item) in items.iter().enumerate() {
                    self.validate(item, item_schema, &format!("{path}[{i}]"), &node.item());
                }
            }
            Some(Value::Array(tuple)) => {
                for (i, (item, item_schema)) in items.iter().zip(tuple).enumerate() {
                    self.validate(item, item_schema, &format!("{path}[{i}]"), &node.item());
                }
            }
            Some(_) => malformed("items", path),
            None => {}
        }
        let size = items.len() as i64;
        if let Some(min) = int_kw(s, "minItems", path)
            && size < min
        {
            let message = format!("{path} in body should have at least {min} items");
            self.fail(Kind::Invalid, path, Some(Value::from(size)), message, node);
        }
        if let Some(max) = int_kw(s, "maxItems", path)
            && size > max
        {
            let message = format!("{path} in body should have at most {max} items");
            self.fail(Kind::TooMany { actual: size, max }, path, None, message, node);
        }
        if flag(s, "uniqueItems") && items.iter().enumerate().any(|(i, a)| items[..i].contains(a)) {
            let message = format!("{path} in body shouldn't contain duplicates");
            self.fail(Kind::Invalid, path, None, message, node);
        }
    }

    fn check_enum(&mut self, v: &Value, s: &Map<String, Value>, path: &str, node: &Node) {
        let allowed = Self::branches(s, "enum", path);
        if allowed.is_empty() || (!v.is_null() && allowed.iter().any(|a| enum_matches(v, a))) {
            return;
        }
        let shown: Vec<String> = allowed.iter().map(go_value).collect();
        let message = format!("{path} in body should be one of [{}]", shown.join(" "));
        self.fail(
            Kind::NotSupported(allowed.to_vec()),
            path,
            Some(v.clone()),
            message,
            node,
        );
    }

    fn object(&mut self, map: &Map<String, Value>, s: &Map<String, Value>, path: &str, node: &Node) {
        let size = map.len() as i64;
        if let Some(min) = int_kw(s, "minProperties", path)
            && size < min
        {
            let message = format!("{path} in body should have at least {min} properties");
            return self.fail(Kind::Invalid, path, Some(Value::from(size)), message, node);
        }
        if let Some(max) = int_kw(s, "maxProperties", path)
            && size > max
        {
            let message = format!("{path} in body should have at most {max} properties");
            return self.fail(Kind::TooMany { actual: size, max }, path, None, message, node);
        }
        let properties = match s.get("properties") {
            Some(Value::Object(p)) => Some(p),
            Some(_) => {
                malformed("properties", path);
                None
            }
            None => None,
        };
        let declared = |k: &str| properties.is_some_and(|p| p.contains_key(k));
        match s.get("additionalProperties") {
            Some(Value::Bool(false)) => {
                for key in map.keys().filter(|k| !declared(k)) {
                    let message = format!("{path}.{key} in body is a forbidden property");
                    self.fail(
                        Kind::Invalid,
                        path,
                        Some(Value::String(key.clone())),
                        message,
                        node,
                    );
                }
            }
            Some(extra @ Value::Object(_)) => {
                for (key, v) in map.iter().filter(|(k, _)| !declared(k)) {
                    self.validate(v, extra, &format!("{path}.{key}"), &node.child(key));
                }
            }
            _ => {}
        }
        for (name, property) in properties.into_iter().flatten() {
            if let Some(v) = map.get(name) {
                let child = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                self.validate(v, property, &child, &node.child(name));
            }
        }
        for key in Self::branches(s, "required", path) {
            match key.as_str() {
                Some(k) if !map.contains_key(k) => {
                    let message = format!("{path}.{k} in body is required");
                    self.fail(Kind::Required, &format!("{path}.{k}"), None, message, node);
                }
                Some(_) => {}
                None => malformed("required", path),
            }
        }
    }
}
