//! A loopback TCP proxy that can be cut: the API server as seen from one component becomes
//! unreachable (listener closed: connection refused; open connections dropped) and reachable
//! again on the same address, while the rest of the test (the simulated node, the test's own
//! client) keeps talking to the API server directly.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// The proxy; every task it started is aborted on drop.
pub struct CutProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    tasks: Arc<Mutex<Vec<AbortHandle>>>,
}

impl CutProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = CutProxy {
            addr: listener.local_addr().unwrap(),
            upstream,
            tasks: Arc::default(),
        };
        proxy.serve(listener);
        proxy
    }

    /// The address components should use instead of the API server's.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn serve(&self, listener: TcpListener) {
        let tasks = self.tasks.clone();
        let upstream = self.upstream;
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let forward = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tasks.lock().unwrap().push(forward.abort_handle());
            }
        });
        self.tasks.lock().unwrap().push(accept.abort_handle());
    }

    /// Unreachable: the listener closes (new connections are refused) and every open
    /// connection is dropped.
    pub fn cut(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    /// Reachable again, on the same address.
    pub async fn restore(&self) {
        let listener = tokio_retry_bind(self.addr).await;
        self.serve(listener);
    }
}

async fn tokio_retry_bind(addr: SocketAddr) -> TcpListener {
    // The aborted accept task drops its listener on its next poll.
    for _ in 0..100 {
        if let Ok(listener) = TcpListener::bind(addr).await {
            return listener;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("cannot listen on {addr} again");
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.cut();
    }
}
