//! `meta.k8s.io PartialObjectMetadata` and `PartialObjectMetadataList`: the metadata-only form a
//! client asks for with `Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`
//! (a get or a watch) or `as=PartialObjectMetadataList` (a list), as kube-rs' `metadata_watcher`
//! and `Api::list_metadata` do. Each object is reduced to its `metadata`, so a client caching
//! only names and labels never receives specs and statuses.
//!
//! As kube-apiserver: the list form on a single object (or the object form on a list) is 406
//! Not Acceptable; `meta.k8s.io/v1` and `v1beta1` are served.

use serde_json::{Value, json};

use super::error::ApiError;
use super::object::meta;

/// The metadata-only form asked for by an Accept header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetadataAs {
    /// `as=PartialObjectMetadataList` rather than `as=PartialObjectMetadata`.
    pub list: bool,
    /// `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`.
    pub api_version: &'static str,
}

/// Reads the first media type of an Accept header: `Some` when it asks for the metadata-only
/// form. A `v` other than `v1`/`v1beta1` is 406, as a real server has no such version.
pub fn wants_metadata(accept: &str) -> Result<Option<MetadataAs>, ApiError> {
    let Some(first) = accept.split(',').next() else {
        return Ok(None);
    };
    let mut kind = None;
    let mut group = None;
    let mut version = None;
    for parameter in first.split(';').skip(1) {
        match parameter.trim().split_once('=') {
            Some(("as", value)) => kind = Some(value.trim()),
            Some(("g", value)) => group = Some(value.trim()),
            Some(("v", value)) => version = Some(value.trim()),
            _ => {}
        }
    }
    let list = match kind {
        Some("PartialObjectMetadata") => false,
        Some("PartialObjectMetadataList") => true,
        _ => return Ok(None),
    };
    if group != Some("meta.k8s.io") {
        return Err(ApiError::not_acceptable(format!(
            "only the following media types are accepted: application/json;as={}, got group {:?}",
            kind.unwrap_or_default(),
            group.unwrap_or_default()
        )));
    }
    let api_version = match version {
        Some("v1") => "meta.k8s.io/v1",
        Some("v1beta1") => "meta.k8s.io/v1beta1",
        other => {
            return Err(ApiError::not_acceptable(format!(
                "no version {:?} of meta.k8s.io/{} is served",
                other.unwrap_or_default(),
                kind.unwrap_or_default()
            )));
        }
    };
    Ok(Some(MetadataAs { list, api_version }))
}

impl MetadataAs {
    /// For a get or a watch: the object form is required.
    pub fn for_object(self) -> Result<Self, ApiError> {
        if self.list {
            return Err(ApiError::not_acceptable(
                "you requested PartialObjectMetadataList, but the requested object is not a list",
            ));
        }
        Ok(self)
    }

    /// For a list: the list form is required.
    pub fn for_list(self) -> Result<Self, ApiError> {
        if !self.list {
            return Err(ApiError::not_acceptable(
                "you requested PartialObjectMetadata, but the requested object is a list",
            ));
        }
        Ok(self)
    }

    /// One object reduced to its metadata.
    pub fn object(self, object: &Value) -> Value {
        json!({"kind": "PartialObjectMetadata", "apiVersion": self.api_version, "metadata": meta(object)})
    }

    /// The list envelope (`items` appended by the caller).
    pub fn list_head(self, metadata: Value) -> Value {
        json!({"kind": "PartialObjectMetadataList", "apiVersion": self.api_version, "metadata": metadata})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_forms_kube_clients_send_are_recognised() {
        let list = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        assert_eq!(
            wants_metadata(list).unwrap(),
            Some(MetadataAs {
                list: true,
                api_version: "meta.k8s.io/v1"
            })
        );
        let object = "application/json; as=PartialObjectMetadata; g=meta.k8s.io; v=v1beta1, application/json";
        assert_eq!(
            wants_metadata(object).unwrap(),
            Some(MetadataAs {
                list: false,
                api_version: "meta.k8s.io/v1beta1"
            })
        );
        assert_eq!(wants_metadata("application/json").unwrap(), None);
        assert_eq!(wants_metadata("").unwrap(), None);
        assert_eq!(
            wants_metadata("application/json;as=Table;g=meta.k8s.io;v=v1").unwrap(),
            None
        );
    }

    #[test]
    fn unknown_versions_groups_and_mismatched_forms_are_not_acceptable() {
        for accept in [
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v2",
            "application/json;as=PartialObjectMetadata;g=apps;v=v1",
            "application/json;as=PartialObjectMetadata",
        ] {
            assert_eq!(wants_metadata(accept).unwrap_err().code, 406, "{accept}");
        }
        let list = wants_metadata("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
            .unwrap()
            .unwrap();
        assert_eq!(list.for_object().unwrap_err().code, 406);
        assert!(list.for_list().is_ok());
        let object = MetadataAs {
            list: false,
            api_version: "meta.k8s.io/v1",
        };
        assert_eq!(object.for_list().unwrap_err().code, 406);
    }

    #[test]
    fn an_object_keeps_only_its_metadata() {
        let node = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"a": "b"}, "resourceVersion": "7"},
            "status": {"capacity": {"cpu": "4"}}});
        let partial = MetadataAs {
            list: false,
            api_version: "meta.k8s.io/v1",
        }
        .object(&node);
        assert_eq!(
            partial,
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"name": "n1", "labels": {"a": "b"}, "resourceVersion": "7"}})
        );
    }
}
