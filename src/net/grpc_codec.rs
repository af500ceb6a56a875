//! The codec of loopwatch's own gRPC services and clients (`loopwatch.v1.Signals`,
//! `loopwatch.v1.Guard`; `build.rs` names it with `codec_path`): tonic-prost's, except that
//! a message that does not decode answers `INVALID_ARGUMENT`, the client's error, where
//! tonic-prost answers `INTERNAL`, a server fault (`from_decode_error` in
//! `tonic-prost/src/codec.rs`). A retrying client treats the two differently.

use prost::Message;
use tonic::codec::{BufferSettings, DecodeBuf, Decoder};
use tonic::{Code, Status};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// [`ProstCodec`] with [`MessageDecoder`]: `T` is the message encoded, `U` the one decoded.
#[derive(Debug, Clone, Default)]
pub struct Codec<T, U>(ProstCodec<T, U>);

impl<T, U> tonic::codec::Codec for Codec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = MessageDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        self.0.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        MessageDecoder(self.0.decoder())
    }
}

/// [`ProstDecoder`] whose decode error is `INVALID_ARGUMENT` naming what failed.
#[derive(Debug, Clone)]
pub struct MessageDecoder<U>(ProstDecoder<U>);

impl<U: Message + Default> Decoder for MessageDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|status| match status.code() {
            Code::Internal => Status::invalid_argument(format!(
                "the request is not a valid {} message: {}",
                std::any::type_name::<U>()
                    .rsplit("::")
                    .next()
                    .unwrap_or("protobuf"),
                status.message()
            )),
            _ => status,
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
