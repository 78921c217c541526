//! Server-side field validation (`?fieldValidation=Ignore|Warn|Strict`, Kubernetes 1.25+):
//! what a strict decode of the request body finds, i.e. fields sent twice and, for custom
//! resources, fields the structural schema prunes. `Strict` refuses the write with 400
//! `strict decoding error: ...`; `Warn` (the default, as on the 1.33 server `/version` reports)
//! answers with one `Warning: 299 - "..."` header per field; `Ignore` says nothing. Unknown
//! fields of built-in kinds are not detected (the embedded server has no schemas for them).

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex};

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::error::{ApiError, ApiResult, Cause};
use super::resource::ResourceInfo;
use super::schema_validation::go_quote;

/// The `fieldValidation` directive of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Drop unknown fields silently (the only behaviour before 1.25).
    Ignore,
    /// Drop them and warn (the default when the parameter is absent).
    #[default]
    Warn,
    /// Refuse the write.
    Strict,
}

impl FieldValidation {
    /// Parse the query parameter; an unknown value is a 422 on the request's options kind
    /// (`CreateOptions`, `UpdateOptions`, `PatchOptions`), as upstream validates it.
    pub fn parse(value: Option<&str>, options_kind: &str) -> ApiResult<Self> {
        match value.unwrap_or("") {
            "" | "Warn" => Ok(Self::Warn),
            "Ignore" => Ok(Self::Ignore),
            "Strict" => Ok(Self::Strict),
            other => Err(ApiError::invalid(
                options_kind,
                "meta.k8s.io",
                "",
                vec![Cause::new(
                    "FieldValueNotSupported",
                    "fieldValidation",
                    format!(
                        "Unsupported value: {}: supported values: \"\", \"Ignore\", \"Strict\", \"Warn\"",
                        go_quote(other)
                    ),
                )],
            )),
        }
    }
}

/// The warnings of one request, sent back as `Warning` headers.
#[derive(Debug, Clone, Default)]
pub struct Warnings(Arc<Mutex<Vec<String>>>);

impl Warnings {
    /// Replace the warnings (a retried update reports its last attempt only).
    pub fn set(&self, warnings: Vec<String>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = warnings;
    }

    /// The warnings collected.
    pub fn get(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A `Warning` header value as Go's apiserver writes it: `299 - "<text>"`.
pub fn warning_header(text: &str) -> String {
    format!("299 - {}", go_quote(text))
}

/// Check a decoded write body: `duplicates` are the fields the raw body repeated; unknown
/// fields are those the CRD's schema would prune from `body`.
pub fn check(
    mode: FieldValidation,
    info: &ResourceInfo,
    body: &Value,
    duplicates: &[String],
    warnings: &Warnings,
) -> ApiResult<()> {
    if mode == FieldValidation::Ignore {
        return Ok(());
    }
    let mut problems: Vec<String> = duplicates
        .iter()
        .map(|d| format!("duplicate field {}", go_quote(d)))
        .collect();
    if let Some(schema) = &info.schema {
        let mut copy = body.clone();
        let mut unknown: Vec<String> = super::schema::prune_and_default(&mut copy, schema)
            .into_iter()
            .map(|p| p.strip_prefix('.').map(str::to_string).unwrap_or(p))
            .collect();
        unknown.sort();
        problems.extend(unknown.iter().map(|u| format!("unknown field {}", go_quote(u))));
    }
    match mode {
        FieldValidation::Strict if !problems.is_empty() => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            problems.join(", ")
        ))),
        FieldValidation::Warn => {
            warnings.set(problems);
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The dotted paths of object keys a JSON document repeats (`spec.a`, `items[0].name`);
/// empty when the body is not JSON.
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    let _ = Finder {
        path: String::new(),
        out: &mut out,
    }
    .deserialize(&mut de);
    out
}

struct Finder<'a> {
    path: String,
    out: &'a mut Vec<String>,
}

impl<'de> DeserializeSeed<'de> for Finder<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Finder<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let out = self.out;
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if !seen.insert(key) && !out.contains(&path) {
                out.push(path.clone());
            }
            map.next_value_seed(Finder { path, out: &mut *out })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let out = self.out;
        let mut i = 0usize;
        while seq
            .next_element_seed(Finder {
                path: format!("{}[{i}]", self.path),
                out: &mut *out,
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_found_with_their_paths() {
        let body = br#"{"a": 1, "spec": {"x": 1, "x": 2, "l": [{"n": 1, "n": 2}]}, "a": 3}"#;
        assert_eq!(duplicate_fields(body), ["spec.x", "spec.l[0].n", "a"]);
        assert!(duplicate_fields(b"not json").is_empty());
        assert!(duplicate_fields(br#"{"a": {"b": 1}, "c": [1, "x", null]}"#).is_empty());
    }

    #[test]
    fn directive_values() {
        assert_eq!(
            FieldValidation::parse(None, "CreateOptions").ok(),
            Some(FieldValidation::Warn)
        );
        assert_eq!(
            FieldValidation::parse(Some("Strict"), "CreateOptions").ok(),
            Some(FieldValidation::Strict)
        );
        let e = FieldValidation::parse(Some("strict"), "PatchOptions")
            .err()
            .map(|e| e.message);
        assert_eq!(
            e.as_deref(),
            Some(
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: \"strict\": \
                 supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""
            )
        );
        assert_eq!(
            warning_header("unknown field \"spec.foo\""),
            r#"299 - "unknown field \"spec.foo\"""#
        );
    }
}
