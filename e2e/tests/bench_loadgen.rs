//! The colocation benchmark's load generator against tiny loopback servers: every due request
//! is accounted for (answered, failed or timed out), latency counts from the intended send time,
//! HTTP bodies by length and chunked, memcached hits and misses. Cheap: runs in CI.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use koord_e2e::bench::loadgen::{LoadSpec, Protocol, measure_capacity, memcache_set, run_open_loop};

/// Serves every connection on a thread of its own with `answer(request line) -> reply bytes`
/// (None closes the connection), after `delay`.
fn serve(answer: fn(&str) -> Option<Vec<u8>>, delay: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || handle(stream, answer, delay));
        }
    });
    addr
}

fn handle(stream: TcpStream, answer: fn(&str) -> Option<Vec<u8>>, delay: Duration) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut first = String::new();
        if reader.read_line(&mut first).unwrap_or(0) == 0 {
            return;
        }
        if first.starts_with("GET ") {
            // Skip the headers.
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
            }
        } else if first.starts_with("set ") {
            let bytes: usize = first.split_whitespace().nth(4).unwrap().parse().unwrap();
            let mut data = vec![0; bytes + 2];
            reader.read_exact(&mut data).unwrap();
        }
        std::thread::sleep(delay);
        match answer(first.trim_end()) {
            Some(reply) => {
                if writer.write_all(&reply).is_err() {
                    return;
                }
            }
            None => return,
        }
    }
}

fn http_length(_: &str) -> Option<Vec<u8>> {
    Some(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec())
}

fn http_chunked(_: &str) -> Option<Vec<u8>> {
    Some(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;x=1\r\nabc\r\n0\r\n\r\n"
            .to_vec(),
    )
}

fn http_error(_: &str) -> Option<Vec<u8>> {
    Some(b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n".to_vec())
}

fn memcache(line: &str) -> Option<Vec<u8>> {
    if line.starts_with("set ") {
        return Some(b"STORED\r\n".to_vec());
    }
    match line {
        "get hit" => Some(b"VALUE hit 0 4\r\nabcd\r\nEND\r\n".to_vec()),
        _ => Some(b"END\r\n".to_vec()),
    }
}

fn spec(addr: SocketAddr, protocol: Protocol, rate: f64, timeout: Duration) -> LoadSpec {
    LoadSpec {
        addr,
        protocol,
        rate,
        duration: Duration::from_millis(1000),
        connections: 4,
        timeout,
        tasks_file: None,
    }
}

#[test]
fn every_due_request_is_answered_by_a_healthy_server() {
    for answer in [http_length, http_chunked] {
        let addr = serve(answer, Duration::ZERO);
        let http = Protocol::Http { path: "/".into() };
        let result = run_open_loop(spec(addr, http.clone(), 200.0, Duration::from_secs(2))).unwrap();
        assert_eq!(result.due, 200);
        assert_eq!((result.ok, result.errors, result.timeouts), (200, 0, 0));
        assert_eq!(result.latency_us.len(), 200);
        assert!(result.quantile_ms(0.5) < 500.0, "{}", result.quantile_ms(0.5));
        let capacity = measure_capacity(addr, http, 2, Duration::from_millis(300), None).unwrap();
        assert!(capacity > 10.0, "{capacity}");
    }
}

#[test]
fn a_slow_server_shows_as_latency_from_the_intended_time_and_timeouts() {
    // One connection, 20 ms per request, 100 requests/s due: the server keeps up with 50/s,
    // so queued requests wait; their latency counts from when they were due.
    let addr = serve(http_length, Duration::from_millis(20));
    let mut load = spec(
        addr,
        Protocol::Http { path: "/".into() },
        100.0,
        Duration::from_millis(300),
    );
    load.connections = 1;
    let result = run_open_loop(load).unwrap();
    assert_eq!(result.due, 100);
    assert_eq!(result.ok + result.errors + result.timeouts, 100);
    assert!(result.timeouts > 0, "queued requests must time out");
    assert!(
        result.quantile_ms(0.99) >= 100.0,
        "p99 {} ms hides the queueing",
        result.quantile_ms(0.99)
    );
}

#[test]
fn errors_and_misses_are_counted_not_hidden() {
    let addr = serve(http_error, Duration::ZERO);
    let result = run_open_loop(spec(
        addr,
        Protocol::Http { path: "/".into() },
        50.0,
        Duration::from_secs(1),
    ))
    .unwrap();
    assert_eq!((result.ok, result.errors), (0, 50));
    let addr = serve(memcache, Duration::ZERO);
    memcache_set(addr, "hit", b"abcd").unwrap();
    let hit = Protocol::MemcacheGet { key: "hit".into() };
    let result = run_open_loop(spec(addr, hit, 100.0, Duration::from_secs(1))).unwrap();
    assert_eq!((result.ok, result.errors, result.timeouts), (100, 0, 0));
    let miss = Protocol::MemcacheGet { key: "miss".into() };
    let result = run_open_loop(spec(addr, miss, 100.0, Duration::from_secs(1))).unwrap();
    assert_eq!((result.ok, result.errors), (0, 100));
    let closed: SocketAddr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let result = run_open_loop(spec(
        closed,
        Protocol::Http { path: "/".into() },
        20.0,
        Duration::from_secs(1),
    ))
    .unwrap();
    assert_eq!(result.ok, 0);
    assert_eq!(result.errors + result.timeouts, 20);
    let bad = LoadSpec {
        rate: 0.0,
        ..spec(
            closed,
            Protocol::Http { path: "/".into() },
            1.0,
            Duration::from_secs(1),
        )
    };
    assert!(run_open_loop(bad).is_err());
}
