//! The protobuf codec of the RLS service: tonic-prost's, except that a
//! request that does not decode (truncated, invalid UTF-8 in a string, wrong
//! wire types) is INVALID_ARGUMENT — the caller's fault — rather than the
//! INTERNAL tonic-prost reports.

use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::ProstCodec;

type Inner = ProstCodec<RateLimitResponse, RateLimitRequest>;

/// Encodes responses, decodes requests.
#[derive(Debug, Default, Clone)]
pub struct RlsCodec(Inner);

/// The request decoder.
#[derive(Debug)]
pub struct RlsDecoder(<Inner as Codec>::Decoder);

impl Codec for RlsCodec {
    type Encode = RateLimitResponse;
    type Decode = RateLimitRequest;
    type Encoder = <Inner as Codec>::Encoder;
    type Decoder = RlsDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        self.0.encoder()
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
        self.0.buffer_settings()
    }
}
