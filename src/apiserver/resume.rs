//! Resuming a watch with a new selector from where the watch it replaces
//! was, instead of listing again.
//!
//! When the ring changes, the CronJob and Job watches are restarted with
//! the new owned buckets' selectors. A restarted kube-runtime watcher lists
//! first: at 10^6 CronJobs each survivor of a killed replica listed its
//! whole new share (about 330,000 CronJobs) beside its bulk load of the
//! gained quarter, three survivors at once, and kube-apiserver, busy
//! sending those lists, cut 36 CronJob watches (lists and loads) in one
//! hand-off (docs/performance.md, S7). Nothing in those lists is news: the
//! kept buckets' objects were watched up to the old watch's last event, and
//! the gained buckets' come in the bulk load (a consistent read). So the
//! new watch starts at the old one's [`Position`]: it asks for the changes
//! after that resourceVersion under the new selector (the kept buckets'
//! missed nothing, the gained buckets' changes since then arrive as
//! changes, never older than what the load read as the supervisor keeps the
//! newer copy).
//!
//! A resumed watch is a plain watch, re-made from its last resourceVersion
//! when the server ends it. If the server no longer has that version
//! (410 Gone), or the watch fails or goes silent, it hands over to the
//! ordinary watcher, which lists: what happens today without a position.

use super::resource_version;
use futures::TryStreamExt as _;
use kube::api::{Api, WatchEvent, WatchParams};
use kube::runtime::watcher::Event;
use kube::{Resource, ResourceExt as _};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How far a watch has delivered: the resourceVersion of the last change it
/// handed over and saw taken (or of a resumed watch's last bookmark), after
/// its list (none during a list, nor before the first change after it). Shared between the watch's task,
/// which writes it, and whoever may replace the watch.
#[derive(Debug, Clone, Default)]
pub struct Position(Arc<Mutex<Option<String>>>);

impl Position {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The watch lists (again): what it delivered before is no position.
    pub fn listing(&self) {
        *self.lock() = None;
    }

    /// A change at `resource_version` was taken. Versions come in order in
    /// one watch; an older one (never expected) does not move it back.
    pub fn delivered(&self, resource_version: Option<&str>) {
        let Some(version) = resource_version else {
            return;
        };
        let mut position = self.lock();
        if position
            .as_deref()
            .is_none_or(|seen| !resource_version::is_older(version, seen))
        {
            *position = Some(version.to_owned());
        }
    }

    pub fn get(&self) -> Option<String> {
        self.lock().clone()
    }
}

/// Why a resumed watch handed over to a list.
#[derive(Debug, thiserror::Error)]
pub enum ResumeEnded {
    /// The server no longer has the changes since that version.
    #[error("the server no longer has the changes since resourceVersion {0} (410 Gone)")]
    Gone(String),
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("the watch was silent for {0:?}")]
    Silent(Duration),
}

/// Silence after which a resumed watch is given up: the server's default
/// watch timeout (290 s) plus 5 s, as the ordinary watches.
const SILENCE: Duration = Duration::from_secs(295);

