//! Recording Events (events.k8s.io/v1): an event is created once, and the
//! same event told again within [`SERIES_WINDOW`] becomes a patch of the
//! first one's `series` (count, last observed), as kube-runtime's
//! `Recorder` does and `kubectl describe` shows ("x3 over 2m").
//!
//! Why not kube-runtime's `Recorder` itself (used until 2026-11):
//! - it walks its whole cache of the last 6 minutes (`HashMap::retain`) on
//!   every event, O(events in 6 minutes) per event: 1.5 % of the replica's
//!   CPU at 200 firings a minute (docs/performance.md), more at a herd's
//!   rate; here expiry follows the order of observation;
//! - its cache is bounded by time only; here also by count
//!   ([`SERIES_CAPACITY`]: when full, the event observed longest ago is
//!   forgotten, and its next repeat is created anew);
//! - its key leaves out the message, so "Created job report-2" within 6
//!   minutes of "Created job report-1" was counted as a repeat of the
//!   first and its own job name never shown. Upstream's recorder tells
//!   events with different messages apart (it counts only identical ones),
//!   and so does this one: the key includes the note.

use super::recent::RecentMap;
use crate::apiserver::client::traced;
use crate::clock::Clock;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use std::sync::{Arc, Mutex};

/// How long after it was last observed a repeat still counts in an
/// event's series (kube-runtime's and client-go's events.k8s.io recorders:
/// 6 minutes).
pub const SERIES_WINDOW: SignedDuration = SignedDuration::from_secs(6 * 60);

/// Events remembered for their series, per replica: at a few hundred bytes
/// each, about a MiB.
pub const SERIES_CAPACITY: usize = 4_096;

/// What makes two events the same: everything but the time.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SeriesKey {
    event_type: &'static str,
    reason: String,
    action: String,
    note: Option<String>,
    regarding: ReferenceKey,
    related: Option<ReferenceKey>,
}

/// The fields of an object reference that name the object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ReferenceKey {
    api_version: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

impl From<&ObjectReference> for ReferenceKey {
    fn from(reference: &ObjectReference) -> Self {
        Self {
            api_version: reference.api_version.clone(),
            kind: reference.kind.clone(),
            namespace: reference.namespace.clone(),
            name: reference.name.clone(),
            uid: reference.uid.clone(),
        }
    }
}

impl SeriesKey {
    pub fn of(event: &Event, regarding: &ObjectReference) -> Self {
        Self {
            event_type: type_name(event.type_),
            reason: event.reason.clone(),
            action: event.action.clone(),
            note: event.note.clone(),
            regarding: regarding.into(),
            related: event.secondary.as_ref().map(ReferenceKey::from),
        }
    }
}

fn type_name(event_type: EventType) -> &'static str {
    match event_type {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

/// An event recorded: its name and how many times it was observed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Recorded {
    name: String,
    count: i32,
}

/// What to write for an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// A new Event.
    Create,
    /// A repeat: the Event `name`'s series, now `count` observations.
    Series { name: String, count: i32 },
}

/// The events of the last [`SERIES_WINDOW`], at most `capacity` of them,
/// each touched when last observed. Pure: time is passed in.
#[derive(Debug)]
pub struct SeriesCache {
    recorded: RecentMap<SeriesKey, Recorded>,
}

impl SeriesCache {
    pub fn new(capacity: usize) -> Self {
        Self {
            recorded: RecentMap::new(capacity),
        }
    }

    /// What to write for `key` observed at `now`.
    pub fn write_for(&mut self, key: &SeriesKey, now: Timestamp) -> Write {
        self.recorded
            .forget_touched_until(now.checked_sub(SERIES_WINDOW).unwrap_or(Timestamp::MIN));
        match self.recorded.get(key) {
            Some(recorded) => Write::Series {
                name: recorded.name.clone(),
                count: recorded.count.saturating_add(1),
            },
            None => Write::Create,
        }
    }

    /// `write` for `key` succeeded at `now`; `name` is the Event's.
    pub fn written(&mut self, key: SeriesKey, name: String, write: &Write, now: Timestamp) {
        let count = match write {
            Write::Create => 1,
            Write::Series { count, .. } => *count,
        };
        self.recorded.insert(key, Recorded { name, count }, now);
    }

    pub fn len(&self) -> usize {
        self.recorded.len()
    }

    pub fn is_empty(&self) -> bool {
        self.recorded.is_empty()
    }
}

/// Records events for one reporter (cheap to clone).
#[derive(Clone)]
pub struct EventRecorder {
    client: kube::Client,
    reporter: Reporter,
    series: Arc<Mutex<SeriesCache>>,
}

