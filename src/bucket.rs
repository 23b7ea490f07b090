//! Buckets: the unit of ownership. Pure.
//!
//! A CronJob's bucket is the top [`BITS`] bits of the 64-bit FNV-1a hash
//! of its `metadata.uid`: exactly the hash the API server's sharded list
//! and watch (KEP-5866, `shardRange(object.metadata.uid, ...)`) computes, so
//! that a set of buckets is also a set of hash ranges the server can filter
//! CronJobs by. A Job carries its CronJob's bucket as the label [`LABEL`],
//! so that any API server can filter Jobs by a label selector.
//!
//! Why 1,024 buckets: the ring assigns whole buckets, so fewer buckets
//! balance worse and move more on a join (256 buckets: a join moved up to
//! 1.17x the ideal), and more buckets make longer selectors (a replica of
//! two owns about 512 buckets in about 250 hash ranges). The ring's tests
//! measure both goals on 1,024.

use std::fmt::Write as _;

/// Bits of the hash that make the bucket.
pub const BITS: u32 = 10;
/// How many buckets there are.
pub const BUCKETS: u16 = 1 << BITS;
/// The label on every Job shardcron creates: its CronJob's bucket.
pub const LABEL: &str = "shardcron.io/bucket";

/// One bucket, `0..BUCKETS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bucket(u16);

/// 64-bit FNV-1a, as Go's `hash/fnv` `New64a` (the API server's shard hash).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Bucket {
    /// The bucket of the CronJob with this UID.
    pub fn of(uid: &str) -> Bucket {
        Bucket((fnv1a64(uid.as_bytes()) >> (64 - BITS)) as u16)
    }

    /// Every bucket, in order.
    pub fn all() -> impl Iterator<Item = Bucket> {
        (0..BUCKETS).map(Bucket)
    }

    pub fn index(self) -> usize {
        usize::from(self.0)
    }

    /// The value of [`LABEL`] for this bucket.
    pub fn label_value(self) -> String {
        self.0.to_string()
    }

    /// Reads a [`LABEL`] value; `None` if it is not a bucket (a label set
    /// by hand, or by a build with another bucket count).
    pub fn from_label(value: &str) -> Option<Bucket> {
        let index: u16 = value.parse().ok()?;
        (index < BUCKETS && index.to_string() == value).then_some(Bucket(index))
    }

    /// The bucket's hash range `[start, end)`; `end` may be 2^64.
    fn hash_range(self) -> (u128, u128) {
        let width = 1u128 << (64 - BITS);
        let start = u128::from(self.0) * width;
        (start, start + width)
    }
}

/// The label selector of the Jobs in `buckets` (sorted or not). Every
/// bucket is any value of the label; an empty set selects no Job (a
/// set-based selector may not be empty: the value `none` is never a bucket).
pub fn label_selector(buckets: &[Bucket]) -> String {
    let mut values: Vec<u16> = buckets.iter().map(|b| b.0).collect();
    values.sort_unstable();
    values.dedup();
    if values.is_empty() {
        return format!("{LABEL} in (none)");
    }
    if values.len() == usize::from(BUCKETS) {
        return LABEL.to_owned();
    }
    let mut selector = format!("{LABEL} in (");
    for (i, value) in values.iter().enumerate() {
        if i > 0 {
            selector.push(',');
        }
        let _ = write!(selector, "{value}");
    }
    selector.push(')');
    selector
}

/// The label selector of the Jobs that carry no bucket: made before
/// shardcron took over, or by hand (`kubectl create job --from=cronjob/..`).
pub fn unlabelled_selector() -> String {
    format!("!{LABEL}")
}

