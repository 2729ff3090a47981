//! The cleanup's transitions, on a hand-driven clock.

use super::*;
use crate::stale::{Frontend, NodePortScope};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

const CIP: &str = "198.18.0.10";
const X: &str = "198.18.1.7";
const Y: &str = "198.18.1.8";

fn cip() -> UdpDest {
    UdpDest::Addr {
        addr: ip(CIP),
        port: 53,
    }
}

fn flow(sport: u16, reply: &str) -> Flow {
    Flow {
        proto: 17,
        src: ip("198.18.9.9"),
        dst: ip(CIP),
        sport,
        dport: 53,
        reply_src: ip(reply),
        reply_sport: 5353,
        zone: 0,
        id: Some(u32::from(sport)),
    }
}

fn serving(eps: &[&str]) -> Delta {
    Delta {
        dests: vec![(
            cip(),
            Frontend::Serving(eps.iter().map(|a| (ip(a), 5353)).collect()),
        )],
        ..Delta::default()
    }
}

fn full(eps: &[&str]) -> Delta {
    Delta {
        full: true,
        nodeports: [Some(NodePortScope::Addrs(BTreeSet::new())), None],
        ..serving(eps)
    }
}

fn cleanup(t0: Instant) -> Cleanup {
    let cfg = CleanupConfig {
        audit: None,
        ..CleanupConfig::default()
    };
    Cleanup::new(cfg, vec![IpFamily::V4], t0)
}

/// Without an index: a commit queues its destinations; the listing's flows are judged
/// when it comes back.
fn listed_stale(c: &mut Cleanup, flows: Vec<Flow>, now: Instant) -> Judged {
    let (job, _) = c.next_job(now);
    let Some(Job::List(scopes)) = job else {
        panic!("expected a listing, got {job:?}");
    };
    assert_eq!(scopes, vec![Scope::Dest(cip())]);
    c.listed(&[(scopes[0], true)], flows, now)
}

/// A readiness flap: Y stops serving (commit), its flows are judged stale; Y serves
/// again (commit) before their delete is sent: they are judged again and dropped, not
/// deleted. (Negative control: taking the doomed flows without judging them again sends
/// the delete: `expected None, got Delete`.)
#[test]
fn a_flow_doomed_by_one_commit_is_spared_when_the_next_serves_it_again() {
    let t0 = Instant::now();
    let mut c = cleanup(t0);
    c.committed(full(&[X, Y]), t0);
    assert!(matches!(c.next_job(t0).0, Some(Job::List(_))));
    c.listed(&[(Scope::All(IpFamily::V4), true)], vec![], t0);
    c.begin();
    c.committed(serving(&[X]), t0);
    let j = listed_stale(&mut c, vec![flow(1, X), flow(2, Y)], t0);
    assert_eq!((j.looked_at, j.stale), (2, 1));
    assert_eq!(c.doomed().count(), 1);
    c.begin();
    c.committed(serving(&[X, Y]), t0);
    let (job, j) = c.next_job(t0);
    assert_eq!(job, None);
    assert_eq!(j.dropped, 1);
    assert_eq!(c.pending(), 0);
}

/// Flows learned while a commit is under way are judged by its outcome: a flow to an
/// endpoint the commit adds is kept when it succeeds, and judged stale when it was
/// refused (the old rules never sent there). (Negative control: judging arrivals while
/// committing dooms the kept one: `left: 1, right: 0`.)
#[test]
fn flows_learned_during_a_commit_are_judged_by_its_outcome() {
    let t0 = Instant::now();
    for refused in [false, true] {
        let mut c = cleanup(t0);
        c.events_on(t0);
        assert_eq!(
            c.next_job(t0).0,
            Some(Job::Seed(vec![IpFamily::V4])),
            "events on: the index is seeded first"
        );
        c.committed(full(&[X]), t0);
        c.seeded(vec![flow(1, X)], true, t0);
        assert!(c.indexed());
        c.begin();
        let j = c.event(FlowEvent::New(flow(2, Y)), t0);
        assert_eq!(j.looked_at, 0, "held while committing");
        let j = if refused {
            c.aborted(t0)
        } else {
            c.committed(serving(&[X, Y]), t0)
        };
        assert_eq!(j.stale, usize::from(refused), "refused: {refused}");
        assert_eq!(c.doomed().count(), usize::from(refused));
    }
}

/// With an index, a commit's destinations are judged from it at once: only the flows to
/// the endpoint that stopped serving are doomed; a DESTROY event takes a doomed flow
/// back.
#[test]
fn an_indexed_commit_dooms_exactly_the_stale_flows() {
    let t0 = Instant::now();
    let mut c = cleanup(t0);
    c.events_on(t0);
    c.next_job(t0);
    c.committed(full(&[X, Y]), t0);
    let j = c.seeded(vec![flow(1, X), flow(2, Y), flow(3, Y)], true, t0);
    assert_eq!((j.looked_at, j.stale), (3, 0));
    c.begin();
    let j = c.committed(serving(&[X]), t0);
    assert_eq!((j.looked_at, j.stale), (3, 2));
    c.event(FlowEvent::Destroy(flow(3, Y)), t0);
    let (job, _) = c.next_job(t0);
    assert_eq!(job, Some(Job::Delete(vec![flow(2, Y)])));
    c.deleted(&[flow(2, Y)], &[Removal::Deleted], t0);
    assert_eq!(c.pending(), 0);
    assert_eq!(c.indexed_flows(), 1);
}

