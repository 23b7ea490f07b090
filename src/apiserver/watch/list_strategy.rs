//! How a watch lists (its first list and each re-list): a streaming list
//! where the server answers one, asked once at start, never inferred from
//! its version (a 1.34+ server may have `WatchList` off, a proxy may drop
//! the parameter); paginated consistent lists otherwise.

use crate::reconcile::CronJobKind;
use kube::Client;
use kube::runtime::watcher;

/// The annotation of the bookmark that ends a streaming list's initial
/// events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// How the initial list (and each re-list) is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ListStrategy {
    /// A streaming list (`sendInitialEvents`) where the server answers one
    /// ([`server_streams_lists`], asked once at start), else paginated lists.
    Auto,
    Streaming,
    /// Paginated consistent LISTs (kube-rs sends no `resourceVersion=0` with
    /// a page size: the watch cache used to ignore limits).
    Paginated,
}

impl ListStrategy {
    /// Resolves `Auto` by asking the server ([`server_streams_lists`]) for
    /// `kind`'s CronJobs in `namespace` (`None`: cluster-wide), never by
    /// its version: a 1.34+ server may have `WatchList` turned off, and a
    /// proxy in front of it may drop the parameter.
    pub async fn resolve(
        self,
        client: &Client,
        kind: CronJobKind,
        namespace: Option<&str>,
    ) -> ListStrategy {
        if self != ListStrategy::Auto {
            return self;
        }
        if server_streams_lists(client, kind, namespace).await {
            ListStrategy::Streaming
        } else {
            ListStrategy::Paginated
        }
    }

    pub(super) fn config(self) -> watcher::Config {
        match self {
            ListStrategy::Streaming => watcher::Config::default().streaming_lists(),
            _ => watcher::Config::default().page_size(500),
        }
    }
}

/// A name no CronJob has (names are DNS subdomains: no underscore), so that
/// the probe's initial events are none.
const PROBE_NAME: &str = "shardcron_list_probe";

/// Whether the API server answers a streaming list of `kind`'s CronJobs:
/// a watch with `sendInitialEvents=true` of none of them (a field selector
/// on a name none has, where [`crate::apiserver::question_namespace`] says, for one
/// second) must end its initial events with the bookmark annotated
/// [`INITIAL_EVENTS_END`]. A server without `WatchList` refuses the
/// parameter (a 4xx); one that ignores it sends no such bookmark. A failed
/// or unanswered question counts as no: paginated lists serve every
/// server.
pub async fn server_streams_lists(
    client: &Client,
    kind: CronJobKind,
    namespace: Option<&str>,
) -> bool {
    let namespace = crate::apiserver::question_namespace(namespace);
    let uri = format!(
        "/apis/{}/namespaces/{namespace}/cronjobs?watch=true&sendInitialEvents=true\
         &resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1\
         &fieldSelector=metadata.name%3D{PROBE_NAME}",
        kind.api_version()
    );
    let request = match http::Request::get(uri).body(Vec::new()) {
        Ok(request) => request,
        Err(error) => {
            tracing::warn!(%error, "could not build the list probe; using paginated lists");
            return false;
        }
    };
    let answer = crate::apiserver::deadline::within(
        crate::apiserver::deadline::LIST_PAGE,
        client.request_text(request),
    )
    .await;
    let text = match answer {
        Ok(Ok(text)) => text,
        Ok(Err(error)) => {
            tracing::info!(%error, "the server refused a streaming list; using paginated lists");
            return false;
        }
        Err(elapsed) => {
            tracing::warn!(%elapsed, "the list probe went unanswered; using paginated lists");
            return false;
        }
    };
    let streams = text.lines().any(|line| {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            return false;
        };
        event["type"] == "BOOKMARK"
            && event["object"]["metadata"]["annotations"][INITIAL_EVENTS_END] == "true"
    });
    if !streams {
        tracing::info!(
            "the server ended no initial events of a streaming list; using paginated lists"
        );
    }
    streams
}
