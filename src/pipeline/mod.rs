//! The span path behind the receivers: extract → registry/detect → annotate → forward.
//!
//! Receivers talk to it only through the contract in [`crate::ingest`] (re-exported here).
//!
//! New detections are counted on the span path (so `/metrics` and `/v1/summary` agree with
//! an acknowledged request), then handed to a bounded [`reporter::ReportQueue`]; the task
//! of [`Pipeline::spawn_reporter`] logs them and publishes their signals off the span path.

pub mod log_sampling;
pub mod reporter;

pub use crate::ingest::{AcceptError, Admission, IncomingRequest, SpanSink};

use futures::future::BoxFuture;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use prost::Message;

use crate::detector::{Action, Severity};
use crate::engine::Engine;
use crate::forward::{ExportBody, ForwardQueue};
use crate::otlp::compact_hex;
use crate::registry::RunDetection;
use crate::signals::{signal_id, CompactString, Signal, SignalHub};

/// The sidecar's span path: reserve a forward slot, detect, annotate, forward; then count
/// the new detections and queue them for the reporter, which logs and signals them.
pub struct Pipeline {
    pub engine: Arc<Engine>,
    /// `None` = detect-only (no downstream configured).
    pub forward: Option<ForwardQueue>,
    pub signals: Option<SignalHub>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Memory limiter, decoded-bytes budget and span cap (`[limits]`).
    pub limits: Arc<crate::ingest::limits::Limits>,
    /// Detections waiting for [`Pipeline::spawn_reporter`]'s task.
    pub reports: Arc<reporter::ReportQueue>,
    /// Which `loop detected` lines are written (`[log.sampling]`).
    pub log_sampling: Arc<log_sampling::DetectionLogSampler>,
}

impl SpanSink for Pipeline {
    fn admit(&self) -> BoxFuture<'_, Result<Admission, AcceptError>> {
        if !self.limits.memory.allows() {
            return Box::pin(std::future::ready(Err(AcceptError::MemoryLimit)));
        }
        match &self.forward {
            Some(queue) => Box::pin(queue.admit()),
            None => Box::pin(std::future::ready(Ok(Admission::unlimited()))),
        }
    }

    fn reserve_decoded(&self, bytes: usize) -> BoxFuture<'_, crate::ingest::limits::DecodedBytes> {
        Box::pin(self.limits.in_flight.reserve(bytes))
    }

    fn read_limits(&self) -> crate::otlp::wire::ReadLimits {
        self.limits.read
    }

    fn accept(&self, admission: Admission, incoming: IncomingRequest) -> Result<(), AcceptError> {
        // The admission slot was taken before the request was read, and its bytes are held
        // before it is processed: a refused request left no trace in the detectors, so the
        // client's retry is processed as if it were the first delivery. An admission without a slot (a caller that skipped `admit`) takes
        // one now or refuses.
        let admission = match (&self.forward, admission.into_slot()) {
            (Some(_), Some(slot)) => Admission::with_slot(slot),
            (Some(queue), None) => queue.try_admit()?,
            (None, _) => Admission::unlimited(),
        };
        // The byte bound (`exporter.queue.max_bytes`) is checked before processing too.
        let held = match &self.forward {
            Some(queue) => Some(queue.hold_bytes(incoming.encoded_len())?),
            None => None,
        };
        let now = Instant::now();
        let (body, spans, processed) = match incoming {
            IncomingRequest::Protobuf(wire) => {
                let raw = wire.bytes.clone();
                let spans = wire.span_count();
                match self.engine.process_wire(wire, now) {
                    Ok(done) => (ExportBody::new(done.pieces), done.spans, done.processed),
                    Err(error) => {
                        // Cannot happen for a request the reader accepted; forward it as
                        // received rather than lose it.
                        tracing::error!(%error, "annotating a request failed; forwarded unannotated");
                        (
                            ExportBody::from(raw),
                            spans,
                            crate::engine::Processed::default(),
                        )
                    }
                }
            }
            IncomingRequest::Json(mut request) => {
                let processed = self.engine.process(&mut request, now);
                let spans = crate::otlp::span_count(&request);
                let bytes = Bytes::from(request.encode_to_vec());
                (ExportBody::from(bytes), spans, processed)
            }
        };
        let queued = match (&self.forward, held) {
            (Some(queue), Some(held)) => queue.send_held(admission, held, body, spans),
            _ => Ok(()),
        };
        // Reported even when the forwarder closed in between: the run state already holds
        // these spans, so the client's retry is a duplicate and would not detect again.
        if !processed.latest_tool_end.is_empty() {
            let now_unix_nano = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
            self.metrics
                .ingest_lag
                .record(&processed.latest_tool_end, now_unix_nano);
        }
        self.metrics.record_detections(&processed.detections);
        self.reports
            .push_helping(processed.detections, |d| self.report(d));
        queued
    }
}

impl Pipeline {
    /// Starts the task that logs and signals queued detections; it ends once
    /// [`Pipeline::reports`] is closed and drained.
    pub fn spawn_reporter(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let pipeline = self.clone();
        tokio::spawn(async move { pipeline.reports.serve(|d| pipeline.report(d)).await })
    }

