//! Every answer's headers within a deadline: [`RESPONSE_HEADERS`] unless
//! the request carries its own ([`ResponseHeadersWithin`]).
//!
//! A silent API server (a stuck proxy, a dead host behind a load
//! balancer) is found by this deadline where keepalive cannot see it. But
//! kube-apiserver answers a LIST's headers only once it has gathered,
//! converted and sized every item: at a cold start of S7 (10^6 CronJobs,
//! four replicas' loads at once) lists of about 130,000 CronJobs went past
//! 30 s, and each such load failed and was read again whole. A whole LIST
//! of a load therefore waits as long as the server's own request timeout,
//! after which the server gives the request up itself.
//!
//! [`RESPONSE_HEADERS`]: super::RESPONSE_HEADERS

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// A request's own wait for its response headers, in its extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHeadersWithin(pub Duration);

/// The layer of [`HeadersDeadline`]: `default` for a request that names
/// no wait of its own.
#[derive(Debug, Clone, Copy)]
pub struct HeadersDeadlineLayer {
    default: Duration,
}

impl HeadersDeadlineLayer {
    pub fn new(default: Duration) -> Self {
        Self { default }
    }
}

impl<S> tower::Layer<S> for HeadersDeadlineLayer {
    type Service = HeadersDeadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        HeadersDeadline {
            inner,
            default: self.default,
        }
    }
}

/// `inner`, failing with tower's `Elapsed` (as its `Timeout` does) when
/// the answer's headers do not come within the request's wait.
#[derive(Debug, Clone)]
pub struct HeadersDeadline<S> {
    inner: S,
    default: Duration,
}

type Answer<R> = Pin<Box<dyn Future<Output = Result<R, tower::BoxError>> + Send>>;

impl<S, B> tower::Service<http::Request<B>> for HeadersDeadline<S>
where
    S: tower::Service<http::Request<B>>,
    S::Error: Into<tower::BoxError>,
    S::Response: Send + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = tower::BoxError;
    type Future = Answer<S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let within =
            (request.extensions().get::<ResponseHeadersWithin>()).map_or(self.default, |own| own.0);
        let answer = self.inner.call(request);
        Box::pin(async move {
            match tokio::time::timeout(within, answer).await {
                Ok(answered) => answered.map_err(Into::into),
                Err(_) => Err(Box::new(tower::timeout::error::Elapsed::new()) as tower::BoxError),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer as _, ServiceExt as _};

    /// A server that answers after `after`.
    fn answering_after(
        after: Duration,
    ) -> impl tower::Service<
        http::Request<()>,
        Response = &'static str,
        Error = std::convert::Infallible,
        Future: Send,
    > + Clone {
        tower::service_fn(move |_: http::Request<()>| async move {
            tokio::time::sleep(after).await;
            Ok::<_, std::convert::Infallible>("answered")
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_waits_its_own_time_for_the_headers_else_the_default() {
        let layer = HeadersDeadlineLayer::new(Duration::from_secs(30));
        let slow = layer.layer(answering_after(Duration::from_secs(45)));
        let refused = slow.clone().oneshot(http::Request::new(())).await;
        assert!(
            refused.is_err_and(|e| e.is::<tower::timeout::error::Elapsed>()),
            "past the default wait: tower's Elapsed, as its Timeout gives"
        );
        let mut patient = http::Request::new(());
        patient
            .extensions_mut()
            .insert(ResponseHeadersWithin(Duration::from_secs(60)));
        assert_eq!(slow.clone().oneshot(patient).await.ok(), Some("answered"));
        let mut hasty = http::Request::new(());
        hasty
            .extensions_mut()
            .insert(ResponseHeadersWithin(Duration::from_secs(10)));
        assert!(slow.oneshot(hasty).await.is_err());
    }
}
