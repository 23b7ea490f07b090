//! The bounds every listener of a replica puts on its connections, before
//! any authentication: at most [`MAX_CONNECTIONS`] at once per listener
//! (the rest wait in the kernel's listen backlog), a request's headers
//! within [`HEADER_DEADLINE`], and a connection kept at most
//! [`CONNECTION_LIFETIME`] (a scraper or a kubelet simply reconnects), the
//! answer then in flight given [`ANSWER_GRACE`] to finish. Any
//! pod can reach the metrics and probe ports: without them, connections
//! opened and left silent would each hold a task and a file descriptor for
//! good, and the descriptors are the ones the replica's own API clients
//! need.

use axum::Router;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub const MAX_CONNECTIONS: usize = 256;
pub const HEADER_DEADLINE: Duration = Duration::from_secs(10);
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(300);
pub const ANSWER_GRACE: Duration = Duration::from_secs(30);

/// The bounds a listener serves within: [`LISTENER`] for every one of a
/// replica's (tests shrink them).
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub max_connections: usize,
    pub header_deadline: Duration,
    pub lifetime: Duration,
    /// How long an answer in flight at the end of the lifetime may take.
    pub grace: Duration,
}

pub const LISTENER: Bounds = Bounds {
    max_connections: MAX_CONNECTIONS,
    header_deadline: HEADER_DEADLINE,
    lifetime: CONNECTION_LIFETIME,
    grace: ANSWER_GRACE,
};

/// A listener that admits at most so many connections at once.
pub struct Admission {
    listener: TcpListener,
    slots: Arc<Semaphore>,
}

/// An accepted connection, holding its listener's slot until it is dropped.
pub struct Admitted {
    pub stream: TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl Admission {
    pub fn new(listener: TcpListener, max_connections: usize) -> Self {
        Admission {
            listener,
            slots: Arc::new(Semaphore::new(max_connections)),
        }
    }

    /// The next connection, once one of the slots is free.
    pub async fn accept(&self) -> Admitted {
        // Acquiring fails only on a closed semaphore, and this one is
        // never closed: were it, no connection would be admitted again.
        let Ok(slot) = self.slots.clone().acquire_owned().await else {
            return std::future::pending().await;
        };
        loop {
            match self.listener.accept().await {
                Ok((stream, _)) => {
                    return Admitted {
                        stream,
                        _slot: slot,
                    };
                }
                Err(error) => {
                    // Out of file descriptors, say: wait rather than spin.
                    tracing::warn!(%error, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// The connections as a stream (for a server that takes one).
    pub fn into_stream(self) -> impl futures::Stream<Item = io::Result<Admitted>> {
        futures::stream::unfold(self, |admission| async move {
            let admitted = admission.accept().await;
            Some((Ok(admitted), admission))
        })
    }
}

impl AsyncRead for Admitted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Admitted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// Serves HTTP/1.1 on `listener` until the process ends, within
/// [`LISTENER`]: `open` turns each admitted connection into the stream to serve
/// and its router (a TLS handshake and the router for its client, say), or
/// into nothing to drop it; it runs on the connection's own task, within
/// the connection's lifetime.
pub async fn serve_http<S, F, Opening>(listener: TcpListener, open: F)
where
    F: Fn(Admitted) -> Opening,
    Opening: Future<Output = Option<(S, Router)>> + Send + 'static,
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    serve_http_within(listener, LISTENER, open).await
}

async fn serve_http_within<S, F, Opening>(listener: TcpListener, bounds: Bounds, open: F)
where
    F: Fn(Admitted) -> Opening,
    Opening: Future<Output = Option<(S, Router)>> + Send + 'static,
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let admission = Admission::new(listener, bounds.max_connections);
    loop {
        let opening = open(admission.accept().await);
        tokio::spawn(async move {
            let ends = tokio::time::Instant::now() + bounds.lifetime;
            let Ok(Some((stream, router))) = tokio::time::timeout_at(ends, opening).await else {
                return;
            };
            let service = hyper_util::service::TowerToHyperService::new(router);
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(bounds.header_deadline)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = tokio::time::sleep_until(ends) => {
                    // The answer in flight, if any, is finished (a scrape
                    // of a large page is not cut): no new request is read.
                    connection.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(bounds.grace, connection).await;
                }
            }
        });
    }
}

/// Serves `router` over plain HTTP/1.1 on `listener` until the process
/// ends, within [`LISTENER`].
pub async fn serve_plain(listener: TcpListener, router: Router) {
    serve_plain_within(listener, LISTENER, router).await
}

async fn serve_plain_within(listener: TcpListener, bounds: Bounds, router: Router) {
    serve_http_within(listener, bounds, move |admitted| {
        let router = router.clone();
        async move { Some((admitted, router)) }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Small bounds, on the real clock: the sockets are real.
    const SMALL: Bounds = Bounds {
        max_connections: 4,
        header_deadline: Duration::from_millis(300),
        lifetime: Duration::from_secs(20),
        grace: Duration::from_secs(5),
    };

    async fn serving() -> std::net::SocketAddr {
        serving_within(SMALL).await
    }

    /// `/` answers at once, `/slow` after a second.
    async fn serving_within(bounds: Bounds) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("its address");
        let router = Router::new().route("/", get(|| async { "ok" })).route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                "slow"
            }),
        );
        tokio::spawn(serve_plain_within(listener, bounds, router));
        addr
    }

    /// The answer to `request`, sent on a new connection, once the server
    /// closes it.
    async fn ask(addr: std::net::SocketAddr, request: &str) -> String {
        let mut asking = TcpStream::connect(addr).await.expect("connect");
        asking.write_all(request.as_bytes()).await.expect("write");
        read_to_close(&mut asking).await
    }

    /// What the server sends before it closes `stream`.
    async fn read_to_close(stream: &mut TcpStream) -> String {
        let mut answer = Vec::new();
        let read = tokio::time::timeout(SMALL.lifetime, stream.read_to_end(&mut answer));
        read.await.expect("closed by the server").expect("read");
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test]
    async fn a_connection_that_never_sends_its_headers_is_closed_at_their_deadline() {
        let addr = serving().await;
        let mut silent = TcpStream::connect(addr).await.expect("connect");
        let started = std::time::Instant::now();
        read_to_close(&mut silent).await;
        let waited = started.elapsed();
        assert!(
            (SMALL.header_deadline / 2..SMALL.lifetime).contains(&waited),
            "closed after {waited:?}"
        );
    }

    #[tokio::test]
    async fn silent_connections_fill_the_slots_and_a_request_is_served_once_they_close() {
        let addr = serving().await;
        let mut silent = Vec::new();
        for _ in 0..SMALL.max_connections {
            silent.push(TcpStream::connect(addr).await.expect("connect"));
        }
        let started = std::time::Instant::now();
        let answer = ask(
            addr,
            "GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        // Served only once the silent ones had used up their deadline.
        assert!(started.elapsed() >= SMALL.header_deadline / 2);
    }

    #[tokio::test]
    async fn an_answer_in_flight_when_the_lifetime_ends_is_finished_and_the_connection_closed() {
        let addr = serving_within(Bounds {
            lifetime: Duration::from_millis(500),
            ..SMALL
        })
        .await;
        // Kept alive, the connection is closed once the answer is out.
        let answer = ask(addr, "GET /slow HTTP/1.1\r\nhost: x\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("slow"), "{answer}");
    }
}
