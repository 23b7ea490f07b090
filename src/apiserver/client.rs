//! The Kubernetes client every part of a replica shares: kube's stack,
//! minus its built-in retry, plus TCP keepalive, a User-Agent that names the
//! replica, and the trace context on every request.
//!
//! kube's client retries 429, 503 and 504 by itself (`Config::default_retry`:
//! up to 15 times, exponential from 5 ms, honouring `Retry-After`), below
//! everything this crate sees. For the write gateway that is a second retry
//! layer under its own ([`super::gateway::retry`]): a throttled write would hold its
//! turn through minutes of invisible backoff, unlogged, uncounted and outside
//! the QPS budget. In S2 at QPS 200 with 3 replicas (`loadtest/`), APF turned
//! away 20,829 requests and the last Job of the herd came 135 s after its
//! slot, where it came after 24 s with one replica. Each failure is now
//! handed to the layer that knows what the request was for: the gateway's
//! bounded backoff, the Lease's renew deadline, kube-runtime's watcher
//! backoff.
//!
//! kube's own builder has no TCP keepalive and no read timeout: a connection
//! whose peer goes silent (a partition, a dead API-server host behind a load
//! balancer) stays open forever. Keepalive finds such a connection dead
//! within [`KEEPALIVE_IDLE`] + [`KEEPALIVE_INTERVAL`] x [`KEEPALIVE_PROBES`]
//! (about a minute). Silence that keepalive cannot see (a peer that still
//! answers TCP but no longer HTTP, such as a stuck proxy or load balancer)
//! is found by deadlines: every request's response headers within
//! [`super::deadline::RESPONSE_HEADERS`] or the request's own wait
//! ([`super::deadline::headers`]: a load's whole LISTs), a gateway request's
//! whole exchange within its verb's deadline, a watch's body by its idle
//! timeout ([`super::watch`]).
//!
//! The write gateway's client can speak HTTP/2 (`--api-http2`,
//! [`Protocol::Http2`]), as client-go does: its writes then share one
//! multiplexed connection instead of one connection per request in
//! flight, at more CPU per firing (hyper's HTTP/2 client spawns a task
//! for each request's answer; docs/performance.md), so HTTP/1.1 stays the
//! default. HTTP/2 leaves a silently dead connection to its PINGs ([`PING_EVERY`], [`PING_TIMEOUT`], found dead
//! sooner than a write's deadline, [`super::deadline::WRITE`]), where an
//! HTTP/1.1 request timing out takes its connection with it. So the reads,
//! the watches and the Lease stay on HTTP/1.1: a renewal must find a dead
//! connection within its own deadline, and a watch is one long stream
//! either way; so does the admin CLI, whose port-forward is an HTTP/1.1
//! upgrade.

use super::deadline::headers::HeadersDeadlineLayer;
use super::fenced_socket::FencedConnector;
use super::write_fence::WriteFence;
use crate::telemetry::trace_span::TraceSpan;
use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{ClientBuilder, ConfigExt};
use kube::{Client, Config};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceBuilder;
use tower::util::{MapErrLayer, MapResponseLayer};

/// Idle time before the first keepalive probe.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// Time between unanswered probes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// Unanswered probes before the kernel gives the connection up.
pub const KEEPALIVE_PROBES: u32 = 3;
/// Connecting (TCP and TLS) gives up after this long, as kube's default.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// An HTTP/2 connection that has received nothing for this long is sent a
/// PING, busy or idle.
pub const PING_EVERY: Duration = Duration::from_secs(10);
/// A PING unanswered for this long closes its connection: a silent
/// connection is given up at most 20 s after its last frame, before a
/// write's deadline, so that the write's retry finds a new one.
pub const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// Which HTTP a client speaks to the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1: a connection per request in flight.
    Http1,
    /// HTTP/2, the only protocol offered in ALPN: the requests multiplexed
    /// on one connection. (Offering HTTP/1.1 beside it, a burst of
    /// requests before the first handshake ends would open a connection
    /// each, since the protocol is known only once one is open.) An API
    /// server URL of plain `http://` gets HTTP/1.1.
    Http2,
}

/// The User-Agent of every request: `shardcron/<version> (<os>/<arch>)
/// replica/<id>`, so that audit logs, APF and the API server's metrics can
/// tell the replicas apart from each other and from other clients of the
/// same ServiceAccount (kube's client sends none).
pub fn user_agent(replica_id: &str) -> String {
    format!(
        "shardcron/{} ({}/{}) replica/{replica_id}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH,
    )
}

