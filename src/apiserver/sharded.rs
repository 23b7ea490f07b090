//! Server-side sharded list and watch (KEP-5866, alpha in Kubernetes 1.36
//! behind the `ShardedListAndWatch` feature gate): the API server filters a
//! list or watch by `shardSelector`, hash ranges of each object's UID, so
//! a replica receives only the CronJobs of its buckets.
//!
//! kube-rs knows no `shardSelector`, so a sharded watch runs on a client of
//! its own that adds the parameter to every request it sends (the watcher's
//! lists and watches alike). Whether the server applies it is read from a
//! list's answer, never from its version: a server that filters echoes the
//! selector in `metadata.shardInfo`; one that does not (an older version,
//! or the gate off) ignores the parameter and answers everything, which is
//! still correct, since every replica filters what it receives by the ring.

use crate::reconcile::CronJobKind;
use http::Request;
use http::uri::{PathAndQuery, Uri};
use kube::Client;

/// Percent-encodes `shardSelector=<selector>` as a query pair.
fn query_pair(selector: &str) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("shardSelector", selector)
        .finish()
}

/// `uri` with `pair` added to its query.
fn with_query_pair(uri: &Uri, pair: &str) -> Option<Uri> {
    let path_and_query = uri.path_and_query()?;
    let joined = match path_and_query.query() {
        Some(query) if !query.is_empty() => format!("{}?{query}&{pair}", path_and_query.path()),
        _ => format!("{}?{pair}", path_and_query.path()),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(PathAndQuery::try_from(joined).ok()?);
    Uri::from_parts(parts).ok()
}

/// A client that sends every request of `client` with `shardSelector`
/// set to `selector`.
pub fn client_with_shard_selector(client: &Client, selector: &str) -> Client {
    let pair = query_pair(selector);
    let inner = client.clone();
    let service = tower::service_fn(move |mut request: Request<kube::client::Body>| {
        if let Some(uri) = with_query_pair(request.uri(), &pair) {
            *request.uri_mut() = uri;
        }
        let inner = inner.clone();
        async move { inner.send(request).await }
    });
    Client::new(service, client.default_namespace())
}

/// Whether to ask the API server to shard the CronJob watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ServerShards {
    /// Where the server shows it filters (one probe at start).
    Auto,
    /// Never: every replica receives every CronJob and filters them itself.
    Off,
}

impl ServerShards {
    /// Whether the CronJob watches are to be sharded by the server, asked
    /// in `namespace` (`None`: cluster-wide), one the controller may list.
    pub async fn resolve(
        self,
        client: &Client,
        kind: CronJobKind,
        namespace: Option<&str>,
    ) -> bool {
        match self {
            ServerShards::Auto => server_filters_cronjobs(client, kind, namespace).await,
            ServerShards::Off => false,
        }
    }
}

/// Half the hash space: any valid selector serves the question.
const PROBE: &str = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";

/// Whether the API server filters `kind`'s CronJob lists by `shardSelector`:
/// asks for one CronJob of half the hash space where
/// [`super::question_namespace`] says for `namespace` (`None`: all; the
/// server walks every CronJob a list covers, a million for a cluster-wide
/// one, and answers `shardInfo` on an empty list too) and reads
/// `metadata.shardInfo`. A failed question
/// counts as no (the unfiltered path serves every server).
pub async fn server_filters_cronjobs(
    client: &Client,
    kind: CronJobKind,
    namespace: Option<&str>,
) -> bool {
    let api_version = kind.api_version();
    let namespace = super::question_namespace(namespace);
    let path = format!("/apis/{api_version}/namespaces/{namespace}/cronjobs");
    let uri = format!("{path}?limit=1&{}", query_pair(PROBE));
    let request = match Request::get(uri).body(Vec::new()) {
        Ok(request) => request,
        Err(error) => {
            tracing::warn!(%error, "could not build the shard probe; not using sharded watches");
            return false;
        }
    };
    let asked = super::deadline::within(
        super::deadline::LIST_PAGE,
        client.request::<serde_json::Value>(request),
    )
    .await;
    match asked {
        Ok(Ok(list)) => list
            .pointer("/metadata/shardInfo/selector")
            .and_then(|s| s.as_str())
            .is_some_and(|s| !s.is_empty()),
        Ok(Err(error)) => {
            tracing::warn!(%error, "the shard probe failed; not using sharded watches");
            false
        }
        Err(elapsed) => {
            tracing::warn!(%elapsed, "the shard probe went unanswered; not using sharded watches");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::scripted::{self, Answer};
    use serde_json::json;

    fn list(shard_info: Option<&str>) -> Answer {
        let mut metadata = json!({"resourceVersion": "7"});
        if let Some(selector) = shard_info {
            metadata["shardInfo"] = json!({"selector": selector});
        }
        Answer::Json(
            200,
            json!({"kind": "CronJobList", "apiVersion": "batch/v1", "metadata": metadata, "items": []}),
        )
    }

    #[tokio::test]
    async fn support_is_read_from_the_lists_answer() {
        let (client, asked) = scripted::client(|_| list(Some(PROBE)));
        assert!(server_filters_cronjobs(&client, CronJobKind::Batch, None).await);
        let probe = &asked.all()[0];
        assert!(
            // Cluster-wide, asked in one namespace: the server walks
            // every CronJob a list covers.
            probe.starts_with("GET /apis/batch/v1/namespaces/kube-system/cronjobs?limit=1&shardSelector=shardRange%28object.metadata.uid%2C+%270x0000000000000000%27"),
            "{probe}"
        );
        // The CRD's CronJobs are probed at their own URL.
        let (client, asked) = scripted::client(|_| list(Some(PROBE)));
        assert!(server_filters_cronjobs(&client, CronJobKind::Shardcron, Some("team-a")).await);
        let probe = &asked.all()[0];
        assert!(
            probe.starts_with("GET /apis/shardcron.io/v1/namespaces/team-a/cronjobs?limit=1&"),
            "{probe}"
        );
        for answer in [list(None), scripted::status(403, "Forbidden")] {
            let answer = std::sync::Mutex::new(Some(answer));
            let (client, _) =
                scripted::client(move |_| answer.lock().unwrap().take().unwrap_or(Answer::Silence));
            assert!(
                !server_filters_cronjobs(&client, CronJobKind::Shardcron, Some("team-a")).await
            );
        }
    }

    #[tokio::test]
    async fn a_sharded_client_adds_the_selector_to_every_request() {
        let (client, asked) = scripted::client(|_| list(None));
        let sharded = client_with_shard_selector(&client, PROBE);
        let api: kube::Api<k8s_openapi::api::batch::v1::CronJob> = kube::Api::all(sharded);
        api.list(&kube::api::ListParams::default().labels("a=b"))
            .await
            .expect("listed");
        api.list(&kube::api::ListParams::default())
            .await
            .expect("listed");
        let asked = asked.all();
        let pair = query_pair(PROBE);
        assert!(
            asked[0].contains("labelSelector=a%3Db") && asked[0].ends_with(&format!("&{pair}")),
            "{}",
            asked[0]
        );
        assert!(
            asked[1].ends_with(&format!("/cronjobs?{pair}")),
            "{}",
            asked[1]
        );
    }
}
