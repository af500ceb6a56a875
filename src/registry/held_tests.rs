//! A run's first event held back from its detectors until a second arrives
//! ([`Registry::held_first`]): nothing a detector finds or answers may change.

use std::sync::Arc;
use std::time::Instant;

use super::*;
use crate::detector::{Action, ProfileSettings};

/// repeated_call fires at the second identical call; every other pattern is off.
fn twice(repeated_call: usize) -> ProfileSettings {
    ProfileSettings {
        name: "twice".into(),
        action: Action::Warn,
        window: 10,
        repeated_call,
        repeated_result: 0,
        alternating_calls: 0,
        cycle: 0,
        repeated_outcome: 0,
        near_repeat: 0,
        repeated_text: 0,
        ..ProfileSettings::nudge()
    }
}

/// Call `span` of run `run`, started at `10·span`: always `tool1` with the same arguments.
fn call(run: &str, span: u64) -> RunEvent {
    super::tests::call(run, span, 10 * span, 1)
}

/// (call ordinal, member span ids) of each detection.
fn found(detections: &[RunDetection]) -> Vec<(Option<usize>, Vec<Vec<u8>>)> {
    detections
        .iter()
        .map(|d| {
            let members = d.span_ids.iter().map(|id| id.to_vec()).collect();
            (d.detection.call, members)
        })
        .collect()
}

fn held(registry: &Registry, run: &str) -> bool {
    registry.held_first(&registry.runs.get(run).expect("the run is held"))
}

#[test]
fn a_first_call_alone_is_held_and_the_second_finds_it_as_if_both_came_at_once() {
    let now = Instant::now();
    let apart = Registry::new(vec![twice(2)], RegistryConfig::default());
    assert!(apart.observe(vec![call("a", 1)], now).is_empty());
    assert!(held(&apart, "a"));
    assert_eq!(apart.run("a").map(|r| r.tool_calls), Some(1));
    let held_bytes = apart.state_bytes();
    let second = apart.observe(vec![call("a", 2)], now);
    assert!(!held(&apart, "a"));
    // The estimate counts a detector's window once it has one.
    assert!(apart.state_bytes() >= held_bytes + DETECTOR_BYTES as u64);

    let together = Registry::new(vec![twice(2)], RegistryConfig::default());
    let both = together.observe(vec![call("a", 1), call("a", 2)], now);
    let expected = vec![(
        Some(2),
        vec![1u64.to_be_bytes().to_vec(), 2u64.to_be_bytes().to_vec()],
    )];
    assert_eq!(found(&second), expected);
    assert_eq!(found(&both), expected);
}

#[test]
fn the_check_of_a_held_run_counts_its_first_call_and_changes_nothing() {
    let now = Instant::now();
    let r = Registry::new(vec![twice(2)], RegistryConfig::default());
    r.observe(vec![call("a", 1)], now);
    let answers = r
        .what_if("a", Arc::from("tool1"), [1; 32])
        .expect("run held");
    assert_eq!(answers.len(), 1);
    let detection = answers[0]
        .detection
        .as_ref()
        .expect("the second call repeats the first");
    assert_eq!((detection.call, detection.count), (Some(2), 2));
    assert!(held(&r, "a"), "asking feeds a copy, not the run");
    assert!(r
        .what_if("a", Arc::from("tool1"), [2; 32])
        .expect("run held")[0]
        .detection
        .is_none());
}

#[test]
fn approving_a_held_run_forgets_its_first_call() {
    let now = Instant::now();
    let r = Registry::new(vec![twice(2)], RegistryConfig::default());
    r.observe(vec![call("a", 1)], now);
    assert!(r.approve("a"));
    assert!(
        r.observe(vec![call("a", 2)], now).is_empty(),
        "call 1 was approved"
    );
    let third = r.observe(vec![call("a", 3)], now);
    assert_eq!(
        found(&third),
        vec![(
            Some(3),
            vec![2u64.to_be_bytes().to_vec(), 3u64.to_be_bytes().to_vec()]
        )]
    );
}

#[test]
fn a_profile_that_fires_on_one_call_is_fed_at_once() {
    // Threshold 1 fails validation; a profile built in code can still have it.
    let one = twice(1);
    assert!(!one.needs_two_observations());
    assert!(twice(2).needs_two_observations());
    let r = Registry::new(vec![one], RegistryConfig::default());
    let first = r.observe(vec![call("a", 1)], Instant::now());
    assert_eq!(
        found(&first),
        vec![(Some(1), vec![1u64.to_be_bytes().to_vec()])]
    );
    assert!(!held(&r, "a"));
}
