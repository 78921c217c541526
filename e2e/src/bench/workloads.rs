//! The pods of the benchmark, the same in both modes: LS servers (nginx, memcached) and the BE
//! stress-ng job, all with host networking on loopback ports and the work directory mounted at
//! its own path, so files written by the bench (nginx config) and by stress-ng (its report) are
//! found at one path by the host and by the containers.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::BenchError;

/// An LS service under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LsWorkload {
    /// nginx serving a static page over HTTP/1.1 keep-alive.
    Nginx,
    /// memcached answering `get` of one key.
    Memcached,
}

impl LsWorkload {
    /// Name in tables, pod names and the `--workloads` flag.
    pub fn name(self) -> &'static str {
        match self {
            LsWorkload::Nginx => "nginx",
            LsWorkload::Memcached => "memcached",
        }
    }

    /// Parses a `--workloads` entry.
    pub fn parse(text: &str) -> Result<Self, BenchError> {
        match text {
            "nginx" => Ok(LsWorkload::Nginx),
            "memcached" => Ok(LsWorkload::Memcached),
            other => Err(BenchError::Usage(format!(
                "unknown LS workload {other:?} (nginx, memcached)"
            ))),
        }
    }

    /// The program the container runs.
    pub fn program(self) -> &'static str {
        self.name()
    }
}

/// The page nginx serves, compressed per request at gzip level 9: a few milliseconds of CPU per
/// request, so that the server, not the load generator next to it, limits the capacity.
const PAGE_BYTES: usize = 48 * 1024;

/// Text that compresses like prose (a fixed pseudo-random word sequence), not like one
/// repeated byte that gzip would skip through.
fn page_text(bytes: usize) -> String {
    const WORDS: [&str; 16] = [
        "node",
        "pod",
        "latency",
        "batch",
        "quota",
        "cgroup",
        "kernel",
        "service",
        "request",
        "memory",
        "colocation",
        "throughput",
        "scheduler",
        "koordinator",
        "suppress",
        "isolation",
    ];
    let mut state: u32 = 0x2545_f491;
    let mut out = String::with_capacity(bytes + 16);
    while out.len() < bytes {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        out.push_str(WORDS[(state >> 16) as usize % WORDS.len()]);
        out.push(if state.is_multiple_of(11) { '\n' } else { ' ' });
    }
    out.truncate(bytes);
    out
}

/// Where a run keeps its files; must be an absolute path on the node.
#[derive(Debug, Clone)]
pub struct WorkDir(pub PathBuf);

impl WorkDir {
    /// nginx's prefix with `nginx.conf` and `html/index.html`, for `port`.
    pub fn write_nginx(&self, port: u16) -> Result<PathBuf, BenchError> {
        let prefix = self.0.join("nginx");
        let html = prefix.join("html");
        std::fs::create_dir_all(&html).map_err(BenchError::Io)?;
        let page = format!("<html><body>{}</body></html>\n", page_text(PAGE_BYTES));
        std::fs::write(html.join("index.html"), page).map_err(BenchError::Io)?;
        let p = prefix.display();
        let conf = format!(
            "daemon off;\nworker_processes 1;\npid {p}/nginx.pid;\nerror_log stderr error;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  gzip on;\n  gzip_comp_level 9;\n  gzip_min_length 0;\n  keepalive_requests 100000000;\n  keepalive_timeout 600s;\n\
             \x20 client_body_temp_path {p}/body;\n  proxy_temp_path {p}/proxy;\n  fastcgi_temp_path {p}/fastcgi;\n\
             \x20 uwsgi_temp_path {p}/uwsgi;\n  scgi_temp_path {p}/scgi;\n\
             \x20 server {{\n    listen 127.0.0.1:{port};\n    location / {{ root {p}/html; }}\n  }}\n}}\n"
        );
        let path = prefix.join("nginx.conf");
        std::fs::write(&path, conf).map_err(BenchError::Io)?;
        Ok(path)
    }

    /// The stress-ng report path of BE run `run`.
    pub fn be_report(&self, run: usize) -> PathBuf {
        self.0.join(format!("be-{run}.yaml"))
    }
}

fn base_pod(name: &str, node: &str, qos: &str, work: &Path, container: Value) -> Value {
    let mut container = container;
    // Images are built locally and imported into the node's runtime, never pulled.
    container["imagePullPolicy"] = json!("IfNotPresent");
    container["volumeMounts"] = json!([{"name": "work", "mountPath": work.display().to_string()}]);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"koordinator.sh/qosClass": qos, "app": "koord-bench"}},
        "spec": {
            "nodeName": node,
            "hostNetwork": true,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [container],
            "volumes": [{"name": "work", "hostPath": {"path": work.display().to_string(), "type": "Directory"}}],
        }
    })
}

