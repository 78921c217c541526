//! An open-loop load generator: requests are due at a fixed rate whatever the server does, and
//! each latency is measured from the request's *intended* send time, so a stalled server shows
//! up as latency of every request it delayed (no coordinated omission). Also a closed-loop
//! capacity probe.
//!
//! It runs on a thread of its own with a single-threaded runtime, so its cost is at most one
//! CPU and does not mix with the harness's runtime.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{Mutex, mpsc};

use super::BenchError;

/// Highest latency the histograms hold (µs): a minute.
const MAX_LATENCY_US: u64 = 60_000_000;

/// What one request is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protocol {
    /// `GET path` over HTTP/1.1 keep-alive; any 2xx with a body of `Content-Length` is a success.
    Http {
        /// The request path.
        path: String,
    },
    /// memcached text protocol `get key`; a hit is a success, a miss an error.
    MemcacheGet {
        /// The key (set beforehand with [`memcache_set`]).
        key: String,
    },
}

/// One open-loop run.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// The server.
    pub addr: SocketAddr,
    /// What each request is.
    pub protocol: Protocol,
    /// Requests per second.
    pub rate: f64,
    /// How long requests are issued.
    pub duration: Duration,
    /// Connections (each carries one request at a time).
    pub connections: usize,
    /// A request not answered this long after its intended time is a timeout.
    pub timeout: Duration,
    /// A cgroup v1 `tasks` file the generator's thread joins (see [`GeneratorCgroup`]).
    pub tasks_file: Option<PathBuf>,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct LoadResult {
    /// Latencies of successful requests, µs from intended send time to full response.
    pub latency_us: Histogram<u64>,
    /// Requests due in the run.
    pub due: u64,
    /// Successful requests.
    pub ok: u64,
    /// Failed requests (connection errors, bad or negative responses).
    pub errors: u64,
    /// Requests not answered within the timeout, or not sent before it passed.
    pub timeouts: u64,
}

impl LoadResult {
    fn empty() -> Result<Self, BenchError> {
        Ok(LoadResult {
            latency_us: new_histogram()?,
            due: 0,
            ok: 0,
            errors: 0,
            timeouts: 0,
        })
    }

    fn merge(&mut self, other: &LoadResult) -> Result<(), BenchError> {
        self.latency_us
            .add(&other.latency_us)
            .map_err(|e| BenchError::Histogram(e.to_string()))?;
        self.ok += other.ok;
        self.errors += other.errors;
        self.timeouts += other.timeouts;
        Ok(())
    }

    /// Latency at quantile `q` (0..1) in ms.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        self.latency_us.value_at_quantile(q) as f64 / 1000.0
    }
}

fn new_histogram() -> Result<Histogram<u64>, BenchError> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).map_err(|e| BenchError::Histogram(e.to_string()))
}

/// Runs `spec` on a thread of its own and returns what it measured.
pub fn run_open_loop(spec: LoadSpec) -> Result<LoadResult, BenchError> {
    if !(spec.rate.is_finite() && spec.rate > 0.0) || spec.connections == 0 {
        return Err(BenchError::Load(format!(
            "rate {} and connections {} must be positive",
            spec.rate, spec.connections
        )));
    }
    let tasks_file = spec.tasks_file.clone();
    on_own_thread(tasks_file, move || async move { open_loop(spec).await })
}

/// Closed loop: `connections` clients send back to back for `duration`; returns requests per
/// second completed (the server's capacity as this generator sees it).
pub fn measure_capacity(
    addr: SocketAddr,
    protocol: Protocol,
    connections: usize,
    duration: Duration,
    tasks_file: Option<PathBuf>,
) -> Result<f64, BenchError> {
    on_own_thread(tasks_file, move || async move {
        let deadline = Instant::now() + duration;
        let mut tasks = Vec::new();
        for _ in 0..connections.max(1) {
            let protocol = protocol.clone();
            tasks.push(tokio::spawn(async move {
                let mut done = 0u64;
                let mut conn = Connection::open(addr).await?;
                while Instant::now() < deadline {
                    conn.request(&protocol).await?;
                    done += 1;
                }
                Ok::<u64, BenchError>(done)
            }));
        }
        let mut total = 0;
        for task in tasks {
            total += task.await.map_err(|e| BenchError::Load(e.to_string()))??;
        }
        Ok(total as f64 / duration.as_secs_f64())
    })
}

