//! Just enough Kubernetes protobuf decoding for what kubectl's typed clients send: the
//! `k8s\0` envelope, Namespace, ConfigMap and Secret bodies (`kubectl create namespace |
//! configmap | secret`), and Eviction (`kubectl drain`, options ignored). Anything else is 415.

use base64::Engine;
use serde_json::{Map, Value, json};

const MAGIC: &[u8] = b"k8s\0";

/// One protobuf field: number and raw payload (varints are decoded to `Varint`).
#[derive(Debug, Clone, PartialEq)]
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut out = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        out |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(out);
        }
    }
    None
}

/// Parse a message into (field number, value) pairs.
fn fields(buf: &[u8]) -> Option<Vec<(u64, Field<'_>)>> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < buf.len() {
        let key = varint(buf, &mut pos)?;
        let (num, wire) = (key >> 3, key & 7);
        let f = match wire {
            0 => Field::Varint(varint(buf, &mut pos)?),
            1 => {
                pos = pos.checked_add(8).filter(|p| *p <= buf.len())?;
                Field::Fixed
            }
            2 => {
                let len = usize::try_from(varint(buf, &mut pos)?).ok()?;
                let end = pos.checked_add(len).filter(|e| *e <= buf.len())?;
                let b = &buf[pos..end];
                pos = end;
                Field::Bytes(b)
            }
            5 => {
                pos = pos.checked_add(4).filter(|p| *p <= buf.len())?;
                Field::Fixed
            }
            _ => return None,
        };
        out.push((num, f));
    }
    Some(out)
}

fn string(b: &[u8]) -> Option<Value> {
    std::str::from_utf8(b).ok().map(|s| Value::String(s.to_string()))
}

fn map_entry(b: &[u8], bytes_value: bool) -> Option<(String, Value)> {
    let mut key = String::new();
    let mut value = Value::String(String::new());
    for (n, f) in fields(b)? {
        if let Field::Bytes(x) = f {
            match n {
                1 => key = std::str::from_utf8(x).ok()?.to_string(),
                2 if bytes_value => value = json!(base64::engine::general_purpose::STANDARD.encode(x)),
                2 => value = string(x)?,
                _ => {}
            }
        }
    }
    Some((key, value))
}

fn insert_entry(obj: &mut Map<String, Value>, field: &str, b: &[u8], bytes_value: bool) -> Option<()> {
    let (k, v) = map_entry(b, bytes_value)?;
    let m = obj.entry(field).or_insert_with(|| json!({}));
    m.as_object_mut()?.insert(k, v);
    Some(())
}

fn push_string(obj: &mut Map<String, Value>, field: &str, b: &[u8]) -> Option<()> {
    let list = obj.entry(field).or_insert_with(|| json!([]));
    list.as_array_mut()?.push(string(b)?);
    Some(())
}

fn object_meta(b: &[u8]) -> Option<Value> {
    let mut m = Map::new();
    for (n, f) in fields(b)? {
        let Field::Bytes(x) = f else { continue };
        match n {
            1 => _ = m.insert("name".into(), string(x)?),
            2 => _ = m.insert("generateName".into(), string(x)?),
            3 => _ = m.insert("namespace".into(), string(x)?),
            11 => insert_entry(&mut m, "labels", x, false)?,
            12 => insert_entry(&mut m, "annotations", x, false)?,
            14 => push_string(&mut m, "finalizers", x)?,
            _ => {}
        }
    }
    Some(Value::Object(m))
}

fn decode_object(api_version: &str, kind: &str, raw: &[u8]) -> Option<Value> {
    let mut o = Map::new();
    o.insert("apiVersion".into(), json!(api_version));
    o.insert("kind".into(), json!(kind));
    for (n, f) in fields(raw)? {
        match (kind, n, f) {
            (_, 1, Field::Bytes(x)) if kind != "Eviction" || n == 1 => {
                _ = o.insert("metadata".into(), object_meta(x)?)
            }
            ("Namespace", 2, Field::Bytes(x)) => {
                let mut spec = Map::new();
                for (sn, sf) in fields(x)? {
                    if let (1, Field::Bytes(s)) = (sn, sf) {
                        push_string(&mut spec, "finalizers", s)?;
                    }
                }
                o.insert("spec".into(), Value::Object(spec));
            }
            ("ConfigMap", 2, Field::Bytes(x)) => insert_entry(&mut o, "data", x, false)?,
            ("ConfigMap", 3, Field::Bytes(x)) => insert_entry(&mut o, "binaryData", x, true)?,
            ("ConfigMap", 4, Field::Varint(v)) | ("Secret", 5, Field::Varint(v)) => {
                _ = o.insert("immutable".into(), json!(v != 0))
            }
            ("Secret", 2, Field::Bytes(x)) => insert_entry(&mut o, "data", x, true)?,
            ("Secret", 3, Field::Bytes(x)) => _ = o.insert("type".into(), string(x)?),
            ("Secret", 4, Field::Bytes(x)) => insert_entry(&mut o, "stringData", x, false)?,
            _ => {}
        }
    }
    Some(Value::Object(o))
}

/// Decode a protobuf request body to JSON; `None` if it is not one of the supported kinds.
pub fn decode(body: &[u8]) -> Option<Value> {
    let envelope = body.strip_prefix(MAGIC)?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), None);
    for (n, f) in fields(envelope)? {
        match (n, f) {
            (1, Field::Bytes(tm)) => {
                for (tn, tf) in fields(tm)? {
                    match (tn, tf) {
                        (1, Field::Bytes(x)) => api_version = std::str::from_utf8(x).ok()?.to_string(),
                        (2, Field::Bytes(x)) => kind = std::str::from_utf8(x).ok()?.to_string(),
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(x)) => raw = Some(x),
            _ => {}
        }
    }
    match kind.as_str() {
        "Namespace" | "ConfigMap" | "Secret" | "Eviction" => decode_object(&api_version, &kind, raw?),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ld(num: u64, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![((num << 3) | 2) as u8, payload.len() as u8];
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn decodes_a_configmap_envelope() {
        let meta = [
            ld(1, b"cm"),
            ld(11, &[ld(1, b"a").as_slice(), ld(2, b"b").as_slice()].concat()),
        ]
        .concat();
        let raw = [
            ld(1, &meta),
            ld(2, &[ld(1, b"k").as_slice(), ld(2, b"v").as_slice()].concat()),
        ]
        .concat();
        let tm = [ld(1, b"v1"), ld(2, b"ConfigMap")].concat();
        let body = [MAGIC.to_vec(), ld(1, &tm), ld(2, &raw)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "labels": {"a": "b"}}, "data": {"k": "v"}})
        );
        assert!(decode(b"k8s\0\xff\xff").is_none());
        assert!(decode(b"nope").is_none());
    }
}
