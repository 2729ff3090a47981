//! The nftables transport against a real kernel, each test in namespaces of its own
//! (the checks are in the harness: `netns_tests::transport`).

use netns_tests::{require_root, transport};

#[test]
fn rejected_batch_changes_nothing_and_names_the_object() {
    require_root!();
    transport::rejected_batch_changes_nothing_and_names_the_object();
}

#[test]
fn check_answers_as_a_commit_would_and_changes_nothing() {
    require_root!();
    transport::check_answers_as_a_commit_would_and_changes_nothing();
}

#[test]
fn generation_guard_detects_other_writers_and_retry_succeeds() {
    require_root!();
    transport::generation_guard_detects_other_writers_and_retry_succeeds();
}

#[test]
fn committed_table_reads_back_equal() {
    require_root!();
    transport::committed_table_reads_back_equal();
}

#[test]
fn every_object_kind_programs_reads_back_and_round_trips() {
    require_root!();
    transport::every_object_kind_programs_reads_back_and_round_trips();
}

#[test]
fn a_refused_element_is_named_among_thousands() {
    require_root!();
    // this machine's kernel (6.18) names it
    assert_eq!(
        transport::a_refused_element_is_named_among_thousands(),
        Some(2345)
    );
}

#[test]
fn a_dropped_watcher_subscription_hears_nothing_until_taken_again() {
    require_root!();
    transport::a_dropped_watcher_subscription_hears_nothing_until_taken_again();
}

#[test]
fn a_refused_packed_element_is_named_among_thousands() {
    require_root!();
    assert_eq!(
        transport::a_refused_packed_element_is_named_among_thousands(),
        Some(2345)
    );
}
