//! Table tests of the ownership protocol, one replica at a time, with the
//! time passed in. The many-replica interleavings are the simulation's
//! ([`super::simulation`]).

use crate::shard::lease::Publication;
use crate::shard::membership::LeaseObservation;
use crate::shard::ownership::*;
use crate::shard::protocol::{Protocol, Protocols};
use crate::shard::ring::Ring;
use std::sync::Arc;

const D: Duration = Duration::from_secs(15);

fn lease(holder: &str, renewal: u64, publication: Option<&Publication>) -> LeaseObservation {
    LeaseObservation {
        holder: Some(holder.into()),
        renewal: renewal.to_string(),
        duration: D,
        view: publication.map(|p| p.view.clone()),
        publication: publication.map(|p| p.id.clone()),
        leaving: publication.is_some_and(|p| p.leaving),
        protocols: Some(Protocols::THIS_BUILD),
        view_protocol: Some(publication.map_or(Protocol::V1, |p| p.protocol)),
        build: None,
    }
}

fn seen(name: &str, lease: LeaseObservation) -> Input {
    Input::LeaseSeen {
        name: name.into(),
        lease,
    }
}

/// r1's published view `view` (publication "j1.1").
fn r1_publication(view: &str) -> Publication {
    Publication {
        view: view.into(),
        protocol: Protocol::V1,
        id: "j1.1".into(),
        leaving: false,
    }
}

const VALID: Input = Input::Tick {
    fence: FenceState::Valid,
    wall: None,
};

/// The fence judged valid [`JOIN_GRACE`] before `t0` and again at `t0`:
/// the commands of the join.
fn join(o: &mut Ownership, t0: Instant) -> Vec<Command> {
    assert!(
        o.on(VALID, t0 - JOIN_GRACE).is_empty(),
        "joined within the grace"
    );
    o.on(VALID, t0)
}

fn published(commands: &[Command]) -> Option<Publication> {
    commands.iter().find_map(|c| match c {
        Command::Publish(p) => Some(p.clone()),
        _ => None,
    })
}

/// The stop of the actor of `key`, whose CronJob's UID the tests name
/// `uid-{key}`.
fn stop(key: &str) -> Command {
    Command::Stop {
        key: key.into(),
        uid: format!("uid-{key}").into(),
    }
}

fn started(commands: &[Command]) -> Vec<&str> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Start { key, .. } => Some(&**key),
            _ => None,
        })
        .collect()
}

/// A bulk load counted from no previous ring (the first) ended, with no
/// [`Input::LoadJobsDone`] before it (as if its Jobs and CronJobs came
/// together at its end).
fn load_done(ok: bool) -> Input {
    Input::LoadDone {
        ok,
        previous: None,
        jobs_told: false,
    }
}

/// A CronJob the watch showed.
fn seen_cronjob(key: &str) -> Input {
    Input::CronJobSeen {
        key: key.into(),
        uid: format!("uid-{key}").into(),
        read_in: None,
    }
}

/// A CronJob a bulk load asked for after every ring change so far showed.
fn loaded_cronjob(key: &str) -> Input {
    Input::CronJobSeen {
        key: key.into(),
        uid: format!("uid-{key}").into(),
        read_in: Some(Epoch::MAX),
    }
}

/// Its first load done: the view a joiner publishes then, and nothing
/// started before the view comes back.
fn loaded(o: &mut Ownership, t0: Instant) -> Publication {
    let commands = o.on(load_done(true), t0);
    assert!(started(&commands).is_empty());
    published(&commands).expect("published once loaded")
}

/// The view a replica publishes at its join when no live peer's view
/// contradicts its first ring: nobody runs its keys.
fn started_together(commands: &[Command]) -> Publication {
    published(commands).expect("no peer runs its keys: published at its join")
}

/// A lone replica "r0" that has joined, published, seen its publication
/// back and loaded "ns/a": "ns/a" runs.
fn serving_alone(t0: Instant) -> (Ownership, Publication) {
    let mut o = Ownership::new("r0", "i1");
    o.on(Input::ListsSynced, t0);
    o.on(Input::LeasesListed, t0);
    let commands = join(&mut o, t0);
    assert!(matches!(commands[0], Command::RingChanged { .. }));
    assert!(matches!(commands[1], Command::Load { .. }));
    let publication = started_together(&commands);
    o.on(seen("r0", lease("r0", 2, Some(&publication))), t0);
    assert!(started(&o.on(seen_cronjob("ns/a"), t0)).is_empty());
    assert!(
        started(&o.on(VALID, t0)).is_empty(),
        "its load is in flight"
    );
    assert_eq!(started(&o.on(load_done(true), t0)), ["ns/a"]);
    (o, publication)
}

#[test]
fn a_replica_joins_only_once_its_fence_is_open_and_the_leases_listed() {
    let t0 = Instant::now();
    let mut o = Ownership::new("r0", "i1");
    o.on(Input::ListsSynced, t0);
    assert!(o.on(VALID, t0).is_empty(), "Leases not listed yet");
    o.on(Input::LeasesListed, t0);
    let waiting = Input::Tick {
        fence: FenceState::Waiting,
        wall: None,
    };
    assert!(o.on(waiting, t0).is_empty(), "fence not open yet");
    assert!(matches!(o.phase(), Phase::Joining { .. }));
    // Open: it waits for peers starting with it, then chooses.
    assert!(o.on(VALID, t0).is_empty());
    assert!(o.on(VALID, t0 + JOIN_GRACE / 2).is_empty());
    assert!(matches!(o.phase(), Phase::Joining { .. }));
    // The shell is told when the grace ends, to judge it then.
    assert_eq!(o.next_expiry(t0), Some(t0 + JOIN_GRACE));
    let commands = o.on(VALID, t0 + JOIN_GRACE);
    assert_eq!(started_together(&commands).view, "r0");
    assert!(matches!(o.phase(), Phase::Serving { .. }));
}

