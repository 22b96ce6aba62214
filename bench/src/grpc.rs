//! A minimal unary gRPC client for `ShouldRateLimit`, straight on `h2`.
//!
//! The load tool shares the machine with the server it measures (and, in the
//! Redis runs, with Redis), so its own CPU per request decides how much is
//! left for them. tonic's `Channel` hands every request to a buffer task
//! and back; this client sends from the calling task on a cloned
//! [`h2::client::SendRequest`], which costs about a third less CPU per
//! request (measured against the no-op server). It speaks only what the
//! load needs: plaintext HTTP/2 (prior knowledge), one message each way, no
//! compression, `grpc-status` from the trailers or a trailers-only answer.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message;

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Why a call failed, as the report groups errors.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The server answered with a gRPC status other than OK.
    #[error("{code:?}: {message}")]
    Status { code: tonic::Code, message: String },
    /// The HTTP/2 exchange failed (connection lost, stream reset, …).
    #[error("Unavailable: {0}")]
    Transport(#[from] h2::Error),
    /// The answer was not a gRPC answer this client understands.
    #[error("Internal: {0}")]
    Protocol(String),
}

/// One HTTP/2 connection to the target; clone it for every in-flight slot.
#[derive(Clone)]
pub struct GrpcConnection {
    send: h2::client::SendRequest<Bytes>,
    uri: http::Uri,
}

impl GrpcConnection {
    /// Connects to `authority` (`host:port`) within `timeout`; the
    /// connection is driven by a task of its own until every clone is gone.
    pub async fn connect(authority: String, timeout: Duration) -> Result<GrpcConnection, String> {
        let authority = authority.as_str();
        let uri: http::Uri = format!("http://{authority}{PATH}")
            .parse()
            .map_err(|e| format!("invalid target {authority:?}: {e}"))?;
        let tcp = tokio::time::timeout(timeout, tokio::net::TcpStream::connect(authority))
            .await
            .map_err(|_| format!("cannot connect to {authority}: timed out"))?
            .map_err(|e| format!("cannot connect to {authority}: {e}"))?;
        tcp.set_nodelay(true)
            .map_err(|e| format!("cannot set TCP_NODELAY: {e}"))?;
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(1 << 20)
            .initial_connection_window_size(1 << 24)
            .handshake::<_, Bytes>(tcp)
            .await
            .map_err(|e| format!("HTTP/2 handshake with {authority} failed: {e}"))?;
        tokio::spawn(async move {
            // Ends when the server closes or every SendRequest is dropped.
            let _ = connection.await;
        });
        Ok(GrpcConnection { send, uri })
    }

    /// One `ShouldRateLimit` call.
    pub async fn should_rate_limit(
        &mut self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, CallError> {
        let http_request = http::Request::post(self.uri.clone())
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .map_err(|e| CallError::Protocol(e.to_string()))?;
        let mut send = self.send.clone().ready().await?;
        let (response, mut body_out) = send.send_request(http_request, false)?;
        body_out.send_data(frame(request), true)?;

        let response = response.await?;
        let (head, mut body) = response.into_parts();
        if head.status != http::StatusCode::OK {
            return Err(CallError::Protocol(format!("HTTP status {}", head.status)));
        }
        let mut message = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            let _ = body.flow_control().release_capacity(chunk.len());
            message.extend_from_slice(&chunk);
        }
        // The status is in the trailers, or in the headers of a
        // trailers-only answer.
        let trailers = body.trailers().await?;
        check_status(trailers.as_ref().unwrap_or(&head.headers))?;
        unframe(message.freeze())
    }
}

/// `request` as one uncompressed gRPC message (1-byte flag, 4-byte length).
fn frame(request: &RateLimitRequest) -> Bytes {
    let len = request.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_u8(0);
    buf.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    // Cannot fail: the buffer has room for the encoded length.
    let _ = request.encode(&mut buf);
    buf.freeze()
}

/// The one message of a gRPC response body.
fn unframe(mut body: Bytes) -> Result<RateLimitResponse, CallError> {
    if body.len() < 5 {
        return Err(CallError::Protocol("response has no message".into()));
    }
    if body.get_u8() != 0 {
        return Err(CallError::Protocol("compressed response".into()));
    }
    let len = body.get_u32() as usize;
    if body.len() != len {
        return Err(CallError::Protocol(format!(
            "message length {len} but {} bytes",
            body.len()
        )));
    }
    RateLimitResponse::decode(body).map_err(|e| CallError::Protocol(e.to_string()))
}

/// The `grpc-status` in `headers` as a result: an error when it is not OK
/// or missing. `grpc-message` is percent-encoded (gRPC over HTTP/2,
/// "Responses").
fn check_status(headers: &http::HeaderMap) -> Result<(), CallError> {
    let Some(code) = headers.get("grpc-status") else {
        return Err(CallError::Protocol("no grpc-status".into()));
    };
    let code = tonic::Code::from_bytes(code.as_bytes());
    if code == tonic::Code::Ok {
        return Ok(());
    }
    let message = headers
        .get("grpc-message")
        .map(|m| {
            percent_encoding::percent_decode(m.as_bytes())
                .decode_utf8_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    Err(CallError::Status { code, message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_and_unframe_round_trip_a_message() {
        let response = RateLimitResponse {
            overall_code: 2,
            ..Default::default()
        };
        let mut framed = BytesMut::new();
        framed.put_u8(0);
        framed.put_u32(response.encoded_len() as u32);
        response.encode(&mut framed).unwrap();
        assert_eq!(unframe(framed.freeze()).unwrap(), response);

        let request = RateLimitRequest {
            domain: "d".into(),
            ..Default::default()
        };
        let framed = frame(&request);
        assert_eq!(framed[0], 0);
        assert_eq!(
            u32::from_be_bytes([framed[1], framed[2], framed[3], framed[4]]) as usize,
            framed.len() - 5
        );
    }

    #[test]
    fn unframe_rejects_what_is_not_one_plain_message() {
        assert!(unframe(Bytes::from_static(b"\0\0\0")).is_err());
        assert!(unframe(Bytes::from_static(b"\x01\0\0\0\0")).is_err());
        assert!(unframe(Bytes::from_static(b"\0\0\0\0\x05ab")).is_err());
    }

    #[test]
    fn status_from_headers() {
        let mut h = http::HeaderMap::new();
        assert_eq!(
            check_status(&h).unwrap_err().to_string(),
            "Internal: no grpc-status"
        );
        h.insert("grpc-status", "0".parse().unwrap());
        assert!(check_status(&h).is_ok());
        h.insert("grpc-status", "3".parse().unwrap());
        h.insert("grpc-message", "bad%20domain%3A %zz".parse().unwrap());
        assert_eq!(
            check_status(&h).unwrap_err().to_string(),
            "InvalidArgument: bad domain: %zz"
        );
        h.insert("grpc-status", "x".parse().unwrap());
        assert!(matches!(
            check_status(&h),
            Err(CallError::Status {
                code: tonic::Code::Unknown,
                ..
            })
        ));
    }
}
