//! The protobuf codec of the RLS service: tonic-prost's, except that a
//! request that does not decode (truncated, invalid UTF-8 in a string, wrong
//! wire types) is INVALID_ARGUMENT — the caller's fault — rather than the
//! INTERNAL tonic-prost reports, and that each call's buffers start at
//! [`CALL_BUFFER`] bytes instead of 8 KiB (they grow when a message needs
//! it): a stream whose answer waits for the client's window holds its
//! buffers, and RLS messages are a few hundred bytes.

use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;
use tonic_prost::ProstCodec;

type Inner = ProstCodec<RateLimitResponse, RateLimitRequest>;

/// The initial size of a call's request and response buffers.
pub const CALL_BUFFER: usize = 1024;

/// What tonic-prost yields after, unchanged.
const YIELD_THRESHOLD: usize = 32 * 1024;

/// Encodes responses, decodes requests.
#[derive(Debug, Default, Clone)]
pub struct RlsCodec(Inner);

/// The response encoder.
#[derive(Debug)]
pub struct RlsEncoder(<Inner as Codec>::Encoder);

impl Encoder for RlsEncoder {
    type Item = RateLimitResponse;
    type Error = Status;

    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Self::Error> {
        self.0.encode(item, dst)
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::new(CALL_BUFFER, YIELD_THRESHOLD)
    }
}

/// The request decoder.
#[derive(Debug)]
pub struct RlsDecoder(<Inner as Codec>::Decoder);

impl Codec for RlsCodec {
    type Encode = RateLimitResponse;
    type Decode = RateLimitRequest;
    type Encoder = RlsEncoder;
    type Decoder = RlsDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        RlsEncoder(self.0.encoder())
    }

    fn decoder(&mut self) -> Self::Decoder {
        RlsDecoder(self.0.decoder())
    }
}

impl Decoder for RlsDecoder {
    type Item = RateLimitRequest;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Self::Error> {
        self.0.decode(buf).map_err(|s| {
            Status::invalid_argument(format!("malformed RateLimitRequest: {}", s.message()))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::new(CALL_BUFFER, YIELD_THRESHOLD)
    }
}