#[test]
fn a_peer_starting_with_it_is_in_its_first_ring() {
    // The peer's Lease appears a second after the fence opened: the first
    // ring already has it, and no load of the whole cluster is asked.
    let t0 = Instant::now();
    let mut o = Ownership::new("r0", "i1");
    o.on(Input::ListsSynced, t0);
    o.on(Input::LeasesListed, t0);
    assert!(o.on(VALID, t0).is_empty());
    o.on(seen("r1", lease("r1", 1, None)), t0 + JOIN_GRACE / 2);
    let commands = o.on(VALID, t0 + JOIN_GRACE);
    assert_eq!(started_together(&commands).view, "r0,r1");
}

/// A first view taking keys a live peer runs under another ring (a
/// restart, a scale-out) is a warm join: published once loaded. A peer
/// that started with it and published the same ring first runs none of
/// its keys: published at once.
#[test]
fn a_first_view_joining_a_running_ring_waits_for_its_load() {
    let t0 = Instant::now();
    for (r1_view, warm) in [("r1", true), ("r0,r1", false)] {
        let mut o = Ownership::new("r0", "i1");
        o.on(Input::ListsSynced, t0);
        o.on(Input::LeasesListed, t0);
        o.on(
            seen("r1", lease("r1", 1, Some(&r1_publication(r1_view)))),
            t0,
        );
        let commands = join(&mut o, t0);
        assert_eq!(published(&commands).is_none(), warm, "r1 serves {r1_view}");
        if warm {
            assert_eq!(loaded(&mut o, t0).view, "r0,r1");
        }
        assert!(matches!(o.phase(), Phase::Serving { .. }));
    }
}

/// Whether each started key may have run elsewhere since it was read.
fn started_ran_elsewhere(commands: &[Command]) -> Vec<(&str, bool)> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Start {
                key, ran_elsewhere, ..
            } => Some((&**key, *ran_elsewhere)),
            _ => None,
        })
        .collect()
}

/// "r0", its first lists done and the ring's Leases listed at `t0`.
fn synced_r0(t0: Instant) -> Ownership {
    let mut o = Ownership::new("r0", "i1");
    o.on(Input::ListsSynced, t0);
    o.on(Input::LeasesListed, t0);
    o
}

/// A started key is told whether it may have run elsewhere after it was
/// read: not at a start of the whole ring (nobody ran it), nor when taken
/// over from a dead peer (read after its Lease expired); yes when moved off
/// a live owner (a warm join), and yes when a live peer's view claiming it
/// is seen after the read, however late the Lease watch shows it.
#[test]
fn a_start_says_whether_its_key_may_have_run_elsewhere_since_it_was_read() {
    let t0 = Instant::now();
    let mut o = synced_r0(t0);
    let publication = started_together(&join(&mut o, t0));
    o.on(seen("r0", lease("r0", 2, Some(&publication))), t0);
    o.on(loaded_cronjob("ns/a"), t0);
    assert_eq!(
        started_ran_elsewhere(&o.on(load_done(true), t0)),
        [("ns/a", false)]
    );

    let key = (0..)
        .map(|i| format!("ns/k{i}"))
        .find(|k| Ring::new(["r0", "r1"]).owner(&format!("uid-{k}")) == Some("r0"))
        .expect("a key of r0's");
    let mut o = synced_r0(t0);
    let r1_alone = r1_publication("r1");
    o.on(seen("r1", lease("r1", 1, Some(&r1_alone))), t0);
    assert!(published(&join(&mut o, t0)).is_none(), "a warm join");
    o.on(loaded_cronjob(&key), t0);
    let publication = loaded(&mut o, t0);
    o.on(seen("r0", lease("r0", 2, Some(&publication))), t0);
    assert!(
        o.on(VALID, t0)
            .iter()
            .all(|c| !matches!(c, Command::Start { .. })),
        "r1 runs it"
    );
    let both = Publication {
        id: "j1.2".into(),
        ..r1_publication("r0,r1")
    };
    o.on(seen("r1", lease("r1", 2, Some(&both))), t0);
    let commands = o.on(VALID, t0);
    assert_eq!(started_ran_elsewhere(&commands), [(key.as_str(), true)]);

    // Published as a whole ring's start while the Lease watch still showed
    // r1 without a view; r1's own ring (it ran the key) comes after.
    let mut o = synced_r0(t0);
    o.on(seen("r1", lease("r1", 1, None)), t0);
    let publication = started_together(&join(&mut o, t0));
    o.on(seen("r1", lease("r1", 2, Some(&r1_alone))), t0);
    o.on(seen("r0", lease("r0", 2, Some(&publication))), t0);
    o.on(loaded_cronjob(&key), t0);
    assert!(started(&o.on(load_done(true), t0)).is_empty(), "r1 runs it");
    o.on(seen("r1", lease("r1", 3, Some(&both))), t0);
    let commands = o.on(VALID, t0);
    assert_eq!(started_ran_elsewhere(&commands), [(key.as_str(), true)]);

    // Taken over from a dead peer: read after its Lease expired here, so
    // after its last write.
    let theirs = (0..)
        .map(|i| format!("ns/k{i}"))
        .find(|k| Ring::new(["r0", "r1"]).owner(&format!("uid-{k}")) == Some("r1"))
        .expect("a key of r1's");
    let mut o = synced_r0(t0);
    o.on(seen("r1", lease("r1", 1, None)), t0);
    let publication = started_together(&join(&mut o, t0));
    o.on(seen("r0", lease("r0", 2, Some(&publication))), t0);
    o.on(seen("r1", lease("r1", 2, Some(&both))), t0);
    o.on(load_done(true), t0);
    let t1 = t0 + D + Duration::from_secs(1);
    o.on(
        seen("r0", lease("r0", 3, Some(&publication))),
        t1 - Duration::from_secs(1),
    );
    let alone = published(&o.on(VALID, t1)).expect("a view without r1");
    o.on(seen("r0", lease("r0", 4, Some(&alone))), t1);
    o.on(loaded_cronjob(&theirs), t1);
    let commands = o.on(load_done(true), t1);
    assert_eq!(started_ran_elsewhere(&commands), [(theirs.as_str(), false)]);
}

