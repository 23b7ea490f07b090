//! `cronjobs.shardcron.io`: batch/v1's CronJob as a CustomResourceDefinition,
//! for clusters whose kube-controller-manager cannot be told to leave
//! CronJobs alone (managed control planes).
//!
//! One source of truth: the schema is the API server's own published
//! OpenAPI v3 for `batch/v1` ([`structural`] inlines it), and this module
//! adds only what batch/v1 does in Go and a CRD must say in the schema:
//! batch/v1's defaults, the validation CEL can express (the cron syntax it
//! cannot: the controller reports that, as upstream, with a Warning event
//! naming the field), the columns `kubectl get cronjobs.batch` prints, the
//! status subresource and the names ([`from_batch`] copies a batch/v1 CronJob
//! into one). `deploy/crd/` holds the definition
//! generated from the pinned Kubernetes; `tests/crd.rs` regenerates it from
//! the local API server and fails if the committed file differs. Its
//! commands: `shardcron crd` ([`command`]) and `shardcron convert`.

pub mod command;
pub mod from_batch;
pub mod structural;

use crate::reconcile::CronJobKind;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Map, Value, json};
use structural::StructuralError;
use thiserror::Error;

// The names the controller reads and writes these objects by.
pub const GROUP: &str = CronJobKind::Shardcron.group();
pub const VERSION: &str = CronJobKind::Shardcron.version();
pub const KIND: &str = CronJobKind::KIND;
pub const PLURAL: &str = CronJobKind::PLURAL;
/// Not batch's `cj`: kubectl would resolve a shared short name to the
/// built-in group first, so `cj` could never reach these objects.
pub const SHORT_NAME: &str = "scj";

/// The OpenAPI path the schema is read from: `kubectl get --raw` it.
pub const OPENAPI_PATH: &str = "/openapi/v3/apis/batch/v1";

const CRONJOB: &str = "io.k8s.api.batch.v1.CronJob";

/// Why the definition could not be made from an OpenAPI document.
#[derive(Debug, Error)]
pub enum CrdError {
    #[error("the document is not OpenAPI v3 (no components.schemas)")]
    NotOpenApi,
    #[error(transparent)]
    Structural(#[from] StructuralError),
    #[error("batch/v1's CronJob schema has no field {0}")]
    MissingField(String),
    #[error("the definition does not decode as a CustomResourceDefinition: {0}")]
    Typed(#[from] serde_json::Error),
}

/// The CustomResourceDefinition of `cronjobs.shardcron.io/v1` from the
/// API server's OpenAPI v3 document for batch/v1 (`OPENAPI_PATH`).
pub fn definition(openapi: &Value) -> Result<CustomResourceDefinition, CrdError> {
    let schemas = openapi
        .pointer("/components/schemas")
        .and_then(Value::as_object)
        .ok_or(CrdError::NotOpenApi)?;
    let mut root = match structural::schema(schemas, CRONJOB)? {
        Value::Object(root) => root,
        _ => return Err(CrdError::NotOpenApi),
    };
    batch_v1_semantics(&mut root)?;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{PLURAL}.{GROUP}"),
            "labels": {"app.kubernetes.io/name": "shardcron"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": format!("{KIND}List"),
                "plural": PLURAL,
                "singular": "cronjob",
                "shortNames": [SHORT_NAME],
                "categories": ["all", "shardcron"],
            },
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": printer_columns(),
                "schema": {"openAPIV3Schema": root},
            }],
        },
    });
    Ok(serde_json::from_value(crd)?)
}

/// The definition as YAML, as committed in deploy/crd/.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, CrdError> {
    // YAML of a value that serialized to JSON cannot fail; the JSON error
    // type is kept for the one path that can.
    let value = serde_json::to_value(crd)?;
    Ok(serde_yaml_ng::to_string(&value).unwrap_or_default())
}

