//! A batch/v1 CronJob as a `shardcron.io/v1` one: the same spec, its own
//! labels and annotations, and its last slot carried in
//! [`LAST_SCHEDULE_ANNOTATION`] (a new object's status cannot be set on
//! create), so that the copy neither runs that slot again nor skips the
//! ones after it. Pure: JSON in, JSON out.

use serde_json::{Map, Value, json};
use thiserror::Error;

pub use crate::reconcile::LAST_SCHEDULE_ANNOTATION;

/// Annotations not carried over: kubectl's record of the original's last
/// apply would make the next `kubectl apply` of the copy compute its diff
/// against another object.
const DROPPED_ANNOTATIONS: [&str; 1] = ["kubectl.kubernetes.io/last-applied-configuration"];

/// Why an object could not be converted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConvertError {
    #[error("expected a batch/v1 CronJob, found {found}")]
    NotABatchCronJob { found: String },
    #[error("the CronJob has no metadata.name")]
    MissingName,
    #[error("CronJob {name} has no spec")]
    MissingSpec { name: String },
}

/// The `shardcron.io/v1` copy of the batch/v1 CronJob `cronjob`; `resume`:
/// the copy is not suspended (the move suspends the original first, so
/// that its last slot is final when it is copied).
pub fn to_shardcron(cronjob: &Value, resume: bool) -> Result<Value, ConvertError> {
    let api_version = cronjob.get("apiVersion").and_then(Value::as_str);
    let kind = cronjob.get("kind").and_then(Value::as_str);
    if api_version != Some("batch/v1") || kind != Some("CronJob") {
        return Err(ConvertError::NotABatchCronJob {
            found: format!(
                "{} {}",
                api_version.unwrap_or("(no apiVersion)"),
                kind.unwrap_or("(no kind)")
            ),
        });
    }
    let meta = cronjob.get("metadata").cloned().unwrap_or_default();
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .ok_or(ConvertError::MissingName)?;
    let spec = cronjob
        .get("spec")
        .filter(|spec| spec.is_object())
        .ok_or_else(|| ConvertError::MissingSpec {
            name: name.to_owned(),
        })?;
    let mut spec = spec.clone();
    if resume {
        spec["suspend"] = json!(false);
    }
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(name));
    for field in ["namespace", "labels"] {
        if let Some(value) = meta.get(field) {
            metadata.insert(field.into(), value.clone());
        }
    }
    let mut annotations: Map<String, Value> = meta
        .get("annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for dropped in DROPPED_ANNOTATIONS {
        annotations.remove(dropped);
    }
    match cronjob
        .pointer("/status/lastScheduleTime")
        .and_then(Value::as_str)
    {
        Some(last) => {
            annotations.insert(LAST_SCHEDULE_ANNOTATION.into(), json!(last));
        }
        // Never run: the copy starts from its own creation, as the original
        // would have from its own.
        None => {
            annotations.remove(LAST_SCHEDULE_ANNOTATION);
        }
    }
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    Ok(json!({
        "apiVersion": "shardcron.io/v1",
        "kind": "CronJob",
        "metadata": metadata,
        "spec": spec,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn original() -> Value {
        json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {
                "name": "report", "namespace": "team-a", "uid": "u-1",
                "resourceVersion": "42", "generation": 3,
                "creationTimestamp": "2024-01-01T00:00:00Z",
                "labels": {"app": "report"},
                "annotations": {
                    "example.com/owner": "team-a",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}"
                },
                "managedFields": [{"manager": "kubectl"}],
                "finalizers": ["example.com/x"]
            },
            "spec": {"schedule": "*/5 * * * *", "suspend": true,
                     "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}},
            "status": {"lastScheduleTime": "2024-03-01T10:05:00Z",
                       "lastSuccessfulTime": "2024-03-01T10:05:07Z",
                       "active": [{"name": "report-28493405"}]}
        })
    }

    #[test]
    fn the_copy_keeps_spec_labels_and_annotations_and_carries_the_last_slot() {
        let copy = to_shardcron(&original(), false).unwrap();
        assert_eq!(
            copy,
            json!({
                "apiVersion": "shardcron.io/v1", "kind": "CronJob",
                "metadata": {
                    "name": "report", "namespace": "team-a",
                    "labels": {"app": "report"},
                    "annotations": {
                        "example.com/owner": "team-a",
                        "shardcron.io/last-schedule-time": "2024-03-01T10:05:00Z"
                    }
                },
                "spec": original()["spec"],
            })
        );
    }

    #[test]
    fn resume_unsuspends_the_copy_only() {
        let copy = to_shardcron(&original(), true).unwrap();
        assert_eq!(copy["spec"]["suspend"], false);
        assert_eq!(copy["spec"]["schedule"], "*/5 * * * *");
    }

    #[test]
    fn a_cronjob_that_never_ran_carries_no_slot() {
        let mut never = original();
        never["status"] = json!({});
        never["metadata"]["annotations"] =
            json!({LAST_SCHEDULE_ANNOTATION: "2020-01-01T00:00:00Z"});
        let copy = to_shardcron(&never, false).unwrap();
        assert_eq!(copy["metadata"].get("annotations"), None);
    }

    #[test]
    fn other_objects_are_refused_by_name() {
        let mut job = original();
        job["kind"] = json!("Job");
        assert_eq!(
            to_shardcron(&job, false).unwrap_err().to_string(),
            "expected a batch/v1 CronJob, found batch/v1 Job"
        );
        let mut ours = original();
        ours["apiVersion"] = json!("shardcron.io/v1");
        assert!(to_shardcron(&ours, false).is_err());
        let mut nameless = original();
        nameless["metadata"] = json!({});
        assert_eq!(
            to_shardcron(&nameless, false),
            Err(ConvertError::MissingName)
        );
        let mut specless = original();
        specless.as_object_mut().unwrap().remove("spec");
        assert_eq!(
            to_shardcron(&specless, false),
            Err(ConvertError::MissingSpec {
                name: "report".into()
            })
        );
    }
}
