//! Registry intake at the run caps vs below them (issue 9, item 3): new runs arriving into a
//! registry already holding `RUNS` runs, with room to spare, at `max_runs` (every new run
//! evicts the least recently seen one), and at `max_bytes` (the same, by estimated bytes).
//! Eviction is O(1) per run (an `lru` recency list), so the three should be close; before,
//! each batch at `max_runs` sorted every run (66 k → 12.5 k traces/s).
//!
//! `cargo bench --bench registry_eviction`; throughput is in runs (traces) per second.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use loopwatch::detector::{Observation, ProfileSettings};
use loopwatch::registry::{Registry, RegistryConfig, RunEvent};

/// Runs held before measuring.
const RUNS: u64 = 100_000;
/// New runs per measured batch (one `observe` call, as one request would bring).
const BATCH: u64 = 1_000;
/// Tool calls per run.
const CALLS: u64 = 3;

fn events(first_run: u64, runs: u64) -> Vec<RunEvent> {
    let mut out = Vec::with_capacity((runs * CALLS) as usize);
    for run in first_run..first_run + runs {
        let key: Arc<str> = Arc::from(format!("{run:032x}"));
        for call in 0..CALLS {
            out.push(RunEvent {
                run_key: key.clone(),
                trace_id: run.to_be_bytes().repeat(2).into(),
                span_id: call.to_be_bytes().into(),
                start_time_unix_nano: 10 * call + 1,
                end_time_unix_nano: 10 * call + 2,
                service_name: None,
                agent_name: None,
                observation: Observation::ToolCall {
                    tool_name: Arc::from("search"),
                    call_fingerprint: Some([call as u8; 32]),
                    result_fingerprint: None,
                    traits: Default::default(),
                },
                call: Default::default(),
            });
        }
    }
    out
}

fn filled(config: RegistryConfig) -> Registry {
    let registry = Registry::new(
        vec![ProfileSettings::nudge(), ProfileSettings::stop()],
        config,
    );
    let now = Instant::now();
    for start in (0..RUNS).step_by(BATCH as usize) {
        registry.observe(events(start, BATCH), now);
    }
    registry
}

fn benches(c: &mut Criterion) {
    let rss = || loopwatch::ingest::limits::memory::resident_bytes().unwrap_or(0);
    let before = rss();
    let probe = filled(RegistryConfig {
        max_runs: usize::MAX,
        ..RegistryConfig::default()
    });
    let full_bytes = probe.state_bytes();
    // Calibration of RunState::heap_bytes: the estimate against what the RSS grew by.
    println!(
        "{RUNS} runs of {CALLS} calls: estimated {} MiB, RSS grew {} MiB",
        full_bytes >> 20,
        rss().saturating_sub(before) >> 20
    );
    drop(probe);
    let cases = [
        (
            "below_caps",
            RegistryConfig {
                max_runs: usize::MAX,
                max_bytes: u64::MAX,
                ..RegistryConfig::default()
            },
        ),
        (
            "at_max_runs",
            RegistryConfig {
                max_runs: RUNS as usize,
                max_bytes: u64::MAX,
                ..RegistryConfig::default()
            },
        ),
        (
            "at_max_bytes",
            RegistryConfig {
                max_runs: usize::MAX,
                max_bytes: full_bytes,
                ..RegistryConfig::default()
            },
        ),
    ];
    let mut group = c.benchmark_group("registry_intake");
    group.throughput(Throughput::Elements(BATCH));
    for (name, config) in cases {
        let registry = filled(config);
        let next = AtomicU64::new(RUNS);
        group.bench_function(name, |b| {
            b.iter_batched(
                || events(next.fetch_add(BATCH, Ordering::Relaxed), BATCH),
                |batch| registry.observe(batch, Instant::now()),
                BatchSize::SmallInput,
            )
        });
        let stats = registry.stats();
        println!(
            "{name}: {} runs held, {} MiB estimated, evicted capacity {} bytes {}",
            registry.run_count(),
            registry.state_bytes() >> 20,
            stats.runs_evicted_capacity.load(Ordering::Relaxed),
            stats.runs_evicted_bytes.load(Ordering::Relaxed),
        );
    }
    group.finish();
}

criterion_group! {
    name = registry_eviction;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    targets = benches
}
criterion_main!(registry_eviction);
