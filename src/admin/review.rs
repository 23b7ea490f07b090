//! Who a caller is and what it may do, asked of the API server as an
//! extension API server asks it: a TokenReview for the caller's bearer
//! token, then a SubjectAccessReview for what it asks (a resource, or a
//! non-resource URL such as `/metrics`). The replica's ServiceAccount needs
//! `create` on both (deploy/kubernetes/rbac.yaml). Used by the admin API
//! and the metrics endpoint, which turn a [`Refusal`] into their own
//! protocol's answer.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::Semaphore;

/// How long a TokenReview or a SubjectAccessReview may take.
pub const REVIEW_DEADLINE: Duration = Duration::from_secs(10);

/// Why a caller was not let through. The messages never carry the token.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Refusal {
    /// No valid token, or one not meant for us.
    #[error("{0}")]
    Unauthenticated(String),
    /// A valid caller that may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// The API server did not answer in time, or the replica is stopping.
    #[error("{0}")]
    Unavailable(String),
}

/// What a SubjectAccessReview is asked about.
#[derive(Debug, Clone)]
pub enum Asked {
    Resource(Box<ResourceAttributes>),
    /// A URL outside the API's resources, such as `/metrics` (`get`).
    Url(NonResourceAttributes),
}

/// The token of an `Authorization: Bearer <token>` header's value.
pub fn bearer(authorization: Option<&str>) -> Result<&str, Refusal> {
    let value = authorization.ok_or_else(|| {
        Refusal::Unauthenticated("no bearer token (authorization: Bearer ...)".to_owned())
    })?;
    value
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|token| !token.is_empty())
        .ok_or_else(|| {
            Refusal::Unauthenticated("the authorization header is not a bearer token".to_owned())
        })
}

/// Asks the API server about callers, at most `concurrency` reviews at a
/// time (each caller costs the API server one or two; anyone who reaches
/// the port may ask, token or not, so the rest wait their turn).
#[derive(Clone)]
pub struct Reviewer {
    client: Client,
    slots: Arc<Semaphore>,
    /// The audiences a caller's token must be meant for; none: the API
    /// server's own.
    audiences: Vec<String>,
}

impl Reviewer {
    pub fn new(client: Client, concurrency: usize, audiences: Vec<String>) -> Self {
        Self {
            client,
            slots: Arc::new(Semaphore::new(concurrency)),
            audiences,
        }
    }

    /// The user behind `token` (TokenReview), if the API server accepts it
    /// for one of our audiences.
    pub async fn authenticate(&self, token: &str) -> Result<UserInfo, Refusal> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
            },
            ..TokenReview::default()
        };
        let answer = self.review("TokenReview", &review).await?;
        let status = answer.status.unwrap_or_default();
        let why = match (status.authenticated, status.user) {
            (Some(true), Some(user)) if meant_for(&self.audiences, status.audiences.as_deref()) => {
                return Ok(user);
            }
            (Some(true), Some(_)) => {
                " (the API server named none of the audiences asked for)".to_owned()
            }
            _ => status
                .error
                .filter(|e| !e.is_empty())
                .map(|e| format!(": {e}"))
                .unwrap_or_default(),
        };
        let hint = match self.audiences.first() {
            Some(audience) => format!(
                "; this API takes tokens meant for {}: make one with `kubectl create token SERVICEACCOUNT --audience {audience}` and pass it with --token-file",
                self.audiences.join(", ")
            ),
            None => String::new(),
        };
        Err(Refusal::Unauthenticated(format!(
            "the token was not accepted{why}{hint}"
        )))
    }

    /// Whether `user` may do what is `asked` (SubjectAccessReview);
    /// `described` names it in the refusal.
    pub async fn authorize(
        &self,
        user: &UserInfo,
        asked: Asked,
        described: &str,
    ) -> Result<(), Refusal> {
        let (resource_attributes, non_resource_attributes) = match asked {
            Asked::Resource(attributes) => (Some(*attributes), None),
            Asked::Url(attributes) => (None, Some(attributes)),
        };
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                groups: user.groups.clone(),
                uid: user.uid.clone(),
                extra: user.extra.clone(),
                resource_attributes,
                non_resource_attributes,
            },
            ..SubjectAccessReview::default()
        };
        let answer = self.review("SubjectAccessReview", &review).await?;
        let status = answer.status.unwrap_or_default();
        if status.allowed {
            return Ok(());
        }
        let name = user.username.as_deref().unwrap_or_default();
        let why = status.reason.filter(|r| !r.is_empty());
        Err(Refusal::Forbidden(format!(
            "{name} may not {described}{}",
            why.map(|r| format!(": {r}")).unwrap_or_default()
        )))
    }

    /// Creates a review within [`REVIEW_DEADLINE`], once a slot is free;
    /// the API server's answer has its status.
    async fn review<K>(&self, kind: &str, review: &K) -> Result<K, Refusal>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::Serialize
            + serde::de::DeserializeOwned,
        K::DynamicType: Default,
    {
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|_| Refusal::Unavailable("the replica is shutting down".to_owned()))?;
        let api: Api<K> = Api::all(self.client.clone());
        tokio::time::timeout(REVIEW_DEADLINE, api.create(&PostParams::default(), review))
            .await
            .map_err(|_| Refusal::Unavailable(format!("the {kind} timed out")))?
            .map_err(|error| Refusal::Unavailable(format!("{kind}: {error}")))
    }
}

/// Whether a token the API server authenticated is meant for one of
/// `ours`, by the audiences it answered with (`status.audiences`): an
/// authenticator that ignores the audiences asked for (a webhook may)
/// answers none, which is not enough when we asked for some.
fn meant_for(ours: &[String], answered: Option<&[String]>) -> bool {
    ours.is_empty()
        || answered
            .unwrap_or_default()
            .iter()
            .any(|audience| ours.contains(audience))
}

#[cfg(test)]
mod tests {
    use super::{Refusal, bearer, meant_for};

    #[test]
    fn only_a_bearer_token_is_read() {
        let refused = |header| matches!(bearer(header), Err(Refusal::Unauthenticated(_)));
        assert!(refused(None));
        assert!(refused(Some("Basic dXNlcjpwYXNz")));
        assert!(refused(Some("Bearer  ")));
        assert!(refused(Some("bearer abc")));
        assert_eq!(bearer(Some("Bearer abc.def")), Ok("abc.def"));
    }

    #[test]
    fn a_token_counts_only_for_an_audience_the_api_server_answered_with() {
        let ours = ["shardcron-admin".to_owned()];
        let answered = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // No audience asked for: the API server's own, whatever it says.
        assert!(meant_for(&[], None));
        assert!(meant_for(&ours, Some(&answered(&["shardcron-admin"]))));
        assert!(meant_for(
            &ours,
            Some(&answered(&[
                "https://kubernetes.default.svc",
                "shardcron-admin"
            ]))
        ));
        assert!(!meant_for(
            &ours,
            Some(&answered(&["https://kubernetes.default.svc"]))
        ));
        assert!(!meant_for(&ours, Some(&[])));
        assert!(!meant_for(&ours, None));
    }
}
