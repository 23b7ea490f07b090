//! Who may call the admin API, decided as Kubernetes decides it: the
//! caller's bearer token is checked with a TokenReview, then the call, as
//! a [`Action`] on a virtual resource of [`GROUP`], with a
//! SubjectAccessReview. So `kubectl auth can-i get
//! cronjobs.admin.shardcron.io -n team-a` answers for the API, and RBAC
//! grants it (docs/admin-api.md).

use crate::admin::review::{self, Asked, Refusal, Reviewer};
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::ResourceAttributes;
use kube::Client;
use tonic::Status;
use tonic::metadata::MetadataMap;

/// The API group of the virtual resources: nothing is served there; RBAC
/// rules name it.
pub const GROUP: &str = "admin.shardcron.io";

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
    /// Read the live state of the CronJobs of a namespace (`None`: of
    /// every namespace): `list` on `cronjobs` there.
    ListCronJobs { namespace: Option<String> },
}

impl Action {
    /// The SubjectAccessReview's attributes for it.
    pub fn attributes(&self) -> ResourceAttributes {
        let (verb, resource, namespace, name) = match self {
            Action::ReadRing => ("get", "rings", None, None),
            Action::ReadQueues => ("get", "queues", None, None),
            Action::ReadCronJob { namespace, name } => (
                "get",
                "cronjobs",
                Some(namespace.clone()),
                Some(name.clone()),
            ),
            Action::ListCronJobs { namespace } => ("list", "cronjobs", namespace.clone(), None),
        };
        ResourceAttributes {
            group: Some(GROUP.to_owned()),
            resource: Some(resource.to_owned()),
            verb: Some(verb.to_owned()),
            namespace,
            name,
            ..ResourceAttributes::default()
        }
    }

    /// How a refusal names it.
    pub fn describe(&self) -> String {
        match self {
            Action::ReadRing => format!("get rings.{GROUP}"),
            Action::ReadQueues => format!("get queues.{GROUP}"),
            Action::ReadCronJob { namespace, name } => {
                format!("get cronjobs.{GROUP} {name:?} in namespace {namespace:?}")
            }
            Action::ListCronJobs {
                namespace: Some(namespace),
            } => format!("list cronjobs.{GROUP} in namespace {namespace:?}"),
            Action::ListCronJobs { namespace: None } => {
                format!("list cronjobs.{GROUP} in every namespace")
            }
        }
    }
}

/// The bearer token of a call: `authorization: Bearer <token>`.
pub fn bearer(metadata: &MetadataMap) -> Result<&str, Status> {
    let header = metadata
        .get("authorization")
        .map(|value| value.to_str().unwrap_or_default());
    review::bearer(header).map_err(status)
}

/// A refusal as the gRPC status the caller gets.
fn status(refusal: Refusal) -> Status {
    match refusal {
        Refusal::Unauthenticated(why) => Status::unauthenticated(why),
        Refusal::Forbidden(why) => Status::permission_denied(why),
        Refusal::Unavailable(why) => Status::unavailable(why),
    }
}

/// Who a call is from.
#[derive(Debug, Clone)]
pub enum Caller {
    /// A gRPC caller: its bearer token, to review.
    Token(MetadataMap),
    /// A user kube-apiserver's aggregation layer authenticated and
    /// forwarded ([`super::aggregated`]): known already, only authorized.
    Forwarded(UserInfo),
}

/// Marks a call made in-process for a forwarded user (a request
/// extension, which only code in this process can set).
#[derive(Debug, Clone)]
pub struct ForwardedUser(pub UserInfo);

impl Caller {
    /// Who `request` is from.
    pub fn of<T>(request: &tonic::Request<T>) -> Caller {
        match request.extensions().get::<ForwardedUser>() {
            Some(ForwardedUser(user)) => Caller::Forwarded(user.clone()),
            None => Caller::Token(request.metadata().clone()),
        }
    }
}

/// Checks calls against the API server, as the controller's
/// ServiceAccount (it needs `create` on tokenreviews and
/// subjectaccessreviews: deploy/kubernetes/rbac.yaml).
#[derive(Clone)]
pub struct Access {
    reviewer: Reviewer,
}

impl Access {
    /// `audiences`: those a caller's token must be meant for; none: the API
    /// server's own (any token kubectl would send, which a replica could
    /// then replay to the API server).
    pub fn new(client: Client, audiences: Vec<String>) -> Self {
        Self {
            reviewer: Reviewer::new(client, MAX_CHECKS, audiences),
        }
    }

    /// The caller's name, if it is who it says (its token is valid, or
    /// kube-apiserver vouched for it) and it may do `action`.
    pub async fn check(&self, caller: &Caller, action: &Action) -> Result<String, Status> {
        let user = match caller {
            Caller::Token(metadata) => {
                let token = bearer(metadata)?;
                self.reviewer.authenticate(token).await.map_err(status)?
            }
            Caller::Forwarded(user) => user.clone(),
        };
        self.reviewer
            .authorize(
                &user,
                Asked::Resource(Box::new(action.attributes())),
                &action.describe(),
            )
            .await
            .map_err(status)?;
        Ok(user.username.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
