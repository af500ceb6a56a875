//! HTTP `GET /v1/signals?trace_id=<hex>&since=<ns>` (DESIGN §6): recent signals from the
//! hub's in-memory ring, oldest first, as `{"data":[<loopwatch.signal.v1>…]}`.

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::hub::SignalHub;
use super::Signal;

/// Query parameters of `GET /v1/signals`; both optional. Unknown parameters are
/// rejected (400) so a typo does not silently return everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalsQuery {
    /// Exact trace id, lowercase hex.
    pub trace_id: Option<String>,
    /// Only signals with `time_unix_nano >= since` (ns since the Unix epoch).
    pub since: Option<u64>,
}

/// Body of `GET /v1/signals`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SignalsResponse {
    /// Matching signals, oldest first.
    pub data: Vec<Signal>,
}

/// Axum handler of `GET /v1/signals`.
pub async fn get_signals(
    State(hub): State<SignalHub>,
    Query(query): Query<SignalsQuery>,
) -> Json<SignalsResponse> {
    let trace_id = query.trace_id.as_deref().filter(|t| !t.is_empty());
    Json(SignalsResponse {
        data: hub.recent(trace_id, query.since),
    })
}

/// A router serving `GET /v1/signals` from `hub`, ready to `merge` into the admin API.
pub fn router(hub: SignalHub) -> Router {
    Router::new()
        .route("/v1/signals", get(get_signals))
        .with_state(hub)
}
