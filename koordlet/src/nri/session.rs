//! One connection to the runtime's NRI socket (register, then answer its requests) and the
//! loop that keeps one such connection alive.
//!
//! One connection at a time: the previous socket is closed before the next dial, so the
//! runtime never sees two koordlet plugins (upstream's "both tried to set CPU pinning" after a
//! reconnect). Re-registration is idempotent: the runtime forgets a plugin with its
//! connection and synchronises the new one with every container, and the hooks answer that
//! synchronisation with updates only for containers whose resources differ from the decision.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message as _;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, info, warn};

use super::api::{self, Event};
use super::mux::{self, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use super::state::{ConnectionState, NriTelemetry};
use super::ttrpc::{self, MessageBuffer, Request, Response, Status};
use super::{NriError, PluginConfig};

/// What koordlet does on the runtime's requests. Implementations are synchronous and pure
/// enough to answer in microseconds; the session still bounds each call by the reply deadline.
pub trait NriHandler: Send + Sync + 'static {
    /// Updates for existing containers after (re)registration; only those that differ.
    fn synchronize(
        &self,
        pods: &[api::PodSandbox],
        containers: &[api::Container],
    ) -> Vec<api::ContainerUpdate>;
    /// The adjustment of a container being created, if any.
    fn create_container(
        &self,
        pod: &api::PodSandbox,
        container: &api::Container,
    ) -> Option<api::ContainerAdjustment>;
    /// Updates answering a resource update of `container` (so the update does not undo the
    /// hook's values).
    fn update_container(
        &self,
        pod: &api::PodSandbox,
        container: &api::Container,
        requested: Option<&api::LinuxResources>,
    ) -> Vec<api::ContainerUpdate>;
}

/// Keeps koordlet registered with the runtime until `stop` is set: connect, register, serve;
/// on loss, wait (1 s doubling to 30 s by default; reset after a connection that lived longer
/// than the longest wait) and start over with a fresh connection.
pub async fn run_plugin(
    config: PluginConfig,
    handler: Arc<dyn NriHandler>,
    telemetry: NriTelemetry,
    state: watch::Sender<ConnectionState>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = config.initial_backoff;
    let mut attempts = 0u64;
    let mut last_error = String::new();
    loop {
        if *stop.borrow() {
            break;
        }
        if attempts > 0 {
            telemetry.reconnects.inc();
        }
        attempts += 1;
        let started = Instant::now();
        let result = match UnixStream::connect(&config.socket).await {
            Ok(stream) => {
                telemetry.set_state(ConnectionState::Connecting, &state);
                serve_connection(stream, &config, handler.clone(), &telemetry, &state, stop.clone()).await
            }
            Err(source) => Err(NriError::Connect {
                path: config.socket.clone(),
                source,
            }),
        };
        match result {
            Ok(()) => break,
            Err(e) => {
                let missing = matches!(&e, NriError::Connect { source, .. }
                    if matches!(source.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused));
                let next = if missing {
                    ConnectionState::SocketMissing
                } else {
                    ConnectionState::Disconnected
                };
                telemetry.set_state(next, &state);
                // The same failure every few seconds is logged once, then at debug level.
                let text = e.to_string();
                if text != last_error {
                    warn!(error = %text, retry_in = ?backoff, "NRI: not connected; containers start without hook adjustments until reconnected");
                    last_error = text;
                } else {
                    debug!(error = %text, retry_in = ?backoff, "NRI: still not connected");
                }
            }
        }
        if started.elapsed() > config.max_backoff {
            backoff = config.initial_backoff;
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => {}
        }
        backoff = (backoff * 2).min(config.max_backoff);
    }
    telemetry.set_state(ConnectionState::Disabled, &state);
}

