//! The Kubernetes client every part of a replica shares: kube's defaults,
//! minus its built-in retry, plus the trace context on every request.
//!
//! kube's client retries 429, 503 and 504 by itself (`Config::default_retry`:
//! up to 15 times, exponential from 5 ms, honouring `Retry-After`), below
//! everything this crate sees. For the write gateway that is a second retry
//! layer under its own ([`super::retry`]): a throttled write would hold its
//! turn through minutes of invisible backoff, unlogged, uncounted and outside
//! the QPS budget. In S2 at QPS 200 with 3 replicas (`loadtest/`), APF turned
//! away 20,829 requests and the last Job of the herd came 135 s after its
//! slot, where it came after 24 s with one replica. Each failure is now
//! handed to the layer that knows what the request was for: the gateway's
//! bounded backoff, the Lease's renew deadline, kube-runtime's watcher
//! backoff.

use crate::telemetry::traces;
use kube::client::ClientBuilder;
use kube::{Client, Config};
use tower::util::MapRequestLayer;

/// Builds the client from `config`, kube's built-in retry turned off.
pub fn build(mut config: Config) -> Result<Client, kube::Error> {
    config.default_retry = false;
    let builder = ClientBuilder::try_from(config)?;
    Ok(builder
        .with_layer(&MapRequestLayer::new(traces::inject::<kube::client::Body>))
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A loopback server that answers every request as APF does when it
    /// turns one away, counting the requests.
    async fn throttling_server() -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = requests.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    loop {
                        match socket.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
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
        (format!("http://{address}"), requests)
    }

    #[tokio::test]
    async fn a_throttled_request_fails_at_once_for_the_caller_to_decide() {
        let (url, requests) = throttling_server().await;
        let config = Config::new(url.parse().unwrap());
        assert!(
            config.default_retry,
            "kube's default, which build turns off"
        );
        let client = build(config).unwrap();
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
        let started = std::time::Instant::now();
        match namespaces.get("default").await {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 429),
            other => panic!("expected the 429, got {other:?}"),
        }
        assert_eq!(requests.load(Ordering::SeqCst), 1, "sent once, not retried");
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }
}
