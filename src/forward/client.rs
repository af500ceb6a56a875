//! The downstream OTLP/gRPC client: sends already-encoded request bytes untouched with a
//! raw-bytes codec on `TraceService/Export`.

use std::time::Duration;

use bytes::{BufMut, Bytes};
use http::uri::PathAndQuery;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use tonic::codec::{BufferSettings, Codec, CompressionEncoding, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

use crate::otlp::EXPORT_PATH;
use crate::tls::ClientTlsConfig;

use super::{ForwardCompression, ForwardError};

/// Client codec: encodes `Bytes` as-is, decodes the `ExportTraceServiceResponse`.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawBytesCodec;

impl Codec for RawBytesCodec {
    type Encode = Bytes;
    type Decode = ExportTraceServiceResponse;
    type Encoder = RawBytesEncoder;
    type Decoder = tonic_prost::ProstDecoder<ExportTraceServiceResponse>;

    fn encoder(&mut self) -> Self::Encoder {
        RawBytesEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::new(BufferSettings::default())
    }
}

/// Encoder half of [`RawBytesCodec`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RawBytesEncoder;

impl Encoder for RawBytesEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

/// A cloneable export client for one downstream endpoint.
#[derive(Clone, Debug)]
pub struct ExportClient {
    grpc: tonic::client::Grpc<Channel>,
    timeout: Duration,
}

impl ExportClient {
    /// A lazily connecting client for `endpoint` (e.g. `http://127.0.0.1:4317`); an
    /// `https://` endpoint uses TLS with the system and webpki roots.
    ///
    /// # Errors
    /// [`ForwardError::InvalidEndpoint`] when `endpoint` is not a valid URI.
    pub fn new(
        endpoint: &str,
        compression: ForwardCompression,
        timeout: Duration,
    ) -> Result<Self, ForwardError> {
        Self::with_tls(endpoint, compression, timeout, &ClientTlsConfig::default())
    }

    /// As [`ExportClient::new`]; an `https://` endpoint uses TLS with `tls` (CA, client
    /// certificate, server name), never cleartext.
    ///
    /// # Errors
    /// [`ForwardError::InvalidEndpoint`] for an invalid URI, [`ForwardError::Tls`] for
    /// TLS settings that cannot be loaded or an `http://` endpoint with TLS settings.
    pub fn with_tls(
        endpoint: &str,
        compression: ForwardCompression,
        timeout: Duration,
        tls: &ClientTlsConfig,
    ) -> Result<Self, ForwardError> {
        let mut channel = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|e| ForwardError::InvalidEndpoint {
                endpoint: endpoint.to_owned(),
                message: e.to_string(),
            })?
            .connect_timeout(timeout);
        if channel.uri().scheme_str() == Some("https") {
            let config = tls.tonic().map_err(|e| ForwardError::Tls(e.to_string()))?;
            channel = channel
                .tls_config(config)
                .map_err(|e| ForwardError::Tls(e.to_string()))?;
        } else if tls.is_set() {
            return Err(ForwardError::Tls(format!(
                "set, but exporter.endpoint `{endpoint}` is not https://"
            )));
        }
        let channel = channel.connect_lazy();
        let mut grpc = tonic::client::Grpc::new(channel)
            .accept_compressed(CompressionEncoding::Gzip)
            .max_decoding_message_size(4 * 1024 * 1024);
        if compression == ForwardCompression::Gzip {
            grpc = grpc.send_compressed(CompressionEncoding::Gzip);
        }
        Ok(Self { grpc, timeout })
    }

    /// One export attempt, bounded by the per-attempt timeout (`DEADLINE_EXCEEDED` when
    /// it passes; connection failures are `UNAVAILABLE`).
    ///
    /// # Errors
    /// The downstream's status, or the local timeout/transport status.
    pub async fn export(&mut self, request: Bytes) -> Result<ExportTraceServiceResponse, Status> {
        let attempt = async {
            self.grpc
                .ready()
                .await
                .map_err(|e| Status::unavailable(format!("downstream not ready: {e}")))?;
            let mut req = tonic::Request::new(request);
            req.set_timeout(self.timeout);
            self.grpc
                .unary(req, PathAndQuery::from_static(EXPORT_PATH), RawBytesCodec)
                .await
                .map(tonic::Response::into_inner)
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(Status::deadline_exceeded(format!(
                "export attempt timed out after {:?}",
                self.timeout
            ))),
        }
    }
}
