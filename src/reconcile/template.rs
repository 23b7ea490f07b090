//! The Job template as an idle actor keeps it: compressed JSON.
//!
//! The typed `JobTemplateSpec` (a `PodSpec` of mostly empty optional fields)
//! takes several KiB in memory; its JSON takes a few hundred bytes, most of
//! them key names every template repeats. zstd with a small dictionary of
//! those names brings a realistic template to about half of its JSON. The
//! template is decoded only when a Job is created.

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use std::sync::LazyLock;

/// Fragments that recur in Job templates (raw-content zstd dictionary). The
/// later a fragment, the cheaper its reference: the most common come last.
const DICTIONARY: &str = concat!(
    r#""securityContext":{"runAsNonRoot":true,"runAsUser":"allowPrivilegeEscalation":false,"readOnlyRootFilesystem":true,"capabilities":{"drop":["ALL"]},"seccompProfile":{"type":"RuntimeDefault"}}"#,
    r#""volumeMounts":[{"mountPath":"/","name":""volumes":[{"name":"configMap":{"name":"secret":{"secretName":"emptyDir":{}"#,
    r#""nodeSelector":{"tolerations":[{"key":"operator":"Exists","effect":"NoSchedule""affinity":{"#,
    r#""serviceAccountName":"imagePullSecrets":[{"name":"imagePullPolicy":"IfNotPresent""imagePullPolicy":"Always""#,
    r#""activeDeadlineSeconds":"ttlSecondsAfterFinished":"completions":"parallelism":"backoffLimit":"#,
    r#""valueFrom":{"secretKeyRef":{"configMapKeyRef":{"fieldRef":{"fieldPath":"metadata.name"}"key":""#,
    r#""annotations":{"labels":{"app.kubernetes.io/name":"app.kubernetes.io/instance":"app.kubernetes.io/component":"app":""#,
    r#""resources":{"limits":{"cpu":"memory":"requests":{"cpu":"100m","memory":"128Mi""256Mi""512Mi""1Gi"}}"#,
    r#""env":[{"name":"value":""args":["command":["/bin/sh","-c","#,
    r#"{"metadata":{"creationTimestamp":null},"spec":{"template":{"metadata":{"spec":{"containers":[{"image":"name":""#,
    r#""restartPolicy":"OnFailure""restartPolicy":"Never"}}}}"#,
);

const LEVEL: i32 = 3;

static ENCODER: LazyLock<zstd::dict::EncoderDictionary<'static>> =
    LazyLock::new(|| zstd::dict::EncoderDictionary::copy(DICTIONARY.as_bytes(), LEVEL));
static DECODER: LazyLock<zstd::dict::DecoderDictionary<'static>> =
    LazyLock::new(|| zstd::dict::DecoderDictionary::copy(DICTIONARY.as_bytes()));

/// A Job template, compressed; cloning copies the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct CompactTemplate(Box<[u8]>);

impl CompactTemplate {
    pub fn new(template: &JobTemplateSpec) -> Self {
        // Serializing an API object cannot fail (every map key is a string).
        Self::from_json(&serde_json::to_vec(template).unwrap_or_default())
    }

    /// The template whose JSON is `json` (as the API server sent it).
    pub fn from_json(json: &[u8]) -> Self {
        // Compressing into a growable buffer cannot fail.
        let compressed = zstd::bulk::Compressor::with_prepared_dictionary(&ENCODER)
            .and_then(|mut c| c.compress(json))
            .unwrap_or_default();
        Self(compressed.into())
    }

    /// The template. Decoding what `new` encoded cannot fail; if it ever
    /// did, the result would be an empty template, which the API server
    /// rejects on create (a FailedCreate event), never a crash.
    pub fn decode(&self) -> JobTemplateSpec {
        let json = zstd::bulk::Decompressor::with_prepared_dictionary(&DECODER)
            .and_then(|mut d| {
                let capacity = zstd::bulk::Decompressor::upper_bound(&self.0).unwrap_or(1 << 20);
                d.decompress(&self.0, capacity)
            })
            .unwrap_or_default();
        serde_json::from_slice(&json).unwrap_or_default()
    }

    /// The size kept in memory, in bytes.
    pub fn encoded_len(&self) -> usize {
        self.0.len()
    }
}

impl std::fmt::Debug for CompactTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CompactTemplate({} bytes)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(i: usize) -> JobTemplateSpec {
        serde_json::from_value(json!({
            "metadata": {"labels": {"app.kubernetes.io/name": "nightly-report"}},
            "spec": {
                "backoffLimit": 2,
                "template": {"spec": {
                    "restartPolicy": "OnFailure",
                    "containers": [{
                        "name": "report",
                        "image": "registry.example.com/reports/nightly:1.4.2",
                        "command": ["/bin/report", format!("--shard={i}")],
                        "env": [{"name": "TENANT", "value": format!("tenant-{i}")}],
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}
                    }]
                }}
            }
        }))
        .unwrap()
    }

    #[test]
    fn round_trips_and_is_smaller_than_the_json() {
        for i in [0, 7, 123_456] {
            let original = template(i);
            let compact = CompactTemplate::new(&original);
            assert_eq!(compact.decode(), original);
            let json = serde_json::to_vec(&original).unwrap().len();
            assert!(
                compact.encoded_len() * 10 < json * 7,
                "{} of {json}",
                compact.encoded_len()
            );
        }
    }

    #[test]
    fn an_empty_template_round_trips() {
        let empty = JobTemplateSpec::default();
        assert_eq!(CompactTemplate::new(&empty).decode(), empty);
    }

    #[test]
    fn undecodable_bytes_give_an_empty_template() {
        assert_eq!(
            CompactTemplate(vec![1, 2, 3].into()).decode(),
            JobTemplateSpec::default()
        );
    }
}