/// Aborts the session's tasks when the session ends, however it ends.
struct AbortOnDrop(Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

type Pending = Arc<Mutex<HashMap<u32, oneshot::Sender<Response>>>>;

/// The state shared by a connection's request handlers.
struct Serve {
    handler: Arc<dyn NriHandler>,
    telemetry: NriTelemetry,
    deadline: Duration,
    out: mpsc::Sender<Vec<u8>>,
    /// Parts of a Synchronize split by the runtime (`more`), until the last one.
    sync_parts: Mutex<Option<api::SynchronizeRequest>>,
}

/// One connection: registers, serves the runtime's requests until the connection closes (an
/// error) or `stop` is set (`Ok`).
async fn serve_connection(
    stream: UnixStream,
    config: &PluginConfig,
    handler: Arc<dyn NriHandler>,
    telemetry: &NriTelemetry,
    state: &watch::Sender<ConnectionState>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), NriError> {
    let (mut reader, mut writer) = stream.into_split();
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(256);
    // One writer: each queued buffer holds all frames of one message, so frames of two
    // messages never interleave on a connection.
    let write_task = tokio::spawn(async move {
        while let Some(bytes) = out_rx.recv().await {
            writer.write_all(&bytes).await?;
        }
        Ok::<(), std::io::Error>(())
    });
    let pending: Pending = Arc::default();
    let serve = Arc::new(Serve {
        handler,
        telemetry: telemetry.clone(),
        deadline: config.reply_deadline,
        out: out_tx.clone(),
        sync_parts: Mutex::new(None),
    });
    let read_pending = pending.clone();
    let mut read_task = tokio::spawn(async move {
        let mut plugin_conn = MessageBuffer::default();
        let mut runtime_conn = MessageBuffer::default();
        loop {
            let Some((conn, payload)) = mux::read_frame(&mut reader).await? else {
                return Err::<(), NriError>(NriError::Closed);
            };
            match conn {
                PLUGIN_SERVICE_CONN => {
                    plugin_conn.push(&payload);
                    while let Some(message) = plugin_conn.next_message()? {
                        if message.kind == ttrpc::TYPE_REQUEST {
                            tokio::spawn(serve.clone().request(message));
                        }
                    }
                }
                RUNTIME_SERVICE_CONN => {
                    runtime_conn.push(&payload);
                    while let Some(message) = runtime_conn.next_message()? {
                        if message.kind != ttrpc::TYPE_RESPONSE {
                            continue;
                        }
                        let response =
                            Response::decode(&message.payload[..]).map_err(|source| NriError::Decode {
                                what: "ttrpc response",
                                source,
                            })?;
                        let waiter = read_pending
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .remove(&message.stream_id);
                        if let Some(waiter) = waiter {
                            let _ = waiter.send(response);
                        }
                    }
                }
                // Like NRI's mux: frames of connections nobody opened are dropped.
                _ => {}
            }
        }
    });
    let _guard = AbortOnDrop(vec![write_task.abort_handle(), read_task.abort_handle()]);

    let register = api::RegisterPluginRequest {
        plugin_name: config.name.clone(),
        plugin_idx: config.index.clone(),
    };
    let register = register.encode_to_vec();
    let registered = call(&out_tx, &pending, 1, "RegisterPlugin", &register);
    tokio::select! {
        result = tokio::time::timeout(config.registration_timeout, registered) => {
            let response = result.map_err(|_| NriError::RegistrationTimeout(config.registration_timeout))??;
            if let Some(status) = response.status.filter(|s| s.code != 0) {
                return Err(NriError::Refused { code: status.code, message: status.message });
            }
        }
        ended = &mut read_task => return Err(flatten(ended)),
    }
    info!(socket = %config.socket.display(), name = %config.name, index = %config.index, "NRI: registered with the runtime");
    telemetry.set_state(ConnectionState::Registered, state);
    tokio::select! {
        ended = &mut read_task => Err(flatten(ended)),
        _ = stop.wait_for(|s| *s) => Ok(()),
    }
}

fn flatten(ended: Result<Result<(), NriError>, tokio::task::JoinError>) -> NriError {
    match ended {
        Ok(Err(e)) => e,
        Ok(Ok(())) | Err(_) => NriError::Closed,
    }
}

/// Sends one request to the runtime's service and waits for its response.
async fn call(
    out: &mpsc::Sender<Vec<u8>>,
    pending: &Pending,
    stream_id: u32,
    method: &str,
    payload: &[u8],
) -> Result<Response, NriError> {
    let request = Request {
        service: api::RUNTIME_SERVICE.to_string(),
        method: method.to_string(),
        payload: payload.to_vec(),
        timeout_nano: 0,
    };
    let (tx, rx) = oneshot::channel();
    pending
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(stream_id, tx);
    let message = ttrpc::encode_message(stream_id, ttrpc::TYPE_REQUEST, &request.encode_to_vec())?;
    out.send(mux::ttrpc_frames(RUNTIME_SERVICE_CONN, &message)?.concat())
        .await
        .map_err(|_| NriError::Closed)?;
    rx.await.map_err(|_| NriError::Closed)
}

/// The most a Synchronize answer may carry, with room for the envelope.
const MAX_SYNC_REPLY: usize = ttrpc::MAX_MESSAGE_LEN - 4096;

impl Serve {
    /// Answers one request of the runtime; never leaves it unanswered.
    async fn request(self: Arc<Self>, message: ttrpc::Message) {
        let reply = match Request::decode(&message.payload[..]) {
            Ok(request) if request.service == api::PLUGIN_SERVICE => {
                let deadline = match request.timeout_nano {
                    // Answer within half of what the runtime allows, at most our own deadline.
                    n if n > 0 => self.deadline.min(Duration::from_nanos((n / 2) as u64)),
                    _ => self.deadline,
                };
                self.dispatch(&request.method, request.payload, deadline).await
            }
            Ok(request) => Err(Status {
                code: ttrpc::CODE_UNIMPLEMENTED,
                message: format!("service {} is not served by this plugin", request.service),
            }),
            Err(e) => Err(Status {
                code: ttrpc::CODE_INVALID_ARGUMENT,
                message: format!("bad ttrpc request: {e}"),
            }),
        };
        let response = match reply {
            Ok(payload) => Response {
                status: None,
                payload,
            },
            Err(status) => Response {
                status: Some(status),
                payload: Vec::new(),
            },
        };
        let frames =
            ttrpc::encode_message(message.stream_id, ttrpc::TYPE_RESPONSE, &response.encode_to_vec())
                .and_then(|m| mux::ttrpc_frames(PLUGIN_SERVICE_CONN, &m));
        match frames {
            Ok(frames) => {
                let _ = self.out.send(frames.concat()).await;
            }
            Err(e) => warn!(error = %e, "NRI: reply not sent"),
        }
    }

    async fn dispatch(&self, method: &str, payload: Vec<u8>, deadline: Duration) -> Result<Vec<u8>, Status> {
        fn decode<M: prost::Message + Default>(payload: &[u8]) -> Result<M, Status> {
            M::decode(payload).map_err(|e| Status {
                code: ttrpc::CODE_INVALID_ARGUMENT,
                message: e.to_string(),
            })
        }
        let handler = self.handler.clone();
        match method {
            "Configure" => {
                let request: api::ConfigureRequest = decode(&payload)?;
                info!(runtime = %request.runtime_name, version = %request.runtime_version,
                      request_timeout_ms = request.request_timeout, "NRI: configured by the runtime");
                let events = [
                    Event::RunPodSandbox,
                    Event::RemovePodSandbox,
                    Event::CreateContainer,
                    Event::UpdateContainer,
                    Event::StopContainer,
                ]
                .iter()
                .fold(0, |mask, e| mask | e.mask());
                Ok(api::ConfigureResponse { events }.encode_to_vec())
            }
            "Synchronize" => {
                let part: api::SynchronizeRequest = decode(&payload)?;
                let whole = {
                    let mut parts = self.sync_parts.lock().unwrap_or_else(|p| p.into_inner());
                    let mut whole = parts.take().unwrap_or_default();
                    whole.pods.extend(part.pods);
                    whole.containers.extend(part.containers);
                    if part.more {
                        *parts = Some(whole);
                        return Ok(api::SynchronizeResponse {
                            update: vec![],
                            more: true,
                        }
                        .encode_to_vec());
                    }
                    whole
                };
                let count = whole.containers.len();
                let updates = self
                    .decide("synchronize", deadline, Vec::new(), move || {
                        handler.synchronize(&whole.pods, &whole.containers)
                    })
                    .await;
                info!(containers = count, updates = updates.len(), "NRI: synchronized");
                Ok(sync_reply(updates).encode_to_vec())
            }
            "CreateContainer" => {
                let request: api::ContainerRequest = decode(&payload)?;
                let (pod, container) = (
                    request.pod.unwrap_or_default(),
                    request.container.unwrap_or_default(),
                );
                let adjust = self
                    .decide("create_container", deadline, None, move || {
                        handler.create_container(&pod, &container)
                    })
                    .await;
                Ok(api::CreateContainerResponse {
                    adjust,
                    update: vec![],
                }
                .encode_to_vec())
            }
            "UpdateContainer" => {
                let request: api::UpdateContainerRequest = decode(&payload)?;
                let update = self
                    .decide("update_container", deadline, Vec::new(), move || {
                        handler.update_container(
                            &request.pod.unwrap_or_default(),
                            &request.container.unwrap_or_default(),
                            request.linux_resources.as_ref(),
                        )
                    })
                    .await;
                Ok(api::UpdateContainerResponse { update }.encode_to_vec())
            }
            // Subscribed so the runtime reports them; counted, nothing to adjust: pod-level
            // cgroups are the reconcile loop's, and a stopping container needs no limits.
            "StopContainer" | "RunPodSandbox" | "RemovePodSandbox" | "StopPodSandbox" => {
                self.telemetry.count(method, "unchanged");
                Ok(Vec::new())
            }
            "StateChange" => {
                let event: api::StateChangeEvent = decode(&payload)?;
                let name = Event::from_number(event.event).map_or("state_change", event_name);
                self.telemetry.count(name, "unchanged");
                Ok(Vec::new())
            }
            "Shutdown" => {
                info!("NRI: the runtime is shutting down");
                Ok(Vec::new())
            }
            other => Err(Status {
                code: ttrpc::CODE_UNIMPLEMENTED,
                message: format!("method {other} is not served by this plugin"),
            }),
        }
    }

    /// Runs a decision off the async runtime within `deadline`; past it, answers `fallback`
    /// (no change) and counts a timeout.
    async fn decide<T: Send + Changes + 'static>(
        &self,
        event: &'static str,
        deadline: Duration,
        fallback: T,
        decision: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        let started = Instant::now();
        let outcome = tokio::time::timeout(deadline, tokio::task::spawn_blocking(decision)).await;
        self.telemetry
            .decide_seconds
            .observe(started.elapsed().as_secs_f64());
        match outcome {
            Ok(Ok(value)) => {
                self.telemetry
                    .count(event, if value.changes() { "adjusted" } else { "unchanged" });
                value
            }
            Ok(Err(e)) => {
                warn!(event, error = %e, "NRI: hook failed; the container is left unchanged");
                self.telemetry.count(event, "error");
                fallback
            }
            Err(_) => {
                warn!(
                    event,
                    ?deadline,
                    "NRI: hook missed its deadline; the container is left unchanged (the reconcile loop applies its limits)"
                );
                self.telemetry.count(event, "timeout");
                fallback
            }
        }
    }
}

