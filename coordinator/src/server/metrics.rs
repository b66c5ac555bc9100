//! `caduceus serve --metrics ADDR`: the coordinator's `GET /metrics`, on a
//! listener of its own, behind the same tokens as the gRPC services (a client
//! or admin token; see `crate::auth`).

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use caduceus_metrics::Exposition;

use crate::Coordinator;
use crate::auth::Authenticator;

struct Endpoint {
    coordinator: Arc<Coordinator>,
    auth: Authenticator,
}

#[async_trait::async_trait]
impl Exposition for Endpoint {
    fn authorize(&self, authorization: Option<&str>) -> Result<(), String> {
        self.auth
            .authorize(caduceus_metrics::METRICS_PATH, authorization, false)
            .map(|_| ())
            .map_err(|status| status.message().to_owned())
    }

    async fn render(&self) -> String {
        self.coordinator.metrics_text().await
    }
}

/// Serves the coordinator's metrics on `listener` until `shutdown`.
pub async fn serve_metrics(
    coordinator: Arc<Coordinator>,
    listener: TcpListener,
    shutdown: CancellationToken,
) {
    let auth = coordinator.authenticator();
    caduceus_metrics::serve(listener, Arc::new(Endpoint { coordinator, auth }), shutdown).await;
}
