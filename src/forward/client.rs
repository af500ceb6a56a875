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

/// The body of one export: serialized `ExportTraceServiceRequest`s sent back to back as
/// one request (protobuf concatenation appends their `resource_spans`), written into the
/// gRPC frame part by part, so a batch of queued requests is copied once, not joined first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportBody {
    parts: Vec<Bytes>,
}

impl ExportBody {
    /// A body of `parts`, in order.
    pub fn new(parts: Vec<Bytes>) -> Self {
        ExportBody { parts }
    }

    /// Bytes in all parts.
    pub fn len(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }

    /// True when no part holds a byte (an empty request).
    pub fn is_empty(&self) -> bool {
        self.parts.iter().all(Bytes::is_empty)
    }

    /// The parts, in order.
    pub fn parts(&self) -> &[Bytes] {
        &self.parts
    }

    /// The body as one buffer (the parts joined; no copy for one part).
    pub fn to_bytes(&self) -> Bytes {
        crate::wire::annotate::joined(&self.parts)
    }
}

impl From<Bytes> for ExportBody {
    fn from(bytes: Bytes) -> Self {
        ExportBody { parts: vec![bytes] }
    }
}

/// Client codec: encodes an [`ExportBody`] as-is, decodes the `ExportTraceServiceResponse`.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawBytesCodec;

impl Codec for RawBytesCodec {
    type Encode = ExportBody;
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
    type Item = ExportBody;
    type Error = Status;

    fn encode(&mut self, item: ExportBody, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.reserve(item.len());
        for part in item.parts {
            dst.put(part);
        }
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
    pub async fn export(
        &mut self,
        request: impl Into<ExportBody>,
    ) -> Result<ExportTraceServiceResponse, Status> {
        let request = request.into();
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
