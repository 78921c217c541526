//! The AdmissionReview wire format, read and written without intermediate JSON trees.
//!
//! Reading: [`Head`] and [`RequestHead`] take only what routing needs (API version, kind, uid,
//! sub-resource, operation) straight from the body, borrowing strings where they need no
//! unescaping and skipping everything else without allocating; the request itself stays a
//! borrowed [`RawValue`] until the endpoint decodes it into its typed form once. Fields of the
//! wrong JSON type are read as absent (the caller then answers `invalid` or allows untouched),
//! never as an error.
//!
//! Writing: [`to_wire_json`] serialises the answer straight into one buffer, with the patch as
//! base64 (the canonical form of a Go `[]byte`), instead of kube-core's array of numbers.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use base64::Engine;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionResponse, AdmissionReview};
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// A JSON string, or `None` for any other JSON value (which is skipped).
#[derive(Debug, Default)]
pub(crate) struct LooseStr<'a>(Option<Cow<'a, str>>);

impl LooseStr<'_> {
    /// The string, when the value was one.
    pub(crate) fn as_str(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for LooseStr<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(LooseVisitor::<LooseStr<'a>>(PhantomData))
    }
}

/// `{"kind": "<string>", ...}` read loosely: the inner `kind`, `None` for anything else.
#[derive(Debug, Default)]
pub(crate) struct LooseKind<'a>(LooseStr<'a>);

impl<'de: 'a, 'a> Deserialize<'de> for LooseKind<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(LooseVisitor::<LooseKind<'a>>(PhantomData))
    }
}

/// Builds a loose value from whichever JSON shape arrives; shapes it does not want are
/// consumed and give the default.
struct LooseVisitor<T>(PhantomData<T>);

/// What a loose value keeps from strings and maps.
trait Loose<'de>: Default {
    fn from_string(value: Cow<'de, str>) -> Self;
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error>;
}

fn skip_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

impl<'de: 'a, 'a> Loose<'de> for LooseStr<'a> {
    fn from_string(value: Cow<'de, str>) -> Self {
        LooseStr(Some(value))
    }
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        skip_map(map).map(|()| Self::default())
    }
}

impl<'de: 'a, 'a> Loose<'de> for LooseKind<'a> {
    fn from_string(_: Cow<'de, str>) -> Self {
        Self::default()
    }
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut kind = LooseStr::default();
        while let Some(key) = map.next_key::<LooseStr<'de>>()? {
            if key.as_str() == Some("kind") {
                kind = map.next_value()?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(LooseKind(kind))
    }
}

impl<'de, T: Loose<'de>> Visitor<'de> for LooseVisitor<T> {
    type Value = T;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any JSON value")
    }
    fn visit_borrowed_str<E>(self, value: &'de str) -> Result<T, E> {
        Ok(T::from_string(Cow::Borrowed(value)))
    }
    fn visit_str<E>(self, value: &str) -> Result<T, E> {
        Ok(T::from_string(Cow::Owned(value.to_owned())))
    }
    fn visit_string<E>(self, value: String) -> Result<T, E> {
        Ok(T::from_string(Cow::Owned(value)))
    }
    fn visit_bool<E>(self, _: bool) -> Result<T, E> {
        Ok(T::default())
    }
    fn visit_i64<E>(self, _: i64) -> Result<T, E> {
        Ok(T::default())
    }
    fn visit_u64<E>(self, _: u64) -> Result<T, E> {
        Ok(T::default())
    }
    fn visit_f64<E>(self, _: f64) -> Result<T, E> {
        Ok(T::default())
    }
    fn visit_unit<E>(self) -> Result<T, E> {
        Ok(T::default())
    }
    fn visit_none<E>(self) -> Result<T, E> {
        Ok(T::default())
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<T, D::Error> {
        deserializer.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<T, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(T::default())
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::from_map(map)
    }
}

/// The top level of an AdmissionReview: its type fields and the raw request.
#[derive(Debug, Deserialize)]
pub(crate) struct Head<'a> {
    /// `apiVersion`, echoed in the answer.
    #[serde(rename = "apiVersion", default, borrow)]
    pub(crate) api_version: LooseStr<'a>,
    /// `kind` (`AdmissionReview`).
    #[serde(default, borrow)]
    pub(crate) kind: LooseStr<'a>,
    /// The request, still as JSON text.
    #[serde(default, borrow)]
    pub(crate) request: Option<&'a RawValue>,
}

/// What routing needs from the request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RequestHead<'a> {
    /// Request uid, echoed in every answer.
    #[serde(default, borrow)]
    pub(crate) uid: LooseStr<'a>,
    /// `kind.kind` of the object (`Pod`, `ConfigMap`, ...).
    #[serde(default, borrow)]
    pub(crate) kind: LooseKind<'a>,
    /// `subResource` (`binding`, `status`, ...), empty for the object itself.
    #[serde(default, borrow)]
    pub(crate) sub_resource: LooseStr<'a>,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    #[serde(default, borrow)]
    pub(crate) operation: LooseStr<'a>,
    /// Namespace of the object, empty for cluster-scoped objects.
    #[serde(default, borrow)]
    pub(crate) namespace: LooseStr<'a>,
}

