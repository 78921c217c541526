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
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, PostParams},
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
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        let Some(mut object) = api.get_opt(name).await? else {
            return Ok(ZoneWrite::NoZones);
        };
        let Some(zones) = object.data.get_mut("zones").and_then(Value::as_array_mut) else {
            return Ok(ZoneWrite::NoZones);
        };
        if !batch::set_zone_entries(zones, targets) {
            return Ok(ZoneWrite::AlreadyInPlace);
        }
        match api.replace(name, &params, &object).await {
            Ok(_) => return Ok(ZoneWrite::Written),
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < ATTEMPTS => {
                tracing::debug!(
                    node = name,
                    attempt,
                    "NodeResourceTopology changed while writing; reading it again"
                );
            }
            Err(error) => return Err(error.into()),
        }
    }
}
