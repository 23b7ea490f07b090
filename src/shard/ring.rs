//! The ring: which replica owns which bucket (and so which CronJob), as a
//! pure function of the set of live members.
//!
//! The ring assigns whole [`Bucket`]s, so that what a replica owns can be
//! named to the API server (a label selector for Jobs, hash ranges for
//! CronJobs). The assignment is rendezvous hashing with bounded loads:
//! every (member, bucket) pair gets a score, the pairs are taken in
//! descending score, and a bucket goes to the first member of its pairs
//! that is still under its capacity, [`SLACK`] times the even share. Without
//! the capacity, rendezvous hashing moves exactly the ideal number of
//! buckets on a join or a leave, but 1,024 buckets over 10 members vary by
//! a third; the capacity bounds the imbalance and costs a few extra moves
//! (the tests below measure both goals: max/avg load <= 1.10, a join or
//! leave moves <= 1.1x the ideal).
//!
//! Every replica must compute the same owner for a key, including replicas
//! built by different compilers during a rolling upgrade. So scores hash
//! explicit bytes with xxHash64, whose output is fixed by its
//! specification, and ties are broken by member name. The assignment is
//! fixed per [`Protocol`] version (golden digests in the tests): changing
//! it takes a new version, which a ring runs only once every member speaks
//! it ([`super::protocol`]).

use super::protocol::Protocol;
use crate::bucket::Bucket;
use std::sync::Arc;
use twox_hash::XxHash64;

/// A member may hold this many times its even share of buckets.
pub const SLACK: f64 = 1.08;

/// The most members a ring has: one per bucket. A view naming more (a
/// peer's Lease annotation is read as it is written) is read as its first
/// `MAX_MEMBERS` by name, the same on every replica, so that no annotation
/// can make a replica score millions of pairs or overflow a member's
/// index.
pub const MAX_MEMBERS: usize = crate::bucket::BUCKETS as usize;

/// How a protocol version assigns buckets.
#[derive(Debug, Clone, Copy)]
struct Assignment {
    seed: u64,
    slack: f64,
}

/// The assignment of `protocol`, if this build knows it.
fn assignment(protocol: Protocol) -> Option<Assignment> {
    match protocol.number() {
        1 => Some(Assignment {
            seed: 0,
            slack: SLACK,
        }),
        // A second version for the tests of a switch between versions
        // (another seed: most buckets move).
        #[cfg(test)]
        2 => Some(Assignment {
            seed: 2,
            slack: SLACK,
        }),
        _ => None,
    }
}

/// A member's score for a bucket: xxHash64 of `<member>#<bucket, u16 LE>`.
/// A ring scores every (member, bucket) pair, so the bytes are put
/// together on the stack: a member is a Lease's holder identity, at most
/// 253 bytes (a DNS subdomain); a longer one is scored alike, from the heap.
fn score(seed: u64, member: &str, bucket: Bucket) -> u64 {
    const ON_STACK: usize = 256;
    let member = member.as_bytes();
    let bucket = (bucket.index() as u16).to_le_bytes();
    let len = member.len() + 3;
    if len > ON_STACK {
        let bytes = [member, b"#", &bucket].concat();
        return XxHash64::oneshot(seed, &bytes);
    }
    let mut bytes = [0u8; ON_STACK];
    bytes[..member.len()].copy_from_slice(member);
    bytes[member.len()] = b'#';
    bytes[member.len() + 1..len].copy_from_slice(&bucket);
    XxHash64::oneshot(seed, &bytes[..len])
}

/// Whether this build knows `protocol`'s assignment (can read a view
/// written in it).
pub fn knows(protocol: Protocol) -> bool {
    assignment(protocol).is_some()
}

/// The ring over one set of members, under one protocol version.
#[derive(Debug, Clone)]
pub struct Ring {
    protocol: Protocol,
    assignment: Assignment,
    members: Vec<Arc<str>>,
    /// For each bucket, the index of its owner in `members`.
    owners: Vec<u16>,
}

/// A ring is a function of its version and members.
impl PartialEq for Ring {
    fn eq(&self, other: &Self) -> bool {
        self.protocol == other.protocol && self.members == other.members
    }
}

impl Eq for Ring {}

