//! The accept loop every HTTP listener of the binary runs (the S3 port,
//! the console's port): HTTP/1 with a header-read timeout, `TCP_NODELAY`
//! (small responses must not wait for Nagle and delayed ACKs), a
//! connection task per client, and a graceful stop.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

/// Serves every connection accepted on `listener` with `handle` (called
/// with each request and its peer) until `shutdown` resolves; then stops
/// accepting and gives open requests up to `grace` to finish. `what`
/// names the listener in logs.
pub async fn serve_connections<H, F>(
    listener: TcpListener,
    what: &'static str,
    handle: H,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<s3s::Body>> + Send + 'static,
{
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30));
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("{what}: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let handle = handle.clone();
        let service = hyper::service::service_fn(move |req| {
            let answer = handle(req, peer);
            async move { Ok::<_, Infallible>(answer.await) }
        });
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("{what}: connection from {peer} ended: {e}");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("{what}: requests did not finish within {grace:?}");
    }
}
