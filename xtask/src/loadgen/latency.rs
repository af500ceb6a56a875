//! The latency step of `bench` (issue 8: "p99 added latency at half of max load < 1 ms"):
//! loopwatch and the plain pass-through under the same open-loop load (`open_loop.rs`), a
//! fraction (default 50 %) of loopwatch's closed-loop maximum spans/s for that traffic,
//! over the corpus and the 0 % loops 10-spans/request traffic. The maximum is the best
//! loopwatch median spans/s of the matrix for that traffic, or a closed-loop probe when the
//! matrix has no such row. Added latency: loopwatch's percentile minus the pass-through's.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::loadgen::bench::{measure_once, median, Row, Setup, Traffic};
use crate::loadgen::client::Load;
use crate::loadgen::open_loop::{measure_paced, Pace};
use crate::loadgen::processes::Binaries;
use crate::loadgen::servers::start_sink;
use crate::loadgen::traffic::{self, Run};

/// Spans per request of the synthetic latency traffic.
const SYNTHETIC_SPANS: usize = 10;

/// Parses a load fraction: a number in (0, 1].
pub fn parse_fraction(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    if v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(format!("{v} is not in (0, 1]"))
    }
}

/// What "loopwatch's maximum" means in the latency step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// The best closed-loop median spans/s (what the clients reached; on a loaded machine
    /// the server CPU may not be saturated at it).
    ClosedLoop,
    /// The best median spans per server CPU-second: the rate one fully busy server CPU
    /// would carry.
    Cpu,
}

impl Basis {
    fn of(self, sample: &crate::loadgen::bench::Sample) -> f64 {
        match self {
            Basis::ClosedLoop => sample.spans_per_second,
            Basis::Cpu => sample.spans_per_cpu_second,
        }
    }
}

/// Where the maximum rate of a latency row came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MaxSource {
    /// The best loopwatch median spans/s of the closed-loop matrix.
    Matrix,
    /// A closed-loop probe of loopwatch run for this step.
    Probe,
}

/// One paced measurement of one setup.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LatencySample {
    pub offered_spans_per_second: f64,
    /// Acknowledged spans per second of sending.
    pub achieved_spans_per_second: f64,
    /// Latency from the due time (see `open_loop.rs`), milliseconds.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    /// Timed requests, and the share of them that left late (every sender busy), in %.
    pub requests: u64,
    pub late_percent: f64,
    pub lost: u64,
    pub refused: u64,
    pub failed: u64,
}

/// Median (lost, failed: sum) of the rounds of one setup under one paced load.
#[derive(Clone, Debug, Serialize)]
pub struct LatencyRow {
    pub traffic: Traffic,
    pub spans_per_request: f64,
    pub setup: Setup,
    pub senders: u32,
    /// Loopwatch's maximum spans/s for this traffic, what it means and where it came from.
    pub loopwatch_max_spans_per_second: f64,
    pub basis: Basis,
    pub max_source: MaxSource,
    /// Offered load as a fraction of that maximum.
    pub load_fraction: f64,
    pub rounds: usize,
    pub median: LatencySample,
}

/// Settings of the latency step.
pub struct Step<'a> {
    pub bins: &'a Binaries,
    /// `taskset -c` list of the servers ("" = not pinned).
    pub cpus: &'a str,
    pub rounds: u32,
    /// Offered load, fraction of loopwatch's maximum, and what the maximum is.
    pub load: f64,
    pub basis: Basis,
    pub senders: u32,
    pub duration: Duration,
    /// Clients of the closed-loop probe, when one is needed.
    pub probe_clients: u32,
    pub quick: bool,
    pub ticks: f64,
}

/// One traffic of the step.
struct Plan {
    traffic: Traffic,
    spans_per_request: f64,
    runs: Arc<Vec<Run>>,
    max: f64,
    source: MaxSource,
}

/// The best loopwatch median of the matrix for `traffic` at `spans_per_request`: spans/s
/// or spans per CPU-second, as `basis` says.
fn matrix_max(rows: &[Row], traffic: Traffic, spans_per_request: f64, basis: Basis) -> Option<f64> {
    rows.iter()
        .filter(|r| {
            r.setup == Setup::Loopwatch
                && r.cell.worker_threads.is_none()
                && r.cell.traffic == traffic
                && r.cell.spans_per_request == spans_per_request
                && r.rounds > 0
                && r.median.spans_per_second > 0.0
        })
        .map(|r| basis.of(&r.median))
        .max_by(f64::total_cmp)
}

