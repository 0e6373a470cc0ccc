//! The HTTP listener every glassbox server runs on: an accept loop over hyper's HTTP/1
//! connection driver that holds up against slow or hostile clients.
//!
//! `axum::serve` has no header or body timeout and waits for every connection at shutdown, so
//! one client that opens a socket and trickles a byte a second holds a connection (and a
//! graceful shutdown) forever. This loop bounds what a peer can cost ([`ServerLimits`]):
//!
//! - **connections**: at most `max_connections` are served at once; further ones wait in the
//!   kernel's accept queue until a slot frees (nothing is read from them meanwhile);
//! - **headers**: a request's head must arrive within `header_read_timeout` of the connection
//!   opening or of the previous response (hyper's `header_read_timeout`, which also closes idle
//!   keep-alive connections), else the connection is closed;
//! - **bodies**: a request body must arrive whole within `body_read_timeout` of its request:
//!   a total deadline, not an idle one, so a trickle of one byte per second cannot keep it
//!   alive. Past it, reading the body fails with an `io::ErrorKind::TimedOut` error that a
//!   handler maps to 408 (the webhook does);
//! - **shutdown**: when the shutdown future resolves, the listener closes, idle connections
//!   close, requests in flight get `shutdown_grace` to finish, and whatever is left is dropped.
//!
//! Not here: routing, the body size caps (each router sets its own), TLS (terminate it in a
//! proxy in front).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body as AxumBody;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::ServiceExt;

use crate::WebError;

/// What one peer may cost the server. [`Default`] gives the values `glassbox serve` uses when
/// its `[web]` section names none (docs/deploy.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Time for a request's head to arrive (from the connection's start or the previous
    /// response).
    pub header_read_timeout: Duration,
    /// Time for a request's whole body to arrive, from the request's head.
    pub body_read_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// Time requests in flight get to finish once shutdown starts.
    pub shutdown_grace: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            max_connections: 1024,
            shutdown_grace: Duration::from_secs(3),
        }
    }
}

/// Serves `app` on `listener` under `limits` until `shutdown` resolves, then shuts down as the
/// module docs say. Handlers see the peer's address as `ConnectInfo<SocketAddr>`.
pub async fn serve_router(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), WebError> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        // A slot first, then a connection: past the cap, peers wait in the accept queue.
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning
                    // (as axum::serve does); a per-connection error just drops that peer.
                    if !is_connection_error(&e) {
                        tracing::error!(error = %e, "accept failed; retrying in 1 s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let body_timeout = limits.body_read_timeout;
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let mut req = req.map(|b| AxumBody::new(DeadlineBody::new(b, body_timeout)));
            req.extensions_mut().insert(ConnectInfo(peer));
            let app = app.clone();
            async move {
                let response = match app.oneshot(req).await {
                    Ok(r) => r,
                    Err(never) => match never {},
                };
                Ok::<_, Infallible>(response)
            }
        });
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        connections.spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
        // Reap the connections that ended, so the set holds only live ones.
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    let open = graceful.count();
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(limits.shutdown_grace) => {
            tracing::warn!(
                open,
                grace_s = limits.shutdown_grace.as_secs_f64(),
                "connections still open after the shutdown grace; closing them"
            );
        }
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// Errors that concern one accepted peer, not the listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// A request body that fails once its total deadline passes (see the module docs).
struct DeadlineBody<B> {
    inner: B,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
}

impl<B> DeadlineBody<B> {
    fn new(inner: B, timeout: Duration) -> Self {
        DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            timeout,
        }
    }
}

impl<B> Body for DeadlineBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            let e = std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the request body did not arrive within {} s",
                    this.timeout.as_secs_f64()
                ),
            );
            return Poll::Ready(Some(Err(Box::new(e))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A body that never yields a frame.
    struct Stalled;

    impl Body for Stalled {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Pending
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_fails_at_its_deadline_as_timed_out() {
        let body = DeadlineBody::new(Stalled, Duration::from_secs(5));
        let started = tokio::time::Instant::now();
        let err = body.collect().await.expect_err("the body must fail");
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        let io = err.downcast_ref::<std::io::Error>().expect("an io::Error");
        assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
        assert!(err.to_string().contains("within 5 s"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_arrives_in_time_is_passed_through() {
        let body = DeadlineBody::new(
            http_body_util::Full::new(Bytes::from_static(b"hello")),
            Duration::from_secs(5),
        );
        let got = body.collect().await.unwrap().to_bytes();
        assert_eq!(&got[..], b"hello");
    }

    /// One byte every second: an idle timeout would never fire; the total deadline does.
    struct Trickle(Pin<Box<tokio::time::Sleep>>);

    impl Body for Trickle {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            if self.0.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let next = tokio::time::Instant::now() + Duration::from_secs(1);
            self.0.as_mut().reset(next);
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x")))))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickling_body_fails_at_its_total_deadline() {
        let trickle = Trickle(Box::pin(tokio::time::sleep(Duration::from_secs(1))));
        let body = DeadlineBody::new(trickle, Duration::from_millis(5500));
        let started = tokio::time::Instant::now();
        let err = body.collect().await.expect_err("the body must fail");
        assert_eq!(started.elapsed(), Duration::from_millis(5500), "{err}");
    }
}