/// A joiner (a live peer with no view yet) takes no key from a serving
/// replica until it has loaded and published: the keys keep running here
/// meanwhile, then move in one step.
#[test]
fn a_joiner_enters_the_ring_only_once_it_has_published() {
    let t0 = Instant::now();
    let (mut o, _) = serving_alone(t0);
    o.on(seen("r1", lease("r1", 1, None)), t0);
    let commands = o.on(VALID, t0);
    // The same view again (a peer came), nothing stopped.
    let [Command::Publish(again)] = commands.as_slice() else {
        panic!("the view published again only, got {commands:?}");
    };
    assert_eq!(again.view, "r0");
    assert!(o.is_running("ns/a"));
    let both = r1_publication("r0,r1");
    o.on(seen("r1", lease("r1", 2, Some(&both))), t0);
    let commands = o.on(VALID, t0);
    assert!(
        matches!(&commands[..], [.., Command::RingChanged { target: Some(ring), .. }, _]
            if ring.members().len() == 2),
        "{commands:?}"
    );
}

/// A peer already in the ring stays in it while it has no view (peers that
/// started together chose each other before any of them had loaded).
#[test]
fn a_peer_in_the_ring_stays_while_it_has_no_view() {
    let t0 = Instant::now();
    let mut o = Ownership::new("r0", "i1");
    o.on(Input::ListsSynced, t0);
    o.on(Input::LeasesListed, t0);
    o.on(seen("r1", lease("r1", 1, None)), t0);
    started_together(&join(&mut o, t0));
    o.on(load_done(true), t0);
    o.on(seen("r1", lease("r1", 2, None)), t0);
    let commands = o.on(VALID, t0 + Duration::from_secs(1));
    assert!(commands.is_empty(), "{commands:?}");
    let Phase::Serving { target, .. } = o.phase() else {
        panic!("not serving: {}", o.phase().name());
    };
    assert_eq!(target.members().len(), 2);
}

#[test]
fn keys_start_only_after_the_load_and_the_echo_of_this_very_publication() {
    let t0 = Instant::now();
    let mut o = Ownership::new("r0", "i1");
    o.on(Input::ListsSynced, t0);
    o.on(Input::LeasesListed, t0);
    let publication = started_together(&join(&mut o, t0));
    assert_eq!(publication.id, "i1.1");
    let commands = o.on(seen_cronjob("ns/a"), t0);
    assert_eq!(
        commands,
        [Command::Spawn {
            key: "ns/a".into(),
            uid: "uid-ns/a".into()
        }]
    );
    assert!(started(&o.on(load_done(true), t0)).is_empty());
    // The same members from an earlier publication (a previous incarnation,
    // or before a lapse) are not this publication's echo.
    let stale = Publication {
        view: publication.view.clone(),
        protocol: Protocol::V1,
        id: "i0.7".into(),
        leaving: false,
    };
    o.on(seen("r0", lease("r0", 1, Some(&stale))), t0);
    assert!(started(&o.on(VALID, t0)).is_empty());
    o.on(seen("r0", lease("r0", 2, Some(&publication))), t0);
    let commands = o.on(VALID, t0 + Duration::from_secs(1));
    assert_eq!(
        commands,
        [Command::Start {
            key: "ns/a".into(),
            uid: "uid-ns/a".into(),
            waited: Duration::from_secs(1),
            ran_elsewhere: false,
        }]
    );
    assert!(o.is_running("ns/a"));
}

