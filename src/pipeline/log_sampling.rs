//! Sampling of the per-detection `loop detected` log lines with the rule, keys and
//! defaults of the OpenTelemetry Collector's own log sampling
//! (`service::telemetry::logs::sampling`, zap's sampler): per `tick`, the first `initial`
//! lines are written, then every `thereafter`-th. zap counts per level and message; here
//! the count is per severity (info, warn, kill), so a kill is never hidden by a warn
//! storm, and a storm's lines (whose messages name different tools) share one count. A loop storm (thousands of detections a second) then costs a few lines
//! a second instead of one per detection; formatting them was the largest single cost of
//! loop-heavy traffic (about 12 % of the server's CPU at 1000 spans per request).
//!
//! Only the log line is sampled: every detection is still annotated, counted in
//! `loopwatch_detections_total`, listed by the HTTP API and, when warn or kill, signalled.
//! A line the log level filters out is not sampled or counted. Lines left out are
//! counted (`loopwatch_detection_log_lines_suppressed_total{severity}`) and, once their tick
//! is over, summed up in one line (at their level) at the next detection of that
//! severity, and at shutdown.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::detector::Severity;
use serde::{Deserialize, Serialize};

/// `[log.sampling]`: sampling of the per-detection `loop detected` lines, with the
/// OpenTelemetry Collector's keys and defaults (`service::telemetry::logs::sampling`):
/// per severity and per `tick`, the first `initial` lines are written, then every
/// `thereafter`-th (0: none). Other log lines are never sampled; every detection is still
/// annotated, counted, listed and signalled ([`crate::pipeline::log_sampling`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSamplingConfig {
    /// `false`: one line per detection, however many.
    pub enabled: bool,
    /// Length of a sampling window, e.g. `"10s"` (more than 0).
    #[serde(with = "humantime_serde")]
    pub tick: Duration,
    /// Lines of one severity written at the start of each tick.
    pub initial: u64,
    /// Past `initial`, every `thereafter`-th line of the tick is written (0: none).
    pub thereafter: u64,
}

impl Default for LogSamplingConfig {
    fn default() -> Self {
        LogSamplingConfig {
            enabled: true,
            tick: Duration::from_secs(10),
            initial: 10,
            thereafter: 100,
        }
    }
}

/// What to do with one detection's log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Write this detection's line.
    pub log: bool,
    /// Lines of this severity left out during the tick that just ended (0: none, or the
    /// tick has not ended): the caller writes one summary line for them first.
    pub left_out_last_tick: u64,
}

/// Per-severity tick windows and the count of lines left out, shared by whoever reports
/// (the reporter task or a request helping it).
#[derive(Debug)]
pub struct DetectionLogSampler {
    /// `None`: sampling off, every line is written.
    rule: Option<Rule>,
    windows: Mutex<[Window; 3]>,
    /// Lines left out since start, by severity (info, warn, kill).
    left_out: [AtomicU64; 3],
}

#[derive(Clone, Copy, Debug)]
struct Rule {
    tick: Duration,
    initial: u64,
    thereafter: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Window {
    /// Start of the current tick; `None` before the first line.
    start: Option<Instant>,
    /// Lines seen in the current tick.
    seen: u64,
    /// Lines left out in the current tick.
    left_out: u64,
}

impl DetectionLogSampler {
    /// A sampler following `config` (`enabled = false`: every line is written).
    pub fn new(config: &LogSamplingConfig) -> Self {
        DetectionLogSampler {
            rule: config.enabled.then_some(Rule {
                tick: config.tick,
                initial: config.initial,
                thereafter: config.thereafter,
            }),
            windows: Mutex::new([Window::default(); 3]),
            left_out: Default::default(),
        }
    }