    /// Logs one detection (one line, structured fields; sampled by `[log.sampling]`) and
    /// publishes its signal.
    fn report(&self, d: RunDetection) {
        let severity = d.detection.severity;
        // A line the log level filters out is neither written nor sampled (nor counted).
        let enabled = match severity {
            Severity::Info => tracing::enabled!(tracing::Level::INFO),
            Severity::Warn | Severity::Kill => tracing::enabled!(tracing::Level::WARN),
        };
        if enabled {
            let verdict = self.log_sampling.sample(severity, Instant::now());
            if verdict.left_out_last_tick > 0 {
                log_suppressed(severity, verdict.left_out_last_tick);
            }
            if verdict.log {
                let reason = crate::annotate::reason(&d);
                self.log_detection(&d, &reason, &compact_hex(&d.trace_id));
            }
        }
        // A profile's `signals = false` keeps its detections off the sinks; budget
        // detections (no profile index) always publish. Read from the detection's own
        // profile, so a reloaded profile decides for the detections it makes.
        let wants_signal = d.profile_index == usize::MAX || d.profile.signals;
        if let (Some(hub), true, Some(action)) = (
            &self.signals,
            wants_signal,
            d.detection.severity.action_in(d.profile.action),
        ) {
            self.metrics.record_signal(&d.profile.name, action);
            hub.publish_deferred(PendingSignal {
                detection: d,
                action,
                engine: self.engine.clone(),
            });
        }
    }

    /// The `loop detected` line of `d`: INFO for progress, WARN for warn and kill.
    fn log_detection(&self, d: &RunDetection, reason: &str, trace_id: &str) {
        let span_id = compact_hex(&d.span_id);
        // Comma-separated, written straight into the log line.
        let tools = crate::annotate::joined(&d.detection.tool_names, ",");
        macro_rules! log_detection {
            ($level:ident) => {
                tracing::$level!(
                    trace_id = %trace_id,
                    span_id = %span_id,
                    profile = %d.profile.name,
                    pattern = d.detection.pattern.as_str(),
                    severity = d.detection.severity.as_str(),
                    count = d.detection.count,
                    occurrence = d.occurrence,
                    tools = %tools,
                    service = d.service_name.as_deref().unwrap_or(""),
                    "loop detected: {reason}"
                )
            };
        }
        match d.detection.severity {
            Severity::Info => log_detection!(info),
            Severity::Warn | Severity::Kill => log_detection!(warn),
        }
    }
}

/// The summary of `count` `loop detected` lines of `severity` that `[log.sampling]` left
/// out (after their tick, or at shutdown), at the level of the lines it stands for.
pub fn log_suppressed(severity: Severity, count: u64) {
    macro_rules! summary {
        ($level:ident) => {
            tracing::$level!(
                severity = severity.as_str(),
                count,
                "loop detected lines not written (log.sampling): the detections are still annotated, counted in loopwatch_detections_total, listed and, when warn or kill, signalled"
            )
        };
    }
    match severity {
        Severity::Info => summary!(info),
        Severity::Warn | Severity::Kill => summary!(warn),
    }
}

/// The `loopwatch.signal.v1` record for a detection; `None` for `info` (progress), which
/// never signals. The message quotes [`crate::annotate::reason`] of the detection.
pub fn signal_of(d: &RunDetection, engine: &Engine) -> Option<Signal> {
    let action = d.detection.severity.action_in(d.profile.action)?;
    Some(signal_with_action(d, action, engine))
}

/// A warn or kill detection's signal, published by the reporter and built when first read
/// ([`SignalHub::publish_deferred`]): from the detection and the engine's fingerprint key,
/// so it is the record [`signal_of`] would have built at once.
struct PendingSignal {
    detection: RunDetection,
    /// The detection severity's action (warn or kill).
    action: Action,
    engine: Arc<Engine>,
}

impl std::fmt::Debug for PendingSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingSignal")
            .field("detection", &self.detection)
            .field("action", &self.action)
            .finish_non_exhaustive()
    }
}

impl crate::signals::DeferredSignal for PendingSignal {
    fn build(&self) -> Signal {
        signal_with_action(&self.detection, self.action, &self.engine)
    }

    /// As the record's field is written (read path only: `GET /v1/signals?trace_id=`).
    fn has_trace_id(&self, trace_id: &str) -> bool {
        compact_hex(&self.detection.trace_id) == trace_id
    }

    fn time_unix_nano(&self) -> u64 {
        self.detection.time_unix_nano
    }

    fn action(&self) -> Action {
        self.action
    }
}

