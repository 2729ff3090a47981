//! The watcher's subscription is dropped for the time of each of our large commits (so
//! the kernel builds no notification of our own elements) and taken again before the
//! generation is read: a commit by another program meanwhile is still caught. Small
//! commits are made heard (then another program's commit right after ours is heard too,
//! and told apart: tests/neighbour.rs).

mod common;

use std::time::Duration;

use common::*;
use sync_engine::*;

fn take(w: &World) -> Vec<&'static str> {
    std::mem::take(&mut *w.kernel_log.lock().unwrap())
}

/// An engine that drops the subscription for every commit (`quiet_above_ops` 0).
fn synced_engine(w: &World) -> Engine<FakeNft, FakeCt, FakeClock> {
    let cfg = EngineConfig {
        quiet_above_ops: 0,
        ..w.config(true)
    };
    let mut e = w.engine_with(cfg);
    e.handle(Event::ServiceApplied(udp_lb()));
    listed(&mut e);
    e.sync().unwrap();
    e.quiet_own_commits(Box::new(w.listening()));
    take(w);
    e
}

fn endpoint_change(w: &World, e: &mut Engine<FakeNft, FakeCt, FakeClock>, addr: &str) {
    e.handle(Event::SliceApplied(slice(
        "dns-1",
        &[(addr, true, true, false)],
    )));
    w.clock.advance(Duration::from_secs(2));
}

#[test]
fn dropped_around_our_commit_and_taken_again_before_the_generation_is_read() {
    let w = World::new();
    let mut e = synced_engine(&w);
    endpoint_change(&w, &mut e, "198.18.2.2");
    e.sync().unwrap();
    let log = take(&w);
    let commit = log.iter().position(|c| *c == "commit").expect("a commit");
    assert_eq!(
        &log[commit - 1..commit + 3],
        ["drop", "commit", "listen", "generation"],
        "{log:?}"
    );
    assert_eq!(log.iter().filter(|c| **c == "drop").count(), 1, "{log:?}");
    // nothing to commit: the subscription is left alone
    w.clock.advance(Duration::from_secs(2));
    e.sync().unwrap();
    let log = take(&w);
    assert!(!log.contains(&"drop"), "{log:?}");
}

#[test]
fn a_commit_by_another_program_while_it_was_dropped_is_repaired() {
    let w = World::new();
    let mut e = synced_engine(&w);
    *w.foreign_after_commit.lock().unwrap() = true;
    endpoint_change(&w, &mut e, "198.18.2.2");
    assert!(!e.sync().unwrap().full);
    assert_eq!(
        e.next_sync_at(),
        Some(w.clock.now()),
        "a repair is due at once"
    );
    assert!(e.sync().unwrap().full, "our tables read back");
}

#[test]
fn a_subscription_that_cannot_be_taken_again_is_given_up() {
    let w = World::new();
    let mut e = synced_engine(&w);
    *w.listen_fails.lock().unwrap() = true;
    endpoint_change(&w, &mut e, "198.18.2.2");
    e.sync().unwrap();
    assert!(take(&w).contains(&"drop"));
    // given up: later commits are made heard, without dropping it again
    *w.listen_fails.lock().unwrap() = false;
    endpoint_change(&w, &mut e, "198.18.2.3");
    e.sync().unwrap();
    let log = take(&w);
    assert!(log.contains(&"commit") && !log.contains(&"drop"), "{log:?}");
}

#[test]
fn small_commits_are_made_heard() {
    let w = World::new();
    let mut e = w.engine(true);
    assert_eq!(e.config().quiet_above_ops, 2_000);
    e.handle(Event::ServiceApplied(udp_lb()));
    listed(&mut e);
    e.quiet_own_commits(Box::new(w.listening()));
    e.sync().unwrap();
    endpoint_change(&w, &mut e, "198.18.2.2");
    e.sync().unwrap();
    let log = take(&w);
    assert!(log.contains(&"commit") && !log.contains(&"drop"), "{log:?}");
}

/// A batch of few operations holding many elements (a cold start's packed element
/// lists) is large: the kernel would build a notification per element, so it is made
/// unheard. (Counted by operations, the 100,000-service cold start's 195 ops were made
/// heard and its commit took 23 s instead of 2 s.)
#[test]
fn a_few_element_lists_of_many_elements_are_made_unheard() {
    let w = World::new();
    let mut e = w.engine(true);
    e.quiet_own_commits(Box::new(w.listening()));
    e.handle(Event::ServiceApplied(udp_lb()));
    for s in 0..3u32 {
        let addrs: Vec<String> = (0..800u32)
            .map(|i| {
                let n = s * 800 + i;
                format!("198.19.{}.{}", n / 250, n % 250 + 1)
            })
            .collect();
        let eps: Vec<(&str, bool, bool, bool)> = addrs
            .iter()
            .map(|a| (a.as_str(), true, true, false))
            .collect();
        e.handle(Event::SliceApplied(slice(&format!("dns-{s}"), &eps)));
    }
    listed(&mut e);
    take(&w);
    e.sync().unwrap();
    let batch = w.take_batches().pop().expect("a batch");
    assert!(batch.len() < 2_000, "{} ops", batch.len());
    let log = take(&w);
    assert!(log.contains(&"drop"), "{log:?}");
}
