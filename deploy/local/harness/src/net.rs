//! Loopback ports for the servers a run starts, and the plain HTTP GET that
//! reads the replicas' probes, metrics and debug pages.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Mutex;
use std::time::Duration;

/// A port free on 127.0.0.1 for a server started next. Drawn at random
/// below the kernel's ephemeral range, as `deploy/local/lib.sh` does: a
/// port the kernel hands out (`bind(0)`) can be taken again, between this
/// check and the server's own bind, by any outgoing connection (an S1 run
/// lost a replica to exactly that). Never the same port twice in one
/// process. A clash that still happens is retried by
/// [`crate::Replica::wait_ready`].
pub fn free_port() -> SocketAddr {
    use std::hash::BuildHasher;
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let range =
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let ephemeral_low: u16 = range
        .split_whitespace()
        .next()
        .and_then(|low| low.parse().ok())
        .unwrap_or(32768);
    let span = u64::from(ephemeral_low.saturating_sub(10_000).max(1));
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for attempt in 0u64..1_000 {
        // std's RandomState has fresh random keys each time: randomness enough.
        let draw = std::collections::hash_map::RandomState::new().hash_one(attempt);
        let port = 10_000 + (draw % span) as u16;
        if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return SocketAddr::from(([127, 0, 0, 1], port));
        }
    }
    // Every draw taken: let the kernel choose (and accept its small risk).
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)))
}

/// A plain HTTP/1.0 GET of `path` at `addr`: (status code, body). Connects
/// within 2 s and reads within 5 s, so a stopped process cannot hang it.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    // One write: `write!` on a bare stream sends each piece on its own, and
    // a server that answers after the first piece and closes resets the
    // connection under the unread rest (CI saw that reset).
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let ports: BTreeSet<u16> = (0..50).map(|_| free_port().port()).collect();
        assert_eq!(ports.len(), 50, "a port was given twice");
        for port in ports {
            assert!(port >= 10_000);
            assert!(TcpListener::bind(("127.0.0.1", port)).is_ok());
        }
    }

    #[test]
    fn http_get_reads_the_status_and_the_body() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            // Read the whole request before answering, as a real server
            // does: closing with unread bytes would reset the connection.
            let mut request = Vec::new();
            let mut byte = [0u8; 1];
            while !request.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap() == 1 {
                request.push(byte[0]);
            }
            stream
                .write_all(b"HTTP/1.0 503 Service Unavailable\r\nX: y\r\n\r\nnot ready")
                .unwrap();
        });
        assert_eq!(
            http_get(addr, "/readyz").unwrap(),
            (503, "not ready".to_owned())
        );
        server.join().unwrap();
    }
}
