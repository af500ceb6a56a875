use super::*;

fn observe(s: &mut State, run: &str, now: u64) {
    s.observe_run(&Arc::from(run), group_of(None, None), now);
}

#[test]
fn a_full_run_table_is_pruned_once_per_bucket_not_once_per_new_run() {
    let mut s = State::default();
    let start = bucket_of(1_800_000_000);
    for i in 0..MAX_TRACKED_RUNS {
        observe(&mut s, &format!("run-{i}"), start);
    }
    assert_eq!((s.runs.len(), s.prune_scans), (MAX_TRACKED_RUNS, 0));
    // Full, and every run within the history: new runs of the same bucket are counted
    // as untracked after a single scan.
    for i in 0..1000 {
        observe(&mut s, &format!("late-{i}"), start + 30);
    }
    assert_eq!((s.untracked_runs, s.prune_scans), (1000, 1));
    // The next bucket scans once more; nothing is old enough to go yet.
    observe(&mut s, "next-minute", start + BUCKET_SECS + 1);
    observe(&mut s, "same-minute", start + BUCKET_SECS + 2);
    // A caller that read the clock just before the minute turned does not scan again.
    observe(&mut s, "previous-minute", start + 59);
    assert_eq!((s.untracked_runs, s.prune_scans), (1003, 2));
    // Past the history, the runs of the first bucket go and new runs are tracked.
    let later = start + (HISTORY_BUCKETS + 1) * BUCKET_SECS;
    observe(&mut s, "fresh", later);
    assert_eq!(s.runs.len(), 1);
    assert!(s.runs.contains_key("fresh"));
    assert_eq!(s.untracked_runs, 1003);
    let totals = s.totals.values().map(|c| c.runs).sum::<u64>();
    assert_eq!(totals, MAX_TRACKED_RUNS as u64 + 1);
}

#[test]
fn groups_past_the_cap_count_as_other() {
    let fleet = Fleet::default();
    let mut s = fleet.state.lock().unwrap();
    for i in 0..MAX_GROUPS + 5 {
        let service: Arc<str> = Arc::from(format!("svc-{i}"));
        s.observe_run(
            &Arc::from(format!("r{i}")),
            group_of(Some(&service), None),
            120,
        );
    }
    // A group counted before the cap keeps its name for new runs.
    let first: Arc<str> = Arc::from("svc-0");
    s.observe_run(&Arc::from("again"), group_of(Some(&first), None), 120);
    drop(s);
    let totals = fleet.totals();
    assert_eq!(totals.len(), MAX_GROUPS + 1);
    assert!(totals.contains(&("svc-0".to_string(), UNKNOWN.to_string(), 2, 0)));
    assert!(totals.contains(&(OTHER.to_string(), OTHER.to_string(), 5, 0)));
    assert_eq!(
        fleet.group_names(Some("svc-1"), None),
        ("svc-1".to_string(), UNKNOWN.to_string())
    );
    assert_eq!(
        fleet.group_names(Some("svc-new"), Some("agent")),
        (OTHER.to_string(), OTHER.to_string())
    );
}

#[test]
fn groups_and_kills_are_named_as_before() {
    let fleet = Fleet::default();
    let mut s = fleet.state.lock().unwrap();
    let service: Arc<str> = Arc::from("checkout");
    s.observe_run(&Arc::from("r1"), group_of(Some(&service), None), 120);
    s.kills_total
        .insert((group_of(Some(&service), None), "repeated_call"), 2);
    drop(s);
    assert_eq!(
        fleet.totals(),
        vec![("checkout".to_string(), UNKNOWN.to_string(), 1, 0)]
    );
    assert_eq!(
        fleet.kills_total(),
        BTreeMap::from([("repeated_call".to_string(), 2)])
    );
}

#[test]
fn a_filtered_view_counts_the_matching_groups_only() {
    use crate::detector::Pattern;
    let fleet = Fleet::default();
    let now = 1_800_000_000;
    let (a, b): (Arc<str>, Arc<str>) = (Arc::from("checkout"), Arc::from("search"));
    let agent: Arc<str> = Arc::from("planner");
    let mut kill = RunDetection::sample(Pattern::RepeatedCall, &["fetch"], Severity::Kill);
    kill.run_key = Arc::from("r-a");
    kill.service_name = Some(a.clone());
    kill.agent_name = Some(agent.clone());
    fleet.observe_detections(&[kill], now);
    {
        let mut s = fleet.state.lock().unwrap();
        s.observe_run(&Arc::from("r-b"), group_of(Some(&b), None), now);
        s.observe_run(&Arc::from("r-b2"), group_of(Some(&b), None), now);
    }
    let all = fleet.view(now);
    assert_eq!(
        (all.last_window.total.runs, all.last_window.total.loop_runs),
        (3, 1)
    );
    assert_eq!(all.services, ["checkout", "search"]);
    assert_eq!(all.agents, ["planner", UNKNOWN]);
    let only = |service: Option<&str>, agent: Option<&str>| {
        fleet.view_of(
            now,
            &GroupFilter {
                service: service.map(str::to_string),
                agent: agent.map(str::to_string),
            },
        )
    };
    let checkout = only(Some("checkout"), None);
    assert_eq!(
        (
            checkout.last_window.total.runs,
            checkout.last_window.total.loop_runs
        ),
        (1, 1)
    );
    assert_eq!(
        checkout.kills_by_reason,
        BTreeMap::from([("repeated_call".to_string(), 1)])
    );
    assert_eq!(checkout.buckets.last().unwrap().kills, 1);
    assert_eq!(checkout.services, all.services, "the choices stay");
    let search = only(Some("search"), Some(UNKNOWN));
    assert_eq!(
        (
            search.last_window.total.runs,
            search.last_window.total.loop_runs
        ),
        (2, 0)
    );
    assert!(search.kills_by_reason.is_empty());
    assert_eq!(search.buckets.last().unwrap().kills, 0);
    assert_eq!(
        only(Some("search"), Some("planner")).last_window.total.runs,
        0
    );
    assert_eq!(
        fleet.kills_total(),
        BTreeMap::from([("repeated_call".to_string(), 1)])
    );
}
