//! A whole list in protobuf (a LIST without pages), its items cut out as
//! the body arrives, so that a list of 25,000 CronJobs is never held whole:
//! at most one item and one chunk of the body are.
//!
//! The body is `k8s\0` and a `runtime.Unknown` (1 `typeMeta`, 2 `raw`,
//! 3 `contentEncoding`, 4 `contentType`) whose `raw` is the list's message
//! (1 `metadata`, 2 `items`, repeated). kube-apiserver's streaming list
//! encoder (1.33+) writes the same bytes as one marshalled message. Pure:
//! no I/O.

use super::{MAX_MESSAGE_BYTES, ProtobufError};
use crate::k8s_proto::{MAGIC, TypeMeta};
use bytes::{Buf as _, Bytes, BytesMut};
use prost::Message as _;

/// The items of one enveloped list of `kind` (`CronJobList`), as the bytes
/// of its body arrive.
#[derive(Debug)]
pub struct ListItems {
    kind: &'static str,
    buffer: BytesMut,
    at: Position,
    /// The envelope's `typeMeta` named `kind`.
    kind_seen: bool,
    /// The envelope's `raw` (the list) was read to its end.
    list_read: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    Magic,
    /// Between the envelope's fields.
    Envelope,
    /// In the list's message, with this many of its bytes not cut yet.
    List {
        left: u64,
    },
}

/// A field's key and, for a length-delimited one, its length: how many
/// bytes they take.
struct Header {
    number: u64,
    wire_type: u64,
    length: u64,
    bytes: usize,
}

const VARINT: u64 = 0;
const LENGTH_DELIMITED: u64 = 2;
const RAW: u64 = 2;
const TYPE_META: u64 = 1;
const ITEMS: u64 = 2;

impl ListItems {
    pub fn new(kind: &'static str) -> Self {
        Self {
            kind,
            buffer: BytesMut::new(),
            at: Position::Magic,
            kind_seen: false,
            list_read: false,
        }
    }

    /// Takes the next bytes of the body.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next item's message (not enveloped), if its bytes have arrived.
    pub fn next_item(&mut self) -> Result<Option<Bytes>, ProtobufError> {
        loop {
            match self.at {
                Position::Magic => {
                    let Some(magic) = self.buffer.get(..MAGIC.len()) else {
                        return Ok(None);
                    };
                    if magic != MAGIC {
                        return Err(ProtobufError::NoMagic);
                    }
                    self.buffer.advance(MAGIC.len());
                    self.at = Position::Envelope;
                }
                Position::Envelope => {
                    let Some(header) = header(&self.buffer)? else {
                        return Ok(None);
                    };
                    if header.number == RAW && header.wire_type == LENGTH_DELIMITED {
                        if !self.kind_seen {
                            return Err(ProtobufError::Malformed("a list before its kind"));
                        }
                        self.buffer.advance(header.bytes);
                        self.at = Position::List {
                            left: header.length,
                        };
                        continue;
                    }
                    let Some(field) = self.whole_field(&header)? else {
                        return Ok(None);
                    };
                    if header.number == TYPE_META && header.wire_type == LENGTH_DELIMITED {
                        let kind = TypeMeta::decode(field)
                            .map_err(|source| ProtobufError::Decode {
                                what: "a list's kind",
                                source,
                            })?
                            .kind
                            .unwrap_or_default();
                        if kind != self.kind {
                            return Err(ProtobufError::Kind {
                                expected: self.kind,
                                got: kind,
                            });
                        }
                        self.kind_seen = true;
                    }
                }
                Position::List { left: 0 } => {
                    self.list_read = true;
                    self.at = Position::Envelope;
                }
                Position::List { left } => {
                    let Some(header) = header(&self.buffer)? else {
                        return Ok(None);
                    };
                    let Some(field) = self.whole_field(&header)? else {
                        return Ok(None);
                    };
                    let taken = (header.bytes + field.len()) as u64;
                    let Some(left) = left.checked_sub(taken) else {
                        return Err(ProtobufError::Malformed("a field past the list's end"));
                    };
                    self.at = Position::List { left };
                    if header.number == ITEMS && header.wire_type == LENGTH_DELIMITED {
                        return Ok(Some(field));
                    }
                }
            }
        }
    }

    /// The body ended here: whether it held the whole list (else it was
    /// cut short, or was not a list at all).
    pub fn finish(&self) -> Result<(), ProtobufError> {
        if self.list_read && self.at == Position::Envelope && self.buffer.is_empty() {
            Ok(())
        } else {
            Err(ProtobufError::Truncated)
        }
    }

    /// The field `header` starts, cut off the buffer (header included, the
    /// field's own bytes returned), if all of it has arrived; a varint's
    /// bytes for a varint field.
    fn whole_field(&mut self, header: &Header) -> Result<Option<Bytes>, ProtobufError> {
        let length = match header.wire_type {
            LENGTH_DELIMITED => header.length,
            VARINT => 0,
            _ => {
                return Err(ProtobufError::Malformed(
                    "a field of a wire type lists do not use",
                ));
            }
        };
        if length > MAX_MESSAGE_BYTES as u64 {
            return Err(ProtobufError::TooBig(length as usize));
        }
        let length = length as usize;
        if self.buffer.len() < header.bytes + length {
            self.buffer
                .reserve(header.bytes + length - self.buffer.len());
            return Ok(None);
        }
        self.buffer.advance(header.bytes);
        Ok(Some(self.buffer.split_to(length).freeze()))
    }
}

