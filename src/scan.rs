//! Offline scan of OTLP request files (`loopwatch scan`).