/// The API server's shard selector (KEP-5866) of the CronJobs in `buckets`:
/// adjacent buckets merged into one `shardRange`. `None` for every bucket
/// (no filter needed) or none (there is nothing to ask for).
pub fn shard_selector(buckets: &[Bucket]) -> Option<String> {
    let mut indices: Vec<u16> = buckets.iter().map(|b| b.0).collect();
    indices.sort_unstable();
    indices.dedup();
    if indices.is_empty() || indices.len() == usize::from(BUCKETS) {
        return None;
    }
    let mut ranges: Vec<(u128, u128)> = Vec::new();
    for index in indices {
        let (start, end) = Bucket(index).hash_range();
        match ranges.last_mut() {
            Some(last) if last.1 == start => last.1 = end,
            _ => ranges.push((start, end)),
        }
    }
    let hex = |value: u128| {
        if value == 1u128 << 64 {
            "0x10000000000000000".to_owned()
        } else {
            format!("{value:#018x}")
        }
    };
    Some(
        ranges
            .iter()
            .map(|(start, end)| {
                format!(
                    "shardRange(object.metadata.uid, '{}', '{}')",
                    hex(*start),
                    hex(*end)
                )
            })
            .collect::<Vec<_>>()
            .join(" || "),
    )
}

/// A UID shaped as the API server makes them (a random version-4 UUID),
/// fixed by `i`. FNV-1a's top bits hardly depend on an input's last bytes,
/// so test keys that differ only at their end ("job-1", "job-2") would all
/// fall in one bucket; real UIDs are random throughout.
#[cfg(test)]
pub fn test_uid(i: u64) -> String {
    use twox_hash::XxHash64;
    let a = XxHash64::oneshot(1, &i.to_le_bytes());
    let b = XxHash64::oneshot(2, &i.to_le_bytes());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_go_s_fnv_1a_64() {
        // Go: fmt.Sprintf("%016x", fnv.New64a() of the bytes), as the API
        // server's sharding.HashField prints it.
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
        let uid = "0d4c2a4e-1f7b-4a8e-9a53-5f1c8b0e2d71";
        assert_eq!(
            Bucket::of(uid).index(),
            (fnv1a64(uid.as_bytes()) >> 54) as usize
        );
    }

    #[test]
    fn a_label_value_reads_back_and_nothing_else_is_a_bucket() {
        for bucket in [Bucket(0), Bucket(7), Bucket(BUCKETS - 1)] {
            assert_eq!(Bucket::from_label(&bucket.label_value()), Some(bucket));
        }
        for value in ["", "-1", "1024", "07", "+7", "x", "7 "] {
            assert_eq!(Bucket::from_label(value), None, "{value:?}");
        }
    }

    #[test]
    fn selectors_name_the_buckets_and_merge_adjacent_ranges() {
        assert_eq!(
            label_selector(&[Bucket(9), Bucket(2), Bucket(9)]),
            "shardcron.io/bucket in (2,9)"
        );
        assert_eq!(label_selector(&[]), "shardcron.io/bucket in (none)");
        assert_eq!(
            label_selector(&Bucket::all().collect::<Vec<_>>()),
            "shardcron.io/bucket"
        );
        assert_eq!(unlabelled_selector(), "!shardcron.io/bucket");

        assert_eq!(shard_selector(&[]), None);
        assert_eq!(shard_selector(&Bucket::all().collect::<Vec<_>>()), None);
        assert_eq!(
            shard_selector(&[Bucket(1), Bucket(0), Bucket(3), Bucket(BUCKETS - 1)]).unwrap(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x0080000000000000') \
             || shardRange(object.metadata.uid, '0x00c0000000000000', '0x0100000000000000') \
             || shardRange(object.metadata.uid, '0xffc0000000000000', '0x10000000000000000')"
        );
    }

    #[test]
    fn a_uid_falls_in_the_range_of_its_bucket() {
        for i in 0..1000 {
            let uid = format!("uid-{i}");
            let hash = u128::from(fnv1a64(uid.as_bytes()));
            let (start, end) = Bucket::of(&uid).hash_range();
            assert!(start <= hash && hash < end, "{uid}");
        }
    }
}
