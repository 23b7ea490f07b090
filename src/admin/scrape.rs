//! `/metrics` and `/metrics/cronjobs` for a Prometheus in the cluster,
//! served as Kubernetes serves its own components' metrics: over TLS
//! ([`super::https`]), each scrape's bearer token checked with a
//! TokenReview and the path with a SubjectAccessReview on the non-resource
//! URL (`get /metrics/cronjobs`), the answers kept briefly
//! ([`super::review_cache`]). The per-CronJob series name tenants'
//! namespaces and CronJobs, so only a caller RBAC lets `get` that URL
//! reads them (deploy/monitoring/prometheus-rbac.yaml grants it to a
//! Prometheus ServiceAccount; docs/operations.md).

use super::review_cache::{ALLOWED_FOR, CAPACITY, FORBIDDEN_FOR, ReviewCache};
use crate::admin::review::{self, Asked, Refusal, Reviewer};
use crate::telemetry::Metrics;
use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::api::authorization::v1::NonResourceAttributes;
use kube::Client;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// At most this many reviews at once for scrapes, per replica.
pub const MAX_REVIEWS: usize = 8;
/// A scrape is answered or refused within this (waiting for a review slot
/// included): Prometheus' own default scrape timeout is 10 s.
pub const CHECK_DEADLINE: Duration = Duration::from_secs(10);

/// The paths served, each authorized on its own.
pub const ALL_SERIES: &str = "/metrics";
pub const CRONJOB_SERIES: &str = "/metrics/cronjobs";

/// A scrape's verdict as kept: by the token's SHA-256 and the path.
type Key = ([u8; 32], &'static str);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Allowed,
    Forbidden(String),
}

/// Who may scrape: the reviews, and the answers kept.
#[derive(Clone)]
pub struct ScrapeAccess {
    reviewer: Reviewer,
    kept: Arc<Mutex<ReviewCache<Key, Verdict>>>,
}

impl ScrapeAccess {
    pub fn new(client: Client) -> Self {
        Self {
            reviewer: Reviewer::new(client, MAX_REVIEWS, Vec::new()),
            kept: Arc::new(Mutex::new(ReviewCache::new(CAPACITY))),
        }
    }

    /// Whether the caller whose `authorization` header this is may `get`
    /// `path`.
    pub async fn check(
        &self,
        authorization: Option<&str>,
        path: &'static str,
    ) -> Result<(), Refusal> {
        let token = review::bearer(authorization)?;
        let key = (digest(token), path);
        let kept = self
            .kept
            .lock()
            .ok()
            .and_then(|kept| kept.get(&key, Instant::now()));
        let verdict = match kept {
            Some(verdict) => verdict,
            None => {
                let verdict = self.review(token, path).await?;
                let ttl = match verdict {
                    Verdict::Allowed => ALLOWED_FOR,
                    Verdict::Forbidden(_) => FORBIDDEN_FOR,
                };
                if let Ok(mut kept) = self.kept.lock() {
                    kept.put(key, verdict.clone(), Instant::now(), ttl);
                }
                verdict
            }
        };
        match verdict {
            Verdict::Allowed => Ok(()),
            Verdict::Forbidden(why) => Err(Refusal::Forbidden(why)),
        }
    }

    /// Asks the API server; an unknown token or an unanswered review is
    /// not kept (so made-up tokens cannot crowd real ones out).
    async fn review(&self, token: &str, path: &'static str) -> Result<Verdict, Refusal> {
        let user = self.reviewer.authenticate(token).await?;
        let asked = Asked::Url(NonResourceAttributes {
            path: Some(path.to_owned()),
            verb: Some("get".to_owned()),
        });
        match self
            .reviewer
            .authorize(&user, asked, &format!("get {path}"))
            .await
        {
            Ok(()) => Ok(Verdict::Allowed),
            Err(Refusal::Forbidden(why)) => Ok(Verdict::Forbidden(why)),
            Err(other) => Err(other),
        }
    }
}

fn digest(token: &str) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, token.as_bytes()).as_ref());
    out
}

/// The two paths, each behind `access`.
pub fn router(metrics: Arc<Metrics>, access: ScrapeAccess) -> Router {
    let all = (metrics.clone(), access.clone());
    Router::new()
        .route(
            ALL_SERIES,
            get(move |headers: HeaderMap| {
                let (metrics, access) = all.clone();
                async move { answer(&access, &headers, ALL_SERIES, || metrics.encode()).await }
            }),
        )
        .route(
            CRONJOB_SERIES,
            get(move |headers: HeaderMap| {
                let (metrics, access) = (metrics.clone(), access.clone());
                async move {
                    answer(&access, &headers, CRONJOB_SERIES, || {
                        metrics.encode_cronjobs()
                    })
                    .await
                }
            }),
        )
}

async fn answer(
    access: &ScrapeAccess,
    headers: &HeaderMap,
    path: &'static str,
    body: impl FnOnce() -> String,
) -> Response {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .map(|value| value.to_str().unwrap_or_default());
    let checked = tokio::time::timeout(CHECK_DEADLINE, access.check(authorization, path))
        .await
        .unwrap_or_else(|_| {
            Err(Refusal::Unavailable(
                "the scrape's review did not finish in time".to_owned(),
            ))
        });
    match checked {
        Ok(()) => crate::telemetry::http::exposition(body()),
        Err(refusal) => refused(refusal),
    }
}

/// A refusal as Kubernetes' components answer one: 401 with a challenge,
/// 403, or 503.
fn refused(refusal: Refusal) -> Response {
    match refusal {
        Refusal::Unauthenticated(why) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            format!("{why}\n"),
        )
            .into_response(),
        Refusal::Forbidden(why) => (StatusCode::FORBIDDEN, format!("{why}\n")).into_response(),
        Refusal::Unavailable(why) => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::digest;

    #[test]
    fn a_token_is_kept_as_its_sha256_only() {
        // echo -n abc | sha256sum
        let expected = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        let hex: String = digest("abc").iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, expected);
    }
}