    /// The verdict for a line of `severity` at `now`: within a tick, lines 1 to `initial`
    /// are written, then line `initial + k * thereafter` for k = 1, 2, … (none when
    /// `thereafter` is 0). A line after the tick ended starts a new tick.
    pub fn sample(&self, severity: Severity, now: Instant) -> Verdict {
        let Some(rule) = self.rule else {
            return Verdict {
                log: true,
                left_out_last_tick: 0,
            };
        };
        let i = severity.index();
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let window = &mut windows[i];
        let mut left_out_last_tick = 0;
        let tick_over = window
            .start
            .is_none_or(|start| now.saturating_duration_since(start) >= rule.tick);
        if tick_over {
            left_out_last_tick = window.left_out;
            *window = Window {
                start: Some(now),
                seen: 0,
                left_out: 0,
            };
        }
        window.seen += 1;
        let beyond = window.seen.saturating_sub(rule.initial);
        let log = beyond == 0 || (rule.thereafter > 0 && beyond % rule.thereafter == 0);
        if !log {
            window.left_out += 1;
            self.left_out[i].fetch_add(1, Ordering::Relaxed);
        }
        Verdict {
            log,
            left_out_last_tick,
        }
    }

    /// Lines left out since start, by severity: (info, warn, kill).
    pub fn left_out(&self) -> (u64, u64, u64) {
        let read = |i: usize| self.left_out[i].load(Ordering::Relaxed);
        (read(0), read(1), read(2))
    }

    /// Lines left out in the current ticks, by severity (info, warn, kill), which no
    /// summary line has reported yet; resets them (for the summary at shutdown).
    pub fn take_unreported(&self) -> (u64, u64, u64) {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let mut take = |i: usize| std::mem::take(&mut windows[i].left_out);
        (take(0), take(1), take(2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(initial: u64, thereafter: u64) -> DetectionLogSampler {
        DetectionLogSampler::new(&LogSamplingConfig {
            enabled: true,
            tick: Duration::from_secs(10),
            initial,
            thereafter,
        })
    }

    /// The 1-based positions of the written lines among `n` lines in one tick.
    fn written(s: &DetectionLogSampler, severity: Severity, n: u64, at: Instant) -> Vec<u64> {
        (1..=n).filter(|_| s.sample(severity, at).log).collect()
    }

    #[test]
    fn first_initial_lines_then_every_thereafter_th() {
        let s = sampler(3, 4);
        let t = Instant::now();
        assert_eq!(written(&s, Severity::Warn, 15, t), vec![1, 2, 3, 7, 11, 15]);
        assert_eq!(s.left_out(), (0, 9, 0));
    }

    #[test]
    fn thereafter_zero_writes_only_the_initial_lines() {
        let s = sampler(2, 0);
        let t = Instant::now();
        assert_eq!(written(&s, Severity::Kill, 6, t), vec![1, 2]);
        assert_eq!(s.left_out(), (0, 0, 4));
    }

    #[test]
    fn severities_are_sampled_apart() {
        let s = sampler(1, 0);
        let t = Instant::now();
        assert!(s.sample(Severity::Warn, t).log);
        assert!(!s.sample(Severity::Warn, t).log);
        // A kill in the middle of a warn storm is still written.
        assert!(s.sample(Severity::Kill, t).log);
        assert!(s.sample(Severity::Info, t).log);
        assert_eq!(s.left_out(), (0, 1, 0));
    }

    #[test]
    fn a_new_tick_starts_over_and_reports_what_the_last_one_left_out() {
        let s = sampler(2, 0);
        let t = Instant::now();
        assert_eq!(written(&s, Severity::Warn, 5, t), vec![1, 2]);
        // Still the same tick just before it ends.
        let late = s.sample(Severity::Warn, t + Duration::from_millis(9_999));
        assert_eq!(
            late,
            Verdict {
                log: false,
                left_out_last_tick: 0
            }
        );
        let next = t + Duration::from_secs(10);
        assert_eq!(
            s.sample(Severity::Warn, next),
            Verdict {
                log: true,
                left_out_last_tick: 4
            }
        );
        assert_eq!(written(&s, Severity::Warn, 3, next), vec![1]);
        assert_eq!(s.take_unreported(), (0, 2, 0));
        assert_eq!(s.take_unreported(), (0, 0, 0));
        assert_eq!(s.left_out(), (0, 6, 0));
    }

    #[test]
    fn disabled_writes_every_line() {
        let s = DetectionLogSampler::new(&LogSamplingConfig {
            enabled: false,
            ..LogSamplingConfig::default()
        });
        let t = Instant::now();
        assert_eq!(written(&s, Severity::Warn, 500, t).len(), 500);
        assert_eq!(s.left_out(), (0, 0, 0));
    }
}