impl RequestHead<'_> {
    /// The object's kind, when the request names one.
    pub(crate) fn kind(&self) -> Option<&str> {
        self.kind.0.as_str()
    }
}

/// Serialises a review the way Go clients write one: kube-core serialises `response.patch`
/// (a `Vec<u8>`) as an array of numbers, which Go happens to accept, but the canonical form of
/// a byte field is a base64 string, which every API server implementation accepts.
pub fn to_wire_json(review: &AdmissionReview<DynamicObject>) -> Result<Vec<u8>, serde_json::Error> {
    let patch_len = review
        .response
        .as_ref()
        .and_then(|response| response.patch.as_ref())
        .map_or(0, Vec::len);
    let mut out = Vec::with_capacity(512 + patch_len.div_ceil(3) * 4);
    serde_json::to_writer(&mut out, &WireReview(review))?;
    Ok(out)
}

struct WireReview<'a>(&'a AdmissionReview<DynamicObject>);

impl Serialize for WireReview<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let review = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("apiVersion", &review.types.api_version)?;
        map.serialize_entry("kind", &review.types.kind)?;
        if let Some(request) = &review.request {
            map.serialize_entry("request", request)?;
        }
        if let Some(response) = &review.response {
            map.serialize_entry("response", &WireResponse(response))?;
        }
        map.end()
    }
}

struct WireResponse<'a>(&'a AdmissionResponse);

impl Serialize for WireResponse<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let response = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("uid", &response.uid)?;
        map.serialize_entry("allowed", &response.allowed)?;
        map.serialize_entry("status", &response.result)?;
        if let Some(patch) = &response.patch {
            map.serialize_entry("patch", &Base64(patch))?;
            // kube-core sets `patchType` (a private field) exactly when it sets the patch, in
            // `with_patch`; JSONPatch is the only patch type admission supports.
            map.serialize_entry("patchType", "JSONPatch")?;
        }
        if !response.audit_annotations.is_empty() {
            map.serialize_entry("auditAnnotations", &response.audit_annotations)?;
        }
        if let Some(warnings) = &response.warnings {
            map.serialize_entry("warnings", warnings)?;
        }
        map.end()
    }
}

struct Base64<'a>(&'a [u8]);

impl Serialize for Base64<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// The previous encoder: kube-core's serialisation, then the patch array turned into base64.
    fn reference(review: &AdmissionReview<DynamicObject>) -> Value {
        let mut value = serde_json::to_value(review).unwrap();
        if let Some(patch) = value.pointer_mut("/response/patch") {
            let bytes: Vec<u8> = patch
                .as_array()
                .unwrap()
                .iter()
                .map(|b| u8::try_from(b.as_u64().unwrap()).unwrap())
                .collect();
            *patch = Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
        }
        value
    }

    fn same_as_reference(review: AdmissionReview<DynamicObject>) {
        let ours: Value = serde_json::from_slice(&to_wire_json(&review).unwrap()).unwrap();
        assert_eq!(ours, reference(&review));
    }

    #[test]
    fn answers_encode_like_kube_core_with_a_base64_patch() {
        same_as_reference(AdmissionResponse::invalid("the body is not JSON").into_review());
        let mut allowed = AdmissionResponse::invalid("");
        allowed.allowed = true;
        allowed.uid = "u1".into();
        allowed.result = kube::core::Status::success();
        allowed.warnings = Some(vec!["ClusterColocationProfile p: invalid".into()]);
        allowed
            .audit_annotations
            .insert("koordinator.sh/x".into(), "y".into());
        same_as_reference(allowed.clone().into_review());
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "add", "path": "/metadata/labels/a", "value": "b\u{e9}\"\n"}
        ]))
        .unwrap();
        same_as_reference(allowed.clone().with_patch(patch).unwrap().into_review());
        same_as_reference(allowed.deny("spec.x: rule").into_review());
    }

    #[test]
    fn heads_read_strings_and_skip_everything_else() {
        let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","extra":[1,{"a":null}],
            "request":{"uid":"u\"1","kind":{"group":"","kind":"Pod","version":"v1"},"object":{"big":[1,2,3]},
            "subResource":null,"operation":7}}"#;
        let head: Head<'_> = serde_json::from_slice(body).unwrap();
        assert_eq!(head.api_version.as_str(), Some("admission.k8s.io/v1"));
        assert_eq!(head.kind.as_str(), Some("AdmissionReview"));
        let request: RequestHead<'_> = serde_json::from_str(head.request.unwrap().get()).unwrap();
        assert_eq!(request.uid.as_str(), Some("u\"1"));
        assert_eq!(request.kind(), Some("Pod"));
        assert_eq!(request.sub_resource.as_str(), None);
        assert_eq!(request.operation.as_str(), None);
        let odd: RequestHead<'_> = serde_json::from_str(r#"{"kind":"Pod","uid":{"x":1}}"#).unwrap();
        assert_eq!(odd.kind(), None);
        assert_eq!(odd.uid.as_str(), None);
    }
}
