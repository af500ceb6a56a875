//! `loop.*` attributes on the span that completes a detection (DESIGN §5).
