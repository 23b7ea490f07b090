//! The paths of the aggregated API (`admin.shardcron.io/v1alpha1`) and its
//! discovery documents, which kube-apiserver's aggregator reads to list
//! the resources (so `kubectl auth can-i get cronjobs.admin.shardcron.io`
//! and RBAC name them) and to judge the APIService available. Pure.

use crate::admin::access::GROUP;
use serde_json::{Value, json};

pub const VERSION: &str = "v1alpha1";

/// `admin.shardcron.io/v1alpha1`.
pub fn group_version() -> String {
    format!("{GROUP}/{VERSION}")
}

/// What a GET asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/apis`, `/apis/admin.shardcron.io`, `/apis/admin.shardcron.io/v1alpha1`.
    Discovery(Discovery),
    /// One CronJob's live state, from its owner.
    CronJob { namespace: String, name: String },
    /// The CronJobs of a namespace (`None`: of every namespace), from every
    /// replica.
    CronJobs { namespace: Option<String> },
    /// The ring of that name, as this replica sees it.
    Ring(String),
    /// The ring this replica serves (a list of one).
    Rings,
    /// That replica's write gateway queues.
    Queues(String),
    /// Every replica's queues.
    AllQueues,
    /// Anything else: 404.
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discovery {
    Groups,
    Group,
    Resources,
}

/// The route of `path` (no query).
pub fn route(path: &str) -> Route {
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let valid = |name: &str| crate::admin::is_object_name(name);
    match parts.as_slice() {
        ["apis"] => Route::Discovery(Discovery::Groups),
        ["apis", group] if *group == GROUP => Route::Discovery(Discovery::Group),
        ["apis", group, version] if *group == GROUP && *version == VERSION => {
            Route::Discovery(Discovery::Resources)
        }
        ["apis", group, version, rest @ ..] if *group == GROUP && *version == VERSION => match rest
        {
            ["cronjobs"] => Route::CronJobs { namespace: None },
            ["namespaces", namespace, "cronjobs"] if valid(namespace) => Route::CronJobs {
                namespace: Some((*namespace).to_owned()),
            },
            ["namespaces", namespace, "cronjobs", name] if valid(namespace) && valid(name) => {
                Route::CronJob {
                    namespace: (*namespace).to_owned(),
                    name: (*name).to_owned(),
                }
            }
            ["rings"] => Route::Rings,
            ["queues"] => Route::AllQueues,
            ["rings", ring] if valid(ring) => Route::Ring((*ring).to_owned()),
            ["queues", replica] if valid(replica) => Route::Queues((*replica).to_owned()),
            _ => Route::Unknown,
        },
        _ => Route::Unknown,
    }
}

/// The discovery document for `level`.
pub fn discovery(level: Discovery) -> Value {
    let version = json!({"groupVersion": group_version(), "version": VERSION});
    let group = json!({
        "name": GROUP,
        "versions": [version],
        "preferredVersion": version,
    });
    match level {
        Discovery::Groups => json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}),
        Discovery::Group => {
            let mut group = group;
            group["kind"] = json!("APIGroup");
            group["apiVersion"] = json!("v1");
            group
        }
        Discovery::Resources => json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version(),
            "resources": [
                {"name": "cronjobs", "singularName": "cronjob", "namespaced": true,
                 "kind": "CronJobState", "verbs": ["get", "list"]},
                {"name": "rings", "singularName": "ring", "namespaced": false,
                 "kind": "Ring", "verbs": ["get", "list"]},
                {"name": "queues", "singularName": "queues", "namespaced": false,
                 "kind": "Queues", "verbs": ["get", "list"]},
            ],
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_path_is_a_discovery_document_a_read_or_unknown() {
        let base = "/apis/admin.shardcron.io/v1alpha1";
        let cronjob = |namespace: &str, name: &str| Route::CronJob {
            namespace: namespace.into(),
            name: name.into(),
        };
        for (path, expected) in [
            ("/apis".to_owned(), Route::Discovery(Discovery::Groups)),
            ("/apis/".to_owned(), Route::Discovery(Discovery::Groups)),
            (
                "/apis/admin.shardcron.io".to_owned(),
                Route::Discovery(Discovery::Group),
            ),
            (base.to_owned(), Route::Discovery(Discovery::Resources)),
            (
                format!("{base}/namespaces/team-a/cronjobs/nightly"),
                cronjob("team-a", "nightly"),
            ),
            (
                format!("{base}/rings/shardcron"),
                Route::Ring("shardcron".into()),
            ),
            (
                format!("{base}/queues/shardcron-0"),
                Route::Queues("shardcron-0".into()),
            ),
            // Lists: every replica's owned CronJobs, merged.
            (
                format!("{base}/namespaces/team-a/cronjobs"),
                Route::CronJobs {
                    namespace: Some("team-a".into()),
                },
            ),
            (
                format!("{base}/cronjobs"),
                Route::CronJobs { namespace: None },
            ),
            (format!("{base}/namespaces/Team-A/cronjobs"), Route::Unknown),
            (format!("{base}/rings"), Route::Rings),
            (format!("{base}/queues"), Route::AllQueues),
            (
                format!("{base}/namespaces/Team-A/cronjobs/x"),
                Route::Unknown,
            ),
            (
                format!("{base}/namespaces/team-a/cronjobs/x/status"),
                Route::Unknown,
            ),
            ("/apis/admin.shardcron.io/v1".to_owned(), Route::Unknown),
            ("/apis/batch/v1".to_owned(), Route::Unknown),
            ("/api/v1".to_owned(), Route::Unknown),
            ("/".to_owned(), Route::Unknown),
        ] {
            assert_eq!(route(&path), expected, "{path}");
        }
    }

    #[test]
    fn discovery_lists_the_three_resources_rbac_names() {
        let resources = discovery(Discovery::Resources);
        let names: Vec<_> = resources["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .map(|r| (r["name"].as_str(), r["namespaced"].as_bool()))
            .collect();
        assert_eq!(
            names,
            [
                (Some("cronjobs"), Some(true)),
                (Some("rings"), Some(false)),
                (Some("queues"), Some(false))
            ]
        );
        assert_eq!(
            discovery(Discovery::Groups)["groups"][0]["preferredVersion"]["groupVersion"],
            "admin.shardcron.io/v1alpha1"
        );
        assert_eq!(discovery(Discovery::Group)["kind"], "APIGroup");
    }
}