impl EventRecorder {
    pub fn new(client: kube::Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            series: Arc::new(Mutex::new(SeriesCache::new(SERIES_CAPACITY))),
        }
    }

    fn series(&self) -> std::sync::MutexGuard<'_, SeriesCache> {
        self.series.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates `event` about `regarding` in its namespace, or counts it in
    /// the series of the same event told within [`SERIES_WINDOW`].
    pub async fn publish(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let now = Clock::System.now();
        let key = SeriesKey::of(event, regarding);
        let write = self.series().write_for(&key, now);
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        // The answers are read for the created Event's name only: decoding
        // each whole Event was about 1% of a replica's CPU per firing.
        let client = &self.client;
        let events =
            kube::core::Request::new(<K8sEvent as kube::Resource>::url_path(&(), Some(namespace)));
        let name = match &write {
            Write::Create => {
                let body = serde_json::to_vec(&self.new_event(event, regarding, now))
                    .map_err(kube::Error::SerdeError)?;
                let request = traced(events.create(&PostParams::default(), body))?;
                let created: Named = client.request(request).await?;
                created.metadata.name.unwrap_or_default()
            }
            Write::Series { name, count } => {
                let series = serde_json::json!({
                    "series": EventSeries {
                        count: *count,
                        last_observed_time: MicroTime(now),
                    }
                });
                let request =
                    traced(events.patch(name, &PatchParams::default(), &Patch::Merge(&series)))?;
                client.request_text(request).await?;
                name.clone()
            }
        };
        self.series().written(key, name, &write, now);
        Ok(())
    }

    /// The Event as kube-runtime's recorder makes it (name: the object's
    /// name and the time in hexadecimal nanoseconds).
    fn new_event(&self, event: &Event, regarding: &ObjectReference, now: Timestamp) -> K8sEvent {
        let controller = &self.reporter.controller;
        K8sEvent {
            action: Some(event.action.clone()),
            reason: Some(event.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            note: event.note.clone(),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(controller),
                    now.as_nanosecond()
                )),
                ..ObjectMeta::default()
            },
            reporting_controller: Some(controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| controller.clone()),
            ),
            type_: Some(type_name(event.type_).to_owned()),
            related: event.secondary.clone(),
            ..K8sEvent::default()
        }
    }
}

/// An object's name, all that is read of a created Event.
#[derive(serde::Deserialize)]
struct Named {
    #[serde(default)]
    metadata: NameOnly,
}

#[derive(Default, serde::Deserialize)]
struct NameOnly {
    #[serde(default)]
    name: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, note: &str) -> SeriesKey {
        let regarding = ObjectReference {
            kind: Some("CronJob".into()),
            namespace: Some("tenant".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        };
        let event = Event {
            type_: EventType::Normal,
            reason: "SuccessfulCreate".into(),
            note: Some(note.into()),
            action: "SuccessfulCreate".into(),
            secondary: None,
        };
        SeriesKey::of(&event, &regarding)
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).expect("a valid time")
    }

    /// Observes `key` at `now` and records the write as succeeded.
    fn observe(cache: &mut SeriesCache, key: &SeriesKey, now: Timestamp) -> Write {
        let write = cache.write_for(key, now);
        let name = match &write {
            Write::Create => format!("{}-{}", key.regarding.name.as_deref().unwrap_or(""), now),
            Write::Series { name, .. } => name.clone(),
        };
        cache.written(key.clone(), name, &write, now);
        write
    }

    #[test]
    fn a_repeat_within_six_minutes_counts_in_the_first_events_series() {
        let mut cache = SeriesCache::new(16);
        let created = key("report", "Created job report-1");
        assert_eq!(observe(&mut cache, &created, at(0)), Write::Create);
        let name = format!("report-{}", at(0));
        assert_eq!(
            observe(&mut cache, &created, at(60)),
            Write::Series {
                name: name.clone(),
                count: 2
            }
        );
        // The window runs from the last observation: 6 minutes after the
        // first but 5 after the second still counts.
        assert_eq!(
            observe(&mut cache, &created, at(360)),
            Write::Series { name, count: 3 }
        );
        // Six minutes of silence: a new event.
        assert_eq!(observe(&mut cache, &created, at(720)), Write::Create);
    }

    #[test]
    fn events_with_another_message_or_object_are_their_own() {
        let mut cache = SeriesCache::new(16);
        assert_eq!(
            observe(&mut cache, &key("report", "Created job report-1"), at(0)),
            Write::Create
        );
        // Upstream tells these apart: each job's name is shown.
        assert_eq!(
            observe(&mut cache, &key("report", "Created job report-2"), at(60)),
            Write::Create
        );
        assert_eq!(
            observe(&mut cache, &key("backup", "Created job report-1"), at(60)),
            Write::Create
        );
        assert_eq!(cache.len(), 3);
    }

    #[test]
    fn a_failed_write_is_not_remembered() {
        let mut cache = SeriesCache::new(16);
        let created = key("report", "Created job report-1");
        assert_eq!(cache.write_for(&created, at(0)), Write::Create);
        // No `written`: the create failed, so the next try creates again.
        assert_eq!(cache.write_for(&created, at(1)), Write::Create);
    }

    #[test]
    fn when_full_the_event_observed_longest_ago_is_forgotten() {
        let mut cache = SeriesCache::new(2);
        let (a, b, c) = (key("a", "x"), key("b", "x"), key("c", "x"));
        observe(&mut cache, &a, at(0));
        observe(&mut cache, &b, at(1));
        // a observed again: b is now the one observed longest ago.
        observe(&mut cache, &a, at(2));
        observe(&mut cache, &c, at(3));
        assert_eq!(cache.len(), 2);
        assert!(matches!(
            cache.write_for(&a, at(4)),
            Write::Series { count: 3, .. }
        ));
        assert_eq!(cache.write_for(&b, at(4)), Write::Create);
        assert!(matches!(cache.write_for(&c, at(4)), Write::Series { .. }));
    }

    #[test]
    fn repeats_leave_the_order_bounded() {
        let mut cache = SeriesCache::new(4);
        let same = key("report", "Created job report-1");
        for second in 0..1_000 {
            observe(&mut cache, &same, at(second));
        }
        assert_eq!(cache.len(), 1);
    }
}