/// `kubectl get cronjobs.batch`'s columns. ACTIVE lists the active Jobs'
/// names: a printer column is a JSONPath and cannot count.
fn printer_columns() -> Value {
    json!([
        {"name": "Schedule", "type": "string", "jsonPath": ".spec.schedule"},
        {"name": "Timezone", "type": "string", "jsonPath": ".spec.timeZone"},
        {"name": "Suspend", "type": "boolean", "jsonPath": ".spec.suspend"},
        {"name": "Active", "type": "string", "jsonPath": ".status.active[*].name"},
        {"name": "Last Schedule", "type": "date", "jsonPath": ".status.lastScheduleTime"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ])
}

/// What batch/v1 does in Go (`SetDefaults_CronJob`, `ValidateCronJob*`),
/// said in the schema where a CRD can say it. The messages are upstream's.
fn batch_v1_semantics(root: &mut Map<String, Value>) -> Result<(), CrdError> {
    // The root's metadata is the API server's own; a CRD may not describe it.
    let metadata = field(root, &["metadata"])?;
    metadata.clear();
    metadata.insert("type".into(), json!("object"));
    rule(
        root,
        None,
        // On create only, as upstream (an older, longer name stays valid).
        // A rule cannot point at metadata.name (not in the schema): the
        // message names it.
        "oldSelf.hasValue() || !has(self.metadata.name) || self.metadata.name.size() <= 52",
        "metadata.name: must be no more than 52 characters",
        true,
    );

    let spec = field(root, &["spec"])?;
    rule(
        spec,
        Some(".schedule"),
        // Upstream refuses a TZ in the schedule on create, and on update
        // unless the old schedule had one too and no timeZone is set.
        "!self.schedule.contains('TZ') || (oldSelf.hasValue() && oldSelf.value().schedule.contains('TZ') && !has(self.timeZone))",
        "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
        true,
    );
    set(spec, &["schedule"], "minLength", json!(1))?;
    set(spec, &["concurrencyPolicy"], "default", json!("Allow"))?;
    set(spec, &["suspend"], "default", json!(false))?;
    set(spec, &["successfulJobsHistoryLimit"], "default", json!(3))?;
    set(spec, &["failedJobsHistoryLimit"], "default", json!(1))?;
    for limit in [
        "successfulJobsHistoryLimit",
        "failedJobsHistoryLimit",
        "startingDeadlineSeconds",
    ] {
        set(spec, &[limit], "minimum", json!(0))?;
    }

    let zone = field(spec, &["timeZone"])?;
    // The longest IANA name is 32 characters; the bound keeps CEL's cost
    // estimate of the rules below small.
    zone.insert("maxLength".into(), json!(255));
    rule(
        zone,
        None,
        "self.split('/').all(p, p.matches('^[A-Za-z.\\\\-_0-9+]{1,14}$') && p != '.' && p != '..' && !p.startsWith('-'))",
        "unknown time zone",
        false,
    );
    rule(
        zone,
        None,
        "self.lowerAscii() != 'local'",
        "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
        false,
    );
    rule(
        zone,
        None,
        // CEL loads the zone as Go's time.LoadLocation does (the API
        // server's tzdata); an unknown name fails the evaluation.
        "timestamp('2000-01-01T00:00:00Z').getHours(self) >= 0",
        "unknown time zone",
        false,
    );

    let job = field(spec, &["jobTemplate", "spec"])?;
    rule(
        job,
        Some(".selector"),
        "!has(self.selector)",
        "`selector` will be auto-generated",
        false,
    );
    rule(
        job,
        Some(".manualSelector"),
        "!has(self.manualSelector) || !self.manualSelector",
        "`manualSelector` is not supported for CronJobs",
        false,
    );
    let pod = field(job, &["template", "spec"])?;
    rule(
        pod,
        Some(".restartPolicy"),
        // batch/v1 defaults it to Always and then refuses Always for a Job.
        "has(self.restartPolicy) && self.restartPolicy in ['OnFailure', 'Never']",
        "Unsupported value: supported values: \"OnFailure\", \"Never\"",
        false,
    );
    set(pod, &["containers"], "minItems", json!(1))?;
    Ok(())
}

/// The schema of the property at `path` under `schema`.
fn field<'s>(
    schema: &'s mut Map<String, Value>,
    path: &[&str],
) -> Result<&'s mut Map<String, Value>, CrdError> {
    let mut at = schema;
    for name in path {
        at = at
            .get_mut("properties")
            .and_then(|p| p.get_mut(*name))
            .and_then(Value::as_object_mut)
            .ok_or_else(|| CrdError::MissingField(path.join(".")))?;
    }
    Ok(at)
}

fn set(
    schema: &mut Map<String, Value>,
    path: &[&str],
    keyword: &str,
    value: Value,
) -> Result<(), CrdError> {
    field(schema, path)?.insert(keyword.into(), value);
    Ok(())
}

