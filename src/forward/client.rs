//! The downstream OTLP/gRPC client: sends already-encoded request bytes untouched with a
//! raw-bytes codec on `TraceService/Export`.
//!
//! Uncompressed, the bytes are not even copied: tonic's encoder copies every message into
//! its frame buffer (4 % of the server's CPU forwarding 1000-span requests, plus the page
//! faults of a fresh 430 KB buffer per export), so the request carries its parts in its
//! extensions and tonic a stand-in it never encodes: [`FramedParts`], the service under
//! tonic's client, swaps the body for the gRPC frame header followed by the parts
//! (HTTP/2 writes large DATA payloads from them directly; runs of short parts are
//! gathered into one chunk). Everything else — headers,
//! deadline, response, trailers, status — stays tonic's. With gzip, tonic's encoder
//! compresses as before.

use std::time::Duration;

use bytes::{BufMut, Bytes};
use http::uri::PathAndQuery;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use tonic::codec::{BufferSettings, Codec, CompressionEncoding, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

use crate::net::tls::ClientTlsConfig;
use crate::otlp::EXPORT_PATH;

use super::{ForwardCompression, ForwardError};

/// The body of one export: serialized `ExportTraceServiceRequest`s sent back to back as
/// one request (protobuf concatenation appends their `resource_spans`), written into the
/// gRPC frame part by part, so a batch of queued requests is copied once, not joined first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportBody {
    parts: Vec<Bytes>,
    /// True for the stand-in an uncompressed export hands tonic while its parts travel in
    /// the request's extensions ([`FramedParts`]): the encoder refuses it, so parts that
    /// never reached [`FramedParts`] fail the export instead of sending an empty request.
    stand_in: bool,
}

impl ExportBody {
    /// A body of `parts`, in order.
    pub fn new(parts: Vec<Bytes>) -> Self {
        ExportBody {
            parts,
            stand_in: false,
        }
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
        crate::annotate::wire::joined(&self.parts)
    }
}

impl From<Bytes> for ExportBody {
    fn from(bytes: Bytes) -> Self {
        ExportBody::new(vec![bytes])
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
        if item.stand_in {
            return Err(Status::internal(
                "export body lost on its way to the wire (its parts never reached FramedParts)",
            ));
        }
        dst.reserve(item.len());
        for part in item.parts {
            dst.put(part);
        }
        Ok(())
    }
}

/// The parts of an uncompressed export, carried in the request's extensions past tonic's
/// encoder to [`FramedParts`].
#[derive(Clone, Debug)]
struct UnframedParts(ExportBody);

/// The channel under tonic's client: when a request carries [`UnframedParts`], its body
/// (tonic's encoding of a stand-in, never polled) is replaced by one gRPC message frame
/// holding the parts ([`framed`]).
#[derive(Clone, Debug)]
pub struct FramedParts {
    channel: Channel,
}

impl tower::Service<http::Request<tonic::body::Body>> for FramedParts {
    type Response = <Channel as tower::Service<http::Request<tonic::body::Body>>>::Response;
    type Error = <Channel as tower::Service<http::Request<tonic::body::Body>>>::Error;
    type Future = <Channel as tower::Service<http::Request<tonic::body::Body>>>::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.channel.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<tonic::body::Body>) -> Self::Future {
        if let Some(UnframedParts(body)) = request.extensions_mut().remove::<UnframedParts>() {
            *request.body_mut() = framed(body);
        }
        self.channel.call(request)
    }
}

/// Parts at least this long go out as their own DATA chunk, uncopied; shorter runs of
/// parts (the slices around the spans of an annotated request, the appended `loop.*`
/// fields) are gathered into one chunk: a chunk per small part cost more in HTTP/2
/// framing and flow control than their copy (loop-heavy 1000-span requests, hundreds of
/// parts each, lost a quarter of their throughput that way).
const OWN_CHUNK_BYTES: usize = 8 * 1024;

/// One uncompressed gRPC message frame of `body`: the 5-byte prefix (uncompressed flag,
/// big-endian length) and the runs of short parts copied into chunks of their own, every
/// part of at least [`OWN_CHUNK_BYTES`] as it is. `body` is under 4 GiB
/// ([`ExportClient::export`] leaves longer ones to tonic, which refuses them).
fn framed(body: ExportBody) -> tonic::body::Body {
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    let mut chunks = Vec::new();
    // One buffer for every gathered chunk, sized up front: growing it by doubling
    // reallocated and copied half of a loop-heavy request's bytes again.
    let short: usize = body
        .parts
        .iter()
        .map(Bytes::len)
        .filter(|&len| len < OWN_CHUNK_BYTES)
        .sum();
    let mut gathered = bytes::BytesMut::with_capacity(5 + short);
    gathered.put_u8(0);
    gathered.put_u32(len);
    for part in body.parts {
        if part.len() >= OWN_CHUNK_BYTES {
            if !gathered.is_empty() {
                chunks.push(gathered.split().freeze());
            }
            chunks.push(part);
        } else {
            gathered.extend_from_slice(&part);
        }
    }
    if !gathered.is_empty() {
        chunks.push(gathered.freeze());
    }
    let frames = chunks
        .into_iter()
        .map(|chunk| Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(chunk)));
    tonic::body::Body::new(http_body_util::StreamBody::new(futures::stream::iter(
        frames,
    )))
}

