//! HTTP `GET /v1/signals?trace_id=<hex>&since=<ns>&action=<warn|kill>` (DESIGN §6): recent
//! signals from the hub's in-memory ring, oldest first, as `{"data":[<loopwatch.signal.v1>…]}`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::hub::SignalHub;
use super::{Action, Signal};
use crate::net::api_error::{json_error, ApiQuery};

/// Query parameters of `GET /v1/signals`; all optional. Unknown parameters, and an
/// `action` other than `warn` / `kill`, are rejected (400) so a typo does not silently
/// return everything (or nothing).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalsQuery {
    /// Exact trace id, lowercase hex.
    pub trace_id: Option<String>,
    /// Only signals with `time_unix_nano >= since` (ns since the Unix epoch).
    pub since: Option<u64>,
    /// Only signals with this action: `warn`, `kill` or `require_approval` (parsed by [`get_signals`], so the
    /// error names the parameter).
    pub action: Option<String>,
}

/// Body of `GET /v1/signals`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SignalsResponse {
    /// Matching signals, oldest first.
    pub data: Vec<Signal>,
}

/// Axum handler of `GET /v1/signals`.
/// A query string that does not deserialize, and an unknown `action`, are `400 Bad
/// Request` with `{"error": …}` (the admin API's error shape), the latter naming the
/// parameter.
pub async fn get_signals(
    State(hub): State<SignalHub>,
    ApiQuery(query): ApiQuery<SignalsQuery>,
) -> Result<Json<SignalsResponse>, Response> {
    let action: Option<Action> = match query.action.as_deref() {
        None | Some("") => None,
        Some(action) => Some(action.parse().map_err(|e| {
            json_error(
                StatusCode::BAD_REQUEST,
                &format!("query parameter action: {e}"),
            )
        })?),
    };
    // Hex is case-insensitive (OTLP/JSON ids, W3C traceparent); signals carry lowercase.
    let trace_id = query
        .trace_id
        .as_deref()
        .filter(|t| !t.is_empty())
        .map(str::to_ascii_lowercase);
    let data = hub.recent(trace_id.as_deref(), query.since, action);
    Ok(Json(SignalsResponse { data }))
}

/// A router serving `GET /v1/signals` from `hub`, ready to `merge` into the admin API.
pub fn router(hub: SignalHub) -> Router {
    Router::new()
        .route("/v1/signals", get(get_signals))
        .with_state(hub)
}
