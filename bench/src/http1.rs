//! The load's other client: `GET` over HTTP/1.1 keep-alive, for loading a
//! proxy (Envoy) in front of the service rather than the service itself.
//!
//! HTTP/1.1 carries one request at a time, so every in-flight slot has a
//! connection of its own: a clone of an [`HttpSlot`] is a new slot that
//! connects on its first request (on the load thread that drives it), and
//! again after its connection closes.

use std::time::Duration;

use hyper::body::Body;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

/// One in-flight slot's connection to `authority`, sending `GET path`.
pub struct HttpSlot {
    authority: String,
    uri: http::Uri,
    send: Option<SendRequest<String>>,
}

impl Clone for HttpSlot {
    fn clone(&self) -> HttpSlot {
        HttpSlot {
            authority: self.authority.clone(),
            uri: self.uri.clone(),
            send: None,
        }
    }
}

impl HttpSlot {
    /// A slot for `GET path` on `authority` (`host:port`); checks that the
    /// target answers by connecting once within `timeout`.
    pub async fn connect(
        authority: &str,
        path: &str,
        timeout: Duration,
    ) -> Result<HttpSlot, String> {
        let uri: http::Uri = path
            .parse()
            .map_err(|e| format!("invalid --http path {path:?}: {e}"))?;
        let mut slot = HttpSlot {
            authority: authority.to_string(),
            uri,
            send: None,
        };
        slot.ready(timeout).await?;
        Ok(slot)
    }

    async fn ready(&mut self, timeout: Duration) -> Result<&mut SendRequest<String>, String> {
        let usable = self.send.as_ref().is_some_and(|s| !s.is_closed());
        if !usable {
            let authority = self.authority.as_str();
            let tcp = tokio::time::timeout(timeout, tokio::net::TcpStream::connect(authority))
                .await
                .map_err(|_| format!("cannot connect to {authority}: timed out"))?
                .map_err(|e| format!("cannot connect to {authority}: {e}"))?;
            tcp.set_nodelay(true)
                .map_err(|e| format!("cannot set TCP_NODELAY: {e}"))?;
            let (send, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                .await
                .map_err(|e| format!("HTTP/1.1 handshake with {authority} failed: {e}"))?;
            tokio::spawn(async move {
                // Ends when the server closes or the slot is dropped.
                let _ = connection.await;
            });
            self.send = Some(send);
        }
        let send = self
            .send
            .as_mut()
            .ok_or_else(|| "no connection".to_string())?;
        send.ready().await.map_err(|e| e.to_string())?;
        Ok(send)
    }

    /// One `GET`: the response's status, once its body is read.
    pub async fn get(&mut self, connect_timeout: Duration) -> Result<u16, String> {
        let request = http::Request::get(self.uri.clone())
            .header(http::header::HOST, self.authority.as_str())
            .body(String::new())
            .map_err(|e| e.to_string())?;
        let send = self.ready(connect_timeout).await?;
        let response = match send.send_request(request).await {
            Ok(r) => r,
            Err(e) => {
                self.send = None;
                return Err(format!("Unavailable: {e}"));
            }
        };
        let status = response.status().as_u16();
        let mut body = response.into_body();
        while let Some(frame) =
            std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
        {
            frame.map_err(|e| format!("Unavailable: {e}"))?;
        }
        Ok(status)
    }
}
