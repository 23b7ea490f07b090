//! Kubernetes' protobuf encoding of built-in objects, as far as the bulk
//! loads read it ([`cronjob`], [`list`]) and a Job create writes it
//! ([`job`]); the messages themselves are [`crate::k8s_proto`].
//!
//! Why: at a cold start of 10^6 CronJobs, 42 % of kube-apiserver's CPU
//! went to encoding the loads' streaming lists as JSON (docs/performance.md,
//! S7); in protobuf one such list cost it 4.6 times less. kube-controller-
//! manager reads and writes built-in kinds in protobuf.
//!
//! The wire format: an object is `k8s\0` followed by a `runtime.Unknown`
//! whose `raw` is the object's message (a list's too: its items are the
//! messages without envelopes). Go's generated marshallers
//! write every non-pointer field, empty or not: an empty string or a zero
//! time is read as absent, as its JSON (`omitempty`) would leave it out.
//! Custom resources have no protobuf: the shardcron.io CronJob stays JSON.

pub mod cronjob;
pub mod job;
pub mod list;

use crate::k8s_proto::{self, MAGIC};
use prost::Message as _;

/// `Accept` of a list or GET in protobuf.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The largest item of a list, or field of its envelope, read: kube-apiserver
/// refuses objects past about 1.5 MiB (etcd's request limit); a length
/// beyond it is a broken body, not a big object. (A page of a paginated
/// list is read whole, as kube-rs reads a JSON one: at most 500 CronJobs.)
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// Why a protobuf answer could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    #[error("not a Kubernetes protobuf object (no k8s\\0 prefix)")]
    NoMagic,
    #[error("decoding {what}: {source}")]
    Decode {
        what: &'static str,
        #[source]
        source: prost::DecodeError,
    },
    #[error("a {0}-byte frame, past the bound of {MAX_MESSAGE_BYTES}")]
    TooBig(usize),
    #[error("the list ended before its last item")]
    Truncated,
    #[error("not a list in protobuf: {0}")]
    Malformed(&'static str),
    #[error("expected a {expected}, the server sent a {got}")]
    Kind { expected: &'static str, got: String },
}

/// The message of an enveloped object of `kind`; a `Status` in its place
/// is the error it tells.
pub(crate) fn message_of(kind: &'static str, object: &[u8]) -> Result<Vec<u8>, ReadError> {
    let (got, raw) = k8s_proto::open_envelope(object).ok_or(ProtobufError::NoMagic)?;
    if got == "Status" {
        return Err(ReadError::Status(Box::new(status_of(&raw)?)));
    }
    if got != kind {
        return Err(ProtobufError::Kind {
            expected: kind,
            got,
        }
        .into());
    }
    Ok(raw)
}

/// What reading an object can meet: bytes that are not one, or a `Status`.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Protobuf(#[from] ProtobufError),
    #[error("the server answered: {0}")]
    Status(Box<kube::core::Status>),
}

/// A `Status` (an error answer, or a watch's ERROR event) as kube-rs has it.
fn status_of(raw: &[u8]) -> Result<kube::core::Status, ProtobufError> {
    k8s_proto::Status::decode(raw)
        .map(Into::into)
        .map_err(|source| ProtobufError::Decode {
            what: "a Status",
            source,
        })
}

/// A `Status` from an error answer's body, enveloped protobuf or JSON
/// (whichever the server chose), else one made from the HTTP status and the
/// body's text.
pub fn error_status(code: http::StatusCode, body: &[u8]) -> kube::core::Status {
    let parsed = if body.starts_with(MAGIC) {
        match message_of("Status", body) {
            Err(ReadError::Status(status)) => Some(*status),
            _ => None,
        }
    } else {
        serde_json::from_slice::<kube::core::Status>(body).ok()
    };
    parsed.unwrap_or_else(|| {
        kube::core::Status::failure(&String::from_utf8_lossy(body), "").with_code(code.as_u16())
    })
}

#[cfg(test)]
mod tests;