#[test]
fn a_key_a_live_peer_still_claims_waits_until_the_peer_lets_go() {
    let t0 = Instant::now();
    let (mut o, _) = serving_alone(t0);
    // r1 was there first (its view {r1} claims everything); r0 moves to
    // {r0, r1} and must not start what r1's published view still gives r1.
    let r1_alone = r1_publication("r1");
    o.on(seen("r1", lease("r1", 3, Some(&r1_alone))), t0);
    let commands = o.on(VALID, t0);
    let ours_in_both =
        |key: &str| Ring::new(["r0", "r1"]).owner(&format!("uid-ns/{key}")) == Some("r0");
    let stopped = commands
        .iter()
        .any(|c| matches!(c, Command::Stop { key, .. } if &**key == "ns/a"));
    assert_eq!(stopped, !ours_in_both("a"));
    // Publishing waits for the stop to be reported.
    assert_eq!(published(&commands).is_some(), ours_in_both("a"));
    let key = (0..100)
        .map(crate::bucket::test_uid)
        .find(|k| ours_in_both(k))
        .unwrap();
    let key = format!("ns/{key}");
    if !ours_in_both("a") {
        let commands = o.on(
            Input::ActorStopped {
                key: "ns/a".into(),
                uid: "uid-ns/a".into(),
            },
            t0,
        );
        assert!(published(&commands).is_some(), "published once stopped");
    }
    let Phase::Serving { publication, .. } = o.phase().clone() else {
        panic!("not serving: {}", o.phase().name());
    };
    o.on(load_done(true), t0);
    o.on(seen("r0", lease("r0", 4, Some(&publication))), t0);
    let commands = o.on(seen_cronjob(&key), t0);
    assert!(started(&commands).is_empty(), "r1's view still claims it");
    // r1 publishes {r0, r1}: the key is r0's alone.
    let r1_both = Publication {
        view: "r0,r1".into(),
        protocol: Protocol::V1,
        id: "j1.2".into(),
        leaving: false,
    };
    o.on(seen("r1", lease("r1", 5, Some(&r1_both))), t0);
    assert_eq!(started(&o.on(VALID, t0)), [key.as_str()]);
}

#[test]
fn a_lapse_stops_everything_and_rejoins_once_stopped() {
    let t0 = Instant::now();
    let (mut o, _) = serving_alone(t0);
    let lapsed = Input::Tick {
        fence: FenceState::Lapsed,
        wall: None,
    };
    let commands = o.on(lapsed.clone(), t0);
    assert_eq!(
        commands,
        [
            stop("ns/a"),
            Command::RingChanged {
                target: None,
                lost: 1
            }
        ]
    );
    assert!(!o.owns("uid-ns/a"));
    assert!(o.on(lapsed.clone(), t0).is_empty(), "still stopping");
    let commands = o.on(
        Input::ActorStopped {
            key: "ns/a".into(),
            uid: "uid-ns/a".into(),
        },
        t0,
    );
    assert_eq!(commands, [Command::RejoinFence]);
    assert!(matches!(o.phase(), Phase::Joining { .. }));
    // It waits the grace again; the next publication is a new one (an old
    // echo cannot start keys), at once: no peer runs its keys.
    assert!(o.on(VALID, t0).is_empty());
    assert_eq!(started_together(&o.on(VALID, t0 + JOIN_GRACE)).id, "i1.2");
}

#[test]
fn a_failed_load_is_retried_and_holds_every_start() {
    let t0 = Instant::now();
    let mut o = Ownership::new("r0", "i1");
    o.on(Input::ListsSynced, t0);
    o.on(Input::LeasesListed, t0);
    let publication = started_together(&join(&mut o, t0));
    o.on(seen("r0", lease("r0", 2, Some(&publication))), t0);
    o.on(seen_cronjob("ns/a"), t0);
    let commands = o.on(load_done(false), t0);
    assert!(matches!(
        commands.as_slice(),
        [Command::Load {
            previous: None,
            delay: LOAD_RETRY,
            ..
        }]
    ));
    assert_eq!(o.loads_in_flight(), 1);
    assert!(started(&o.on(VALID, t0)).is_empty());
    assert_eq!(started(&o.on(load_done(true), t0)), ["ns/a"]);
}

#[test]
fn a_failed_load_is_retried_for_what_it_was_to_gain_not_for_everything_owned() {
    let t0 = Instant::now();
    let (mut o, _) = serving_alone(t0);
    // A load counted from the ring before a change failed: the retry
    // counts from the same ring, under the ring now chosen.
    let before = Arc::new(Ring::new(["r0", "r1"]));
    let commands = o.on(
        Input::LoadDone {
            ok: false,
            previous: Some(before.clone()),
            jobs_told: false,
        },
        t0,
    );
    let [
        Command::Load {
            target,
            previous: Some(previous),
            delay: LOAD_RETRY,
            ..
        },
    ] = commands.as_slice()
    else {
        panic!("one retry of the same gains, got {commands:?}");
    };
    assert!(Arc::ptr_eq(previous, &before));
    let members: Vec<&str> = target.members().iter().map(|m| &**m).collect();
    assert_eq!(members, ["r0"]);
    assert_eq!(o.loads_in_flight(), 1);
}

#[test]
fn shutdown_releases_the_lease_once_every_actor_stopped() {
    let t0 = Instant::now();
    let (mut o, _) = serving_alone(t0);
    let commands = o.on(Input::Shutdown, t0);
    assert_eq!(commands, [stop("ns/a")]);
    assert!(o.on(VALID, t0).is_empty(), "a tick changes nothing now");
    assert!(
        o.on(seen_cronjob("ns/b"), t0).is_empty(),
        "nothing new starts"
    );
    let commands = o.on(
        Input::ActorStopped {
            key: "ns/a".into(),
            uid: "uid-ns/a".into(),
        },
        t0,
    );
    assert_eq!(commands, [Command::ReleaseAndExit]);
    assert!(o.on(Input::Shutdown, t0).is_empty());
}

