//! The ring protocol's versions: what a replica tells its peers it speaks,
//! which version a ring runs, and which peers it cannot share a ring with.
//! Pure.
//!
//! A *protocol version* fixes everything two replicas must compute alike
//! to never run one CronJob twice: the ring's assignment ([`super::ring`]),
//! how a view is written on a Lease and what it means ([`super::handoff`]).
//! Each replica states the versions it speaks on its Lease
//! ([`PROTOCOLS_ANNOTATION`]) and the version of the view it publishes
//! ([`VIEW_PROTOCOL_ANNOTATION`]); a peer's view is read with the version
//! it was written in, and one this build cannot read claims every key
//! (nothing starts here that it might run).
//!
//! A ring runs the highest version every member it counts speaks
//! ([`negotiate`]): a new version's behaviour switches on only once every
//! live member has it, and the switch is a change of the ring like a join
//! (lost keys stop before the new view is published; gained ones start
//! once no peer's view claims them), so it never lets two replicas run a
//! key. A peer that speaks no version this replica speaks is never guessed
//! at: it is left out of the ring, reported (a metric, an Event, an alert),
//! and its views claim every key.
//!
//! A Lease that states no version was written by release zero (0.1.0,
//! before versions), which speaks version 1: [`Protocols::RELEASE_ZERO`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The versions the replica speaks: `1`, or a range `1-2`.
pub const PROTOCOLS_ANNOTATION: &str = "shardcron.io/protocols";
/// The version the published view (`shardcron.io/view`) is written in.
pub const VIEW_PROTOCOL_ANNOTATION: &str = "shardcron.io/view-protocol";
/// The replica's release and commit (`0.2.0 1a2b3c4`), for people and
/// `/debug/shards`; no decision reads it.
pub const BUILD_ANNOTATION: &str = "shardcron.io/build";

/// The longest annotation value parsed as versions; longer is unreadable.
const MAX_ENCODED: usize = 16;

/// One version of the ring protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Protocol(u16);

impl Protocol {
    /// Rendezvous hashing with bounded loads (slack 1.08) over 1,024
    /// buckets; a view is its members' names, sorted, comma-separated.
    pub const V1: Protocol = Protocol(1);

    pub const fn new(version: u16) -> Protocol {
        Protocol(version)
    }

    pub fn number(self) -> u16 {
        self.0
    }

    /// A [`VIEW_PROTOCOL_ANNOTATION`] value: absent is release zero's
    /// version 1; anything but a positive number is `None`, unreadable.
    pub fn of_view(annotation: Option<&str>) -> Option<Protocol> {
        match annotation {
            None => Some(Protocol::V1),
            Some(value) => parse_version(value),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

fn parse_version(value: &str) -> Option<Protocol> {
    if value.len() > MAX_ENCODED || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse::<u16>().ok().filter(|v| *v > 0).map(Protocol)
}

/// The versions a replica speaks: every one from `lowest` to `highest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protocols {
    lowest: Protocol,
    highest: Protocol,
}

impl Protocols {
    /// What this build speaks.
    pub const THIS_BUILD: Protocols = Protocols {
        lowest: Protocol::V1,
        highest: Protocol::V1,
    };
    /// What a Lease that states no versions speaks: release zero's.
    pub const RELEASE_ZERO: Protocols = Protocols {
        lowest: Protocol::V1,
        highest: Protocol::V1,
    };

    /// `None` when `lowest > highest`.
    pub const fn new(lowest: Protocol, highest: Protocol) -> Option<Protocols> {
        if lowest.0 > highest.0 {
            None
        } else {
            Some(Protocols { lowest, highest })
        }
    }

    pub fn lowest(self) -> Protocol {
        self.lowest
    }

    pub fn highest(self) -> Protocol {
        self.highest
    }

    pub fn speaks(self, version: Protocol) -> bool {
        self.lowest <= version && version <= self.highest
    }

    fn meets(self, other: Protocols) -> bool {
        self.lowest <= other.highest && other.lowest <= self.highest
    }

    /// A [`PROTOCOLS_ANNOTATION`] value: absent is [`Self::RELEASE_ZERO`];
    /// one that does not read is `None` (the peer speaks nothing known).
    pub fn of_lease(annotation: Option<&str>) -> Option<Protocols> {
        let Some(value) = annotation else {
            return Some(Self::RELEASE_ZERO);
        };
        match value.split_once('-') {
            None => parse_version(value).map(|v| Protocols {
                lowest: v,
                highest: v,
            }),
            Some((lowest, highest)) => {
                Protocols::new(parse_version(lowest)?, parse_version(highest)?)
            }
        }
    }

    /// The [`PROTOCOLS_ANNOTATION`] value.
    pub fn encode(self) -> String {
        if self.lowest == self.highest {
            self.lowest.to_string()
        } else {
            format!("{}-{}", self.lowest, self.highest)
        }
    }
}

impl fmt::Display for Protocols {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.encode())
    }
}