/// A flow to a destination the state serves, learned by an event, is judged at once;
/// one not DNAT'ed to a served destination is stale.
#[test]
fn a_new_flow_is_judged_on_arrival() {
    let t0 = Instant::now();
    let mut c = cleanup(t0);
    c.events_on(t0);
    c.next_job(t0);
    c.committed(full(&[X]), t0);
    c.seeded(vec![], true, t0);
    let mut unnated = flow(7, CIP);
    unnated.reply_sport = 53;
    assert_eq!(c.event(FlowEvent::New(flow(6, X)), t0).stale, 0);
    assert_eq!(c.event(FlowEvent::New(unnated), t0).stale, 1);
}

/// A failed delete is tried again after the backoff, judged again then; an incomplete
/// listing likewise.
#[test]
fn failures_are_retried_with_a_backoff_and_judged_again() {
    let t0 = Instant::now();
    let mut c = cleanup(t0);
    c.committed(full(&[X]), t0);
    c.next_job(t0);
    c.listed(&[(Scope::All(IpFamily::V4), false)], vec![flow(1, Y)], t0);
    let (job, _) = c.next_job(t0);
    assert_eq!(job, Some(Job::Delete(vec![flow(1, Y)])));
    c.deleted(&[flow(1, Y)], &[Removal::Failed], t0);
    assert_eq!(c.next_job(t0).0, None, "nothing due before the backoff");
    let t1 = t0 + Duration::from_millis(500);
    assert_eq!(c.next_job(t1).0, Some(Job::Delete(vec![flow(1, Y)])));
    c.deleted(&[flow(1, Y)], &[Removal::Deleted], t1);
    // the listing comes again, and its flows are judged by the state of then
    let (job, _) = c.next_job(t1);
    assert_eq!(job, Some(Job::List(vec![Scope::All(IpFamily::V4)])));
}

/// Lost events seed the index again, which judges everything.
#[test]
fn lost_events_seed_again() {
    let t0 = Instant::now();
    let mut c = cleanup(t0);
    c.events_on(t0);
    c.next_job(t0);
    c.committed(full(&[X]), t0);
    c.seeded(vec![], true, t0);
    c.lost(t0);
    assert_eq!(c.next_job(t0).0, Some(Job::Seed(vec![IpFamily::V4])));
    let j = c.seeded(vec![flow(1, Y), flow(2, X)], true, t0);
    assert_eq!((j.looked_at, j.stale), (2, 1));
}

/// Two services selecting the same pod: deleting one deletes its own flows and leaves
/// the other's. (Negative control: judging by the reply source alone, as targets did
/// before, deletes B's flow too.)
#[test]
fn a_deleted_service_leaves_the_flows_of_another_to_the_same_pod() {
    let t0 = Instant::now();
    let b = UdpDest::Addr {
        addr: ip("198.18.0.11"),
        port: 53,
    };
    let mut c = cleanup(t0);
    c.events_on(t0);
    c.next_job(t0);
    let mut d = full(&[X]);
    d.dests.push((b, Frontend::Serving(vec![(ip(X), 5353)])));
    c.committed(d, t0);
    let mut fb = flow(9, X);
    fb.dst = ip("198.18.0.11");
    c.seeded(vec![flow(1, X), fb], true, t0);
    c.begin();
    // A deleted: its frontend's flows are judged once (every one stale, #141371), B's
    // flows to the same pod stay.
    let j = c.committed(
        Delta {
            dests: vec![(cip(), Frontend::Deleted)],
            ..Delta::default()
        },
        t0,
    );
    assert_eq!((j.looked_at, j.stale), (1, 1));
    assert_eq!(c.next_job(t0).0, Some(Job::Delete(vec![flow(1, X)])));
    c.deleted(&[flow(1, X)], &[Removal::Deleted], t0);
    assert_eq!(c.pending(), 0);
    assert!(c.judge().gone().is_empty(), "forgotten once dealt with");
    assert_eq!(c.verdict(&fb), None);
}

/// From the index, a NodePort's flows are judged on this node's NodePort addresses only:
/// one to the node address not DNAT'ed is stale, one to another host on the same port
/// number is not even looked at.
#[test]
fn an_indexed_nodeport_is_judged_on_the_nodes_addresses() {
    let t0 = Instant::now();
    let node = ip("198.18.5.1");
    let np = UdpDest::NodePort {
        v6: false,
        port: 30053,
    };
    let mut c = cleanup(t0);
    c.events_on(t0);
    c.next_job(t0);
    c.committed(
        Delta {
            full: true,
            dests: vec![(np, Frontend::Serving(vec![(ip(X), 5353)]))],
            nodeports: [Some(NodePortScope::Addrs([node].into())), None],
        },
        t0,
    );
    let mut to_node = flow(1, X);
    to_node.dst = node;
    to_node.dport = 30053;
    let mut unnated = to_node;
    unnated.sport = 2;
    unnated.reply_src = node;
    unnated.reply_sport = 30053;
    let mut elsewhere = unnated;
    elsewhere.sport = 3;
    elsewhere.dst = ip("198.18.7.7");
    elsewhere.reply_src = elsewhere.dst;
    let j = c.seeded(vec![to_node, unnated, elsewhere], true, t0);
    assert_eq!((j.looked_at, j.stale), (3, 1));
    c.begin();
    let j = c.committed(
        Delta {
            dests: vec![(np, Frontend::Serving(vec![]))],
            ..Delta::default()
        },
        t0,
    );
    assert_eq!(j.looked_at, 2, "the flows to the node address only");
    assert_eq!(c.doomed().count(), 2);
}
