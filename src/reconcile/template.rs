//! The Job template as an idle actor keeps it: compressed JSON (or
//! protobuf, as a protobuf load brought it), or, past a bound, nothing but
//! its size and digest.
//!
//! The typed `JobTemplateSpec` (a `PodSpec` of mostly empty optional fields)
//! takes several KiB in memory; its JSON takes a few hundred bytes, most of
//! them key names every template repeats. zstd with a small dictionary of
//! those names brings a realistic template to about half of its JSON. The
//! template is decoded only when a Job is created.
//!
//! A template that compresses to more than [`KEPT_TEMPLATE_BYTES`] is not
//! kept at all ([`CompactTemplate::Left`]): what a tenant writes into a
//! template (up to the API server's object limit, about 1.5 MiB, and
//! random bytes do not compress) would otherwise be the replica's memory,
//! which every tenant shares. Its Job is made from the CronJob read again
//! at that moment ([`crate::reconcile::Lookup::JobTemplate`]): one GET per
//! Job of such a CronJob, and nothing held between its firings.

use super::raw_json::RawJson;
use crate::k8s_proto;
use k8s_openapi::api::batch::v1::JobTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use prost::Message as _;
use serde::Deserialize;
use std::cell::RefCell;
use std::collections::BTreeMap;
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

thread_local! {
    /// One compression context per thread, made on first use: made per
    /// template, its workspace allocated and cleared each time, it was
    /// about a third of a template's compression (the actors benchmark,
    /// docs/performance.md). Its workspace follows the largest template
    /// compressed lately (a few MiB after a 1 MB one); zstd shrinks it
    /// again once it has long been far too big.
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
    /// One decompression context per thread, for the same reason.
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// A compressed template is kept up to this many bytes (a realistic one
/// takes a few hundred); above it, only its digest.
pub const KEPT_TEMPLATE_BYTES: usize = 16 * 1024;

/// A Job template, compressed, or left with the API server when too big;
/// cloning copies the bytes.
#[derive(Clone, PartialEq, Eq)]
pub enum CompactTemplate {
    /// zstd with [`DICTIONARY`], at most [`KEPT_TEMPLATE_BYTES`], of the
    /// template's JSON, or of its protobuf message after
    /// [`k8s_proto::MAGIC`] (which no JSON starts with).
    Kept(Box<[u8]>),
    /// Too big to keep: read again when a Job is made. The digest of its
    /// JSON tells one version from another (a spec update's comparison).
    /// One field, so the enum stays the size of a boxed slice (the
    /// variant sits in the box's null-pointer niche).
    Left { digest: u64 },
}

impl Default for CompactTemplate {
    fn default() -> Self {
        Self::Kept(Box::default())
    }
}

impl CompactTemplate {
    pub fn new(template: &JobTemplateSpec) -> Self {
        // Serializing an API object cannot fail (every map key is a string).
        Self::from_json(&serde_json::to_vec(template).unwrap_or_default())
    }

    /// The template whose JSON is `json` (as the API server sent it).
    pub fn from_json(json: &[u8]) -> Self {
        Self::compress(json)
    }

    /// The template whose protobuf message (a `JobTemplateSpec`) is
    /// `message`, as the API server sent it.
    pub fn from_protobuf(message: &[u8]) -> Self {
        Self::compress(&[k8s_proto::MAGIC.as_slice(), message].concat())
    }

    fn compress(encoded: &[u8]) -> Self {
        // Compressing into a growable buffer cannot fail.
        let compressed = COMPRESSOR
            .with_borrow_mut(|compressor| {
                if compressor.is_none() {
                    *compressor = zstd::bulk::Compressor::with_prepared_dictionary(&ENCODER).ok();
                }
                compressor.as_mut()?.compress(encoded).ok()
            })
            .unwrap_or_default();
        if compressed.len() > KEPT_TEMPLATE_BYTES {
            return Self::Left {
                digest: digest(encoded),
            };
        }
        Self::Kept(compressed.into())
    }

    /// The template, if it is kept. Decoding what `new` encoded cannot
    /// fail; if it ever did, the result would be an empty template, which
    /// the API server rejects on create (a FailedCreate Event), never a
    /// crash.
    pub fn decode(&self) -> Option<JobTemplate> {
        let encoded = self.decompress()?;
        Some(match encoded.strip_prefix(k8s_proto::MAGIC) {
            Some(message) => JobTemplate::from_protobuf(message).unwrap_or_default(),
            None => JobTemplate::from_json(&encoded),
        })
    }

    fn decompress(&self) -> Option<Vec<u8>> {
        let Self::Kept(compressed) = self else {
            return None;
        };
        let encoded = DECOMPRESSOR
            .with_borrow_mut(|decompressor| {
                if decompressor.is_none() {
                    *decompressor =
                        zstd::bulk::Decompressor::with_prepared_dictionary(&DECODER).ok();
                }
                let capacity = zstd::bulk::Decompressor::upper_bound(compressed).unwrap_or(1 << 20);
                decompressor.as_mut()?.decompress(compressed, capacity).ok()
            })
            .unwrap_or_default();
        Some(encoded)
    }

    /// The size kept in memory, in bytes.
    pub fn encoded_len(&self) -> usize {
        match self {
            Self::Kept(compressed) => compressed.len(),
            Self::Left { .. } => 0,
        }
    }
}

/// A kept template, read as far as upstream's `getJobFromTemplate2` reads
/// it: its labels and annotations (copied to the Job), its spec in the
/// encoding it came in (the Job's spec, sent back so, never decoded into
/// this build's types: a field of a newer API server's reaches the Job as
/// upstream's controller of that release copies it) and whether that spec
/// sets `ttlSecondsAfterFinished` (the slot's finalizer).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobTemplate {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub spec: EncodedSpec,
    pub ttl_seconds_after_finished: Option<i32>,
}