/// The LS pod of `workload` listening on `addr`: burstable, `cpu_request` requested.
pub fn ls_pod(
    workload: LsWorkload,
    node: &str,
    image: &str,
    cpu_request: &str,
    work: &WorkDir,
    addr: SocketAddr,
) -> Result<Value, BenchError> {
    let port = addr.port().to_string();
    let command: Vec<String> = match workload {
        LsWorkload::Nginx => {
            let conf = work.write_nginx(addr.port())?;
            let prefix = work.0.join("nginx");
            vec![
                "nginx".into(),
                "-e".into(),
                "stderr".into(),
                "-p".into(),
                prefix.display().to_string(),
                "-c".into(),
                conf.display().to_string(),
            ]
        }
        LsWorkload::Memcached => [
            "memcached",
            "-l",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "0",
            "-t",
            "1",
            "-m",
            "64",
            "-u",
            "root",
        ]
        .map(String::from)
        .to_vec(),
    };
    Ok(base_pod(
        &format!("ls-{}", workload.name()),
        node,
        "LS",
        &work.0,
        json!({
            "name": workload.name(), "image": image, "command": command,
            "resources": {"requests": {"cpu": cpu_request, "memory": "256Mi"}},
        }),
    ))
}

/// The BE stress-ng job: `cpus` CPU stressors, one memory-bandwidth (`--vm`) and one cache
/// thrasher, for `seconds`, writing its report for run `run`. BestEffort with `batch_milli_cpu`
/// of batch CPU (request = limit, as extended resources require) and priority class
/// `koord-batch`, as a ClusterColocationProfile makes it; koordlet turns the batch limit into
/// the container's CFS quota.
pub fn be_pod(
    node: &str,
    image: &str,
    work: &WorkDir,
    run: usize,
    cpus: usize,
    batch_milli_cpu: u64,
    seconds: u64,
) -> Value {
    let report = work.be_report(run).display().to_string();
    let batch_cpu = batch_milli_cpu.max(1).to_string();
    let (cpus, seconds) = (cpus.to_string(), seconds.to_string());
    let command = [
        "stress-ng",
        "--cpu",
        &cpus,
        "--vm",
        "1",
        "--vm-bytes",
        "128m",
        "--cache",
        "1",
        "--timeout",
        &seconds,
        "--metrics-brief",
        "--yaml",
        &report,
    ]
    .map(String::from)
    .to_vec();
    let batch = json!({"kubernetes.io/batch-cpu": batch_cpu, "kubernetes.io/batch-memory": "1Gi"});
    let mut pod = base_pod(
        &format!("be-{run}"),
        node,
        "BE",
        &work.0,
        json!({
            "name": "stress", "image": image, "command": command,
            "resources": {"requests": batch.clone(), "limits": batch},
        }),
    );
    // koord-webhook refuses a BE pod without a batch priority (as upstream's does).
    pod["spec"]["priorityClassName"] = json!("koord-batch");
    pod
}

/// A loopback address with a port that was free a moment ago.
pub fn free_port() -> Result<SocketAddr, BenchError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(BenchError::Io)?;
    listener.local_addr().map_err(BenchError::Io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_carry_their_qos_and_commands() {
        let dir = tempfile::tempdir().unwrap();
        let work = WorkDir(dir.path().to_path_buf());
        let addr: SocketAddr = "127.0.0.1:18080".parse().unwrap();
        let pod = ls_pod(LsWorkload::Nginx, "n1", "koord-bench-nginx", "1", &work, addr).unwrap();
        assert_eq!(pod["metadata"]["labels"]["koordinator.sh/qosClass"], "LS");
        assert_eq!(pod["spec"]["hostNetwork"], true);
        assert_eq!(pod["spec"]["containers"][0]["command"][0], "nginx");
        let conf = std::fs::read_to_string(dir.path().join("nginx/nginx.conf")).unwrap();
        assert!(
            conf.contains("listen 127.0.0.1:18080;") && conf.contains("daemon off;"),
            "{conf}"
        );
        let be = be_pod("n1", "koord-bench-stress-ng", &work, 3, 2, 1500, 12);
        let cmd = be["spec"]["containers"][0]["command"].to_string();
        assert!(
            cmd.contains("\"--cpu\",\"2\"") && cmd.contains("be-3.yaml"),
            "{cmd}"
        );
        assert_eq!(
            be["spec"]["containers"][0]["resources"]["limits"]["kubernetes.io/batch-cpu"],
            "1500"
        );
        assert_eq!(be["spec"]["priorityClassName"], "koord-batch");
        assert!(LsWorkload::parse("redis").is_err());
    }
}