/// Builds the client from `config`: kube's retry off, keepalive on, a
/// deadline on every response's headers, the User-Agent set; HTTP/1.1.
pub fn build(config: Config, user_agent: &str) -> Result<Client, kube::Error> {
    build_with(config, user_agent, Protocol::Http1, None)
}

/// Builds the write gateway's client: as [`build`]'s, on connections of its
/// own that write only while `fence` lets this replica write and abort
/// when it lapses ([`super::fenced_socket`]), in `protocol`. Lease
/// renewals must not go through it: they are what reopens the fence.
pub fn build_fenced(
    config: Config,
    user_agent: &str,
    protocol: Protocol,
    fence: Arc<dyn WriteFence>,
) -> Result<Client, kube::Error> {
    build_with(config, user_agent, protocol, Some(fence))
}

fn build_with(
    mut config: Config,
    user_agent: &str,
    protocol: Protocol,
    fence: Option<Arc<dyn WriteFence>>,
) -> Result<Client, kube::Error> {
    config.default_retry = false;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    let agent = http::HeaderValue::from_str(user_agent)
        .map_err(|e| kube::Error::HttpError(http::Error::from(e)))?;
    config.headers.push((http::header::USER_AGENT, agent));
    if config.proxy_url.is_some() {
        // kube's builder knows the proxy protocols; it has no keepalive, and
        // requests keep their deadlines.
        tracing::info!(
            "a proxy is configured: TCP keepalive to the API server is off, and HTTP/1.1 only"
        );
        if fence.is_some() {
            tracing::warn!(
                "a proxy is configured: the write fence is checked before each request, \
                 not at the socket (a replica frozen while its request is in the client \
                 may send it late)"
            );
        }
        let builder = ClientBuilder::try_from(config)?;
        return Ok(builder
            .with_layer(&MapResponseLayer::new(record_status))
            .with_layer(&HeadersDeadlineLayer::new(
                super::deadline::RESPONSE_HEADERS,
            ))
            .build());
    }
    let protocol = match protocol {
        Protocol::Http2 if config.cluster_url.scheme_str() != Some("https") => {
            tracing::info!("the API server's URL is not https: HTTP/1.1 only");
            Protocol::Http1
        }
        protocol => protocol,
    };
    let mut connector = HttpConnector::new();
    connector.enforce_http(false);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_keepalive(Some(KEEPALIVE_IDLE));
    connector.set_keepalive_interval(Some(KEEPALIVE_INTERVAL));
    connector.set_keepalive_retries(Some(KEEPALIVE_PROBES));
    connector.set_nodelay(true);
    match fence {
        None => {
            let connector = https_connector(&config, connector, protocol)?;
            finish(config, connector, protocol)
        }
        Some(fence) => {
            let connector =
                https_connector(&config, FencedConnector::new(connector, fence), protocol)?;
            finish(config, connector, protocol)
        }
    }
}

