//! Who may call the admin API, decided as Kubernetes decides it: the
//! caller's bearer token is checked with a TokenReview, then the call, as
//! a [`Action`] on a virtual resource of [`GROUP`], with a
//! SubjectAccessReview. So `kubectl auth can-i get
//! cronjobs.admin.shardcron.io -n team-a` answers for the API, and RBAC
//! grants it (docs/admin-api.md).

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use std::time::Duration;
use tonic::Status;
use tonic::metadata::MetadataMap;

/// The API group of the virtual resources: nothing is served there; RBAC
/// rules name it.
pub const GROUP: &str = "admin.shardcron.io";

/// How long a TokenReview or a SubjectAccessReview may take.
const REVIEW_DEADLINE: Duration = Duration::from_secs(10);

/// At most this many calls are being checked at once per replica: each
/// costs the API server two reviews, and anyone who reaches the port can
/// ask, token or not. More wait for a slot (within the call's deadline).
pub const MAX_CHECKS: usize = 8;

/// What a call asks to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Read the ring: `get` on the cluster-scoped `rings`.
    ReadRing,
    /// Read the write gateway's queues: `get` on the cluster-scoped
    /// `queues` (they name tenants' namespaces).
    ReadQueues,
    /// Read one CronJob's live state: `get` on `cronjobs` in its namespace.
    ReadCronJob { namespace: String, name: String },
}

impl Action {
    /// The SubjectAccessReview's attributes for it.
    pub fn attributes(&self) -> ResourceAttributes {
        let (resource, namespace, name) = match self {
            Action::ReadRing => ("rings", None, None),
            Action::ReadQueues => ("queues", None, None),
            Action::ReadCronJob { namespace, name } => {
                ("cronjobs", Some(namespace.clone()), Some(name.clone()))
            }
        };
        ResourceAttributes {
            group: Some(GROUP.to_owned()),
            resource: Some(resource.to_owned()),
            verb: Some("get".to_owned()),
            namespace,
            name,
            ..ResourceAttributes::default()
        }
    }

    /// How a refusal names it.
    fn describe(&self) -> String {
        match self {
            Action::ReadRing => format!("get rings.{GROUP}"),
            Action::ReadQueues => format!("get queues.{GROUP}"),
            Action::ReadCronJob { namespace, name } => {
                format!("get cronjobs.{GROUP} {name:?} in namespace {namespace:?}")
            }
        }
    }
}

/// The bearer token of a call: `authorization: Bearer <token>`.
pub fn bearer(metadata: &MetadataMap) -> Result<&str, Status> {
    let header = metadata
        .get("authorization")
        .ok_or_else(|| Status::unauthenticated("no bearer token (authorization: Bearer ...)"))?;
    header
        .to_str()
        .ok()
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|token| !token.is_empty())
        .ok_or_else(|| Status::unauthenticated("the authorization header is not a bearer token"))
}

/// Checks calls against the API server, as the controller's
/// ServiceAccount (it needs `create` on tokenreviews and
/// subjectaccessreviews: deploy/kubernetes/rbac.yaml).
#[derive(Clone)]
pub struct Access {
    client: Client,
    checks: std::sync::Arc<tokio::sync::Semaphore>,
    /// The audiences a caller's token must be meant for; none: the API
    /// server's own (any token kubectl would send, which a replica could
    /// then replay to the API server).
    audiences: Vec<String>,
}

impl Access {
    pub fn new(client: Client, audiences: Vec<String>) -> Self {
        Self {
            client,
            checks: std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CHECKS)),
            audiences,
        }
    }

    /// The caller, if its token is valid and it may do `action`.
    pub async fn check(&self, metadata: &MetadataMap, action: &Action) -> Result<String, Status> {
        let token = bearer(metadata)?;
        let _slot = self
            .checks
            .acquire()
            .await
            .map_err(|_| Status::unavailable("the replica is shutting down"))?;
        let user = self.authenticate(token).await?;
        let name = user.username.clone().unwrap_or_default();
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                resource_attributes: Some(action.attributes()),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = self.review("SubjectAccessReview", &review).await?;
        let status = answer.status.unwrap_or_default();
        if status.allowed {
            Ok(name)
        } else {
            let why = status.reason.filter(|r| !r.is_empty());
            Err(Status::permission_denied(format!(
                "{name} may not {}{}",
                action.describe(),
                why.map(|r| format!(": {r}")).unwrap_or_default()
            )))
        }
    }

    /// Creates a review (a TokenReview, a SubjectAccessReview) within
    /// [`REVIEW_DEADLINE`]; the API server's answer has its status.
    async fn review<K>(&self, kind: &str, review: &K) -> Result<K, Status>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::Serialize
            + serde::de::DeserializeOwned,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::all(self.client.clone());
        tokio::time::timeout(REVIEW_DEADLINE, api.create(&PostParams::default(), review))
            .await
            .map_err(|_| Status::unavailable(format!("the {kind} timed out")))?
            .map_err(|error| Status::unavailable(format!("{kind}: {error}")))
    }

    async fn authenticate(&self, token: &str) -> Result<UserInfo, Status> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
            },
            ..TokenReview::default()
        };
        let answer = self.review("TokenReview", &review).await?;
        let status = answer.status.unwrap_or_default();
        // The token itself is never logged nor echoed.
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
        Err(Status::unauthenticated(format!(
            "the token was not accepted{why}{hint}"
        )))
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
    use super::*;

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

    #[test]
    fn each_call_is_a_get_on_its_virtual_resource() {
        let ring = Action::ReadRing.attributes();
        assert_eq!(
            (
                ring.group.as_deref(),
                ring.resource.as_deref(),
                ring.verb.as_deref()
            ),
            (Some(GROUP), Some("rings"), Some("get"))
        );
        assert_eq!(ring.namespace, None);
        let one = Action::ReadCronJob {
            namespace: "team-a".into(),
            name: "nightly".into(),
        }
        .attributes();
        assert_eq!(one.resource.as_deref(), Some("cronjobs"));
        assert_eq!(one.namespace.as_deref(), Some("team-a"));
        assert_eq!(one.name.as_deref(), Some("nightly"));
    }

    #[test]
    fn only_a_bearer_token_is_read() {
        let mut metadata = MetadataMap::new();
        assert_eq!(
            bearer(&metadata).map_err(|s| s.code()),
            Err(tonic::Code::Unauthenticated)
        );
        metadata.insert(
            "authorization",
            "Basic dXNlcjpwYXNz".parse().expect("ascii"),
        );
        assert_eq!(
            bearer(&metadata).map_err(|s| s.code()),
            Err(tonic::Code::Unauthenticated)
        );
        metadata.insert("authorization", "Bearer  ".parse().expect("ascii"));
        assert!(bearer(&metadata).is_err());
        metadata.insert("authorization", "Bearer abc.def".parse().expect("ascii"));
        assert_eq!(bearer(&metadata).ok(), Some("abc.def"));
    }
}
