//! A JSON value kept as bytes: re-emitted compact as it is read, never
//! built into a typed object. A Job template's spec travels so from the
//! CronJob to its Job, with every field the API server sent, including the
//! ones this build's Kubernetes types do not know.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// A JSON value, re-emitted as compact JSON while it is read: no typed
/// object is built. (serde_json's `RawValue` would copy the bytes as they
/// are, but fails where serde buffers a value first, as it does for a watch
/// event whose `object` comes before its `type`.)
#[derive(Clone, Debug, Default)]
pub struct RawJson(pub(crate) Box<[u8]>);

impl RawJson {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// What it means, for comparing two encodings of one value (bytes
    /// that are not JSON, which a deserializer never makes, read as null).
    pub fn value(&self) -> serde_json::Value {
        serde_json::from_slice(&self.0).unwrap_or_default()
    }
}

/// Equal when they mean the same: the same bytes, or the same value in
/// another key order (a template re-encoded by this build against the one
/// the API server sent).
impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0 || self.value() == other.value()
    }
}

impl Eq for RawJson {}

/// Compact JSON of `value` (tests, and a typed object sent on as JSON).
impl From<&serde_json::Value> for RawJson {
    fn from(value: &serde_json::Value) -> Self {
        Self(serde_json::to_vec(value).unwrap_or_default().into())
    }
}

impl<'de> Deserialize<'de> for RawJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut json = Vec::with_capacity(1024);
        serde_transcode::transcode(deserializer, &mut serde_json::Serializer::new(&mut json))
            .map_err(D::Error::custom)?;
        Ok(Self(json.into()))
    }
}