/// Adds a CEL rule, its refusal reported at `field` (a path below the
/// schema it is on) when it names one; `transition` rules see the old
/// object as `oldSelf`, absent on create.
fn rule(
    schema: &mut Map<String, Value>,
    field: Option<&str>,
    rule: &str,
    message: &str,
    transition: bool,
) {
    let mut entry = json!({"rule": rule, "message": message});
    if let Some(field) = field {
        entry["fieldPath"] = json!(field);
    }
    if transition {
        entry["optionalOldSelf"] = json!(true);
    }
    let rules = schema
        .entry("x-kubernetes-validations")
        .or_insert_with(|| json!([]));
    if let Value::Array(rules) = rules {
        rules.push(entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trimmed batch/v1 document: enough of the CronJob for every rule.
    fn openapi() -> Value {
        let object = |properties: Value| json!({"type": "object", "properties": properties});
        let reference = |name: &str| json!({"allOf": [{"$ref": format!("#/components/schemas/{name}")}], "default": {}});
        json!({"components": {"schemas": {
            "io.k8s.api.batch.v1.CronJob": {
                "type": "object", "required": ["spec"],
                "x-kubernetes-group-version-kind": [{"group": "batch", "kind": "CronJob", "version": "v1"}],
                "properties": {
                    "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                    "metadata": reference("Meta"),
                    "spec": reference("io.k8s.api.batch.v1.CronJobSpec"),
                    "status": reference("Status")}},
            "Meta": object(json!({"name": {"type": "string"}})),
            "Status": object(json!({"lastScheduleTime": {"type": "string", "format": "date-time"}})),
            "io.k8s.api.batch.v1.CronJobSpec": {
                "type": "object", "required": ["schedule", "jobTemplate"],
                "properties": {
                    "schedule": {"type": "string", "default": ""},
                    "timeZone": {"type": "string"},
                    "concurrencyPolicy": {"type": "string", "enum": ["Allow", "Forbid", "Replace"]},
                    "suspend": {"type": "boolean"},
                    "startingDeadlineSeconds": {"type": "integer", "format": "int64"},
                    "successfulJobsHistoryLimit": {"type": "integer", "format": "int32"},
                    "failedJobsHistoryLimit": {"type": "integer", "format": "int32"},
                    "jobTemplate": reference("Template")}},
            "Template": object(json!({"spec": reference("JobSpec")})),
            "JobSpec": object(json!({
                "selector": {"type": "object"}, "manualSelector": {"type": "boolean"},
                "template": reference("PodTemplate")})),
            "PodTemplate": object(json!({"spec": reference("PodSpec")})),
            "PodSpec": {"type": "object", "required": ["containers"], "properties": {
                "restartPolicy": {"type": "string"},
                "containers": {"type": "array", "items": {"type": "object"}}}},
        }}})
    }

    #[test]
    fn the_definition_carries_batch_v1s_defaults_rules_and_columns() {
        let crd = definition(&openapi()).unwrap();
        assert_eq!(crd.metadata.name.as_deref(), Some("cronjobs.shardcron.io"));
        let version = &crd.spec.versions[0];
        assert!(version.subresources.as_ref().unwrap().status.is_some());
        let columns: Vec<&str> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            columns,
            [
                "Schedule",
                "Timezone",
                "Suspend",
                "Active",
                "Last Schedule",
                "Age"
            ]
        );
        let root = serde_json::to_value(version.schema.as_ref().unwrap()).unwrap();
        let root = &root["openAPIV3Schema"];
        assert_eq!(root["properties"]["metadata"], json!({"type": "object"}));
        let spec = &root["properties"]["spec"];
        assert_eq!(spec["properties"]["concurrencyPolicy"]["default"], "Allow");
        assert_eq!(
            spec["properties"]["successfulJobsHistoryLimit"]["default"],
            3
        );
        assert_eq!(spec["properties"]["failedJobsHistoryLimit"]["default"], 1);
        assert_eq!(spec["properties"]["suspend"]["default"], false);
        assert_eq!(
            spec["properties"]["startingDeadlineSeconds"]["minimum"],
            0.0
        );
        assert_eq!(spec["properties"]["schedule"].get("default"), None);
        assert_eq!(
            spec["properties"]["timeZone"]["x-kubernetes-validations"]
                .as_array()
                .map(Vec::len),
            Some(3)
        );
        let pod = &spec["properties"]["jobTemplate"]["properties"]["spec"]["properties"]["template"]
            ["properties"]["spec"];
        assert_eq!(pod["properties"]["containers"]["minItems"], 1);
        assert!(
            pod["x-kubernetes-validations"][0]["rule"]
                .as_str()
                .unwrap()
                .contains("OnFailure")
        );
        assert!(root.get("x-kubernetes-group-version-kind").is_none());
        assert!(
            to_yaml(&crd)
                .unwrap()
                .contains("name: cronjobs.shardcron.io")
        );
    }

    #[test]
    fn a_document_without_the_cronjob_is_a_clear_error() {
        assert!(matches!(definition(&json!({})), Err(CrdError::NotOpenApi)));
        let err = definition(&json!({"components": {"schemas": {}}})).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the OpenAPI document has no schema \"io.k8s.api.batch.v1.CronJob\" under components.schemas"
        );
    }
}
