//! The write fence where the bytes are written: the connections of the
//! gateway's own client refuse to write once this replica's fence has
//! lapsed, and abort (a TCP reset, whatever is still queued in the kernel
//! discarded) the moment it lapses.
//!
//! The gateway asks the fence before it hands a request to the client, and
//! drops the request when the fence lapses; between the two, the request
//! is the client's (hyper's connection tasks, TLS, the kernel's send
//! buffer), and a process frozen there (SIGSTOP, a paused VM) used to send
//! it on waking, after a peer had taken the CronJob over: the churn test
//! saw two slots run twice that way. Here the check is the last thing
//! before each `write` to the socket, on the process's own thread, so a
//! frozen process wakes, asks, and writes nothing. And bytes written
//! before the lapse but still queued (a silent network retransmitting
//! them) are thrown away by the abort instead of reaching the API server
//! when the network heals.
//!
//! What stays open: a freeze between the check and the `write` call (no
//! await between them, a few instructions), and bytes already on the wire
//! that a network delays past the margin between the renew deadline and
//! the Lease duration (5 s by default). Lease renewals go through another
//! client: they are what reopens the fence.

use super::write_fence::WriteFence;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// Wraps a TCP connector: each connection it makes is a [`FencedStream`].
#[derive(Clone)]
pub struct FencedConnector<C> {
    inner: C,
    fence: Arc<dyn WriteFence>,
}

impl<C> FencedConnector<C> {
    pub fn new(inner: C, fence: Arc<dyn WriteFence>) -> Self {
        FencedConnector { inner, fence }
    }
}

impl<C> tower::Service<http::Uri> for FencedConnector<C>
where
    C: tower::Service<http::Uri, Response = TokioIo<TcpStream>>,
    C::Future: Send + 'static,
{
    type Response = FencedStream;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<FencedStream, C::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let fence = self.fence.clone();
        Box::pin(async move { Ok(FencedStream::new(connecting.await?, fence)) })
    }
}

/// A TCP connection that writes only while the fence lets this replica
/// write, and aborts when it lapses.
pub struct FencedStream {
    io: TokioIo<TcpStream>,
    fence: Arc<dyn WriteFence>,
    /// Wakes the connection when the fence, as known at its last poll,
    /// lapses: an idle or waiting connection is polled then and aborts.
    expiry: Pin<Box<Sleep>>,
    aborted: bool,
}

impl FencedStream {
    fn new(io: TokioIo<TcpStream>, fence: Arc<dyn WriteFence>) -> Self {
        FencedStream {
            io,
            fence,
            expiry: Box::pin(tokio::time::sleep(Duration::ZERO)),
            aborted: false,
        }
    }

    /// `Err` once the fence has lapsed (the connection then aborted);
    /// otherwise arms the wake-up for the fence's expiry as known now.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if !self.aborted {
            match self.fence.valid_for() {
                Some(left) => {
                    self.expiry.as_mut().reset(Instant::now() + left);
                    // Registers the waker. Ready only if the deadline passed
                    // between the two lines: then look again at once.
                    if self.expiry.as_mut().poll(cx).is_ready() {
                        cx.waker().wake_by_ref();
                    }
                    return Ok(());
                }
                None => {
                    self.aborted = true;
                    // Closed with a zero linger, the socket sends a reset
                    // and the kernel drops what it still holds to send.
                    if let Err(e) = self.io.inner().set_zero_linger() {
                        tracing::debug!(error = %e, "could not set a zero linger on a fenced connection");
                    }
                    tracing::debug!("the write fence lapsed: the connection is aborted");
                }
            }
        }
        Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "the write fence lapsed: this replica may not write",
        ))
    }
}

impl Connection for FencedStream {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

impl Read for FencedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl Write for FencedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.check(cx).is_err() {
            // Nothing more is sent; dropping the socket resets it.
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper_util::client::legacy::connect::HttpConnector;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::AsyncReadExt;

    /// A fence a test opens and shuts by hand, valid for a minute at a time.
    #[derive(Default)]
    struct Switch(AtomicBool);

    impl WriteFence for Switch {
        fn valid_for(&self) -> Option<Duration> {
            self.0
                .load(Ordering::SeqCst)
                .then_some(Duration::from_secs(60))
        }
    }