/// A `JobSpec` as it came: JSON (a watch's, a JSON list's, the CRD's) or
/// protobuf (a protobuf load's).
#[derive(Debug, Clone, PartialEq)]
pub enum EncodedSpec {
    /// Its JSON; `None` where the template has no spec.
    Json(Option<RawJson>),
    /// A `JobSpec` message.
    Protobuf(Vec<u8>),
}

impl Default for EncodedSpec {
    fn default() -> Self {
        Self::Json(None)
    }
}

impl JobTemplate {
    /// The template whose JSON is `json`. Bytes that are not a template
    /// give an empty one, which the API server rejects on create (a
    /// FailedCreate Event), never a crash.
    pub fn from_json(json: &[u8]) -> Self {
        Self::decode_json(json).unwrap_or_default()
    }

    fn decode_json(json: &[u8]) -> Result<Self, serde_json::Error> {
        #[derive(Deserialize)]
        struct Received {
            #[serde(default)]
            metadata: Option<Metadata>,
            #[serde(default)]
            spec: Option<RawJson>,
        }
        #[derive(Default, Deserialize)]
        struct Metadata {
            #[serde(default)]
            labels: Option<BTreeMap<String, String>>,
            #[serde(default)]
            annotations: Option<BTreeMap<String, String>>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Ttl {
            #[serde(default)]
            ttl_seconds_after_finished: Option<i32>,
        }
        let Received { metadata, spec } = serde_json::from_slice(json)?;
        let ttl_seconds_after_finished = match &spec {
            Some(spec) => {
                serde_json::from_slice::<Ttl>(spec.as_bytes())?.ttl_seconds_after_finished
            }
            None => None,
        };
        let metadata = metadata.unwrap_or_default();
        Ok(Self {
            labels: metadata.labels.unwrap_or_default(),
            annotations: metadata.annotations.unwrap_or_default(),
            spec: EncodedSpec::Json(spec),
            ttl_seconds_after_finished,
        })
    }

    /// The template whose protobuf message (a `JobTemplateSpec`) is
    /// `message`.
    pub fn from_protobuf(message: &[u8]) -> Result<Self, prost::DecodeError> {
        let template = k8s_proto::JobTemplateSpec::decode(message)?;
        let metadata = template.metadata.unwrap_or_default();
        let spec = template.spec.unwrap_or_default();
        let ttl = k8s_proto::JobSpecTtl::decode(spec.as_slice())?.ttl_seconds_after_finished;
        Ok(Self {
            labels: metadata.labels,
            annotations: metadata.annotations,
            spec: EncodedSpec::Protobuf(spec),
            ttl_seconds_after_finished: ttl,
        })
    }

    /// The typed template (tests, and the command-line tools), if it came
    /// as JSON: fields this build's types do not know are dropped here,
    /// which is why a Job is never built from it.
    pub fn typed(self) -> Option<JobTemplateSpec> {
        let EncodedSpec::Json(spec) = self.spec else {
            return None;
        };
        let non_empty = |map: BTreeMap<String, String>| (!map.is_empty()).then_some(map);
        let (labels, annotations) = (non_empty(self.labels), non_empty(self.annotations));
        Some(JobTemplateSpec {
            metadata: (labels.is_some() || annotations.is_some()).then(|| ObjectMeta {
                labels,
                annotations,
                ..ObjectMeta::default()
            }),
            spec: spec.and_then(|spec| serde_json::from_slice(spec.as_bytes()).ok()),
        })
    }
}

/// A typed template, as the API server would send it in JSON.
impl From<&JobTemplateSpec> for JobTemplate {
    fn from(template: &JobTemplateSpec) -> Self {
        // Serializing an API object cannot fail (every map key is a string).
        Self::from_json(&serde_json::to_vec(template).unwrap_or_default())
    }
}

/// FNV-1a, 64 bits: stable across processes and builds, unlike std's
/// hasher, and the digest only tells versions of one template apart.
fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl std::fmt::Debug for CompactTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Kept(compressed) => write!(f, "CompactTemplate({} bytes)", compressed.len()),
            Self::Left { digest } => write!(f, "CompactTemplate(left, digest {digest:016x})"),
        }
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
            assert_eq!(
                compact.decode().and_then(JobTemplate::typed),
                Some(original.clone())
            );
            let json = serde_json::to_vec(&original).unwrap().len();
            assert!(
                compact.encoded_len() * 10 < json * 7,
                "{} of {json}",
                compact.encoded_len()
            );
        }
    }

    #[test]
    fn a_threads_contexts_serve_template_after_template_alike() {
        let first = CompactTemplate::new(&template(1));
        assert!(matches!(
            CompactTemplate::new(&incompressible(1_000_000)),
            CompactTemplate::Left { .. }
        ));
        assert_eq!(
            CompactTemplate::new(&template(2))
                .decode()
                .and_then(JobTemplate::typed),
            Some(template(2))
        );
        // The reused context keeps its dictionary and level: the same bytes.
        assert_eq!(CompactTemplate::new(&template(1)), first);
        assert_eq!(
            first.decode().and_then(JobTemplate::typed),
            Some(template(1))
        );
    }

    #[test]
    fn an_empty_template_round_trips() {
        let empty = JobTemplateSpec::default();
        assert_eq!(
            CompactTemplate::new(&empty)
                .decode()
                .and_then(JobTemplate::typed),
            Some(empty)
        );
    }

    #[test]
    fn undecodable_bytes_give_an_empty_template() {
        assert_eq!(
            CompactTemplate::Kept(vec![1, 2, 3].into())
                .decode()
                .and_then(JobTemplate::typed),
            Some(JobTemplateSpec::default())
        );
    }

    fn incompressible(bytes: usize) -> JobTemplateSpec {
        serde_json::from_value(json!({
            "metadata": {"annotations": {"noise": shardcron_harness::incompressible_text(bytes, 1)}},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
        }))
        .unwrap()
    }

    #[test]
    fn a_template_past_the_bound_is_left_with_only_its_digest() {
        let big = incompressible(1_000_000);
        let left = CompactTemplate::new(&big);
        assert!(matches!(left, CompactTemplate::Left { .. }));
        assert_eq!(size_of::<CompactTemplate>(), size_of::<Box<[u8]>>());
        assert_eq!(left.encoded_len(), 0);
        assert_eq!(left.decode(), None);
        assert_eq!(left, CompactTemplate::new(&big));
        // Another version of it is told apart.
        assert_ne!(left, CompactTemplate::new(&incompressible(1_000_001)));
        // Just under the bound, it is kept.
        let small = incompressible(KEPT_TEMPLATE_BYTES / 2);
        assert!(matches!(
            CompactTemplate::new(&small),
            CompactTemplate::Kept(_)
        ));
        assert_eq!(
            CompactTemplate::new(&small)
                .decode()
                .and_then(JobTemplate::typed),
            Some(small)
        );
    }
}