/// [`signal_of`] for a detection whose severity asks for `action`.
pub fn signal_with_action(d: &RunDetection, action: Action, engine: &Engine) -> Signal {
    let message = crate::annotate::message(&d.detection, action);
    let compact = |s: &str| CompactString::new(s);
    Signal {
        schema: CompactString::const_new(crate::signals::SIGNAL_SCHEMA),
        id: signal_id(
            &d.run_key,
            &d.profile.name,
            d.detection.pattern.as_str(),
            &d.detection.fingerprints,
            d.occurrence,
        ),
        occurrence: d.occurrence,
        severity: d.detection.severity,
        time_unix_nano: d.time_unix_nano,
        trace_id: compact_hex(&d.trace_id),
        run_key: compact(&d.run_key),
        service_name: d.service_name.as_deref().map(compact),
        agent_name: d.agent_name.as_deref().map(compact),
        profile: compact(&d.profile.name),
        action,
        pattern: CompactString::const_new(d.detection.pattern.as_str()),
        tool_names: d.detection.tool_names.iter().map(|t| compact(t)).collect(),
        count: d.detection.count as u32,
        window: d.detection.window as u32,
        fingerprints: d
            .detection
            .fingerprints
            .iter()
            .map(|f| engine.fingerprint_key.short_compact(f))
            .collect(),
        span_ids: d.span_ids.iter().map(|s| compact_hex(s)).collect(),
        first_span_id: compact_hex(d.span_ids.first().unwrap_or(&d.span_id)),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::Pattern;

    fn engine() -> Engine {
        let mut config = crate::config::Config::default();
        config.detection.fingerprint_key = Some("test".into());
        Engine::from_config(&config).expect("default config")
    }

    #[test]
    fn messages_wrap_the_reason_word_for_word() {
        let engine = engine();
        let mut alternating = RunDetection::sample(
            Pattern::AlternatingCalls,
            &["search", "fetch"],
            Severity::Warn,
        );
        Arc::make_mut(&mut alternating.detection).count = 3;
        assert_eq!(
            signal_of(&alternating, &engine)
                .expect("warn signals")
                .message,
            "You seem to be stuck in a loop: search and fetch alternated 3 times with the same \
             arguments. Do not call search with the same arguments again; try a different \
             approach, or stop and report what is blocking you."
        );
        let mut cycle = RunDetection::sample(Pattern::Cycle, &["a", "b", "c"], Severity::Kill);
        Arc::make_mut(&mut cycle.detection).count = 6;
        assert_eq!(
            signal_of(&cycle, &engine).expect("kill signals").message,
            "loopwatch stopped this run: the call sequence a → b → c repeated 6 times with the \
             same arguments."
        );
        let mut text = RunDetection::sample(Pattern::RepeatedText, &[], Severity::Warn);
        Arc::make_mut(&mut text.detection).count = 3;
        assert_eq!(
            signal_of(&text, &engine).expect("warn signals").message,
            "You seem to be stuck in a loop: the model gave the same text response 3 times in a \
             row. Do not call the same tool with the same arguments again; try a different \
             approach, or stop and report what is blocking you."
        );
        let progress = RunDetection::sample(Pattern::RepeatedCall, &["poll"], Severity::Info);
        assert_eq!(
            signal_of(&progress, &engine),
            None,
            "progress never signals"
        );
    }

    #[test]
    fn tool_names_and_fingerprints_serialize_as_the_arrays_they_were() {
        let engine = engine();
        for names in [&[][..], &["search"], &["search", "fetch"], &["a", "b", "c"]] {
            let d = RunDetection::sample(Pattern::Cycle, names, Severity::Kill);
            let signal = signal_of(&d, &engine).expect("kill signals");
            // As the `Vec<CompactString>` fields serialized them.
            let as_vec = |list: &[CompactString]| serde_json::to_string(&list.to_vec()).unwrap();
            let json = serde_json::to_string(&signal).unwrap();
            let tool_names = format!(r#""tool_names":{},"#, as_vec(&signal.tool_names));
            let fingerprints = format!(r#""fingerprints":{},"#, as_vec(&signal.fingerprints));
            assert!(json.contains(&tool_names), "{json}");
            assert!(json.contains(&fingerprints), "{json}");
            assert_eq!(signal.tool_names[..], names[..]);
            assert_eq!(signal.fingerprints.len(), names.len());
        }
    }

    #[test]
    fn a_pending_signal_builds_the_record_signal_of_builds() {
        let engine = Arc::new(engine());
        let mut d = RunDetection::sample(Pattern::RepeatedCall, &["search"], Severity::Kill);
        d.trace_id = (0u8..16).map(|b| b * 17).collect();
        d.span_ids = Arc::new([[3; 8].as_slice().into(), [2; 8].as_slice().into()]);
        d.time_unix_nano = 42;
        let eager = signal_of(&d, &engine).expect("kill signals");
        let pending = PendingSignal {
            detection: d.clone(),
            action: Action::Kill,
            engine: engine.clone(),
        };
        use crate::signals::DeferredSignal;
        assert_eq!(pending.build(), eager);
        assert_eq!(pending.time_unix_nano(), 42);
        assert_eq!(pending.action(), eager.action);
        assert_eq!(eager.trace_id, "00112233445566778899aabbccddeeff");
        assert!(pending.has_trace_id(&eager.trace_id));
        for other in [
            "00112233445566778899AABBCCDDEEFF",
            "00112233445566778899aabbccddeef0",
            "00112233445566778899aabbccddee",
            "",
        ] {
            assert!(!pending.has_trace_id(other), "{other}");
        }
    }
}
