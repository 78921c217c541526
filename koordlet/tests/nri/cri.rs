//! A minimal CRI client for tests: the few `runtime.v1.RuntimeService` calls needed to start a
//! pod sandbox and a container, as unary gRPC over HTTP/2 on the runtime's unix socket, with
//! hand-declared messages (tags of the CRI `api.proto`).

use std::collections::HashMap;
use std::path::Path;

use tokio::net::UnixStream;

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub namespace: String,
    #[prost(uint32, tag = "4")]
    pub attempt: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NamespaceOption {
    /// 2 = NODE (host network: no CNI needed).
    #[prost(int32, tag = "1")]
    pub network: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxSandboxSecurityContext {
    #[prost(message, optional, tag = "1")]
    pub namespace_options: Option<NamespaceOption>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxPodSandboxConfig {
    #[prost(string, tag = "1")]
    pub cgroup_parent: String,
    #[prost(message, optional, tag = "2")]
    pub security_context: Option<LinuxSandboxSecurityContext>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxConfig {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<PodSandboxMetadata>,
    #[prost(string, tag = "2")]
    pub hostname: String,
    #[prost(string, tag = "3")]
    pub log_directory: String,
    #[prost(map = "string, string", tag = "6")]
    pub labels: HashMap<String, String>,
    #[prost(map = "string, string", tag = "7")]
    pub annotations: HashMap<String, String>,
    #[prost(message, optional, tag = "8")]
    pub linux: Option<LinuxPodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxRequest {
    #[prost(message, optional, tag = "1")]
    pub config: Option<PodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxResponse {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageSpec {
    #[prost(string, tag = "1")]
    pub image: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerConfig {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ContainerMetadata>,
    #[prost(message, optional, tag = "2")]
    pub image: Option<ImageSpec>,
    #[prost(string, tag = "11")]
    pub log_path: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerRequest {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
    #[prost(message, optional, tag = "2")]
    pub config: Option<ContainerConfig>,
    #[prost(message, optional, tag = "3")]
    pub sandbox_config: Option<PodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerResponse {
    #[prost(string, tag = "1")]
    pub container_id: String,
}

/// `StartContainerRequest` (field `container_id`), `StopPodSandboxRequest` and
/// `RemovePodSandboxRequest` (field `pod_sandbox_id`): one string at tag 1.
#[derive(Clone, PartialEq, prost::Message)]
pub struct IdRequest {
    #[prost(string, tag = "1")]
    pub id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

/// One unary call of `runtime.v1.RuntimeService`.
pub async fn call<Resp: prost::Message + Default>(
    socket: &Path,
    method: &str,
    request: &impl prost::Message,
) -> Result<Resp, String> {
    let stream = UnixStream::connect(socket).await.map_err(|e| e.to_string())?;
    let (client, connection) = h2::client::handshake(stream).await.map_err(|e| e.to_string())?;
    let driver = tokio::spawn(connection);
    let result = async {
        let mut client = client.ready().await.map_err(|e| e.to_string())?;
        let http_request = http::Request::builder()
            .method("POST")
            .uri(format!("http://localhost/runtime.v1.RuntimeService/{method}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .map_err(|e| e.to_string())?;
        let (response, mut send) = client
            .send_request(http_request, false)
            .map_err(|e| e.to_string())?;
        let body = request.encode_to_vec();
        let mut framed = vec![0u8];
        framed.extend((body.len() as u32).to_be_bytes());
        framed.extend(body);
        send.send_data(framed.into(), true).map_err(|e| e.to_string())?;
        let response = response.await.map_err(|e| e.to_string())?;
        let (parts, mut body) = response.into_parts();
        let mut data = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(|e| e.to_string())?;
            let _ = body.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        let trailers = body
            .trailers()
            .await
            .map_err(|e| e.to_string())?
            .unwrap_or_default();
        let header = |name: &str| {
            trailers
                .get(name)
                .or_else(|| parts.headers.get(name))
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let status = header("grpc-status").unwrap_or_default();
        if status != "0" {
            return Err(format!(
                "{method}: grpc-status {status}: {}",
                header("grpc-message").unwrap_or_default()
            ));
        }
        if data.len() < 5 {
            return Err(format!("{method}: short response"));
        }
        Resp::decode(&data[5..]).map_err(|e| e.to_string())
    }
    .await;
    driver.abort();
    result
}
