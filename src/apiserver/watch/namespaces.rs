//! Namespaces whose deletion has begun, told to the write gateway as they
//! are deleted rather than at the first refusal.
//!
//! Why a watch: a terminating namespace refuses creates but takes
//! patches, and an Event the replica recorded before is updated by a
//! patch (its series). So a tenant's namespace deleted with hundreds of
//! Events waiting for it took them, one patch at a time at the gateway's
//! lowest class, until kube-controller-manager's namespace controller
//! reached its CronJob (6 to 9 s on an idle control plane, more than 20 s
//! under load). Watching the namespaces' metadata, the deletion's first
//! change (`deletionTimestamp` set) drops them within a watch event's
//! delay. The refusals stay the fallback (a deployment without the
//! `namespaces` rights, a watch re-listing).
//!
//! Bounds: nothing is kept per namespace here (each change is mapped and
//! handed on); the gateway remembers at most
//! [`CAPACITY`](crate::apiserver::gateway::gone::CAPACITY) names, each for
//! [`REMEMBERED_FOR`](crate::apiserver::gateway::gone::REMEMBERED_FOR),
//! renewed by each change the namespace's deletion makes.

use crate::apiserver::gateway::gone::Going;
use crate::telemetry::Metrics;
use crate::telemetry::metrics::ResourceLabels;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use std::sync::Arc;
use tokio::task::JoinHandle;

/// What a change of a namespace says of its writes: `Some` once its
/// deletion has begun (it refuses creates) or is done (it refuses all).
pub fn going(event: &Event<PartialObjectMeta<Namespace>>) -> Option<(&str, Going)> {
    match event {
        Event::Apply(namespace) | Event::InitApply(namespace)
            if namespace.metadata.deletion_timestamp.is_some() =>
        {
            Some((namespace.metadata.name.as_deref()?, Going::Terminating))
        }
        Event::Delete(namespace) => Some((namespace.metadata.name.as_deref()?, Going::Gone)),
        _ => None,
    }
}

/// Watches the metadata of one namespace (`scope`) or all, telling
/// `deliver` of each whose deletion has begun or ended. Without the rights
/// to (a deployment's RBAC older than this watch), it says so once and
/// ends: the gateway still learns from the API server's refusals.
pub fn namespaces(
    client: Client,
    scope: Option<&str>,
    metrics: Arc<Metrics>,
    mut deliver: impl FnMut(&str, Going) + Send + 'static,
) -> JoinHandle<()> {
    let api = Api::<PartialObjectMeta<Namespace>>::all(client);
    let mut config = watcher::Config::default().any_semantic();
    if let Some(name) = scope {
        config = config.fields(&format!("metadata.name={name}"));
    }
    let labels = ResourceLabels {
        resource: "namespaces",
    };
    tokio::spawn(async move {
        let received = metrics.watch_events.get_or_create(&labels).clone();
        let mut events = watcher::watcher(api, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Init) => {
                    metrics.watch_restarts.get_or_create(&labels).inc();
                }
                Ok(event) => {
                    received.inc();
                    if let Some((name, going)) = going(&event) {
                        deliver(name, going);
                    }
                }
                Err(watcher::Error::InitialListFailed(kube::Error::Api(status)))
                    if status.code == 403 =>
                {
                    tracing::warn!(error = %status.message, "cannot watch namespaces (list and watch on namespaces, deploy/kubernetes/rbac.yaml): a deleted namespace's waiting Events are dropped at the first refusal only");
                    return;
                }
                Err(error) => {
                    tracing::warn!(resource = "namespaces", %error, "watch failed; retrying");
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;

    fn namespace(deleting: bool) -> PartialObjectMeta<Namespace> {
        PartialObjectMeta {
            types: None,
            metadata: ObjectMeta {
                name: Some("tenant".to_owned()),
                deletion_timestamp: deleting.then_some(Time(jiff::Timestamp::UNIX_EPOCH)),
                ..ObjectMeta::default()
            },
            _phantom: Default::default(),
        }
    }

    #[test]
    fn a_namespace_going_is_told_at_its_deletions_start_and_end() {
        let table = [
            (Event::Apply(namespace(false)), None),
            (Event::InitApply(namespace(false)), None),
            (
                Event::Apply(namespace(true)),
                Some(("tenant", Going::Terminating)),
            ),
            (
                Event::InitApply(namespace(true)),
                Some(("tenant", Going::Terminating)),
            ),
            (
                Event::Delete(namespace(true)),
                Some(("tenant", Going::Gone)),
            ),
            (
                Event::Delete(namespace(false)),
                Some(("tenant", Going::Gone)),
            ),
            (Event::Init, None),
            (Event::InitDone, None),
        ];
        for (event, expected) in table {
            assert_eq!(going(&event), expected, "{event:?}");
        }
    }
}
