//! Per-run state: events in start-time order, deduplicated by span_id, detectors per profile.
