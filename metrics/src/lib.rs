//! The `/metrics` endpoint of `caduceus serve --metrics ADDR` and `caduceus
//! worker --metrics ADDR`: OpenMetrics text (which Prometheus scrapes) from
//! the process's [`prometheus_client`] registry, over plain HTTP/1.
//!
//! Nothing is served without a token: every scrape needs `authorization:
//! Bearer <token>`, checked by the process that owns the metrics
//! ([`Exposition::authorize`]). Only `GET /metrics` exists.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

mod families;

pub use families::{Described, ToolCalls, UNKNOWN_TOOL, gauge_value, set_counts};
pub use prometheus_client;

/// The content type of the OpenMetrics text format.
pub const CONTENT_TYPE_OPENMETRICS: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The one path served.
pub const METRICS_PATH: &str = "/metrics";

/// Bucket bounds (seconds) of the latency histograms: a coordinator's own
/// cost is tens of microseconds, a tool call anything up to the foreground
/// maximum (600 s).
pub const LATENCY_BUCKETS: [f64; 20] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0, 180.0, 600.0,
];

/// A histogram with [`LATENCY_BUCKETS`].
pub fn latency_histogram() -> prometheus_client::metrics::histogram::Histogram {
    prometheus_client::metrics::histogram::Histogram::new(LATENCY_BUCKETS)
}

/// What a process exposes.
#[async_trait::async_trait]
pub trait Exposition: Send + Sync + 'static {
    /// Whether a scrape with this `authorization` header value may read the
    /// metrics; the error is the text of the 401 answer.
    fn authorize(&self, authorization: Option<&str>) -> Result<(), String>;
    /// The exposition text, `# EOF` included.
    async fn render(&self) -> String;
}

/// A slow client gets this long to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `GET /metrics` on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    exposition: Arc<dyn Exposition>,
    shutdown: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(err) => {
                // Out of descriptors, most likely: wait instead of spinning.
                tracing::warn!(%err, "metrics endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let exposition = exposition.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let exposition = exposition.clone();
                async move { Ok::<_, Infallible>(answer(&*exposition, &request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                served = connection => {
                    if let Err(err) = served {
                        tracing::debug!(%err, "metrics endpoint: connection ended");
                    }
                }
                () = shutdown.cancelled() => {}
            }
        });
    }
}

/// The answer to one request.
pub async fn answer(
    exposition: &dyn Exposition,
    request: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    respond(
        exposition,
        request.method(),
        request.uri().path(),
        request
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    )
    .await
}

/// [`answer`] for the parts of a request it reads.
pub async fn respond(
    exposition: &dyn Exposition,
    method: &Method,
    path: &str,
    authorization: Option<&str>,
) -> Response<Full<Bytes>> {
    if path != METRICS_PATH {
        return plain(
            StatusCode::NOT_FOUND,
            "not found: the metrics are at GET /metrics\n",
        );
    }
    if method != Method::GET {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "only GET /metrics\n");
    }
    if let Err(reason) = exposition.authorize(authorization) {
        let mut response = plain(StatusCode::UNAUTHORIZED, &format!("{reason}\n"));
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    }
    let mut response = Response::new(Full::new(Bytes::from(exposition.render().await)));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(CONTENT_TYPE_OPENMETRICS),
    );
    response
}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text.to_owned())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Encodes `registry` as OpenMetrics text, `# EOF` included.
pub fn encode(registry: &prometheus_client::registry::Registry) -> String {
    let mut text = String::new();
    // Writing to a String cannot fail; an encoder error would be a bug in
    // a metric's encoding, and what was written is still worth serving.
    if let Err(err) = prometheus_client::encoding::text::encode(&mut text, registry) {
        tracing::warn!(%err, "metrics: encoding failed");
    }
    text
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