/// Stores `value` under `key` (memcached text protocol), for [`Protocol::MemcacheGet`].
pub fn memcache_set(addr: SocketAddr, key: &str, value: &[u8]) -> Result<(), BenchError> {
    let (key, value) = (key.to_owned(), value.to_owned());
    on_own_thread(None, move || async move {
        let mut stream = TcpStream::connect(addr).await.map_err(BenchError::Io)?;
        let mut line = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
        line.extend_from_slice(&value);
        line.extend_from_slice(b"\r\n");
        stream.write_all(&line).await.map_err(BenchError::Io)?;
        let mut reader = BufReader::new(stream);
        let mut reply = String::new();
        reader.read_line(&mut reply).await.map_err(BenchError::Io)?;
        match reply.trim_end() {
            "STORED" => Ok(()),
            other => Err(BenchError::Load(format!("memcached set {key}: {other}"))),
        }
    })
}

fn on_own_thread<F, Fut, T>(tasks_file: Option<PathBuf>, work: F) -> Result<T, BenchError>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, BenchError>>,
    T: Send + 'static,
{
    let handle = std::thread::Builder::new()
        .name("koord-bench-load".into())
        .spawn(move || {
            if let Some(tasks) = &tasks_file {
                join_cgroup(tasks)?;
            }
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(BenchError::Io)?;
            runtime.block_on(work())
        })
        .map_err(BenchError::Io)?;
    handle
        .join()
        .map_err(|_| BenchError::Load("load generator thread panicked".into()))?
}

/// Moves the calling thread (not its process) into the cgroup v1 whose `tasks` file is given.
fn join_cgroup(tasks: &std::path::Path) -> Result<(), BenchError> {
    let link = std::fs::read_link("/proc/thread-self").map_err(BenchError::Io)?;
    let tid = link
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| BenchError::Load(format!("cannot read the thread id from {}", link.display())))?
        .to_owned();
    std::fs::write(tasks, tid).map_err(BenchError::Io)
}

async fn open_loop(spec: LoadSpec) -> Result<LoadResult, BenchError> {
    let (tx, rx) = mpsc::unbounded_channel::<Instant>();
    let rx = Arc::new(Mutex::new(rx));
    let mut workers = Vec::new();
    for _ in 0..spec.connections {
        let (rx, protocol) = (rx.clone(), spec.protocol.clone());
        let (addr, timeout) = (spec.addr, spec.timeout);
        workers.push(tokio::spawn(async move {
            connection_worker(addr, protocol, timeout, rx).await
        }));
    }
    let start = Instant::now() + Duration::from_millis(10);
    let due = (spec.rate * spec.duration.as_secs_f64()).round() as u64;
    let interval = Duration::from_secs_f64(1.0 / spec.rate);
    let mut sent = 0u64;
    while sent < due {
        let next = start + interval.mul_f64(sent as f64);
        let now = Instant::now();
        if next > now {
            tokio::time::sleep_until(next.into()).await;
        }
        // Timers are coarse (1 ms): send everything due by now, each with its own intended time.
        let now = Instant::now();
        while sent < due {
            let intended = start + interval.mul_f64(sent as f64);
            if intended > now {
                break;
            }
            if tx.send(intended).is_err() {
                return Err(BenchError::Load("every connection worker stopped".into()));
            }
            sent += 1;
        }
    }
    drop(tx);
    let mut total = LoadResult::empty()?;
    total.due = due;
    for worker in workers {
        let part = worker.await.map_err(|e| BenchError::Load(e.to_string()))??;
        total.merge(&part)?;
    }
    Ok(total)
}

async fn connection_worker(
    addr: SocketAddr,
    protocol: Protocol,
    timeout: Duration,
    queue: Arc<Mutex<mpsc::UnboundedReceiver<Instant>>>,
) -> Result<LoadResult, BenchError> {
    let mut result = LoadResult::empty()?;
    let mut conn: Option<Connection> = None;
    loop {
        let next = queue.lock().await.recv().await;
        let Some(intended) = next else { break };
        let deadline = intended + timeout;
        if Instant::now() >= deadline {
            // Queued behind slow requests until its time ran out: never sent.
            result.timeouts += 1;
            continue;
        }
        let attempt = async {
            if conn.is_none() {
                conn = Some(Connection::open(addr).await?);
            }
            match conn.as_mut() {
                Some(c) => c.request(&protocol).await,
                None => Err(BenchError::Load("no connection".into())),
            }
        };
        match tokio::time::timeout_at(deadline.into(), attempt).await {
            Ok(Ok(())) => {
                let us = intended.elapsed().as_micros().clamp(1, MAX_LATENCY_US as u128) as u64;
                result
                    .latency_us
                    .record(us)
                    .map_err(|e| BenchError::Histogram(e.to_string()))?;
                result.ok += 1;
            }
            Ok(Err(_)) => {
                result.errors += 1;
                conn = None;
            }
            Err(_) => {
                result.timeouts += 1;
                conn = None;
            }
        }
    }
    Ok(result)
}