/// The key of the field `bytes` start with and, for a length-delimited
/// field, its length; a varint field's value is counted in `bytes`.
/// `None` until all of them have arrived.
fn header(bytes: &[u8]) -> Result<Option<Header>, ProtobufError> {
    let Some((key, key_bytes)) = varint(bytes)? else {
        return Ok(None);
    };
    let (number, wire_type) = (key >> 3, key & 7);
    let rest = &bytes[key_bytes..];
    let (length, length_bytes) = match wire_type {
        LENGTH_DELIMITED | VARINT => match varint(rest)? {
            Some(read) => read,
            None => return Ok(None),
        },
        _ => (0, 0),
    };
    Ok(Some(Header {
        number,
        wire_type,
        // A varint's value is the field itself: nothing follows it.
        length: if wire_type == VARINT { 0 } else { length },
        bytes: key_bytes + length_bytes,
    }))
}

/// A varint at the start of `bytes` and how many bytes it takes; `None`
/// if it has not all arrived.
fn varint(bytes: &[u8]) -> Result<Option<(u64, usize)>, ProtobufError> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().take(10).enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(Some((value, i + 1)));
        }
    }
    if bytes.len() >= 10 {
        return Err(ProtobufError::Malformed("a varint longer than ten bytes"));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s_proto::{self, envelope};

    fn cronjob(name: &str) -> k8s_proto::CronJob {
        k8s_proto::CronJob {
            metadata: Some(k8s_proto::ObjectMeta {
                name: Some(name.into()),
                ..k8s_proto::ObjectMeta::default()
            }),
            ..k8s_proto::CronJob::default()
        }
    }

    fn list_body(kind: &str, names: &[&str]) -> Vec<u8> {
        let list = k8s_proto::CronJobList {
            metadata: Some(k8s_proto::ListMeta {
                resource_version: Some("9".into()),
                continue_: Some(String::new()),
            }),
            items: names.iter().map(|name| cronjob(name)).collect(),
        };
        envelope("batch/v1", kind, list.encode_to_vec())
    }

    /// The items `body` gives, pushed `step` bytes at a time, and whether
    /// it held the whole list.
    fn read(body: &[u8], step: usize) -> (Vec<String>, Result<(), ProtobufError>) {
        let mut list = ListItems::new("CronJobList");
        let mut names = Vec::new();
        for chunk in body.chunks(step) {
            list.push(chunk);
            loop {
                match list.next_item() {
                    Ok(Some(item)) => names.push(
                        k8s_proto::CronJob::decode(item)
                            .unwrap()
                            .metadata
                            .unwrap()
                            .name
                            .unwrap(),
                    ),
                    Ok(None) => break,
                    Err(error) => return (names, Err(error)),
                }
            }
        }
        (names, list.finish())
    }

    #[test]
    fn items_are_cut_out_however_the_bytes_arrive() {
        let body = list_body("CronJobList", &["a", "b", "c"]);
        for step in 1..=body.len() {
            let (names, end) = read(&body, step);
            assert_eq!(names, ["a", "b", "c"], "{step} bytes at a time");
            assert!(end.is_ok(), "{step}: {end:?}");
        }
        let (names, end) = read(&list_body("CronJobList", &[]), 1);
        assert!(names.is_empty() && end.is_ok());
    }

    #[test]
    fn a_body_cut_anywhere_is_told_as_cut() {
        let body = list_body("CronJobList", &["a", "b"]);
        // The envelope's last two fields (empty contentEncoding and
        // contentType, two bytes each) follow the list: without them the
        // list is still whole.
        let list_end = body.len() - 4;
        assert!(read(&body[..list_end], 1).1.is_ok());
        for end in 0..list_end {
            let (_, finished) = read(&body[..end], 1);
            assert!(
                matches!(finished, Err(ProtobufError::Truncated)),
                "cut after {end} bytes: {finished:?}"
            );
        }
    }

    #[test]
    fn another_kind_or_bytes_that_are_no_list_are_refused() {
        let (names, end) = read(&list_body("JobList", &["a"]), 7);
        assert!(names.is_empty());
        assert!(matches!(end, Err(ProtobufError::Kind { got, .. }) if got == "JobList"));
        assert!(matches!(
            read(b"{\"kind\":\"CronJobList\"}", 3).1,
            Err(ProtobufError::NoMagic)
        ));
        // A list whose item claims more bytes than the list has.
        let mut body = list_body("CronJobList", &["a"]);
        let item_key = body.iter().rposition(|b| *b == 0x12).unwrap();
        body[item_key + 1] += 1;
        assert!(read(&body, 1).1.is_err());
        // An item's length past the bound is refused before it is waited for.
        let type_meta = k8s_proto::TypeMeta {
            api_version: Some("batch/v1".into()),
            kind: Some("CronJobList".into()),
        }
        .encode_to_vec();
        let mut huge = MAGIC.to_vec();
        huge.extend([0x0a, type_meta.len() as u8]);
        huge.extend(type_meta);
        huge.extend([
            0x12, 0x80, 0x80, 0x80, 0x80, 0x08, 0x12, 0x80, 0x80, 0x80, 0x80, 0x04,
        ]);
        assert!(matches!(read(&huge, 1).1, Err(ProtobufError::TooBig(_))));
    }
}
