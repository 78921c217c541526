//! Reading a component's Prometheus `/metrics` the way a Prometheus server does: a plain HTTP
//! GET on the admin address, then one sample by its exact series.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A loopback address with a port free right now, for a component that must be told its admin
/// address up front (the port could in principle be taken before the component binds it).
pub fn free_loopback_addr() -> std::io::Result<SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// The body of `GET /metrics` on `addr`; `None` while nothing answers there.
pub async fn scrape(addr: SocketAddr) -> Option<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?;
    (status == "200").then(|| body.to_owned())
}

/// The value of the sample whose series (name and labels, as printed) is exactly `series`.
pub fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_matches_the_whole_series() {
        let body = "a_total 1\na{x=\"1\"} 2.5\nab 3\n";
        assert_eq!(sample(body, "a_total"), Some(1.0));
        assert_eq!(sample(body, "a{x=\"1\"}"), Some(2.5));
        assert_eq!(sample(body, "a"), None);
    }
}