#[test]
fn a_recreated_cronjob_replaces_its_actor_and_readiness_waits_for_arming() {
    let t0 = Instant::now();
    let (mut o, _) = serving_alone(t0);
    assert!(
        o.on(Input::ActorArmed { key: "ns/a".into() }, t0)
            .contains(&Command::SetReady)
    );
    let commands = o.on(
        Input::CronJobSeen {
            key: "ns/a".into(),
            uid: "other".into(),
            read_in: None,
        },
        t0,
    );
    assert_eq!(
        commands[..2],
        [
            stop("ns/a"),
            Command::Spawn {
                key: "ns/a".into(),
                uid: "other".into()
            }
        ]
    );
    assert!(o.has("ns/a", "other"));
    // A stale report of the old actor's stop is matched by UID.
    let commands = o.on(
        Input::ActorStopped {
            key: "ns/a".into(),
            uid: "uid-ns/a".into(),
        },
        t0,
    );
    assert!(commands.iter().all(|c| !matches!(c, Command::Stop { .. })));
    assert!(o.oldest_stop().is_none());
}

/// "r0" serving in a ring of {r0, r1} (r1 published it too), with "ns/k"
/// one of r0's keys, running; and r1's publication.
fn serving_beside_r1(t0: Instant) -> (Ownership, String, Publication) {
    serving_beside_r1_with(t0, |_| true)
}

/// [`serving_beside_r1`], with a key whose UID is also `also`'s.
fn serving_beside_r1_with(
    t0: Instant,
    also: impl Fn(&str) -> bool,
) -> (Ownership, String, Publication) {
    let key = (0..1000)
        .map(|i| format!("ns/{}", crate::bucket::test_uid(i)))
        .find(|k| {
            let uid = format!("uid-{k}");
            Ring::new(["r0", "r1"]).owner(&uid) == Some("r0") && also(&uid)
        })
        .expect("some key is r0's");
    let mut o = Ownership::new("r0", "i1");
    o.on(Input::ListsSynced, t0);
    o.on(Input::LeasesListed, t0);
    o.on(seen("r1", lease("r1", 1, None)), t0);
    let own = started_together(&join(&mut o, t0));
    assert_eq!(own.view, "r0,r1");
    o.on(seen_cronjob(&key), t0);
    o.on(load_done(true), t0);
    let r1 = r1_publication("r0,r1");
    o.on(seen("r1", lease("r1", 2, Some(&r1))), t0);
    o.on(seen("r0", lease("r0", 3, Some(&own))), t0);
    assert_eq!(started(&o.on(VALID, t0)), [key.as_str()]);
    (o, key, r1)
}

/// A graceful stop with a live peer: the keys keep running under a view
/// that says it is leaving, until the peer's view leaves it out (the peer
/// has loaded them); then they stop and the Lease is released.
#[test]
fn a_graceful_stop_runs_its_keys_until_the_peer_has_loaded_them() {
    let t0 = Instant::now();
    let (mut o, key, _) = serving_beside_r1(t0);
    let commands = o.on(Input::Shutdown, t0);
    let [Command::Publish(leaving)] = commands.as_slice() else {
        panic!("one leaving publication, got {commands:?}");
    };
    assert!(leaving.leaving && leaving.view == "r0,r1", "{leaving:?}");
    assert!(matches!(o.phase(), Phase::Leaving { .. }));
    assert!(o.on(VALID, t0 + Duration::from_secs(1)).is_empty());
    assert!(o.is_running(&key));
    let r1_alone = Publication {
        view: "r1".into(),
        protocol: Protocol::V1,
        id: "j1.2".into(),
        leaving: false,
    };
    o.on(seen("r1", lease("r1", 4, Some(&r1_alone))), t0);
    let commands = o.on(VALID, t0 + Duration::from_secs(2));
    assert_eq!(commands, [stop(&key)]);
    let commands = o.on(
        Input::ActorStopped {
            key: key.as_str().into(),
            uid: format!("uid-{key}").into(),
        },
        t0,
    );
    assert_eq!(commands, [Command::ReleaseAndExit]);
}

/// SIGTERM in the middle of a ring change (in a rolling restart, the next
/// replica stopped as the last one comes back): the keys are not dropped;
/// once the lost ones have stopped, the view of the new ring is published
/// marked leaving, and the replica leaves as from serving.
#[test]
fn a_graceful_stop_during_a_ring_change_leaves_once_the_lost_keys_have_stopped() {
    let t0 = Instant::now();
    let (mut o, key, _) = serving_beside_r1_with(t0, |uid| {
        Ring::new(["r0", "r1", "r2"]).owner(uid) == Some("r2")
    });
    let r2 = Publication {
        view: "r0,r1,r2".into(),
        protocol: Protocol::V1,
        id: "k1.1".into(),
        leaving: false,
    };
    o.on(seen("r2", lease("r2", 5, Some(&r2))), t0);
    let commands = o.on(VALID, t0);
    assert!(commands.contains(&stop(&key)), "{commands:?}");
    assert!(matches!(o.phase(), Phase::Stopping { .. }));
    let commands = o.on(Input::Shutdown, t0);
    assert!(
        commands.iter().all(|c| !matches!(
            c,
            Command::Stop { .. } | Command::Publish(_) | Command::ReleaseAndExit
        )),
        "{commands:?}"
    );
    let commands = o.on(
        Input::ActorStopped {
            key: key.as_str().into(),
            uid: format!("uid-{key}").into(),
        },
        t0 + Duration::from_secs(1),
    );
    let published: Vec<&Publication> = commands
        .iter()
        .filter_map(|c| match c {
            Command::Publish(p) => Some(p),
            _ => None,
        })
        .collect();
    assert!(
        matches!(published.as_slice(), [p] if p.leaving && p.view == "r0,r1,r2"),
        "{commands:?}"
    );
    assert!(matches!(o.phase(), Phase::Leaving { .. }));
    // Its drain counts from SIGTERM.
    let commands = o.on(VALID, t0 + DRAIN);
    assert_eq!(commands, [Command::ReleaseAndExit]);
}

