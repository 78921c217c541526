//! Writes the batch entries of a node's NUMA zones into its NodeResourceTopology.
//!
//! The write is a read-modify-update with the object's `resourceVersion` (optimistic
//! concurrency; a 409 Conflict re-reads and retries), not a server-side apply: `zones` is an
//! atomic list in the NodeResourceTopology schema, so an apply of our entries would have to send
//! the whole list and would take ownership of every zone and resource koordlet or
//! node-feature-discovery wrote. The update changes only the batch entries of each zone; the
//! object is read as untyped JSON so that every other field goes back as it was read.

use std::collections::BTreeMap;

use koord_api::topology::NodeResourceTopology;
use koord_runtime::Edit;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject},
};
use serde_json::Value;

use super::{Error, FIELD_MANAGER};
use crate::batch::{self, Amounts};

/// Reads and updates before giving up on a node whose object keeps changing under us.
const ATTEMPTS: usize = 5;

/// What [`write`] found and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneWrite {
    /// The entries were written.
    Written,
    /// The object already said so: nothing written.
    AlreadyInPlace,
    /// The object is gone or has no zones: nothing written.
    NoZones,
}

/// Sets each zone's batch entries to its target (zones without one: their batch entries to 0).
pub async fn write(
    client: &Client,
    name: &str,
    targets: &BTreeMap<String, Amounts>,
) -> Result<ZoneWrite, Error> {
    let resource = ApiResource::erase::<NodeResourceTopology>(&());
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let done = koord_runtime::read_modify_replace(&api, name, FIELD_MANAGER, ATTEMPTS, |object| {
        let Some(zones) = object.data.get_mut("zones").and_then(Value::as_array_mut) else {
            return Edit::Keep(ZoneWrite::NoZones);
        };
        if batch::set_zone_entries(zones, targets) {
            Edit::Replace(ZoneWrite::Written)
        } else {
            Edit::Keep(ZoneWrite::AlreadyInPlace)
        }
    })
    .await?;
    Ok(done.unwrap_or(ZoneWrite::NoZones))
}
