//! Slow and idle clients cannot exhaust the server: slowloris connections are cut
//! after the header-read timeout while /healthz keeps answering, connections over the
//! cap are closed at accept, and the server's memory goes back near where it was
//! once ~20,000 idle connections are closed (docs/security.md records a run).

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::Qanat;

/// The resident memory of process `pid`, in MiB.
fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
}

/// How many sockets this test may open: its own soft limit raised to the hard one.
fn socket_budget() -> usize {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    let _ = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: lim.maximum,
            maximum: lim.maximum,
        },
    );
    let now = getrlimit(Resource::Nofile).current.unwrap_or(1024);
    usize::try_from(now.saturating_sub(200)).unwrap_or(usize::MAX)
}

fn addr(q: &Qanat) -> String {
    q.url.trim_start_matches("http://").to_string()
}

/// A connection that has sent the start of a request and then nothing.
fn slow_client(addr: &str) -> Option<TcpStream> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: qanat\r\nX-Slow: ")
        .ok()?;
    Some(s)
}

/// Whether the server has closed `s` (EOF or reset) within `wait`.
fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).expect("read timeout");
    let mut buf = [0u8; 512];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            // A 408 or similar before closing: keep reading to the end.
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false
            }
            Err(_) => return true,
        }
    }
}

fn healthz_ms(q: &Qanat) -> u128 {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let t = Instant::now();
    let r = client
        .get(format!("{}/healthz", q.url))
        .send()
        .expect("/healthz answers while slow clients hold connections");
    assert!(r.status().is_success(), "{}", r.status());
    t.elapsed().as_millis()
}

#[test]
fn slowloris_connections_are_cut_and_healthz_keeps_answering() {
    // One client here holds them all: its own cap (tested below) is lifted, so the
    // header timeout alone is what cuts them.
    let q = Qanat::start_with(vec![
        ("QANAT_SERVER_HEADER_READ_TIMEOUT_SECS".into(), "2".into()),
        (
            "QANAT_SERVER_MAX_CONNECTIONS_PER_CLIENT".into(),
            "100000".into(),
        ),
        ("QANAT_SERVER_MAX_CONNECTIONS".into(), "30000".into()),
    ]);
    let pid = q.child.as_ref().expect("server").id();
    // About 20,000 where the limits allow (the server needs one descriptor for each
    // too, and a few of its own).
    let n = socket_budget().min(20_000).saturating_sub(300);
    let before = rss_mib(pid);
    let mut slow: Vec<TcpStream> = (0..n).filter_map(|_| slow_client(&addr(&q))).collect();
    assert!(slow.len() >= n * 9 / 10, "opened {} of {n}", slow.len());
    let during = rss_mib(pid);
    let ms = healthz_ms(&q);
    // Every slow connection is closed by the server once the header timeout passes.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut open = 0;
    for s in &mut slow {
        let left = deadline.saturating_duration_since(Instant::now());
        if !closed_within(s, left.max(Duration::from_millis(10))) {
            open += 1;
        }
    }
    assert_eq!(
        open, 0,
        "{open} slow connections were still open after 15 s"
    );
    drop(slow);
    // Memory comes back near where it was (generous: the allocator keeps some).
    let bound = before + 128.max(before / 2);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut after = rss_mib(pid);
    while after > bound && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        after = rss_mib(pid);
    }
    let ms_after = healthz_ms(&q);
    eprintln!(
        "slowloris: {n} connections; /healthz {ms} ms during, {ms_after} ms after; server RSS {before} MiB before, {during} MiB during, {after} MiB after"
    );
    assert!(
        n >= 5_000,
        "only {n} sockets could be opened here: raise the open-files limit"
    );
    assert!(
        after <= bound,
        "server RSS {after} MiB after the connections closed, {before} MiB before (bound {bound} MiB; {during} MiB during)"
    );
}

#[test]
fn connections_over_the_cap_are_closed_at_accept() {
    let q = Qanat::start_with(vec![
        ("QANAT_SERVER_MAX_CONNECTIONS".into(), "20".into()),
        ("QANAT_SERVER_HEADER_READ_TIMEOUT_SECS".into(), "30".into()),
    ]);
    let mut held: Vec<TcpStream> = (0..30).filter_map(|_| slow_client(&addr(&q))).collect();
    let refused = held
        .iter_mut()
        .map(|s| closed_within(s, Duration::from_millis(300)))
        .filter(|closed| *closed)
        .count();
    assert_eq!(refused, 10, "30 connections against a cap of 20");
    // Freed slots are taken again.
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    healthz_ms(&q);
}

#[test]
fn one_client_cannot_take_every_connection() {
    let q = Qanat::start_with(vec![
        (
            "QANAT_SERVER_MAX_CONNECTIONS_PER_CLIENT".into(),
            "10".into(),
        ),
        ("QANAT_SERVER_HEADER_READ_TIMEOUT_SECS".into(), "30".into()),
    ]);
    let mut held: Vec<TcpStream> = (0..15).filter_map(|_| slow_client(&addr(&q))).collect();
    let refused = held
        .iter_mut()
        .map(|s| closed_within(s, Duration::from_millis(300)))
        .filter(|closed| *closed)
        .count();
    assert_eq!(
        refused, 5,
        "15 connections from one client against its cap of 10"
    );
    // Another client (another loopback address) still gets in while they are held.
    let other = reqwest::blocking::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().expect("ip"))
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let r = other
        .get(format!("{}/healthz", q.url))
        .send()
        .expect("/healthz answers another client");
    assert!(r.status().is_success(), "{}", r.status());
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    healthz_ms(&q);
}

#[test]
fn an_upload_that_stops_sending_is_cut_after_the_body_timeout() {
    let q = Qanat::start_with(vec![(
        "QANAT_SERVER_BODY_READ_TIMEOUT_SECS".into(),
        "1".into(),
    )]);
    q.create_project("p", &["uae-north"]);
    let mut s = TcpStream::connect(addr(&q)).expect("connect");
    let head = format!(
        "PUT /api/v1/projects/p/objects/stalled.bin HTTP/1.1\r\nHost: qanat\r\nAuthorization: Bearer {}\r\nContent-Length: 1000000\r\n\r\n",
        q.admin_token
    );
    s.write_all(head.as_bytes()).expect("head");
    s.write_all(&[7u8; 1000]).expect("some of the body");
    let t = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply);
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "a stalled upload holds its connection"
    );
    assert!(
        reply.starts_with("HTTP/1.1 400") && reply.contains("not received within"),
        "{reply}"
    );
    // Nothing was stored.
    let (status, _) = q.api("GET", "/api/v1/projects/p/objects/stalled.bin", None);
    assert_eq!(status, 404);
}
