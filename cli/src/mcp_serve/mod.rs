//! `caduceus mcp serve`: the fleet as an MCP server, for any MCP client
//! (Claude Code, codex, goose, an IDE). On stdio by default; with `--listen`
//! over streamable HTTP, where every request needs the fleet's token as a
//! bearer token. See README "caduceus as an MCP server".
//!
//! It lives in the CLI rather than a crate of its own because it is a client
//! of the coordinator like `caduceus call` (cli/src/target.rs), and nothing
//! else links it; the MCP *client* side is the coordinator's business.

mod environments;
mod fleet;
mod handler;
mod tools;

use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use clap::{Args, Subcommand};
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use caduceus_common::redact;
use caduceus_proto::token_from_authorization;

use crate::config::Config;
use crate::target::Embedded;
use fleet::{Credential, Fleet, FleetError, RemoteFleet};
use handler::{Session, Shared};

/// The path MCP clients post to.
const MCP_PATH: &str = "/mcp";

#[derive(Subcommand)]
pub enum McpCommand {
    /// Serve the fleet's tools to an MCP client: on stdio, or over streamable HTTP with --listen.
    Serve(McpServeArgs),
    /// The MCP servers of `mcp_servers:` whose tools this host's coordinator offers.
    List {
        /// Print JSON (one array).
        #[arg(long)]
        json: bool,
    },
    /// Connect to one configured MCP server, list its tools and disconnect.
    Test {
        /// The server's name under `mcp_servers:`.
        name: String,
        /// Print JSON (one object).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
pub struct McpServeArgs {
    /// Serve streamable HTTP on this address (e.g. 127.0.0.1:7800) at /mcp instead of stdio;
    /// every request needs `Authorization: Bearer <token>`.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    #[command(flatten)]
    client: crate::ClientArgs,
}

pub async fn run(command: McpCommand, config: &Config) -> Result<()> {
    match command {
        McpCommand::Serve(args) => serve(args, config).await,
        McpCommand::List { json } => crate::mcp_client::list(config, json),
        McpCommand::Test { name, json } => crate::mcp_client::test(config, &name, json).await,
    }
}

async fn serve(args: McpServeArgs, config: &Config) -> Result<()> {
    let remote = crate::remote(&args.client, config)?;
    // The token HTTP clients must present to an embedded fleet; a remote
    // coordinator checks its own tokens.
    let own_token = match &remote.url {
        Some(_) => remote.token.clone(),
        None => args.client.token.resolve(config)?,
    };
    if let Some(token) = &own_token {
        redact::register_secret(token);
    }
    let fleet = match &remote.url {
        Some(url) => {
            let fleet = RemoteFleet::new(url.clone(), remote.ca.clone());
            if let Some(token) = &own_token {
                // Fails early on a wrong address or token, before a client
                // waits on a server that cannot serve it.
                Fleet::Remote(fleet)
                    .admit_checked(token)
                    .await
                    .with_context(|| format!("the coordinator at {url} refused"))?
            } else if args.listen.is_none() {
                return Err(anyhow!(
                    "--coordinator needs a token: pass --token or --token-file, or set CADUCEUS_TOKEN or CADUCEUS_TOKEN_FILE"
                ));
            } else {
                Fleet::Remote(fleet)
            }
        }
        None => Fleet::Embedded(Embedded::start(config, crate::gate(config), 1).await?),
    };
    let fleet = Arc::new(fleet);
    let outcome = match args.listen {
        None => serve_stdio(fleet.clone(), Credential(own_token)).await,
        Some(listen) => serve_http(fleet.clone(), own_token, &listen).await,
    };
    if let Ok(fleet) = Arc::try_unwrap(fleet) {
        fleet.close().await;
    }
    outcome
}

impl Fleet {
    async fn admit_checked(self, token: &str) -> Result<Self, FleetError> {
        self.admit(token, Some(token)).await?;
        Ok(self)
    }
}

async fn serve_stdio(fleet: Arc<Fleet>, credential: Credential) -> Result<()> {
    let session = Session::new(Arc::new(Shared { fleet, credential }));
    let running = session
        .clone()
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow!("the MCP client did not initialise the session: {e}"))?;
    let ended = running.waiting().await;
    session.release_all().await;
    ended
        .map(|_| ())
        .map_err(|e| anyhow!("the MCP session failed: {e}"))
}

#[derive(Clone)]
struct Gatekeeper {
    fleet: Arc<Fleet>,
    expected: Option<Arc<str>>,
}

#[allow(clippy::print_stderr)] // the listening line scripts wait for
async fn serve_http(fleet: Arc<Fleet>, own_token: Option<String>, listen: &str) -> Result<()> {
    if matches!(*fleet, Fleet::Embedded(_)) && own_token.is_none() {
        return Err(anyhow!(
            "mcp serve --listen needs a token its clients must present: pass --token or --token-file, or set CADUCEUS_TOKEN or CADUCEUS_TOKEN_FILE"
        ));
    }
    let listener = crate::listen::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let address = listener.local_addr()?;
    let shutdown = CancellationToken::new();
    let shared = Arc::new(Shared {
        fleet: fleet.clone(),
        credential: Credential(None),
    });
    let mut settings =
        StreamableHttpServerConfig::default().with_cancellation_token(shutdown.child_token());
    if !address.ip().is_loopback() {
        // The Host check guards loopback servers against DNS rebinding; a
        // page rebound to this server cannot present the bearer token, and
        // a served address is reached under names this process cannot know.
        settings = settings.with_allowed_hosts(Vec::<String>::new());
    }
    let service = StreamableHttpService::new(
        move || Ok(Session::new(shared.clone())),
        Arc::new(LocalSessionManager::default()),
        settings,
    );
    let gatekeeper = Gatekeeper {
        fleet,
        expected: own_token.map(Arc::from),
    };
    let router = axum::Router::new()
        .nest_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn_with_state(gatekeeper, admit));
    if !address.ip().is_loopback() {
        tracing::warn!(
            "listening on {address} without TLS: tokens and tool traffic cross the network in plain text; listen on 127.0.0.1 (behind a TLS proxy) instead"
        );
    }
    eprintln!("caduceus mcp listening on http://{address}{MCP_PATH}");
    let stop = shutdown.clone();
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            let _ = tokio::signal::ctrl_c().await;
            stop.cancel();
        })
        .await
        .context("the MCP HTTP server failed")
}

/// Refuses a request without an admitted bearer token before rmcp sees it:
/// 401 for a missing or refused token, 403 for a token whose role may not
/// call tools (a worker token).
async fn admit(State(gate): State<Gatekeeper>, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(token_from_authorization)
        .map(str::to_owned);
    let Some(presented) = presented else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "missing token: every request needs `Authorization: Bearer <token>`",
        );
    };
    match gate.fleet.admit(&presented, gate.expected.as_deref()).await {
        Ok(()) => next.run(request).await,
        Err(FleetError::Unauthenticated(message)) => refuse(StatusCode::UNAUTHORIZED, &message),
        Err(FleetError::PermissionDenied(message)) => refuse(StatusCode::FORBIDDEN, &message),
        Err(FleetError::Unavailable(message)) => refuse(StatusCode::BAD_GATEWAY, &message),
    }
}

fn refuse(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({"error": message}).to_string();
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if status == StatusCode::UNAUTHORIZED {
        headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}
