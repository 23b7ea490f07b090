//! The APIService of `admin.shardcron.io` exists only while replicas run
//! (`--aggregated-api-service`): a replica registers it if it is missing
//! once it can serve it (`super::serve::run`), and the last replica to
//! leave gracefully withdraws it.
//!
//! Why: an APIService whose backends are all down makes discovery of its
//! group fail, and kube-controller-manager's namespace controller, which
//! must know every namespaced resource before it empties a namespace, then
//! holds every namespace deletion in the cluster (`NamespaceDeletionDiscovery
//! Failure`, "stale GroupVersion discovery"; measured on the local control
//! plane, November 2026: an unrelated namespace stayed Terminating until
//! the APIService was deleted, then went within seconds). A `Local`
//! APIService (no `service`) is stale too. So when the replicas are scaled
//! to zero or uninstalled, the group goes away with them.
//!
//! The last one out: each replica, after its own Lease is released, reads
//! the ring's Leases from the API server (a consistent list) and withdraws
//! the APIService if no other replica holds one. Two leaving at once each
//! read after their own release, so the later reader sees both released.
//! A replica that crashes leaves no one to do it: that case is an alert
//! (`ShardcronAdminAPIUnavailable`, on kube-apiserver's own
//! `aggregator_unavailable_apiservice`), and docs/admin-api.md says how to
//! release the namespaces by hand.

use crate::clock::Clock;
use crate::shard::lease::RING_LABEL;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::{
    APIService, APIServiceSpec, ServiceReference,
};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use std::time::Duration;

/// The APIService's name, the group's and the version's.
pub const NAME: &str = "v1alpha1.admin.shardcron.io";
pub const GROUP: &str = "admin.shardcron.io";
pub const VERSION: &str = "v1alpha1";

/// Each request here is answered within this (a replica's start and exit
/// do not wait longer).
pub const DEADLINE: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    #[error("--aggregated-api-service {0:?}: must be NAMESPACE/NAME")]
    BadService(String),
    #[error("{0}")]
    Api(#[from] kube::Error),
    #[error("no answer from the API server within {DEADLINE:?}")]
    Deadline,
}

/// The Service kube-apiserver reaches the replicas through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRef {
    pub namespace: String,
    pub name: String,
}

impl std::str::FromStr for ServiceRef {
    type Err = RegistrationError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.split_once('/') {
            Some((namespace, name))
                if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
            {
                Ok(ServiceRef {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                })
            }
            _ => Err(RegistrationError::BadService(text.to_owned())),
        }
    }
}

