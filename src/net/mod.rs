//! The network edges every listener and client shares: TLS, bearer-token auth, retry
//! policy, the admin API's error shape, listener hygiene (connection caps, HTTP/2 limits)
//! and the trace-link template of the `/ui` page.

pub mod api_error;
pub mod auth;
pub mod grpc_codec;
pub mod listen;
pub mod log_limit;
pub mod retry;
pub mod tls;
pub mod trace_url;
