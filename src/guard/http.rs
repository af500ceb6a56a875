//! HTTP routes of the guard on the admin listener: `POST /v1/check` (the pre-execution
//! check), `POST /v1/runs/{run_key}/approve` and `POST /v1/runs/{run_key}/deny` (answers to
//! a `require_approval` signal). They sit behind the admin token like every admin route.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};

use super::approval::{self, Approvals};
use super::{check, CheckRequest};
use crate::engine::Engine;
use crate::net::api_error::{json_error, ApiPath};

/// What the guard routes read and act on.
#[derive(Clone)]
pub struct GuardState {
    pub engine: Arc<Engine>,
    pub approvals: Approvals,
}

/// The guard's routes, ready to `merge` into the admin router.
pub fn router(state: GuardState) -> Router {
    Router::new()
        .route("/v1/check", post(post_check))
        .route("/v1/runs/{run_key}/approve", post(post_approve))
        .route("/v1/runs/{run_key}/deny", post(post_deny))
        .with_state(state)
}

/// `POST /v1/check`: a JSON [`CheckRequest`] → a JSON [`super::CheckResponse`]. A body that
/// is not such an object, or names no run or no tool, is `400 {"error": …}`.
async fn post_check(
    State(state): State<GuardState>,
    body: Result<Json<CheckRequest>, JsonRejection>,
) -> Response {
    let Json(request) = match body {
        Ok(body) => body,
        Err(e) => return json_error(StatusCode::BAD_REQUEST, &e.body_text()),
    };
    match check(&state.engine, &request) {
        Ok(answer) => Json(answer).into_response(),
        Err(e) => json_error(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}

/// `POST /v1/runs/{run_key}/approve`: the run goes on with its loop counters reset.
/// `404` for a run loopwatch does not hold.
async fn post_approve(
    State(state): State<GuardState>,
    ApiPath(run_key): ApiPath<String>,
) -> Response {
    answer(state.approvals.approve(&state.engine, &run_key))
}

/// `POST /v1/runs/{run_key}/deny`: the run is stopped (a `kill` signal is published for its
/// latest detection awaiting approval). `404` for an unknown run, `409` when none awaits.
async fn post_deny(State(state): State<GuardState>, ApiPath(run_key): ApiPath<String>) -> Response {
    answer(state.approvals.deny(&state.engine, &run_key))
}

fn answer(outcome: Result<approval::Answered, approval::ApprovalError>) -> Response {
    match outcome {
        Ok(answered) => Json(answered).into_response(),
        Err(e @ approval::ApprovalError::UnknownRun(_)) => {
            json_error(StatusCode::NOT_FOUND, &e.to_string())
        }
        Err(e @ approval::ApprovalError::NothingToDeny(_)) => {
            json_error(StatusCode::CONFLICT, &e.to_string())
        }
    }
}
