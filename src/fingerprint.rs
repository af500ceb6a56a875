//! Fingerprints (DESIGN §3): canonical JSON (RFC 8785) after volatile keys are removed,
//! hashed with SHA-256; external form is an HMAC-SHA256 under `fingerprint_key`.

use crate::event::{CallStatus, Payload};

/// A SHA-256 digest.
pub type Fingerprint = [u8; 32];

/// Computes call and result fingerprints.
#[derive(Clone, Debug)]
pub struct Fingerprinter {}

impl Fingerprinter {
    /// SHA-256(tool_name ‖ 0x00 ‖ canonical arguments).
    pub fn call_fingerprint(&self, tool_name: &str, arguments: &Payload) -> Fingerprint {
        let _ = (tool_name, arguments);
        [0; 32]
    }

    /// SHA-256(status ‖ 0x00 ‖ canonical result or error message); `None` when the call
    /// succeeded but its result was not captured.
    pub fn result_fingerprint(&self, status: &CallStatus, result: Option<&Payload>) -> Option<Fingerprint> {
        let _ = (status, result);
        None
    }
}
