//! The network edges every listener and client shares: TLS, bearer-token auth, retry
//! policy, the admin API's error shape and listener hygiene (connection caps, HTTP/2 limits).

pub mod api_error;
pub mod auth;
pub mod listen;
pub mod log_limit;
pub mod retry;
pub mod tls;