fn aggregate(samples: &[LatencySample]) -> LatencySample {
    let m = |f: fn(&LatencySample) -> f64| median(samples.iter().map(f).collect());
    LatencySample {
        offered_spans_per_second: m(|s| s.offered_spans_per_second),
        achieved_spans_per_second: m(|s| s.achieved_spans_per_second),
        p50_ms: m(|s| s.p50_ms),
        p99_ms: m(|s| s.p99_ms),
        p999_ms: m(|s| s.p999_ms),
        max_ms: m(|s| s.max_ms),
        requests: m(|s| s.requests as f64) as u64,
        late_percent: m(|s| s.late_percent),
        lost: samples.iter().map(|s| s.lost).sum(),
        refused: m(|s| s.refused as f64) as u64,
        failed: samples.iter().map(|s| s.failed).sum(),
    }
}

impl Step<'_> {
    fn drain_timeout(&self) -> Duration {
        Duration::from_secs(if self.quick { 10 } else { 30 })
    }

    /// Loopwatch's maximum for `runs` by the step's basis (one closed-loop load of the
    /// step's duration).
    async fn probe(&self, runs: &Arc<Vec<Run>>) -> anyhow::Result<f64> {
        let load = Load {
            concurrency: self.probe_clients,
            duration: self.duration,
            requests: u64::MAX,
            drain_timeout: self.drain_timeout(),
        };
        let sample = measure_once(
            self.bins,
            Setup::Loopwatch,
            (self.cpus, None),
            runs,
            load,
            self.ticks,
        )
        .await?;
        anyhow::ensure!(
            sample.spans_per_second > 0.0,
            "the closed-loop probe of loopwatch delivered no spans"
        );
        Ok(self.basis.of(&sample))
    }

    /// The sink, a fresh server process, one paced load.
    async fn measure(
        &self,
        setup: Setup,
        runs: &Arc<Vec<Run>>,
        pace: Pace,
    ) -> anyhow::Result<LatencySample> {
        let (sink, sink_addr, stop) = start_sink().await?;
        let server = self.bins.start(setup, sink_addr, self.cpus, None)?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let outcome = measure_paced(server.addr, &sink, runs, pace).await;
        drop(server);
        let _ = stop.send(true);
        let o = outcome?;
        Ok(LatencySample {
            offered_spans_per_second: pace.spans_per_second,
            achieved_spans_per_second: o.achieved_spans_per_second(),
            p50_ms: o.percentile_ms(50.0),
            p99_ms: o.percentile_ms(99.0),
            p999_ms: o.percentile_ms(99.9),
            max_ms: o.percentile_ms(100.0),
            requests: o.requests,
            late_percent: 100.0 * o.late as f64 / o.requests.max(1) as f64,
            lost: o.lost(),
            refused: o.refused,
            failed: o.failed,
        })
    }

    /// Runs the step over the corpus (`corpus`, `corpus_spans` per request) and synthetic
    /// 0 % loops traffic, rounds interleaved like the matrix; `rows` is the matrix.
    pub async fn run(
        &self,
        rows: &[Row],
        corpus: &Arc<Vec<Run>>,
        corpus_spans: f64,
    ) -> anyhow::Result<Vec<LatencyRow>> {
        let synthetic = Arc::new(traffic::synthetic(
            SYNTHETIC_SPANS,
            traffic::CALLS_PER_TRACE,
            false,
            4,
        )?);
        let mut plans = Vec::new();
        for (traffic, spans_per_request, runs) in [
            (Traffic::Corpus, corpus_spans, corpus.clone()),
            (Traffic::NoLoops, SYNTHETIC_SPANS as f64, synthetic),
        ] {
            let (max, source) = match matrix_max(rows, traffic, spans_per_request, self.basis) {
                Some(max) => (max, MaxSource::Matrix),
                None => (self.probe(&runs).await?, MaxSource::Probe),
            };
            eprintln!(
                "latency {}: loopwatch max {max:.0} spans/s ({source:?}), offering {:.0}",
                traffic.label(),
                max * self.load
            );
            plans.push(Plan {
                traffic,
                spans_per_request,
                runs,
                max,
                source,
            });
        }
        let setups = [Setup::Loopwatch, Setup::Passthrough];
        let mut samples = vec![vec![Vec::new(); setups.len()]; plans.len()];
        for round in 0..self.rounds as usize {
            for (p, plan) in plans.iter().enumerate() {
                let pace = Pace {
                    spans_per_second: plan.max * self.load,
                    senders: self.senders,
                    duration: self.duration,
                    drain_timeout: self.drain_timeout(),
                };
                for k in 0..setups.len() {
                    let s = (k + round) % setups.len();
                    let setup = setups[s];
                    match self.measure(setup, &plan.runs, pace).await {
                        Ok(sample) => {
                            eprintln!(
                                "latency round {} {} {}: {:.0} of {:.0} spans/s, p50 {:.2} ms, p99 {:.2} ms, late {:.1} %, lost {}",
                                round + 1,
                                plan.traffic.label(),
                                setup.name(),
                                sample.achieved_spans_per_second,
                                sample.offered_spans_per_second,
                                sample.p50_ms,
                                sample.p99_ms,
                                sample.late_percent,
                                sample.lost
                            );
                            samples[p][s].push(sample);
                        }
                        Err(e) => eprintln!(
                            "latency round {} {} {} failed: {e:#}",
                            round + 1,
                            plan.traffic.label(),
                            setup.name()
                        ),
                    }
                }
            }
        }
        Ok(plans
            .iter()
            .zip(samples)
            .flat_map(|(plan, per_setup)| {
                setups
                    .iter()
                    .zip(per_setup)
                    .map(|(&setup, samples)| LatencyRow {
                        traffic: plan.traffic,
                        spans_per_request: plan.spans_per_request,
                        setup,
                        senders: self.senders,
                        loopwatch_max_spans_per_second: plan.max,
                        basis: self.basis,
                        max_source: plan.source,
                        load_fraction: self.load,
                        rounds: samples.len(),
                        median: aggregate(&samples),
                    })
                    .collect::<Vec<_>>()
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_fractions_are_in_zero_to_one() {
        assert_eq!(parse_fraction("0.5"), Ok(0.5));
        assert_eq!(parse_fraction("1"), Ok(1.0));
        assert!(parse_fraction("0").is_err());
        assert!(parse_fraction("1.5").is_err());
        assert!(parse_fraction("NaN").is_err());
        assert!(parse_fraction("half").is_err());
    }

    fn row(setup: Setup, traffic: Traffic, clients: u32, spans_per_second: f64) -> Row {
        Row {
            cell: crate::loadgen::bench::Cell {
                traffic,
                spans_per_request: 10.0,
                clients,
                server_cpus: "0".into(),
                worker_threads: None,
                runs: 0,
                setups: vec![setup],
            },
            setup,
            rounds: 1,
            median: crate::loadgen::bench::Sample {
                spans_per_second,
                spans_per_cpu_second: 4.0 * spans_per_second,
                ..Default::default()
            },
        }
    }

    #[test]
    fn the_maximum_is_loopwatch_best_row_of_that_traffic() {
        let rows = [
            row(Setup::Loopwatch, Traffic::NoLoops, 4, 100.0),
            row(Setup::Loopwatch, Traffic::NoLoops, 32, 300.0),
            row(Setup::Passthrough, Traffic::NoLoops, 32, 900.0),
            row(Setup::Loopwatch, Traffic::LoopHeavy, 32, 700.0),
        ];
        let max = |traffic, basis| matrix_max(&rows, traffic, 10.0, basis);
        assert_eq!(max(Traffic::NoLoops, Basis::ClosedLoop), Some(300.0));
        assert_eq!(max(Traffic::NoLoops, Basis::Cpu), Some(1200.0));
        assert_eq!(max(Traffic::Corpus, Basis::ClosedLoop), None);
        assert_eq!(matrix_max(&rows, Traffic::NoLoops, 100.0, Basis::Cpu), None);
    }

    #[test]
    fn latency_medians_and_sums() {
        let s = |p99_ms, lost| LatencySample {
            p99_ms,
            lost,
            ..Default::default()
        };
        let m = aggregate(&[s(3.0, 1), s(1.0, 0), s(2.0, 2)]);
        assert_eq!(m.p99_ms, 2.0);
        assert_eq!(m.lost, 3);
    }
}
