//! Counting what a watch receives: a client whose response bodies add
//! their bytes to a counter, so that `shardcron_watch_bytes_total` shows
//! what each watch costs the network and the decoder (sharding is meant to
//! divide it).

use bytes::Bytes;
use http_body::Frame;
use kube::Client;
use kube::client::Body;
use prometheus_client::metrics::counter::Counter;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A client that sends through `client` and adds the bytes of every
/// response body to `received`.
pub fn client_counting_bytes(client: &Client, received: Counter) -> Client {
    let inner = client.clone();
    let service = tower::service_fn(move |request: http::Request<Body>| {
        let inner = inner.clone();
        let received = received.clone();
        async move {
            let response = inner.send(request).await?;
            Ok::<_, kube::Error>(response.map(|body| CountedBody { body, received }))
        }
    });
    Client::new(service, client.default_namespace())
}

struct CountedBody {
    body: Body,
    received: Counter,
}

impl http_body::Body for CountedBody {
    type Data = Bytes;
    type Error = kube::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            self.received.inc_by(data.len() as u64);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::scripted::{self, Answer};

    #[tokio::test]
    async fn every_byte_of_a_response_is_counted() {
        let (client, _) = scripted::client(|_| {
            Answer::Json(
                200,
                serde_json::json!({"kind": "Status", "status": "Success"}),
            )
        });
        let received = Counter::default();
        let counted = client_counting_bytes(&client, received.clone());
        let text = counted
            .request_text(http::Request::get("/version").body(Vec::new()).unwrap())
            .await
            .expect("answered");
        assert_eq!(received.get(), text.len() as u64);
    }
}
