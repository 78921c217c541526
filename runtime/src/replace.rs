//! Read-modify-replace with optimistic concurrency: for objects (or fields) a component cannot
//! own through server-side apply, such as one entry of an atomic list another writer shares.

use std::fmt;

use kube::Api;
use kube::api::PostParams;
use serde::{Serialize, de::DeserializeOwned};

/// What an edit of [`read_modify_replace`] decided about the object it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edit<T> {
    /// The object was changed: replace it, then return `T`.
    Replace(T),
    /// Nothing to write: return `T` without writing.
    Keep(T),
}

/// Reads object `name`, lets `edit` change it and replaces it under `field_manager`; the
/// replace carries the `resourceVersion` read, so a write in between answers 409 Conflict, on
/// which the object is read and edited again, `attempts` times at most (a later conflict is
/// returned). `Ok(None)` when the object does not exist.
pub async fn read_modify_replace<K, T>(
    api: &Api<K>,
    name: &str,
    field_manager: &str,
    attempts: usize,
    mut edit: impl FnMut(&mut K) -> Edit<T>,
) -> Result<Option<T>, kube::Error>
where
    K: Clone + fmt::Debug + DeserializeOwned + Serialize,
{
    let params = PostParams {
        field_manager: Some(field_manager.to_owned()),
        ..PostParams::default()
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        let Some(mut object) = api.get_opt(name).await? else {
            return Ok(None);
        };
        let done = match edit(&mut object) {
            Edit::Keep(done) => return Ok(Some(done)),
            Edit::Replace(done) => done,
        };
        match api.replace(name, &params, &object).await {
            Ok(_) => return Ok(Some(done)),
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < attempts => {
                tracing::debug!(
                    name,
                    attempt,
                    "object changed between the read and the replace; reading it again"
                );
            }
            Err(error) => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::client::Body;
    use serde_json::json;

    use super::*;

    /// A fake API server for one ConfigMap `cm` whose `resourceVersion` moves on with every
    /// GET (another writer between each read and our replace) until `conflicts` PUTs have
    /// been refused; returns the client and the request log (`METHOD rv-sent`).
    fn server(conflicts: usize) -> (kube::Client, Arc<Mutex<Vec<String>>>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new(Mutex::new((0u64, conflicts)));
        let seen = log.clone();
        let service = tower::service_fn(move |req: http::Request<Body>| {
            let (log, state) = (seen.clone(), state.clone());
            async move {
                let method = req.method().clone();
                let body = req.into_body().collect_bytes().await.unwrap();
                let mut state = state.lock().unwrap();
                let (status, reply) = if method == http::Method::GET {
                    state.0 += 1;
                    log.lock().unwrap().push("GET".to_string());
                    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "cm", "namespace": "default", "resourceVersion": state.0.to_string()},
                        "data": {"k": "old"}});
                    (200, cm)
                } else {
                    let sent: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    let rv = sent["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap_or("")
                        .to_string();
                    log.lock()
                        .unwrap()
                        .push(format!("PUT {rv} {}", sent["data"]["k"]));
                    if state.1 > 0 {
                        state.1 -= 1;
                        let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                            "reason": "Conflict", "code": 409, "message": "the object has been modified"});
                        (409, status)
                    } else {
                        (200, sent)
                    }
                };
                let response = http::Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                    .unwrap();
                Ok::<_, Infallible>(response)
            }
        });
        (kube::Client::new(service, "default"), log)
    }

    fn edit(cm: &mut ConfigMap) -> Edit<&'static str> {
        cm.data.get_or_insert_default().insert("k".into(), "new".into());
        Edit::Replace("written")
    }

    #[tokio::test]
    async fn a_conflict_reads_edits_and_replaces_again_with_the_new_version() {
        let (client, log) = server(2);
        let api: Api<ConfigMap> = Api::default_namespaced(client);
        let done = read_modify_replace(&api, "cm", "test", 5, edit).await.unwrap();
        assert_eq!(done, Some("written"));
        assert_eq!(
            *log.lock().unwrap(),
            [
                "GET",
                "PUT 1 \"new\"",
                "GET",
                "PUT 2 \"new\"",
                "GET",
                "PUT 3 \"new\""
            ]
        );
    }

    #[tokio::test]
    async fn conflicts_beyond_the_attempts_are_returned() {
        let (client, log) = server(5);
        let api: Api<ConfigMap> = Api::default_namespaced(client);
        let error = read_modify_replace(&api, "cm", "test", 2, edit)
            .await
            .unwrap_err();
        assert!(
            matches!(error, kube::Error::Api(ref s) if s.code == 409),
            "{error}"
        );
        assert_eq!(log.lock().unwrap().len(), 4);
    }

    #[tokio::test]
    async fn keep_writes_nothing() {
        let (client, log) = server(0);
        let api: Api<ConfigMap> = Api::default_namespaced(client);
        let done = read_modify_replace(&api, "cm", "test", 5, |_| Edit::Keep(7))
            .await
            .unwrap();
        assert_eq!(done, Some(7));
        assert_eq!(*log.lock().unwrap(), ["GET"]);
    }
}