impl Ring {
    /// The ring of `members` (order and duplicates do not matter) under
    /// `protocol`; `None` if this build does not know that version.
    pub fn of<'a>(protocol: Protocol, members: impl IntoIterator<Item = &'a str>) -> Option<Ring> {
        let assignment = assignment(protocol)?;
        let mut members: Vec<Arc<str>> = members.into_iter().map(Arc::from).collect();
        members.sort();
        members.dedup();
        members.truncate(MAX_MEMBERS);
        let owners = assign(&members, assignment);
        Some(Ring {
            protocol,
            assignment,
            members,
            owners,
        })
    }

    /// The ring of `members` under protocol version 1.
    #[cfg(test)]
    pub fn new<'a>(members: impl IntoIterator<Item = &'a str>) -> Ring {
        Ring::of(Protocol::V1, members).expect("this build speaks version 1")
    }

    /// This ring without `member`, under the same version.
    pub fn without(&self, member: &str) -> Ring {
        let members: Vec<Arc<str>> = self
            .members
            .iter()
            .filter(|m| &***m != member)
            .cloned()
            .collect();
        let owners = assign(&members, self.assignment);
        Ring {
            protocol: self.protocol,
            assignment: self.assignment,
            members,
            owners,
        }
    }

    /// The protocol version it assigns by.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The members, sorted.
    pub fn members(&self) -> &[Arc<str>] {
        &self.members
    }

    /// The member that owns the CronJob with this UID; `None` on an empty ring.
    pub fn owner(&self, uid: &str) -> Option<&str> {
        self.owner_of(Bucket::of(uid))
    }

    /// The member that owns `bucket`; `None` on an empty ring.
    pub fn owner_of(&self, bucket: Bucket) -> Option<&str> {
        let member = *self.owners.get(bucket.index())?;
        self.members.get(usize::from(member)).map(|m| &**m)
    }

    /// The buckets `member` owns, in order.
    pub fn buckets_of(&self, member: &str) -> Vec<Bucket> {
        let Ok(index) = self.members.binary_search_by(|m| (**m).cmp(member)) else {
            return Vec::new();
        };
        Bucket::all()
            .filter(|bucket| usize::from(self.owners[bucket.index()]) == index)
            .collect()
    }
}

