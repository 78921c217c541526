//! Small schema helpers for fields whose content is deliberately free-form.

use schemars::{Schema, SchemaGenerator, json_schema};

/// An optional object whose keys and values are kept verbatim
/// (`x-kubernetes-preserve-unknown-fields`); for `Option` fields, so it is nullable.
pub fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "nullable": true,
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// A block device's `ioCfg`: kept as given (upstream's cgroup v1/v2 fields pass through), with
/// the one field the validator checks declared, so the configuration reference and `kubectl
/// explain` show its range.
pub fn block_io_cfg(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "nullable": true,
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {
            "ioWeightPercent": {
                "type": "integer",
                "format": "int64",
                "description": "Relative I/O weight of the class on this device, in percent (cgroup `io.weight` / `blkio.weight`)."
            }
        }
    })
}

/// The pattern controller-gen puts on Kubernetes quantities; it also marks a schema as a
/// quantity for the ConfigMap parser, which accepts bare JSON numbers there like Go does.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// A quantity that is always present (`x-kubernetes-int-or-string`, explicitly not nullable, so
/// the API server never stores a `null` the Rust type could not read back).
pub fn required_quantity(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "nullable": false,
        "x-kubernetes-int-or-string": true,
        "pattern": QUANTITY_PATTERN
    })
}
