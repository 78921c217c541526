//! Small schema helpers for fields whose content is deliberately free-form.

use schemars::{Schema, SchemaGenerator, json_schema};

/// An object whose keys and values are kept verbatim (`x-kubernetes-preserve-unknown-fields`).
pub fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}
