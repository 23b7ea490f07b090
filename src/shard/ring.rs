//! The consistent-hash ring: which replica owns which CronJob, as a pure
//! function of the set of live members.
//!
//! Every replica must compute the same owner for a key, including replicas
//! built by different compilers during a rolling upgrade. So the ring hashes
//! explicit bytes with xxHash64 (seed 0), whose output is fixed by its
//! specification, never Rust's `Hash` of a `str` (whose byte layout is not
//! promised) or SipHash with per-process keys.

use hashring::HashRing;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;
use twox_hash::XxHash64;

/// Virtual nodes per member: enough for a max/avg load under 1.10 at 2-10
/// members (measured in the tests below).
pub const VIRTUAL_NODES: u16 = 512;

type Fixed = BuildHasherDefault<XxHash64>;

/// One point on the ring: member `member`, replica `index`.
#[derive(Debug, Clone)]
struct VirtualNode {
    member: Arc<str>,
    index: u16,
}

impl Hash for VirtualNode {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // "<member>#<index>" as bytes, spelled out so the layout is ours.
        state.write(self.member.as_bytes());
        state.write(b"#");
        state.write(&self.index.to_le_bytes());
    }
}

/// A CronJob's ring key: the bytes of `namespace/name`.
struct Key<'a>(&'a str, &'a str);

impl Hash for Key<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.0.as_bytes());
        state.write(b"/");
        state.write(self.1.as_bytes());
    }
}

/// The ring over one set of members.
#[derive(Debug, Clone)]
pub struct Ring {
    ring: HashRing<VirtualNode, Fixed>,
    members: Vec<Arc<str>>,
}

/// A ring is a function of its members.
impl PartialEq for Ring {
    fn eq(&self, other: &Self) -> bool {
        self.members == other.members
    }
}

impl Eq for Ring {}

impl Ring {
    /// The ring of `members` (order and duplicates do not matter).
    pub fn new<'a>(members: impl IntoIterator<Item = &'a str>) -> Ring {
        let mut members: Vec<Arc<str>> = members.into_iter().map(Arc::from).collect();
        members.sort();
        members.dedup();
        let mut ring = HashRing::with_hasher(Fixed::default());
        // Added in sorted order, so that even a hash collision between two
        // virtual nodes resolves the same way on every replica.
        ring.batch_add(
            members
                .iter()
                .flat_map(|m| {
                    (0..VIRTUAL_NODES).map(|index| VirtualNode {
                        member: m.clone(),
                        index,
                    })
                })
                .collect(),
        );
        Ring { ring, members }
    }

    /// The members, sorted.
    pub fn members(&self) -> &[Arc<str>] {
        &self.members
    }

    /// The member that owns CronJob `namespace/name`; `None` on an empty ring.
    pub fn owner(&self, namespace: &str, name: &str) -> Option<&str> {
        self.ring.get(&Key(namespace, name)).map(|v| &*v.member)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const KEYS: usize = 100_000;

    fn keys() -> Vec<(String, String)> {
        (0..KEYS)
            .map(|i| (format!("tenant-{}", i % 997), format!("cronjob-{i}")))
            .collect()
    }

    fn members(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("shardcron-{i}")).collect()
    }

    fn owners(ring: &Ring, keys: &[(String, String)]) -> Vec<String> {
        keys.iter()
            .map(|(ns, name)| ring.owner(ns, name).unwrap().to_owned())
            .collect()
    }

    #[test]
    fn owners_are_fixed_across_builds() {
        // Changing the hash, the key bytes or VIRTUAL_NODES moves CronJobs
        // between replicas of different versions: these must never change silently.
        let ring = Ring::new(["shardcron-0", "shardcron-1", "shardcron-2"]);
        let got: Vec<_> = ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|name| ring.owner("default", name).unwrap())
            .collect();
        assert_eq!(got, GOLDEN);
        assert_eq!(Ring::new(["x", "y", "x"]).members().len(), 2);
        assert_eq!(Ring::new([]).owner("a", "b"), None);
    }

    const GOLDEN: [&str; 6] = [
        "shardcron-0",
        "shardcron-2",
        "shardcron-1",
        "shardcron-2",
        "shardcron-0",
        "shardcron-1",
    ];

    #[test]
    fn balance_and_movement_for_2_to_10_members() {
        let keys = keys();
        let mut report = String::new();
        for n in 2..=10 {
            let names = members(n);
            let ring = Ring::new(names.iter().map(String::as_str));
            let before = owners(&ring, &keys);
            let mut load: HashMap<&str, usize> = HashMap::new();
            for owner in &before {
                *load.entry(owner).or_default() += 1;
            }
            let max_over_avg = *load.values().max().unwrap() as f64 / (KEYS as f64 / n as f64);

            // One member joins: ideally 1/(n+1) of the keys move, all to it.
            let joined = members(n + 1);
            let after = owners(&Ring::new(joined.iter().map(String::as_str)), &keys);
            let moved_join = before.iter().zip(&after).filter(|(a, b)| a != b).count();
            assert!(
                before
                    .iter()
                    .zip(&after)
                    .all(|(a, b)| a == b || *b == joined[n])
            );
            let ideal_join = KEYS as f64 / (n + 1) as f64;

            // One member leaves: exactly its keys move.
            let left = &names[1..];
            let after = owners(&Ring::new(left.iter().map(String::as_str)), &keys);
            let moved_leave = before.iter().zip(&after).filter(|(a, b)| a != b).count();
            assert_eq!(moved_leave, load[names[0].as_str()]);
            let ideal_leave = KEYS as f64 / n as f64;

            report.push_str(&format!(
                "n={n:2} max/avg {max_over_avg:.3}  join moves {:.3} of ideal  leave moves {:.3} of ideal\n",
                moved_join as f64 / ideal_join,
                moved_leave as f64 / ideal_leave
            ));
            assert!(max_over_avg <= 1.10, "{report}");
            assert!(moved_join as f64 <= 1.1 * ideal_join, "{report}");
            assert!(moved_leave as f64 <= 1.1 * ideal_leave, "{report}");
        }
        eprintln!("{report}");
    }
}