/// A peer that never leaves it out (its load fails, say) holds the stop
/// only for the drain time.
#[test]
fn a_graceful_stop_waits_for_its_peer_no_longer_than_the_drain() {
    let t0 = Instant::now();
    let (o, key, _) = serving_beside_r1(t0);
    let mut o = o.with_drain(Duration::from_secs(5));
    o.on(Input::Shutdown, t0);
    assert!(o.on(VALID, t0 + Duration::from_secs(4)).is_empty());
    let commands = o.on(VALID, t0 + Duration::from_secs(5));
    assert_eq!(commands, [stop(&key)]);
}

/// The peer's side: a member that is leaving is out of its ring at once,
/// but the view that leaves it out is published only once the keys it
/// gains are loaded (the leaver waits for that), and they start when the
/// leaver lets go (its claim holds them until then).
#[test]
fn a_leaving_peer_is_out_of_the_ring_and_its_keys_start_once_it_lets_go() {
    let t0 = Instant::now();
    let (mut o, _, r1) = serving_beside_r1(t0);
    let commands = r1_leaves(&mut o, r1, t0);
    assert!(
        matches!(&commands[..], [Command::RingChanged { target: Some(ring), .. }, Command::Load { .. }]
            if ring.members().len() == 1),
        "{commands:?}"
    );
    let gained = (0..100)
        .map(|i| format!("ns/{}", crate::bucket::test_uid(i)))
        .find(|k| Ring::new(["r0", "r1"]).owner(&format!("uid-{k}")) == Some("r1"))
        .expect("some key is r1's");
    o.on(seen_cronjob(&gained), t0);
    let own = loaded(&mut o, t0);
    assert_eq!(own.view, "r0");
    o.on(seen("r0", lease("r0", 5, Some(&own))), t0);
    assert!(started(&o.on(VALID, t0)).is_empty(), "r1 still runs it");
    // r1 releases its Lease.
    o.on(
        seen(
            "r1",
            LeaseObservation {
                holder: None,
                ..lease("r1", 6, None)
            },
        ),
        t0,
    );
    // Its claim is gone; the view is published again and the key starts on
    // its echo (a silent watch must not let a leaving peer that still runs
    // its keys merely expire here: the echo shows its renewals first).
    let commands = o.on(VALID, t0);
    assert!(started(&commands).is_empty(), "{commands:?}");
    let again = published(&commands).expect("published again");
    o.on(seen("r0", lease("r0", 7, Some(&again))), t0);
    assert_eq!(started(&o.on(VALID, t0)), [gained.as_str()]);
}

/// A peer leaves, and the keys gained from it that fall due first are read
/// on their own: the view that leaves it out is published then, its bulk
/// load still in flight (not for a report of an older epoch's reads). When
/// the leaver lets go, a key read alone starts; one the load has not shown
/// yet waits for it.
#[test]
fn leaving_out_a_leaver_publishes_once_the_gained_keys_due_first_are_read() {
    let t0 = Instant::now();
    let (mut o, _, r1) = serving_beside_r1(t0);
    let gained = three_keys_of_r1();
    let commands = r1_leaves(&mut o, r1, t0);
    let Some(Command::Load { epoch, .. }) =
        commands.iter().find(|c| matches!(c, Command::Load { .. }))
    else {
        panic!("no load: {commands:?}");
    };
    let epoch = *epoch;
    assert!(
        published(&commands).is_none(),
        "not before the due keys are read"
    );
    let read_alone = Input::KeyRead {
        key: gained[0].as_str().into(),
        uid: format!("uid-{}", gained[0]).into(),
        read_in: epoch,
    };
    assert!(started(&o.on(read_alone, t0)).is_empty());
    let stale = o.on(Input::DueKeysRead { epoch: epoch - 1 }, t0);
    assert!(
        published(&stale).is_none(),
        "an older epoch's reads: {stale:?}"
    );
    let own = published(&o.on(Input::DueKeysRead { epoch }, t0))
        .expect("published with the load in flight");
    assert_eq!((own.view.as_str(), o.loads_in_flight()), ("r0", 1));
    o.on(seen("r0", lease("r0", 5, Some(&own))), t0);
    o.on(seen_cronjob(&gained[1]), t0);
    assert!(started(&o.on(VALID, t0)).is_empty(), "r1 still runs them");
    // r1 lets go; the view is published again and comes back.
    let released = LeaseObservation {
        holder: None,
        ..lease("r1", 6, None)
    };
    o.on(seen("r1", released), t0);
    let again = published(&o.on(VALID, t0)).expect("published again");
    o.on(seen("r0", lease("r0", 7, Some(&again))), t0);
    assert_eq!(
        started(&o.on(VALID, t0)),
        [gained[0].as_str()],
        "the one read alone; the other waits for the load"
    );
    assert!(started(&o.on(Input::LoadJobsDone, t0)).is_empty());
    assert_eq!(
        started(&o.on(loaded_cronjob(&gained[1]), t0)),
        [gained[1].as_str()]
    );
}