/// The ring's version and the peers it leaves out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    pub protocol: Protocol,
    /// Live peers that speak no version in common with the ring (or whose
    /// Lease's versions do not read), with what they said.
    pub incompatible: BTreeMap<String, Option<Protocols>>,
}

impl Negotiated {
    pub fn excludes(&self, peer: &str) -> bool {
        self.incompatible.contains_key(peer)
    }
}

/// The version of the ring of `mine` and `peers` (each with what its Lease
/// says it speaks): the highest that this replica and every peer it can
/// share a ring with speak. A peer whose range does not meet ours, or that
/// cannot speak the version the others leave, is incompatible.
///
/// Every replica that speaks the chosen version computes the same choice
/// from the same Leases; one that does not is left out by the others, and
/// leaves them out.
pub fn negotiate<'a>(
    mine: Protocols,
    peers: impl IntoIterator<Item = (&'a str, Option<Protocols>)>,
) -> Negotiated {
    let peers: Vec<(&str, Option<Protocols>)> = peers.into_iter().collect();
    let protocol = peers
        .iter()
        .filter_map(|(_, theirs)| theirs.filter(|t| t.meets(mine)))
        .map(|theirs| theirs.highest)
        .fold(mine.highest, Ord::min);
    let incompatible = peers
        .into_iter()
        .filter(|(_, theirs)| !theirs.is_some_and(|t| t.speaks(protocol)))
        .map(|(name, theirs)| (name.to_owned(), theirs))
        .collect();
    Negotiated {
        protocol,
        incompatible,
    }
}

/// The names in `negotiated`'s incompatible peers, for a change check.
pub fn incompatible_names(negotiated: &Negotiated) -> BTreeSet<String> {
    negotiated.incompatible.keys().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(lowest: u16, highest: u16) -> Option<Protocols> {
        Protocols::new(Protocol(lowest), Protocol(highest))
    }

    #[test]
    fn annotations_read_as_written_and_absent_is_release_zero() {
        assert_eq!(Protocols::of_lease(None), Some(Protocols::RELEASE_ZERO));
        assert_eq!(Protocols::of_lease(Some("1")), range(1, 1));
        assert_eq!(Protocols::of_lease(Some("1-3")), range(1, 3));
        for bad in [
            "",
            "0",
            "3-1",
            "x",
            "1-",
            "-1",
            "1-2-3",
            " 1",
            "99999999999999999",
        ] {
            assert_eq!(Protocols::of_lease(Some(bad)), None, "{bad:?}");
        }
        for p in [range(1, 1), range(2, 7)].into_iter().flatten() {
            assert_eq!(Protocols::of_lease(Some(&p.encode())), Some(p));
        }
        assert_eq!(Protocol::of_view(None), Some(Protocol::V1));
        assert_eq!(Protocol::of_view(Some("2")), Some(Protocol(2)));
        assert_eq!(Protocol::of_view(Some("two")), None);
        assert_eq!(Protocol::of_view(Some("0")), None);
    }

    /// One row: what this replica speaks, what each peer's Lease says
    /// (`None`: does not read), the version chosen and the peers left out.
    #[test]
    fn a_ring_runs_the_highest_version_every_member_speaks() {
        type Peers = &'static [(&'static str, Option<(u16, u16)>)];
        type Row = ((u16, u16), Peers, u16, &'static [&'static str]);
        let rows: &[Row] = &[
            // Alone: our highest.
            ((1, 2), &[], 2, &[]),
            // A rolling upgrade: old and new members run the old version...
            (
                (1, 2),
                &[("old", Some((1, 1))), ("new", Some((1, 2)))],
                1,
                &[],
            ),
            // ...and the new one once the last old member is gone.
            ((1, 2), &[("new", Some((1, 2)))], 2, &[]),
            // The old build's view of the same ring.
            ((1, 1), &[("new", Some((1, 2)))], 1, &[]),
            // A peer two releases ahead that dropped our version.
            ((1, 1), &[("far", Some((2, 3)))], 1, &["far"]),
            // Unreadable versions are incompatible, never guessed at.
            ((1, 2), &[("odd", None), ("new", Some((1, 2)))], 2, &["odd"]),
            // A peer that meets us but not the version the others leave.
            (
                (1, 3),
                &[("old", Some((1, 1))), ("next", Some((3, 3)))],
                1,
                &["next"],
            ),
        ];
        for (mine, peers, protocol, incompatible) in rows {
            let negotiated = negotiate(
                range(mine.0, mine.1).unwrap(),
                peers
                    .iter()
                    .map(|(name, theirs)| (*name, theirs.and_then(|(l, h)| range(l, h)))),
            );
            assert_eq!(negotiated.protocol, Protocol(*protocol), "{peers:?}");
            assert_eq!(
                incompatible_names(&negotiated),
                incompatible.iter().map(|p| p.to_string()).collect(),
                "{peers:?}"
            );
        }
    }
}