    /// A fence that lets this replica write until a time on tokio's clock.
    struct Until(Mutex<Instant>);

    impl WriteFence for Until {
        fn valid_for(&self) -> Option<Duration> {
            let left = self
                .0
                .lock()
                .ok()?
                .saturating_duration_since(Instant::now());
            Some(left).filter(|left| !left.is_zero())
        }
    }

    /// A client through the fenced connector, and a server that records
    /// every byte it receives and never answers.
    async fn client_and_silent_server(
        fence: Arc<dyn WriteFence>,
        http2: bool,
    ) -> (
        hyper_util::client::legacy::Client<FencedConnector<HttpConnector>, String>,
        String,
        tokio::sync::mpsc::Receiver<Vec<u8>>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}/", listener.local_addr().unwrap());
        let (received, bytes) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let received = received.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0; 4096];
                    // Ends with the connection: EOF or a reset.
                    loop {
                        match socket.read(&mut buf).await {
                            Ok(0) => {
                                let _ = received.send(b"<closed>".to_vec()).await;
                                return;
                            }
                            Ok(n) => {
                                let _ = received.send(buf[..n].to_vec()).await;
                            }
                            Err(_) => {
                                let _ = received.send(b"<reset>".to_vec()).await;
                                return;
                            }
                        }
                    }
                });
            }
        });
        let connector = FencedConnector::new(HttpConnector::new(), fence);
        // HTTP/2 with prior knowledge: on TLS, ALPN would choose it.
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .http2_only(http2)
                .build(connector);
        (client, address, bytes)
    }

    fn post(address: &str) -> http::Request<String> {
        http::Request::post(address)
            .body("create the Job".to_owned())
            .unwrap()
    }

    #[tokio::test]
    async fn a_lapsed_fence_lets_no_byte_out() {
        for http2 in [false, true] {
            a_lapsed_fence_lets_no_byte_out_in(http2).await;
        }
    }

    async fn a_lapsed_fence_lets_no_byte_out_in(http2: bool) {
        let fence = Arc::new(Switch::default());
        let (client, address, mut bytes) = client_and_silent_server(fence.clone(), http2).await;
        let failure = client.request(post(&address)).await.unwrap_err();
        assert!(
            format!("{:?}", failure).contains("write fence lapsed"),
            "{failure:?}"
        );
        // The server saw the connection, and not a byte of the request.
        assert_eq!(bytes.recv().await.as_deref(), Some(&b"<reset>"[..]));
        assert!(bytes.try_recv().is_err());
    }

    #[tokio::test]
    async fn an_open_fence_writes_and_its_lapse_aborts_the_connection() {
        an_open_fence_writes_and_its_lapse_aborts_the_connection_in(false, "POST / HTTP/1.1").await;
    }

    /// HTTP/2: the connection all requests share is aborted at the lapse,
    /// its PINGs and window updates included.
    #[tokio::test]
    async fn an_open_fence_writes_and_its_lapse_aborts_the_http2_connection() {
        an_open_fence_writes_and_its_lapse_aborts_the_connection_in(true, "PRI * HTTP/2.0").await;
    }

    async fn an_open_fence_writes_and_its_lapse_aborts_the_connection_in(
        http2: bool,
        first_line: &str,
    ) {
        let fence = Arc::new(Until(Mutex::new(Instant::now() + Duration::from_secs(2))));
        let (client, address, mut bytes) = client_and_silent_server(fence.clone(), http2).await;
        let started = Instant::now();
        let answer = tokio::spawn(async move { client.request(post(&address)).await });
        let sent = bytes.recv().await.unwrap();
        assert!(
            String::from_utf8_lossy(&sent).starts_with(first_line),
            "{sent:?}"
        );
        // The server never answers: at the lapse the connection is reset,
        // not left to carry bytes later, and the request fails.
        let mut last = bytes.recv().await.unwrap();
        while last != b"<reset>" && last != b"<closed>" {
            last = bytes.recv().await.unwrap();
        }
        assert_eq!(last, b"<reset>");
        assert!(answer.await.unwrap().is_err());
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(1_900) && took < Duration::from_secs(10),
            "{took:?}"
        );
    }
}