/// r1, serving beside r0 under `r1`, publishes its view again marked
/// leaving: r0's commands on its next tick.
fn r1_leaves(o: &mut Ownership, r1: Publication, t0: Instant) -> Vec<Command> {
    let leaving = Publication {
        id: "j1.2".into(),
        leaving: true,
        ..r1
    };
    o.on(seen("r1", lease("r1", 4, Some(&leaving))), t0);
    o.on(VALID, t0)
}

/// Three keys the ring of r0 and r1 gives r1 (r0 gains them when r1 goes).
fn three_keys_of_r1() -> Vec<String> {
    (0..300)
        .map(|i| format!("ns/{}", crate::bucket::test_uid(i)))
        .filter(|k| Ring::new(["r0", "r1"]).owner(&format!("uid-{k}")) == Some("r1"))
        .take(3)
        .collect()
}

/// A peer's Lease runs out: the keys gained from it load, the Jobs first;
/// none starts before the load has told its Jobs, and then each starts as
/// the load shows its CronJob, before the load ends. A gained key the
/// watch showed first (a resumed watch replays versions older than the
/// load's read) waits for the load's copy.
#[test]
fn a_gained_key_starts_as_the_load_shows_its_cronjob_once_the_loads_jobs_are_told() {
    let t0 = Instant::now();
    let (mut o, _, _) = serving_beside_r1(t0);
    let gained = three_keys_of_r1();
    // r1 renews no more; r0 does.
    let t1 = t0 + D + Duration::from_secs(5);
    o.on(seen("r0", lease("r0", 4, None)), t1);
    let commands = o.on(VALID, t1);
    assert!(
        commands.iter().any(|c| matches!(c, Command::Load { .. })),
        "{commands:?}"
    );
    let own = published(&commands).expect("nothing to stop: the view is published at once");
    assert_eq!(own.view, "r0");
    o.on(seen("r0", lease("r0", 5, Some(&own))), t1);
    assert!(started(&o.on(loaded_cronjob(&gained[0]), t1)).is_empty());
    assert!(
        started(&o.on(VALID, t1)).is_empty(),
        "its Jobs are not told"
    );
    assert_eq!(
        started(&o.on(Input::LoadJobsDone, t1)),
        [gained[0].as_str()]
    );
    assert_eq!(
        started(&o.on(loaded_cronjob(&gained[1]), t1)),
        [gained[1].as_str()],
        "started on arrival, the load still in flight"
    );
    // The watch shows the third first: it waits for the load's copy.
    assert!(started(&o.on(seen_cronjob(&gained[2]), t1)).is_empty());
    assert!(started(&o.on(VALID, t1)).is_empty());
    // A failed load retried: the key still waits for the retry's copy.
    let failed = Input::LoadDone {
        ok: false,
        previous: None,
        jobs_told: true,
    };
    assert!(started(&o.on(failed, t1)).is_empty());
    assert!(started(&o.on(Input::LoadJobsDone, t1)).is_empty());
    assert_eq!(
        started(&o.on(loaded_cronjob(&gained[2]), t1)),
        [gained[2].as_str()]
    );
    assert_eq!(o.loads_in_flight(), 1);
    let done = Input::LoadDone {
        ok: true,
        previous: None,
        jobs_told: true,
    };
    assert!(started(&o.on(done, t1)).is_empty());
    assert_eq!(o.loads_in_flight(), 0);
}

/// At a take-over, a gained key read on its own with its Jobs (the standby
/// CronJobs due first, `crate::shard::standby`) starts at once, before the
/// bulk load has told its Jobs; the others still wait for that. A key read
/// alone that the watch had shown first no longer waits for the load's copy:
/// the read is as consistent as the load.
#[test]
fn a_gained_key_read_alone_starts_before_the_bulk_load_tells_its_jobs() {
    let t0 = Instant::now();
    let (mut o, _, _) = serving_beside_r1(t0);
    let gained = three_keys_of_r1();
    let read_alone = |key: &str| Input::KeyRead {
        key: key.into(),
        uid: format!("uid-{key}").into(),
        read_in: Epoch::MAX,
    };
    let t1 = t0 + D + Duration::from_secs(5);
    o.on(seen("r0", lease("r0", 4, None)), t1);
    let own = published(&o.on(VALID, t1)).expect("published");
    // Read alone before the own view is back: it waits for that (the
    // hand-off rule is the same for every key).
    assert!(started(&o.on(read_alone(&gained[0]), t1)).is_empty());
    o.on(seen("r0", lease("r0", 5, Some(&own))), t1);
    assert_eq!(
        started(&o.on(VALID, t1)),
        [gained[0].as_str()],
        "read alone: starts, the load's Jobs not told"
    );
    // One the load shows waits for its Jobs as before.
    assert!(started(&o.on(loaded_cronjob(&gained[1]), t1)).is_empty());
    // One the watch showed first, then read alone: starts.
    assert!(started(&o.on(seen_cronjob(&gained[2]), t1)).is_empty());
    assert_eq!(
        started(&o.on(read_alone(&gained[2]), t1)),
        [gained[2].as_str()]
    );
    assert_eq!(
        started(&o.on(Input::LoadJobsDone, t1)),
        [gained[1].as_str()]
    );
    assert!(started(&o.on(load_done(true), t1)).is_empty());
    assert_eq!(o.loads_in_flight(), 0);
}