/// Each bucket's owner (an index into the sorted `members`); empty for no member.
fn assign(members: &[Arc<str>], Assignment { seed, slack }: Assignment) -> Vec<u16> {
    if members.is_empty() {
        return Vec::new();
    }
    let buckets = usize::from(crate::bucket::BUCKETS);
    let capacity = (buckets as f64 * slack / members.len() as f64).ceil() as usize;
    let mut pairs: Vec<(u64, u16, Bucket)> = members
        .iter()
        .enumerate()
        .flat_map(|(m, member)| Bucket::all().map(move |b| (score(seed, member, b), m as u16, b)))
        .collect();
    // Highest score first; equal scores: the member first by name, then the bucket.
    pairs.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut owners = vec![u16::MAX; buckets];
    let mut load = vec![0usize; members.len()];
    let mut left = buckets;
    for (_, member, bucket) in pairs {
        let owner = &mut owners[bucket.index()];
        if *owner != u16::MAX || load[usize::from(member)] >= capacity {
            continue;
        }
        *owner = member;
        load[usize::from(member)] += 1;
        left -= 1;
        if left == 0 {
            break;
        }
    }
    owners
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const KEYS: usize = 100_000;

    fn uids() -> Vec<String> {
        (0..KEYS as u64).map(crate::bucket::test_uid).collect()
    }

    fn members(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("shardcron-{i}")).collect()
    }

    fn owners(ring: &Ring, uids: &[String]) -> Vec<String> {
        uids.iter()
            .map(|uid| ring.owner(uid).unwrap().to_owned())
            .collect()
    }

    #[test]
    fn a_score_hashes_the_member_the_hash_and_the_bucket_whatever_the_members_length() {
        for len in [0, 1, 63, 253, 254, 300, 4096] {
            let member = "m".repeat(len);
            for bucket in [Bucket::all().next(), Bucket::all().last()]
                .into_iter()
                .flatten()
            {
                let index = (bucket.index() as u16).to_le_bytes();
                let bytes = [member.as_bytes(), b"#", &index].concat();
                assert_eq!(
                    score(7, &member, bucket),
                    XxHash64::oneshot(7, &bytes),
                    "{len}"
                );
            }
        }
    }

    #[test]
    fn owners_are_fixed_across_builds() {
        // Changing the hash, the bucket count, the scores or SLACK moves
        // CronJobs between replicas of different versions: these must
        // never change silently.
        let ring = Ring::new(["shardcron-0", "shardcron-1", "shardcron-2"]);
        let got: Vec<_> = (0..6)
            .map(|i| ring.owner(&crate::bucket::test_uid(i)).unwrap().to_owned())
            .collect();
        assert_eq!(got, GOLDEN);
        assert_eq!(Ring::new(["x", "y", "x"]).members().len(), 2);
        let crowd: Vec<String> = (0..70_000).map(|i| format!("r{i:05}")).collect();
        let crowded = Ring::new(crowd.iter().map(String::as_str));
        assert_eq!(crowded.members().len(), MAX_MEMBERS);
        assert_eq!(crowded.members()[0].as_ref(), "r00000");
        assert!(crowded.owner("some-uid").is_some());
        assert_eq!(Ring::new([]).owner("a"), None);
        assert!(Ring::new([]).buckets_of("x").is_empty());
    }

    /// xxHash64 of each bucket's owner's name, in bucket order, for
    /// rings of 1, 2, 3, 5 and 10 members named `shardcron-<i>`, per
    /// protocol version this build speaks. A change to the assignment fails
    /// here: give it a new version instead (docs/upgrading.md).
    const GOLDEN_ASSIGNMENTS: &[(u16, [u64; 5])] = &[(
        1,
        [
            14238113281281448642,
            6922710684664009701,
            10061071290402874906,
            10560944213475866239,
            65555337010789161,
        ],
    )];

    #[test]
    fn each_versions_assignment_is_frozen() {
        let speaks = crate::shard::protocol::Protocols::THIS_BUILD;
        for version in speaks.lowest().number()..=speaks.highest().number() {
            let protocol = Protocol::new(version);
            let got: Vec<u64> = [1, 2, 3, 5, 10]
                .map(|n| {
                    let names = members(n);
                    let ring = Ring::of(protocol, names.iter().map(String::as_str)).unwrap();
                    let mut owners = Vec::new();
                    for bucket in Bucket::all() {
                        owners.extend_from_slice(ring.owner_of(bucket).unwrap().as_bytes());
                        owners.push(b'\n');
                    }
                    XxHash64::oneshot(0, &owners)
                })
                .to_vec();
            let golden = GOLDEN_ASSIGNMENTS
                .iter()
                .find(|(v, _)| *v == version)
                .unwrap_or_else(|| panic!("version {version} has no golden assignment: {got:?}"));
            assert_eq!(got, golden.1, "version {version}'s assignment changed");
        }
        assert!(Ring::of(Protocol::new(99), ["a"]).is_none());
        let ring = Ring::new(["a", "b", "c"]);
        assert_eq!(ring.without("b"), Ring::new(["a", "c"]));
        assert_ne!(
            Ring::of(Protocol::new(2), ["a", "b"]),
            Some(Ring::new(["a", "b"]))
        );
    }

    const GOLDEN: [&str; 6] = [
        "shardcron-1",
        "shardcron-1",
        "shardcron-0",
        "shardcron-2",
        "shardcron-0",
        "shardcron-1",
    ];

    #[test]
    fn every_bucket_has_one_owner_and_buckets_of_says_which() {
        let ring = Ring::new(["r0", "r1", "r2"]);
        let mut seen = vec![0; usize::from(crate::bucket::BUCKETS)];
        for member in ["r0", "r1", "r2"] {
            for bucket in ring.buckets_of(member) {
                assert_eq!(ring.owner_of(bucket), Some(member));
                seen[bucket.index()] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
        assert!(ring.buckets_of("r9").is_empty());
    }

    #[test]
    fn balance_and_movement_for_2_to_10_members() {
        let uids = uids();
        let mut report = String::new();
        for n in 2..=10 {
            let names = members(n);
            let ring = Ring::new(names.iter().map(String::as_str));
            let before = owners(&ring, &uids);
            let mut load: HashMap<&str, usize> = HashMap::new();
            for owner in &before {
                *load.entry(owner).or_default() += 1;
            }
            let max_over_avg = *load.values().max().unwrap() as f64 / (KEYS as f64 / n as f64);

            // One member joins: ideally 1/(n+1) of the keys move, all to it.
            let joined = members(n + 1);
            let after = owners(&Ring::new(joined.iter().map(String::as_str)), &uids);
            let moved_join = before.iter().zip(&after).filter(|(a, b)| a != b).count();
            let ideal_join = KEYS as f64 / (n + 1) as f64;

            // One member leaves: ideally only its keys move. The capacity
            // that bounds the imbalance costs more here than on a join (the
            // remaining members' capacity grows, and each takes back some
            // buckets it scores higher): up to 1.13x at these sizes.
            let left = &names[1..];
            let after = owners(&Ring::new(left.iter().map(String::as_str)), &uids);
            let moved_leave = before.iter().zip(&after).filter(|(a, b)| a != b).count();
            assert!(moved_leave >= load[names[0].as_str()]);
            let ideal_leave = KEYS as f64 / n as f64;

            report.push_str(&format!(
                "n={n:2} max/avg {max_over_avg:.3}  join moves {:.3} of ideal  leave moves {:.3} of ideal\n",
                moved_join as f64 / ideal_join,
                moved_leave as f64 / ideal_leave
            ));
            assert!(max_over_avg <= 1.10, "{report}");
            assert!(moved_join as f64 <= 1.1 * ideal_join, "{report}");
            assert!(moved_leave as f64 <= 1.15 * ideal_leave, "{report}");
        }
        eprintln!("{report}");
    }

    #[test]
    fn selectors_stay_within_a_few_kilobytes() {
        // The longest selectors a replica sends: with two members, about
        // half the buckets each.
        let ring = Ring::new(["shardcron-0", "shardcron-1"]);
        let mine = ring.buckets_of("shardcron-0");
        let labels = crate::bucket::label_selector(&mine);
        let shards = crate::bucket::shard_selector(&mine).unwrap();
        eprintln!(
            "2 members: {} buckets, label selector {} B, shard selector {} B ({} ranges)",
            mine.len(),
            labels.len(),
            shards.len(),
            shards.matches("shardRange").count()
        );
        assert!(labels.len() < 4 * 1024);
        assert!(shards.len() < 24 * 1024);
    }
}