/// One keep-alive connection.
struct Connection {
    reader: BufReader<TcpStream>,
    line: String,
    body: Vec<u8>,
}

impl Connection {
    async fn open(addr: SocketAddr) -> Result<Self, BenchError> {
        let stream = TcpStream::connect(addr).await.map_err(BenchError::Io)?;
        stream.set_nodelay(true).map_err(BenchError::Io)?;
        Ok(Connection {
            reader: BufReader::new(stream),
            line: String::new(),
            body: Vec::new(),
        })
    }

    async fn request(&mut self, protocol: &Protocol) -> Result<(), BenchError> {
        match protocol {
            Protocol::Http { path } => {
                let request = format!(
                    "GET {path} HTTP/1.1\r\nHost: bench\r\nAccept-Encoding: gzip\r\nConnection: keep-alive\r\n\r\n"
                );
                self.reader
                    .get_mut()
                    .write_all(request.as_bytes())
                    .await
                    .map_err(BenchError::Io)?;
                self.http_response().await
            }
            Protocol::MemcacheGet { key } => {
                let request = format!("get {key}\r\n");
                self.reader
                    .get_mut()
                    .write_all(request.as_bytes())
                    .await
                    .map_err(BenchError::Io)?;
                self.memcache_response().await
            }
        }
    }

    async fn read_line(&mut self) -> Result<&str, BenchError> {
        self.line.clear();
        let n = self
            .reader
            .read_line(&mut self.line)
            .await
            .map_err(BenchError::Io)?;
        if n == 0 {
            return Err(BenchError::Load("connection closed by the server".into()));
        }
        Ok(self.line.trim_end())
    }

    async fn read_body(&mut self, len: usize) -> Result<(), BenchError> {
        self.body.resize(len, 0);
        self.reader
            .read_exact(&mut self.body)
            .await
            .map_err(BenchError::Io)?;
        Ok(())
    }

    async fn http_response(&mut self) -> Result<(), BenchError> {
        let status = parse_status(self.read_line().await?)?;
        let mut length = 0usize;
        let mut chunked = false;
        loop {
            let line = self.read_line().await?;
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value
                        .trim()
                        .parse()
                        .map_err(|_| BenchError::Load(format!("bad Content-Length {value:?}")))?;
                } else if name.eq_ignore_ascii_case("transfer-encoding") {
                    chunked = value.trim().eq_ignore_ascii_case("chunked");
                }
            }
        }
        if chunked {
            self.read_chunks().await?;
        } else {
            self.read_body(length).await?;
        }
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(BenchError::Load(format!("HTTP status {status}")))
        }
    }

    /// A chunked body: `<hex size>\r\n<data>\r\n` until size 0, then trailers and a blank line.
    async fn read_chunks(&mut self) -> Result<(), BenchError> {
        loop {
            let line = self.read_line().await?;
            let size = parse_chunk_size(line)?;
            if size == 0 {
                while !self.read_line().await?.is_empty() {}
                return Ok(());
            }
            self.read_body(size + 2).await?;
        }
    }

    async fn memcache_response(&mut self) -> Result<(), BenchError> {
        let first = self.read_line().await?.to_owned();
        let Some(bytes) = parse_value_line(&first)? else {
            return Err(BenchError::Load(format!("memcached: {first}")));
        };
        self.read_body(bytes + 2).await?;
        match self.read_line().await? {
            "END" => Ok(()),
            other => Err(BenchError::Load(format!(
                "memcached: expected END, got {other:?}"
            ))),
        }
    }
}

/// The status code of an HTTP/1.x status line.
pub fn parse_status(line: &str) -> Result<u16, BenchError> {
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next().map(str::parse::<u16>)) {
        (Some(v), Some(Ok(code))) if v.starts_with("HTTP/1.") => Ok(code),
        _ => Err(BenchError::Load(format!("bad HTTP status line {line:?}"))),
    }
}

/// The size of an HTTP chunk from its header line (extensions after `;` ignored).
pub fn parse_chunk_size(line: &str) -> Result<usize, BenchError> {
    let hex = line.split(';').next().unwrap_or("").trim();
    usize::from_str_radix(hex, 16).map_err(|_| BenchError::Load(format!("bad chunk size line {line:?}")))
}

/// The data length of a memcached `VALUE <key> <flags> <bytes>` line; `None` for anything else
/// (`END` of a miss, `ERROR`, `SERVER_ERROR ...`).
pub fn parse_value_line(line: &str) -> Result<Option<usize>, BenchError> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    match fields.as_slice() {
        ["VALUE", _key, _flags, bytes, ..] => bytes
            .parse()
            .map(Some)
            .map_err(|_| BenchError::Load(format!("bad memcached VALUE line {line:?}"))),
        _ => Ok(None),
    }
}