/// A cloneable export client for one downstream endpoint.
#[derive(Clone, Debug)]
pub struct ExportClient {
    grpc: tonic::client::Grpc<FramedParts>,
    timeout: Duration,
    /// True when requests are sent uncompressed, i.e. through [`FramedParts`].
    uncompressed: bool,
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
        let mut grpc = tonic::client::Grpc::new(FramedParts { channel })
            .accept_compressed(CompressionEncoding::Gzip)
            .max_decoding_message_size(4 * 1024 * 1024);
        let uncompressed = compression == ForwardCompression::None;
        if !uncompressed {
            grpc = grpc.send_compressed(CompressionEncoding::Gzip);
        }
        Ok(Self {
            grpc,
            timeout,
            uncompressed,
        })
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
            // A frame states its length in 32 bits: a longer body goes to tonic's encoder,
            // whose size check refuses it (RESOURCE_EXHAUSTED).
            let mut req = if self.uncompressed && u32::try_from(request.len()).is_ok() {
                let mut req = tonic::Request::new(ExportBody {
                    parts: Vec::new(),
                    stand_in: true,
                });
                req.extensions_mut().insert(UnframedParts(request));
                req
            } else {
                tonic::Request::new(request)
            };
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

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn framed_body_sends_long_parts_uncopied_and_gathers_short_ones() {
        let long = |byte: u8| Bytes::from(vec![byte; OWN_CHUNK_BYTES + 100]);
        let parts = vec![
            Bytes::from_static(b"\x0a\x03abc"),
            Bytes::new(),
            long(7),
            Bytes::from_static(b"xy"),
            Bytes::from_static(b"z"),
            long(8),
            long(9),
            Bytes::from_static(b"end"),
        ];
        let body = ExportBody::new(parts.clone());
        let mut framed_body = framed(body.clone());
        let mut chunks = Vec::new();
        while let Some(frame) = framed_body.frame().await {
            chunks.push(frame.unwrap().into_data().unwrap());
        }
        // prefix + "\x0a\x03abc" | long 7 | "xyz" | long 8 | long 9 | "end"
        assert_eq!(
            chunks.len(),
            6,
            "{:?}",
            chunks.iter().map(Bytes::len).collect::<Vec<_>>()
        );
        assert_eq!(chunks[0][0], 0, "uncompressed");
        let len = u32::from_be_bytes(chunks[0][1..5].try_into().unwrap());
        assert_eq!(len as usize, body.len());
        assert_eq!(&chunks[0][5..], b"\x0a\x03abc");
        assert_eq!(&chunks[2][..], b"xyz");
        assert_eq!(&chunks[5][..], b"end");
        // Long parts are sent as they are: the same memory, no copy.
        assert_eq!(chunks[1].as_ptr(), parts[2].as_ptr());
        assert_eq!(chunks[3].as_ptr(), parts[5].as_ptr());
        assert_eq!(chunks[4].as_ptr(), parts[6].as_ptr());
        // And the frame is the body's bytes behind the prefix.
        assert_eq!(chunks.concat()[5..], body.to_bytes()[..]);
    }

    /// Counts the exports a downstream fully received.
    struct CountingDownstream(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    #[tonic::async_trait]
    impl opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceService
        for CountingDownstream
    {
        async fn export(
            &self,
            _request: tonic::Request<
                opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest,
            >,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, Status> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
        }
    }

    /// The guard of the uncompressed path: a stand-in whose parts never reached
    /// `FramedParts` (here: a channel without it) fails the export (the encoder's error
    /// resets the HTTP/2 stream: `INTERNAL`), and the downstream receives no request,
    /// rather than an empty one.
    #[tokio::test]
    async fn a_stand_in_that_reaches_the_encoder_fails_the_export_and_sends_nothing() {
        use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceServiceServer;
        let received = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(CountingDownstream(
                    received.clone(),
                )))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let grpc = tonic::client::Grpc::new(channel);
        // One span-less resource_spans entry: a valid, non-empty request.
        let request = Bytes::from_static(b"\x0a\x00");
        let export = |body: ExportBody| {
            let mut grpc = grpc.clone();
            async move {
                grpc.ready().await.unwrap();
                grpc.unary(
                    tonic::Request::new(body),
                    PathAndQuery::from_static(EXPORT_PATH),
                    RawBytesCodec,
                )
                .await
            }
        };
        let stand_in = ExportBody {
            parts: vec![request.clone()],
            stand_in: true,
        };
        let status = export(stand_in)
            .await
            .expect_err("a stand-in never goes out");
        assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
        assert_eq!(received.load(std::sync::atomic::Ordering::SeqCst), 0);
        // The same parts as a real body are delivered on the same channel.
        export(ExportBody::from(request)).await.expect("delivered");
        assert_eq!(received.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
