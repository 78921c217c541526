//! The runtime's side of NRI, for tests: accepts the plugin on a unix socket, answers its
//! registration and sends it requests, speaking the same mux + ttrpc framing as containerd.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use koordlet::nri::api;
use koordlet::nri::mux::{self, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use koordlet::nri::ttrpc::{self, MessageBuffer, Request, Response};
use prost::Message as _;
use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};

/// The listening side.
pub struct FakeRuntime {
    listener: UnixListener,
}

/// One accepted plugin connection.
pub struct PluginConn {
    stream: UnixStream,
    buffers: HashMap<u32, MessageBuffer>,
    next_stream: u32,
    /// The registration the plugin sent.
    pub registered: api::RegisterPluginRequest,
}

impl FakeRuntime {
    pub fn bind(path: &Path) -> Self {
        FakeRuntime {
            listener: UnixListener::bind(path).unwrap(),
        }
    }

    /// Accepts the next plugin and answers its RegisterPlugin.
    pub async fn accept(&self) -> PluginConn {
        let (stream, _) = tokio::time::timeout(Duration::from_secs(20), self.listener.accept())
            .await
            .expect("plugin did not connect")
            .unwrap();
        let mut conn = PluginConn {
            stream,
            buffers: HashMap::new(),
            next_stream: 1,
            registered: api::RegisterPluginRequest::default(),
        };
        let message = conn.next_message(RUNTIME_SERVICE_CONN).await;
        assert_eq!(message.kind, ttrpc::TYPE_REQUEST);
        let request = Request::decode(&message.payload[..]).unwrap();
        assert_eq!(
            (request.service.as_str(), request.method.as_str()),
            (api::RUNTIME_SERVICE, "RegisterPlugin")
        );
        conn.registered = api::RegisterPluginRequest::decode(&request.payload[..]).unwrap();
        let response = Response {
            status: None,
            payload: api::Empty {}.encode_to_vec(),
        };
        conn.send(
            RUNTIME_SERVICE_CONN,
            message.stream_id,
            ttrpc::TYPE_RESPONSE,
            &response.encode_to_vec(),
        )
        .await;
        conn
    }
}

impl PluginConn {
    async fn send(&mut self, conn: u32, stream_id: u32, kind: u8, payload: &[u8]) {
        let message = ttrpc::encode_message(stream_id, kind, payload).unwrap();
        for frame in mux::ttrpc_frames(conn, &message).unwrap() {
            self.stream.write_all(&frame).await.unwrap();
        }
    }

    async fn next_message(&mut self, conn: u32) -> ttrpc::Message {
        loop {
            if let Some(m) = self.buffers.entry(conn).or_default().next_message().unwrap() {
                return m;
            }
            let (id, payload) =
                tokio::time::timeout(Duration::from_secs(20), mux::read_frame(&mut self.stream))
                    .await
                    .expect("no frame from the plugin")
                    .unwrap()
                    .expect("plugin closed the connection");
            self.buffers.entry(id).or_default().push(&payload);
        }
    }

    /// Calls a method of the plugin's service; returns the decoded response payload or the
    /// error status.
    pub async fn call<Resp: prost::Message + Default>(
        &mut self,
        method: &str,
        request: &impl prost::Message,
    ) -> Result<Resp, ttrpc::Status> {
        let stream_id = self.next_stream;
        self.next_stream += 2;
        let envelope = Request {
            service: api::PLUGIN_SERVICE.to_string(),
            method: method.to_string(),
            payload: request.encode_to_vec(),
            timeout_nano: 2_000_000_000,
        };
        self.send(
            PLUGIN_SERVICE_CONN,
            stream_id,
            ttrpc::TYPE_REQUEST,
            &envelope.encode_to_vec(),
        )
        .await;
        let message = self.next_message(PLUGIN_SERVICE_CONN).await;
        assert_eq!(
            (message.kind, message.stream_id),
            (ttrpc::TYPE_RESPONSE, stream_id)
        );
        let response = Response::decode(&message.payload[..]).unwrap();
        match response.status {
            Some(status) if status.code != 0 => Err(status),
            _ => Ok(Resp::decode(&response.payload[..]).unwrap()),
        }
    }

    /// Sends Configure as containerd does and returns the subscribed event mask.
    pub async fn configure(&mut self) -> i32 {
        let request = api::ConfigureRequest {
            runtime_name: "fake".into(),
            runtime_version: "0".into(),
            registration_timeout: 5000,
            request_timeout: 2000,
            ..Default::default()
        };
        let response: api::ConfigureResponse = self.call("Configure", &request).await.unwrap();
        response.events
    }
}