/// Watches `api` from resourceVersion `from` (a watch with bookmarks, no
/// initial events), handing each change as an `Apply` or `Delete` to
/// `deliver` and recording it in `position` once taken; re-made from the
/// last version seen each time the server ends it. Returns only when it
/// cannot go on: the caller then lists.
pub async fn watch_from<K, Delivered>(
    api: &Api<K>,
    params: &WatchParams,
    from: String,
    position: &Position,
    mut deliver: impl FnMut(Event<K>) -> Delivered,
) -> ResumeEnded
where
    K: Resource + Clone + DeserializeOwned + Debug,
    Delivered: Future<Output = ()>,
{
    // It stands where it starts: a watch that replaces it before the first
    // change or bookmark starts there too, rather than listing.
    position.delivered(Some(&from));
    let mut version = from;
    loop {
        let stream = match api.watch(params, &version).await {
            Ok(stream) => stream,
            Err(error) => return error.into(),
        };
        let mut stream = std::pin::pin!(stream);
        loop {
            let next = match tokio::time::timeout(SILENCE, stream.try_next()).await {
                Err(_) => return ResumeEnded::Silent(SILENCE),
                Ok(Err(error)) => return error.into(),
                Ok(Ok(next)) => next,
            };
            let (event, object_version) = match next {
                // The server ended the watch (its timeout): on from here.
                None => break,
                Some(WatchEvent::Added(object) | WatchEvent::Modified(object)) => {
                    let at = object.resource_version();
                    (Event::Apply(object), at)
                }
                Some(WatchEvent::Deleted(object)) => {
                    let at = object.resource_version();
                    (Event::Delete(object), at)
                }
                // Every change before it was taken: the position moves too.
                Some(WatchEvent::Bookmark(bookmark)) => {
                    version = bookmark.metadata.resource_version;
                    position.delivered(Some(&version));
                    continue;
                }
                Some(WatchEvent::Error(status)) if status.code == 410 => {
                    return ResumeEnded::Gone(version);
                }
                Some(WatchEvent::Error(status)) => {
                    return kube::Error::Api(status).into();
                }
            };
            deliver(event).await;
            position.delivered(object_version.as_deref());
            if let Some(at) = object_version {
                version = at;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::scripted::{self, Answer};
    use k8s_openapi::api::batch::v1::CronJob;
    use serde_json::{Value, json};

    fn cronjob(name: &str, version: &str) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "CronJob",
               "metadata": {"namespace": "a", "name": name, "resourceVersion": version},
               "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {}}}}})
    }

    fn bookmark(version: &str) -> Value {
        json!({"type": "BOOKMARK", "object": {"kind": "CronJob", "apiVersion": "batch/v1",
               "metadata": {"resourceVersion": version}}})
    }

    fn gone() -> Value {
        json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
               "status": "Failure", "message": "too old resource version", "reason": "Expired",
               "code": 410}})
    }

    #[test]
    fn the_position_is_the_last_change_taken_and_a_list_clears_it() {
        let position = Position::default();
        assert_eq!(position.get(), None);
        position.delivered(Some("10"));
        position.delivered(Some("12"));
        position.delivered(None);
        assert_eq!(position.get().as_deref(), Some("12"));
        // Never back.
        position.delivered(Some("11"));
        assert_eq!(position.get().as_deref(), Some("12"));
        position.listing();
        assert_eq!(position.get(), None);
    }

    #[tokio::test]
    async fn a_resumed_watch_asks_for_changes_after_its_version_and_goes_on_after_each_end() {
        let (client, asked) = scripted::client(|request| {
            if request.uri.contains("resourceVersion=100&") || request.uri.ends_with("=100") {
                Answer::Events(vec![
                    json!({"type": "MODIFIED", "object": cronjob("report", "105")}),
                    bookmark("120"),
                ])
            } else if request.uri.contains("resourceVersion=120") {
                Answer::Events(vec![
                    json!({"type": "DELETED", "object": cronjob("report", "130")}),
                    gone(),
                ])
            } else {
                Answer::Silence
            }
        });
        let api: Api<CronJob> = Api::all(client);
        let position = Position::default();
        let mut seen = Vec::new();
        let ended = watch_from(
            &api,
            &WatchParams::default().labels("team=a"),
            "100".to_owned(),
            &position,
            |event| {
                seen.push(match event {
                    Event::Apply(c) => {
                        format!("apply {}", c.resource_version().unwrap_or_default())
                    }
                    Event::Delete(c) => {
                        format!("delete {}", c.resource_version().unwrap_or_default())
                    }
                    _ => "other".to_owned(),
                });
                async {}
            },
        )
        .await;
        assert_eq!(seen, ["apply 105", "delete 130"]);
        assert!(
            matches!(ended, ResumeEnded::Gone(ref v) if v == "130"),
            "{ended:?}"
        );
        assert_eq!(position.get().as_deref(), Some("130"));
        let asked = asked.all();
        assert_eq!(asked.len(), 2, "{asked:?}");
        for request in &asked {
            assert!(request.contains("watch=true"), "{request}");
            assert!(request.contains("labelSelector=team%3Da"), "{request}");
            assert!(!request.contains("sendInitialEvents"), "{request}");
        }
        // The second watch starts at the bookmark, not at the last object.
        assert!(asked[1].contains("resourceVersion=120"), "{}", asked[1]);
    }
}