/// A read counts for a key only if asked for since the key's latest gain: a
/// load asked for before the key was lost and gained again (a ring that
/// flapped while it ran) is as good as the watch's copy, since the owner
/// in between may have run a slot. The simulation found that (seed 1937).
#[test]
fn a_read_asked_for_before_the_key_was_lost_and_gained_again_is_not_fresh() {
    let mut loads = crate::shard::ownership::loads::Loads::default();
    let (alone, pair) = (Ring::new(["r0"]), Ring::new(["r0", "r1"]));
    let uid = (0..100)
        .map(crate::bucket::test_uid)
        .find(|uid| pair.owner(uid) == Some("r1"))
        .expect("a key r1 takes");
    loads.ring_changed(Some(&alone), None, "r0");
    let first = loads.epoch();
    assert!(loads.fresh(&uid, Some(first)));
    assert!(!loads.fresh(&uid, None), "the watch's copy never is");
    // r1 joins (the key goes), then leaves (it comes back).
    loads.ring_changed(Some(&pair), Some(&alone), "r0");
    loads.ring_changed(Some(&alone), Some(&pair), "r0");
    assert!(!loads.fresh(&uid, Some(first)));
    assert!(loads.fresh(&uid, Some(loads.epoch())));
    // A key kept through the changes: the first read still counts.
    let kept = (0..100)
        .map(crate::bucket::test_uid)
        .find(|uid| pair.owner(uid) == Some("r0"))
        .expect("a key r0 keeps");
    assert!(loads.fresh(&kept, Some(first)));
    // After a lapse everything is gained again.
    loads.ring_changed(None, None, "r0");
    loads.ring_changed(Some(&alone), None, "r0");
    assert!(!loads.fresh(&kept, Some(first)));
}

/// The fence valid, and the wall clock `second`s past a whole minute
/// (negative: before it).
fn tick_at(second: i64) -> Input {
    let wall = jiff::Timestamp::from_second(1_800_000_000 + second).expect("a valid time");
    Input::Tick {
        fence: FenceState::Valid,
        wall: Some(wall),
    }
}

#[test]
fn the_hold_runs_from_ten_seconds_before_a_whole_minute_to_five_after() {
    let at = |ms: i64| jiff::Timestamp::from_millisecond(1_800_000_000_000 + ms).expect("valid");
    for (ms, held) in [
        (-10_001, false),
        (-10_000, true),
        (-1, true),
        (0, true),
        (4_999, true),
        (5_000, false),
        (30_000, false),
        (49_999, false),
    ] {
        assert_eq!(near_a_whole_minute(at(ms)), held, "{ms} ms from the minute");
    }
}

/// A join's first view into a running ring, ready at :55, waits until
/// five seconds past the minute (told by a later tick, or reckoned from
/// the last tick's wall clock and the monotonic clock): the peers' stops
/// would fall on that minute's slots. A ring starting together publishes
/// at :55 at once (nobody runs its keys).
#[test]
fn a_join_into_a_running_ring_waits_out_a_whole_minute() {
    let t0 = Instant::now();
    for (r1_view, running) in [("r1", true), ("r0,r1", false)] {
        let mut o = Ownership::new("r0", "i1");
        o.on(Input::ListsSynced, t0);
        o.on(Input::LeasesListed, t0);
        o.on(
            seen("r1", lease("r1", 1, Some(&r1_publication(r1_view)))),
            t0,
        );
        assert!(o.on(tick_at(-7), t0 - JOIN_GRACE).is_empty());
        let joined = o.on(tick_at(-5), t0);
        if !running {
            assert_eq!(started_together(&joined).view, "r0,r1");
            continue;
        }
        assert!(published(&joined).is_none(), "{joined:?}");
        let loaded = o.on(load_done(true), t0);
        assert!(published(&loaded).is_none(), "held at :55: {loaded:?}");
        let at_the_minute = o.on(tick_at(0), t0 + Duration::from_secs(5));
        assert!(published(&at_the_minute).is_none(), "{at_the_minute:?}");
        // No tick since :00, 5 s on the monotonic clock: :05.
        let after = o.on(VALID, t0 + Duration::from_secs(10));
        assert_eq!(published(&after).expect("published at :05").view, "r0,r1");
    }
}

/// A view leaving out a leaver that still runs its keys waits out a whole
/// minute; a take-over from a dead peer (its keys run nowhere) does not.
#[test]
fn a_leave_waits_out_a_whole_minute_and_a_take_over_does_not() {
    let t0 = Instant::now();
    let (mut o, _, r1) = serving_beside_r1(t0);
    o.on(tick_at(-8), t0);
    let commands = r1_leaves(&mut o, r1, t0);
    let Some(Command::Load { epoch, .. }) =
        commands.iter().find(|c| matches!(c, Command::Load { .. }))
    else {
        panic!("no load: {commands:?}");
    };
    let read = o.on(Input::DueKeysRead { epoch: *epoch }, t0);
    assert!(published(&read).is_none(), "held at :52: {read:?}");
    let later = o.on(VALID, t0 + Duration::from_secs(12));
    assert!(published(&later).is_none(), "held at :04: {later:?}");
    let own = published(&o.on(VALID, t0 + Duration::from_secs(13))).expect("published at :05");
    assert_eq!(own.view, "r0");

    let (mut o, _, _) = serving_beside_r1(t0);
    let expired = o.on(tick_at(-5), t0 + D + Duration::from_secs(1));
    assert_eq!(
        published(&expired).expect("r1 dead: published at :55").view,
        "r0"
    );
}
