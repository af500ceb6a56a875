//! gRPC `loopwatch.v1.Guard/Check` (`proto/loopwatch/v1/guard.proto`) on the OTLP gRPC
//! port: the same answer as `POST /v1/check`.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::{check, CheckRequest};
use crate::engine::Engine;
pub use crate::signals::grpc::proto;

pub use proto::guard_client::GuardClient;
pub use proto::guard_server::GuardServer;

/// The `Guard` service over an engine.
pub struct GuardService {
    engine: Arc<Engine>,
}

/// The tonic server of `Guard` answering from `engine`.
pub fn guard_service(engine: Arc<Engine>) -> GuardServer<GuardService> {
    GuardServer::new(GuardService { engine })
}

#[tonic::async_trait]
impl proto::guard_server::Guard for GuardService {
    /// A request naming no run or no tool is `INVALID_ARGUMENT`; anything else answers.
    async fn check(
        &self,
        request: Request<proto::CheckRequest>,
    ) -> Result<Response<proto::CheckResponse>, Status> {
        let request = request.into_inner();
        let request = CheckRequest {
            trace_id: Some(request.trace_id).filter(|t| !t.is_empty()),
            run_key: Some(request.run_key).filter(|k| !k.is_empty()),
            tool_name: request.tool_name,
            arguments: Some(request.arguments)
                .filter(|a| !a.is_empty())
                .map(serde_json::Value::String),
        };
        let answer = check(&self.engine, &request)
            .map_err(|e| Status::invalid_argument(format!("Check: {e}")))?;
        Ok(Response::new(proto::CheckResponse {
            decision: answer.decision.as_str().to_owned(),
            pattern: answer.pattern,
            count: answer.count,
            message: answer.message,
            profile: answer.profile,
            known_run: answer.known_run,
        }))
    }
}