/// The APIService as deploy/admin-api ships it, served by `service` on
/// port 443. Each replica's certificate is its own (self-signed unless
/// `--admin-tls-cert-file`), so TLS to it is not verified, as in the
/// shipped object.
pub fn desired(service: &ServiceRef) -> APIService {
    APIService {
        metadata: ObjectMeta {
            name: Some(NAME.to_owned()),
            labels: Some([("app.kubernetes.io/name".to_owned(), "shardcron".to_owned())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(APIServiceSpec {
            group: Some(GROUP.to_owned()),
            version: Some(VERSION.to_owned()),
            group_priority_minimum: 1000,
            version_priority: 15,
            insecure_skip_tls_verify: Some(true),
            service: Some(ServiceReference {
                namespace: Some(service.namespace.clone()),
                name: Some(service.name.clone()),
                port: Some(443),
            }),
            ca_bundle: None,
        }),
        status: None,
    }
}

/// The replicas other than `own` whose Lease is held and unexpired at
/// `now`. A released Lease has no holder; a crashed replica's expires.
pub fn other_live_holders(leases: &[Lease], own: &str, now: Timestamp) -> Vec<String> {
    leases
        .iter()
        .filter_map(|lease| {
            let spec = lease.spec.as_ref()?;
            let holder = spec.holder_identity.as_deref()?;
            let renewed = spec.renew_time.as_ref()?.0;
            let duration = i64::from(spec.lease_duration_seconds?);
            let expires = renewed
                .checked_add(jiff::SignedDuration::from_secs(duration))
                .ok()?;
            (holder != own && expires > now).then(|| holder.to_owned())
        })
        .collect()
}

async fn within<T>(
    request: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, RegistrationError> {
    tokio::time::timeout(DEADLINE, request)
        .await
        .map_err(|_| RegistrationError::Deadline)?
        .map_err(RegistrationError::from)
}

/// What [`register`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Registered {
    Created,
    /// There already (left as it is: an operator's changes stay).
    Present,
}

/// Registers the APIService if it is missing.
pub async fn register(
    client: Client,
    service: &ServiceRef,
) -> Result<Registered, RegistrationError> {
    let api = Api::<APIService>::all(client);
    match within(api.create(&PostParams::default(), &desired(service))).await {
        Ok(_) => Ok(Registered::Created),
        Err(RegistrationError::Api(kube::Error::Api(e))) if e.code == 409 => {
            Ok(Registered::Present)
        }
        Err(e) => Err(e),
    }
}

/// What [`withdraw_if_last`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Withdrawal {
    Withdrawn,
    /// These replicas still hold their Leases: the group stays.
    PeersRemain(Vec<String>),
}

/// Withdraws the APIService unless another replica of the ring (Leases
/// labelled `shardcron.io/ring=<ring>` in `namespace`) still holds its
/// Lease. Call after this replica's own Lease is released.
pub async fn withdraw_if_last(
    client: Client,
    namespace: &str,
    ring: &str,
    own: &str,
) -> Result<Withdrawal, RegistrationError> {
    let leases = Api::<Lease>::namespaced(client.clone(), namespace);
    // A consistent read (no resourceVersion): the peers' releases committed
    // before it are seen.
    let selector = format!("{RING_LABEL}={ring}");
    let listed = within(leases.list(&ListParams::default().labels(&selector))).await?;
    let others = other_live_holders(&listed.items, own, Clock::System.now());
    if !others.is_empty() {
        return Ok(Withdrawal::PeersRemain(others));
    }
    let api = Api::<APIService>::all(client);
    match within(api.delete(NAME, &DeleteParams::default())).await {
        Ok(_) => Ok(Withdrawal::Withdrawn),
        Err(RegistrationError::Api(kube::Error::Api(e))) if e.code == 404 => {
            Ok(Withdrawal::Withdrawn)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn lease(holder: Option<&str>, renewed: &str, seconds: i32) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                renew_time: Some(MicroTime(renewed.parse().unwrap())),
                lease_duration_seconds: Some(seconds),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn only_other_held_unexpired_leases_keep_the_group() {
        let now: Timestamp = "2026-11-27T10:00:00Z".parse().unwrap();
        let cases = [
            // (what, leases, the live others)
            (
                "alone",
                vec![lease(Some("r0"), "2026-11-27T09:59:59Z", 15)],
                vec![],
            ),
            (
                "a peer renewing",
                vec![
                    lease(Some("r0"), "2026-11-27T09:59:59Z", 15),
                    lease(Some("r1"), "2026-11-27T09:59:50Z", 15),
                ],
                vec!["r1"],
            ),
            (
                "a peer released",
                vec![lease(None, "2026-11-27T09:59:59Z", 15)],
                vec![],
            ),
            (
                "a peer crashed long ago",
                vec![lease(Some("r1"), "2026-11-27T09:59:44Z", 15)],
                vec![],
            ),
            (
                "a Lease with no renewal",
                vec![Lease {
                    spec: Some(LeaseSpec {
                        holder_identity: Some("r2".to_owned()),
                        ..LeaseSpec::default()
                    }),
                    ..Lease::default()
                }],
                vec![],
            ),
        ];
        for (what, leases, live) in cases {
            assert_eq!(other_live_holders(&leases, "r0", now), live, "{what}");
        }
    }

    #[test]
    fn the_service_is_namespace_slash_name() {
        let service: ServiceRef = "shardcron-system/shardcron-admin".parse().unwrap();
        assert_eq!(service.namespace, "shardcron-system");
        let made = desired(&service);
        assert_eq!(made.metadata.name.as_deref(), Some(NAME));
        let port = made.spec.and_then(|s| s.service).and_then(|s| s.port);
        assert_eq!(port, Some(443));
        for bad in ["", "a", "/b", "a/", "a/b/c"] {
            assert!(bad.parse::<ServiceRef>().is_err(), "{bad:?}");
        }
    }
}