/// Whether a decision changes anything (for the `adjusted`/`unchanged` count).
trait Changes {
    fn changes(&self) -> bool;
}

impl<T> Changes for Option<T> {
    fn changes(&self) -> bool {
        self.is_some()
    }
}

impl<T> Changes for Vec<T> {
    fn changes(&self) -> bool {
        !self.is_empty()
    }
}

fn event_name(event: Event) -> &'static str {
    match event {
        Event::RunPodSandbox => "RunPodSandbox",
        Event::StopPodSandbox => "StopPodSandbox",
        Event::RemovePodSandbox => "RemovePodSandbox",
        Event::CreateContainer => "CreateContainer",
        Event::UpdateContainer => "UpdateContainer",
        Event::StopContainer => "StopContainer",
    }
}

/// The Synchronize answer, kept under ttrpc's message limit: updates that would not fit are
/// left to the reconcile loop (with a warning) rather than making the runtime drop the reply.
pub fn sync_reply(mut updates: Vec<api::ContainerUpdate>) -> api::SynchronizeResponse {
    let mut size = 0usize;
    let fits = updates
        .iter()
        .take_while(|u| {
            size += u.encoded_len() + 8;
            size <= MAX_SYNC_REPLY
        })
        .count();
    if fits < updates.len() {
        warn!(
            kept = fits,
            dropped = updates.len() - fits,
            "NRI: synchronize answer trimmed to the message limit"
        );
        updates.truncate(fits);
    }
    api::SynchronizeResponse {
        update: updates,
        more: false,
    }
}