/// TLS over `connector` as kube's own (`rustls_https_connector_with_connector`),
/// offering in ALPN only the HTTP `protocol` says.
fn https_connector<H>(
    config: &Config,
    connector: H,
    protocol: Protocol,
) -> Result<HttpsConnector<H>, kube::Error> {
    let builder = HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    let builder = match &config.tls_server_name {
        Some(name) => {
            let name = name.clone().try_into().map_err(|e| {
                kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
            })?;
            builder.with_server_name_resolver(FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    Ok(match protocol {
        Protocol::Http1 => builder.enable_http1().wrap_connector(connector),
        Protocol::Http2 => builder.enable_http2().wrap_connector(connector),
    })
}

/// kube's stack above the connections.
fn finish<C>(config: Config, connector: C, protocol: Protocol) -> Result<Client, kube::Error>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    let http: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .http2_only(protocol == Protocol::Http2)
            .timer(TokioTimer::new())
            .http2_keep_alive_interval(PING_EVERY)
            .http2_keep_alive_timeout(PING_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .layer(MapResponseLayer::new(record_status))
        .layer(HeadersDeadlineLayer::new(super::deadline::RESPONSE_HEADERS))
        .layer(MapErrLayer::new(tower::BoxError::from))
        .service(http);
    Ok(Client::new(service, config.default_namespace))
}

/// Records the status code kube-apiserver answered on the request's span
/// (`kube.request`, see the gateway): kube's typed calls return the object,
/// not the code, so a create's 201 would otherwise be reported as 200. (The
/// answer is awaited in the request's task, where its span is current; the
/// request itself is sent from kube's buffer task, so its `traceparent` is
/// added before: [`traced`].)
fn record_status<B>(response: http::Response<B>) -> http::Response<B> {
    TraceSpan::current().set(
        "http.response.status_code",
        response.status().as_str().to_owned(),
    );
    response
}

/// `request` with its span's `traceparent` (the code running now is the
/// request's span), for whoever builds a request to add: not a layer of
/// the client, because kube's client hands each request to a buffer's
/// task, where no span is current.
pub fn traced<B>(
    request: Result<http::Request<B>, kube::core::request::Error>,
) -> Result<http::Request<B>, kube::Error> {
    request
        .map(|request| TraceSpan::current().inject(request))
        .map_err(kube::Error::BuildRequest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A loopback server that answers every request as APF does when it
    /// turns one away, counting the requests.
    async fn throttling_server() -> (String, Arc<AtomicUsize>, Arc<std::sync::Mutex<String>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = requests.clone();
        let seen = Arc::new(std::sync::Mutex::new(String::new()));
        let last = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let counted = counted.clone();
                let last = last.clone();
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    loop {
                        match socket.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                *last.lock().unwrap() =
                                    String::from_utf8_lossy(&buffer[..n]).into_owned();
                            }
                        }
                        counted.fetch_add(1, Ordering::SeqCst);
                        let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429}"#;
                        let response = format!(
                            "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if socket.write_all(response.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (format!("http://{address}"), requests, seen)
    }

    /// A TLS server on loopback offering HTTP/2 and HTTP/1.1 in ALPN, as
    /// kube-apiserver does, answering every request with a Namespace;
    /// records the protocol each connection agreed on.
    async fn tls_server() -> (Config, Arc<std::sync::Mutex<Vec<String>>>) {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
        let der = certified.cert.der().to_vec();
        let key = PrivateKeyDer::try_from(certified.signing_key.serialize_der()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![CertificateDer::from(der.clone())], key)
            .unwrap();
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let agreed = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = agreed.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let Ok(stream) = acceptor.accept(socket).await else {
                    continue;
                };
                let alpn = stream.get_ref().1.alpn_protocol().unwrap_or_default();
                let alpn = String::from_utf8_lossy(alpn).into_owned();
                seen.lock().unwrap().push(alpn.clone());
                let answer = hyper::service::service_fn(|_request| async {
                    let body =
                        r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"default"}}"#;
                    let response = http::Response::builder()
                        .header("content-type", "application/json")
                        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                        .unwrap();
                    Ok::<_, std::convert::Infallible>(response)
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                tokio::spawn(async move {
                    if alpn == "h2" {
                        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                            .serve_connection(io, answer)
                            .await;
                    } else {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(io, answer)
                            .await;
                    }
                });
            }
        });
        let mut config = Config::new(format!("https://{address}").parse().unwrap());
        config.root_cert = Some(vec![der]);
        (config, agreed)
    }

    struct Open;

    impl WriteFence for Open {
        fn valid_for(&self) -> Option<Duration> {
            Some(Duration::from_secs(60))
        }
    }

    /// Ten requests at once; the protocol each connection agreed in ALPN.
    async fn ten_gets_at_once(protocol: Protocol) -> Vec<String> {
        let (config, agreed) = tls_server().await;
        let fence: Arc<dyn WriteFence> = Arc::new(Open);
        let client = build_fenced(config, &user_agent("test"), protocol, fence).unwrap();
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
        let gets = (0..10).map(|_| namespaces.get("default"));
        for answer in futures::future::join_all(gets).await {
            assert_eq!(answer.unwrap().metadata.name.as_deref(), Some("default"));
        }
        agreed.lock().unwrap().clone()
    }

    #[tokio::test]
    async fn http2_multiplexes_the_requests_on_one_connection() {
        assert_eq!(ten_gets_at_once(Protocol::Http2).await, ["h2"]);
        // HTTP/1.1 offers nothing in ALPN, as kube's own connector.
        let http1 = ten_gets_at_once(Protocol::Http1).await;
        assert!(http1.iter().all(String::is_empty), "{http1:?}");
    }

    #[tokio::test]
    async fn a_throttled_request_fails_at_once_for_the_caller_to_decide() {
        let (url, requests, last) = throttling_server().await;
        let config = Config::new(url.parse().unwrap());
        assert!(
            config.default_retry,
            "kube's default, which build turns off"
        );
        let client = build(config, &user_agent("test")).unwrap();
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
        let started = std::time::Instant::now();
        match namespaces.get("default").await {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 429),
            other => panic!("expected the 429, got {other:?}"),
        }
        assert_eq!(requests.load(Ordering::SeqCst), 1, "sent once, not retried");
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        let request = last.lock().unwrap().to_ascii_lowercase();
        assert!(
            request.contains(&format!(
                "user-agent: shardcron/{} (",
                env!("CARGO_PKG_VERSION")
            )) && request.contains(" replica/test\r\n"),
            "the request names itself: {request}"
        );
    }
}
