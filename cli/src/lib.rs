//! `caduceus` — one binary: `serve`, `worker`, `call`, `tools`, `status`,
//! `run`, `sessions`, `approvals`, `tokens`, `workers`, `audit tail`,
//! `guard check`, `plugins list`. Results go to stdout; logs go to stderr. Every client
//! command takes `--json`: its result as one JSON document on stdout, and a
//! failure as `{"error": "..."}` there (exit status 1). The command logic
//! lives in this library so that the integration tests can build the same
//! program under another name (see `tests/README.md`).

mod agent_settings;
pub mod config;
pub mod file_server;
mod hardening;
mod listen;
mod mcp_client;
mod mcp_serve;
mod progress;
mod run;
mod sandbox_user;
mod sessions;
pub mod target;
pub mod token;

mod approvals;
mod audit;
mod cron;
mod plugins;
mod tokens;
mod workers;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use serde_json::{Value, json};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use caduceus_common::redact;
use caduceus_coordinator::CoordinatorConfig;
use caduceus_coordinator::call::ToolFilter;
use caduceus_coordinator::gate::{CommandGate, Gate};
use caduceus_coordinator::scheduler::Liveness;
use caduceus_coordinator::server::TlsFiles;
use caduceus_worker::backends::isolation::{Confinement, LocalIsolation};
use caduceus_worker::link::LinkOptions;
use caduceus_worker::tools::ToolSettings;
use caduceus_worker::{Worker, WorkerConfig};

use config::Config;
use target::{Remote, Target};

/// Where `serve` listens when neither `--listen` nor the config says.
const DEFAULT_LISTEN: &str = "127.0.0.1:7700";

#[derive(Parser)]
#[command(
    name = "caduceus",
    version,
    about = "Run the tools of AI agents across many hosts"
)]
struct Cli {
    /// Configuration file (default: $CADUCEUS_HOME/config.yaml or ~/.caduceus/config.yaml).
    #[arg(long, global = true, env = "CADUCEUS_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a coordinator: workers attach to it, clients call tools through it.
    Serve(ServeArgs),
    /// Attach this host as a worker to a coordinator.
    Worker(WorkerArgs),
    /// Call one tool and print the result exactly as a model would see it.
    Call(CallArgs),
    /// List the tools a model would see.
    Tools(ToolsArgs),
    /// Show the coordinator's workers and environments.
    Status(StatusArgs),
    /// Run one agent task: live progress on stderr, the final answer on stdout.
    Run(run::RunArgs),
    /// Recorded agent sessions: list, show one.
    Sessions {
        #[command(subcommand)]
        command: sessions::SessionsCommand,
    },
    /// Scheduled jobs (the `cronjob` tool's): list, show one, its runs.
    Cron {
        #[command(subcommand)]
        command: cron::CronCommand,
    },
    /// The command guard.
    Guard {
        #[command(subcommand)]
        command: GuardCommand,
    },
    /// Pending approvals of dangerous commands: list, approve, deny.
    Approvals {
        #[command(subcommand)]
        command: approvals::ApprovalsCommand,
    },
    /// MCP: `mcp serve` offers the fleet's tools to any MCP client; `mcp list` and
    /// `mcp test NAME` show the MCP servers whose tools the coordinator offers.
    Mcp {
        #[command(subcommand)]
        command: mcp_serve::McpCommand,
    },
    /// Scoped tokens (worker, client, admin) on a running coordinator: create, list, revoke.
    Tokens {
        #[command(subcommand)]
        command: tokens::TokensCommand,
    },
    /// The workers of a running coordinator: list, cordon, uncordon, drain.
    Workers {
        #[command(subcommand)]
        command: workers::WorkersCommand,
    },
    /// The audit log of this host's coordinator: tool calls, approvals, token use.
    Audit {
        #[command(subcommand)]
        command: audit::AuditCommand,
    },
    /// Plugins in $CADUCEUS_HOME/plugins (and ./.caduceus/plugins when enabled).
    Plugins {
        #[command(subcommand)]
        command: plugins::PluginsCommand,
    },
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on (default: the config's `listen`, else 127.0.0.1:7700).
    #[arg(long)]
    listen: Option<String>,
    // The shared token: an admin token for workers, clients and operators
    // (`caduceus tokens create` makes scoped ones).
    #[command(flatten)]
    token: token::TokenArgs,
    /// TLS certificate (PEM); TLS is on when both --tls-cert and --tls-key are given.
    #[arg(long)]
    tls_cert: Option<PathBuf>,
    #[arg(long)]
    tls_key: Option<PathBuf>,
    /// CA certificate (PEM): workers must present a client certificate it
    /// signed to attach (mutual TLS; clients need none).
    #[arg(long)]
    tls_client_ca: Option<PathBuf>,
    /// Heartbeat interval workers are asked to keep, milliseconds.
    #[arg(long, default_value_t = 1000)]
    heartbeat_ms: u64,
    /// Silence after which a worker is `suspect` (no new placements),
    /// milliseconds (default: 1.5 heartbeat intervals).
    #[arg(long)]
    suspect_after_ms: Option<u64>,
    /// Silence after which a worker is lost (its calls are answered with an
    /// error, its tasks placed afresh), milliseconds (default: 3 intervals).
    #[arg(long)]
    lost_after_ms: Option<u64>,
    /// Threads of the coordinator's runtime; 0 = automatic (one thread on
    /// machines with up to 2 cores, else one per core). One thread answers
    /// calls fastest (no thread hand-offs, ~50 µs less per call, measured) and
    /// served 8 concurrent clients as fast as two threads on 2 cores; more
    /// threads help CPU-heavy coordinators on bigger hosts.
    #[arg(long, default_value_t = 0, env = "CADUCEUS_THREADS")]
    threads: usize,
    /// Serve Prometheus metrics (OpenMetrics text) on GET http://ADDR/metrics;
    /// a scrape needs a client or admin token (`authorization: Bearer …`).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
}

#[derive(Args)]
struct WorkerArgs {
    /// Coordinator address (http://host:port or https://host:port).
    #[arg(long, env = "CADUCEUS_COORDINATOR")]
    coordinator: Option<String>,
    #[command(flatten)]
    token: token::TokenArgs,
    /// Name of this worker, unique in the fleet (default: the host name).
    #[arg(long)]
    name: Option<String>,
    /// Backends to offer, comma-separated.
    #[arg(long, value_delimiter = ',')]
    backends: Option<Vec<String>>,
    /// Labels, comma-separated key=value pairs.
    #[arg(long, value_delimiter = ',')]
    labels: Vec<String>,
    /// Calls run at once before the scheduler prefers other workers.
    #[arg(long)]
    capacity: Option<u32>,
    /// Environments (tasks) this worker holds at most; a full worker gets
    /// no new task (default: 16 per core, `worker.max_envs`).
    #[arg(long, value_name = "N")]
    max_envs: Option<u32>,
    /// CA certificate (PEM) to trust for an https coordinator.
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for a coordinator that demands one of
    /// workers (`serve --tls-client-ca`); needs --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// When the worker runs as root: the user its local sandboxes run as
    /// (default: nobody).
    #[arg(long)]
    run_as: Option<String>,
    /// Let a root worker run its local sandboxes as root, where their
    /// commands can read the worker's environment and memory.
    #[arg(long)]
    allow_root_sandbox: bool,
    /// Confinement of local environments: none, workspace or strict
    /// (default: `terminal.local_isolation`).
    #[arg(long)]
    local_isolation: Option<String>,
    /// Run the MCP servers the coordinator asks this worker to host
    /// (`mcp_servers.<name>.on: {labels}` matching this worker's labels):
    /// their commands run on this host as this worker's user, outside any
    /// sandbox, with `${VAR}` read from this worker's environment. Off by
    /// default (`worker.host_mcp`).
    #[arg(long)]
    host_mcp: bool,
    /// On SIGTERM or SIGINT: seconds running calls get to finish before they
    /// are cancelled (a second signal does not cut it short).
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, value_parser = grace_seconds)]
    shutdown_grace: f64,
    /// Serve this worker's Prometheus metrics on GET http://ADDR/metrics; a
    /// scrape presents the token this worker attaches with.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
}

fn grace_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && (0.0..=86_400.0).contains(&seconds) => Ok(seconds),
        _ => Err(format!(
            "'{text}' is not a number of seconds between 0 and 86400"
        )),
    }
}

#[derive(Args, Clone)]
struct ClientArgs {
    /// Coordinator address; without it an embedded coordinator and local worker are started.
    #[arg(long, env = "CADUCEUS_COORDINATOR")]
    coordinator: Option<String>,
    #[command(flatten)]
    token: token::TokenArgs,
    /// CA certificate (PEM) to trust for an https coordinator.
    #[arg(long)]
    tls_ca: Option<PathBuf>,
}

#[derive(Args)]
struct CallArgs {
    /// Tool name.
    tool: String,
    /// Arguments as JSON (passed to the pipeline as given; malformed JSON gets the model's error).
    #[arg(default_value = "{}")]
    arguments: String,
    /// Task id: calls of one task share one environment.
    #[arg(long, default_value = "default")]
    task: String,
    /// Placement labels the task's environment needs, comma-separated
    /// key=value pairs: it goes only to a worker carrying all of them
    /// (default: `placement.labels`).
    #[arg(long, value_delimiter = ',')]
    labels: Vec<String>,
    /// Print `{"result": …, "worker": …, "status": …}` instead of the
    /// result text alone.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Args)]
struct ToolsArgs {
    /// Print the OpenAI function definitions as JSON.
    #[arg(long)]
    json: bool,
    /// Only these toolsets (comma-separated).
    #[arg(long, value_delimiter = ',')]
    toolsets: Vec<String>,
    /// Without these toolsets (comma-separated).
    #[arg(long, value_delimiter = ',')]
    disable: Vec<String>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Args)]
struct StatusArgs {
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand)]
enum GuardCommand {
    /// Print the guard's verdict on a command as JSON.
    Check {
        /// The command (quote it as one argument).
        command: String,
        /// Accepted for symmetry: the verdict is always JSON.
        #[arg(long)]
        json: bool,
    },
}

/// The `caduceus` program.
#[allow(clippy::print_stderr)] // the binary's edge: errors go to stderr
pub fn main() -> std::process::ExitCode {
    if let Some(code) = file_server::run_if_asked() {
        return code;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit());
    let quiet = !matches!(cli.command, Command::Serve(_) | Command::Worker(_));
    init_logging(if quiet { "warn" } else { "info" });
    if let Some(token) = hardening::token_on_command_line(&matches) {
        hardening::hide_token(&token);
    }
    // Arguments (and the variables clap reads) are parsed; no thread exists yet.
    let protection = hardening::protect_process();
    hardening::report(&protection);
    // A worker spends its time waiting on pipes and sockets (its commands run
    // as separate processes), so one thread serves it best: a tool call then
    // crosses no thread boundary inside the worker (measured: ~50 µs less per
    // call on 2 cores). A coordinator on a small host does the same (see
    // `serve --threads`); embedded fleets are multi-threaded.
    let small_host = std::thread::available_parallelism().map_or(1, |n| n.get()) <= 2;
    let threads = match &cli.command {
        Command::Worker(_) => 1,
        Command::Serve(args) if args.threads == 0 && small_host => 1,
        Command::Serve(args) => args.threads,
        _ => 0,
    };
    let built = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else if threads > 1 {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    };
    let runtime = match built {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let json = wants_json(&matches);
    match runtime.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            if json {
                // The same shape for every command's failure under --json.
                let _ = out(&json!({"error": format!("{err:#}")}).to_string());
            }
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Whether the (sub)command given was asked for `--json`.
fn wants_json(matches: &clap::ArgMatches) -> bool {
    let mut current = matches;
    loop {
        if current
            .try_get_one::<bool>("json")
            .ok()
            .flatten()
            .copied()
            .unwrap_or(false)
        {
            return true;
        }
        match current.subcommand() {
            Some((_, sub)) => current = sub,
            None => return false,
        }
    }
}

/// `k=v` pairs (`--labels`), trimmed; later pairs win.
pub(crate) fn parse_labels(pairs: &[String]) -> Result<BTreeMap<String, String>> {
    let mut labels = BTreeMap::new();
    for pair in pairs.iter().filter(|p| !p.trim().is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .filter(|(k, _)| !k.trim().is_empty())
            .ok_or_else(|| anyhow!("label '{pair}' is not key=value"))?;
        labels.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    Ok(labels)
}

/// Logs go to stderr: text, or with `CADUCEUS_LOG_FORMAT=json` one JSON
/// object a line (with the fields of the spans it happened in: a tool call's
/// `trace_id`). `CADUCEUS_LOG` filters (`info`, `debug`, …).
fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CADUCEUS_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(default))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    if json_logs(std::env::var("CADUCEUS_LOG_FORMAT").ok().as_deref()) {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Whether `CADUCEUS_LOG_FORMAT` asks for JSON lines (anything else: text).
fn json_logs(format: Option<&str>) -> bool {
    format.is_some_and(|f| f.trim().eq_ignore_ascii_case("json"))
}

/// Binds the `--metrics` listener and prints the line scripts wait for (the
/// address, which matters for port 0).
#[allow(clippy::print_stderr)] // the parseable line, as `serve` prints its own
async fn metrics_listener(address: &str, who: &str) -> Result<tokio::net::TcpListener> {
    let listener = listen::bind(address)
        .await
        .with_context(|| format!("cannot serve metrics on {address}"))?;
    let bound = listener.local_addr()?;
    if !bound.ip().is_loopback() {
        tracing::warn!(
            "serving metrics on {bound} over plain HTTP: the scrape's token crosses the network in plain text; listen on 127.0.0.1 or scrape over a tunnel"
        );
    }
    eprintln!("caduceus {who} metrics on http://{bound}/metrics");
    Ok(listener)
}

async fn run(cli: Cli) -> Result<()> {
    let config = Config::load(cli.config.as_deref())?;
    match cli.command {
        Command::Serve(args) => serve(args, &config).await,
        Command::Worker(args) => worker(args, &config).await,
        Command::Call(args) => call(args, &config).await,
        Command::Tools(args) => tools(args, &config).await,
        Command::Status(args) => status(args, &config).await,
        Command::Mcp { command } => mcp_serve::run(command, &config).await,
        Command::Run(args) => run::run(args, &config).await,
        Command::Guard {
            command: GuardCommand::Check { command, json: _ },
        } => {
            let verdict = caduceus_guard::check_command(&command);
            out(&verdict.to_json().to_string())
        }
        Command::Approvals { command } => approvals::run(command, &config).await,
        Command::Sessions { command } => sessions::run(command),
        Command::Cron { command } => cron::run(command),
        Command::Tokens { command } => tokens::run(command, &config).await,
        Command::Workers { command } => workers::run(command, &config).await,
        Command::Audit { command } => audit::run(command).await,
        Command::Plugins { command } => plugins::run(command, &config),
    }
}

/// Writes one line to stdout (results only; logs go to stderr).
fn out(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}")?;
    stdout.flush()?;
    Ok(())
}

/// The command guard with the configured approvals.
fn gate(config: &Config) -> Arc<dyn Gate> {
    Arc::new(CommandGate::new(config.approval_settings()))
}

fn remote(args: &ClientArgs, config: &Config) -> Result<Remote> {
    Remote::from_flags(
        args.coordinator.clone(),
        &args.token,
        args.tls_ca.clone(),
        config,
    )
}

#[allow(clippy::print_stderr)] // the listening line scripts wait for
async fn serve(args: ServeArgs, config: &Config) -> Result<()> {
    let token = args.token.resolve(config)?.ok_or_else(|| {
        anyhow!("serve needs a token: pass --token or --token-file, or set CADUCEUS_TOKEN or CADUCEUS_TOKEN_FILE (workers and clients must present it)")
    })?;
    let listen = args
        .listen
        .or_else(|| config.listen.clone())
        .unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    let tls = match (
        args.tls_cert.or_else(|| config.tls.cert.clone()),
        args.tls_key.or_else(|| config.tls.key.clone()),
    ) {
        (Some(cert), Some(key)) => Some(TlsFiles {
            cert,
            key,
            client_ca: args.tls_client_ca,
        }),
        (None, None) if args.tls_client_ca.is_some() => {
            bail!("--tls-client-ca needs TLS: pass --tls-cert and --tls-key too")
        }
        (None, None) => None,
        _ => bail!("TLS needs both --tls-cert and --tls-key"),
    };
    let mut liveness = Liveness::from_interval(Duration::from_millis(args.heartbeat_ms.max(100)));
    if let Some(ms) = args.suspect_after_ms {
        liveness.suspect_after = Duration::from_millis(ms);
    }
    if let Some(ms) = args.lost_after_ms {
        liveness.lost_after = Duration::from_millis(ms);
    }
    if liveness.suspect_after < liveness.heartbeat_interval
        || liveness.lost_after < liveness.suspect_after
    {
        bail!(
            "heartbeat settings must grow: --heartbeat-ms ({} ms) <= --suspect-after-ms ({} ms) <= --lost-after-ms ({} ms)",
            liveness.heartbeat_interval.as_millis(),
            liveness.suspect_after.as_millis(),
            liveness.lost_after.as_millis()
        );
    }
    let mut coordinator_config = coordinator_config(config, token)?;
    // A served coordinator's sessions outlive it: the next one resumes them.
    coordinator_config.agent.durable = true;
    let coordinator = plugins::start_coordinator(
        config,
        CoordinatorConfig {
            liveness,
            ..coordinator_config
        },
        gate(config),
    )
    .await?;
    let listener = listen::bind(&listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let address = listener.local_addr()?;
    for warning in serve_warnings(coordinator.token(), address, tls.is_some()) {
        tracing::warn!("{warning}");
    }
    tracing::info!(%address, id = %coordinator.id(), tls = tls.is_some(), "coordinator listening");
    // A parseable line for scripts that start the coordinator on port 0.
    eprintln!("caduceus coordinator listening on {address}");
    let resumed = coordinator.sessions().resume_orphans();
    if resumed > 0 {
        tracing::info!(
            sessions = resumed,
            "resuming sessions a restart interrupted once their workers are back"
        );
    }
    // Scheduled jobs run on served coordinators only (an embedded one lives
    // for one command); after the resumption, so a run's session is resumed once.
    coordinator.start_cron();
    let stop_metrics = CancellationToken::new();
    let _stop_metrics = stop_metrics.clone().drop_guard();
    if let Some(address) = &args.metrics {
        let listener = metrics_listener(address, "coordinator").await?;
        tokio::spawn(caduceus_coordinator::server::serve_metrics(
            coordinator.clone(),
            listener,
            stop_metrics.clone(),
        ));
    }
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    caduceus_coordinator::server::serve(coordinator.clone(), listener, tls, shutdown).await?;
    // What the sessions recorded is on disk before the process ends.
    coordinator.sessions().flush().await;
    coordinator.shutdown();
    Ok(())
}

/// Tokens shorter than this draw a warning from `serve`.
const MIN_TOKEN_CHARS: usize = 16;

/// What `serve` warns about before it listens: a guessable token, and
/// plain-text traffic on an address other hosts can reach.
fn serve_warnings(token: &str, address: std::net::SocketAddr, tls: bool) -> Vec<String> {
    let mut warnings = Vec::new();
    if token.chars().count() < MIN_TOKEN_CHARS {
        warnings.push(format!(
            "the token is shorter than {MIN_TOKEN_CHARS} characters and can be guessed; use a long random one (e.g. `openssl rand -hex 32`)"
        ));
    }
    if !tls && !address.ip().is_loopback() {
        warnings.push(format!(
            "listening on {address} without TLS: tokens and tool traffic cross the network in plain text; pass --tls-cert and --tls-key, or listen on 127.0.0.1"
        ));
    }
    warnings
}

/// Coordinator settings from the configuration (serve and embedded fleets).
/// Registers the secrets it holds (the token, the model's API key and extra
/// headers, the secret-named variables of its environment) with the output
/// redaction.
pub(crate) fn coordinator_config(config: &Config, token: String) -> Result<CoordinatorConfig> {
    let agent = agent_settings::agent_settings(config)?;
    redact::register_secret(&token);
    for secret in agent
        .llm
        .api_key
        .iter()
        .chain(agent.llm.extra_headers.values())
    {
        redact::register_secret(secret);
    }
    redact::register_scrubbed_env(caduceus_common::process_env::vars(), &[]);
    let audit = config
        .audit
        .config()
        .map(caduceus_coordinator::audit::AuditLog::open)
        .transpose()?;
    Ok(CoordinatorConfig {
        audit,
        placement: config.placement.config()?,
        worker_grants: crate::config::worker_grants(config.worker_grants.as_ref())?,
        backend_choice: config.placement.backend_choice.clone(),
        token,
        terminal_backend: config.terminal.backend.clone(),
        terminal_timeout_secs: config.terminal.timeout,
        max_foreground_timeout_secs: config.terminal.max_foreground_timeout,
        environment_settings: config.terminal.environment_settings(),
        code_timeout_secs: config.code_execution.timeout.max(1),
        code_max_tool_calls: config.code_execution.max_tool_calls,
        vision: agent_settings::vision_model(config, &agent.llm)?,
        agent,
        home: Some(crate::config::home_dir()),
        ..CoordinatorConfig::default()
    })
}

/// Worker settings from the configuration. The variables withheld from
/// sandboxes (and the sudo password among them) are registered with the
/// output redaction.
pub(crate) fn worker_config(
    config: &Config,
    name: String,
    backends: Vec<String>,
    mut labels: HashMap<String, String>,
    capacity: Option<u32>,
    max_environments: Option<u32>,
) -> Result<WorkerConfig> {
    let mut backend_options = backend_options(config);
    if backends.iter().any(|b| b == "local") {
        backend_options.local_user = sandbox_user::local_sandbox_user(
            config.worker.run_as.as_deref(),
            config.worker.allow_root_sandbox,
        )?;
        match &backend_options.local_user {
            Some(user) => {
                tracing::info!(user = %user.name, uid = user.uid, home = %user.home, "local sandboxes run as another user")
            }
            None if nix::unistd::Uid::effective().is_root() => tracing::warn!(
                "local sandboxes run as root (--allow-root-sandbox): their commands can read this worker's environment and memory"
            ),
            None => {}
        }
        let mode: LocalIsolation = config.terminal.local_isolation.parse()?;
        // Probed here, once: a worker configured to confine never runs its
        // environments unconfined.
        if mode != LocalIsolation::None && backend_options.local_user.is_none() {
            // Root inside the namespaces could remount them writable again,
            // and a worker that is not root cannot make them.
            bail!(
                "terminal.local_isolation {} needs a root worker whose local sandboxes run as an unprivileged user (--run-as, without --allow-root-sandbox)",
                mode.as_str()
            );
        }
        backend_options.local_confinement = Confinement::probe(mode)?;
        // A confined worker says so in `status` (and for placement) with two
        // labels; an unconfined one leaves the operator's labels alone.
        if let Some(c) = &backend_options.local_confinement {
            labels.insert("local_isolation".to_owned(), c.mode.as_str().to_owned());
            labels.insert(
                "local_isolation_mechanism".to_owned(),
                c.mechanism().to_owned(),
            );
        }
    }
    // A sandbox user starts in its own home unless a cwd is configured.
    let local_cwd = config
        .terminal
        .cwd
        .clone()
        .or_else(|| backend_options.local_user.as_ref().map(|u| u.home.clone()))
        .or_else(|| {
            std::env::current_dir()
                .ok()
                .map(|p| p.display().to_string())
        })
        .unwrap_or_else(|| "/".to_owned());
    let shell_env = caduceus_common::env_hygiene::sanitized_env(
        caduceus_common::process_env::vars().into_iter(),
        &config.terminal.env_passthrough,
    );
    // The secret variables were withheld from our own environment at start;
    // their values are still known, and masked wherever they appear.
    redact::register_scrubbed_env(
        caduceus_common::process_env::vars(),
        &config.terminal.env_passthrough,
    );
    Ok(WorkerConfig {
        name,
        labels,
        backends,
        capacity: capacity.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get() as u32 * 8)
                .unwrap_or(16)
        }),
        max_environments: max_environments.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get() as u32 * ENVIRONMENTS_PER_CORE)
                .unwrap_or(ENVIRONMENTS_PER_CORE)
        }),
        local_cwd,
        backend_options,
        tools: ToolSettings {
            max_output_chars: config.tool_output.max_bytes,
            files: caduceus_files::FileToolsConfig {
                write_safe_root: std::env::var("CADUCEUS_WRITE_SAFE_ROOT")
                    .ok()
                    .filter(|s| !s.is_empty()),
                caduceus_home: Some(config::home_dir().display().to_string()),
                ..caduceus_files::FileToolsConfig::default()
            },
            // hermes' web tools read `security.allow_private_urls` only.
            web: caduceus_worker::tools::web::WebSettings {
                allow_private_urls: config.security.allow_private_urls,
                extract_char_limit: config
                    .web
                    .extract_char_limit
                    .unwrap_or(caduceus_worker::tools::web::DEFAULT_CHAR_LIMIT),
            },
            speech: caduceus_worker::tools::speech::SpeechSettings::default(),
        },
        shell_env,
        shell_init: Vec::new(),
        login_shell: config.terminal.login_shell,
        shell_init_files: shell_init_files(&config.terminal),
        // The terminal hands it to sudo itself; it never enters a sandbox's
        // environment (env_hygiene drops it).
        sudo_password: caduceus_common::process_env::var("SUDO_PASSWORD")
            .map(caduceus_worker::shell::Secret::new),
        env_lifetime: Duration::from_secs(config.terminal.lifetime_seconds),
        reap_interval: Duration::from_secs(config.terminal.reap_interval_seconds.max(1)),
        backend_probe_interval: Duration::from_secs(config.terminal.backend_probe_seconds.max(1)),
        browser: caduceus_worker::browser::BrowserSettings {
            inactivity_timeout: Duration::from_secs(config.browser.inactivity_timeout.max(1)),
            // hermes reads `browser.allow_private_urls`; its web tools read
            // `security.allow_private_urls`: either opens private addresses.
            allow_private_urls: config.browser.allow_private_urls
                || config.security.allow_private_urls,
            ..caduceus_worker::browser::BrowserSettings::default()
        },
        host_mcp: config.worker.host_mcp,
    })
}

/// A worker's default `--max-envs` per core: an idle environment is a shell
/// (or a container) waiting for its next command, so a core carries many.
const ENVIRONMENTS_PER_CORE: u32 = 16;

/// hermes' `_resolve_shell_init_files`: the explicit list, else the rc files
/// when `auto_source_bashrc` is on.
fn shell_init_files(terminal: &config::TerminalSection) -> Vec<String> {
    if !terminal.shell_init_files.is_empty() {
        terminal.shell_init_files.clone()
    } else if terminal.auto_source_bashrc {
        ["~/.profile", "~/.bash_profile", "~/.bashrc"]
            .map(str::to_owned)
            .to_vec()
    } else {
        Vec::new()
    }
}

/// Settings of the Docker, SSH and Singularity backends, leases and warm
/// pools from `terminal.*`.
fn backend_options(config: &Config) -> caduceus_worker::backends::BackendOptions {
    use caduceus_worker::backends::{singularity::SingularitySettings, ssh::SshSettings};
    let t = &config.terminal;
    let lease = Duration::from_secs(t.sandbox_lease_seconds.max(1));
    let ssh = t.ssh_host.as_ref().filter(|h| !h.is_empty()).map(|host| {
        let mut ssh = SshSettings::new(host.clone());
        ssh.user = t.ssh_user.clone().filter(|u| !u.is_empty());
        ssh.port = t.ssh_port;
        ssh.key = t
            .ssh_key
            .as_ref()
            .filter(|k| !k.is_empty())
            .map(PathBuf::from);
        ssh.known_hosts = t
            .ssh_known_hosts
            .as_ref()
            .filter(|k| !k.is_empty())
            .map(PathBuf::from);
        ssh.connect_timeout = Duration::from_secs(t.ssh_connect_timeout.max(1));
        if let Some(dir) = t.ssh_control_dir.as_ref().filter(|d| !d.is_empty()) {
            ssh.control_dir = PathBuf::from(dir);
        }
        ssh.cwd = t.cwd.clone();
        ssh.lease = lease;
        ssh
    });
    let mut singularity = SingularitySettings {
        executable: t
            .singularity_executable
            .as_ref()
            .filter(|e| !e.is_empty())
            .map(PathBuf::from),
        cpus: t.container_cpu,
        memory_mb: t.container_memory,
        persistent: t.container_persistent,
        binds: t.singularity_binds.clone(),
        lease,
        scratch_dir: match t.scratch_dir.as_ref().filter(|d| !d.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => config::home_dir().join("sandboxes/singularity"),
        },
        ..SingularitySettings::default()
    };
    if let Some(image) = t.singularity_image.as_ref().filter(|i| !i.is_empty()) {
        singularity.image = image.clone();
    }
    // Credentials from the withheld environment: the sandbox never sees them.
    let daytona = caduceus_worker::backends::daytona::DaytonaSettings::from_env(
        caduceus_common::process_env::var,
    )
    .map(|mut daytona| {
        daytona.snapshot = t.daytona_snapshot.clone().filter(|s| !s.is_empty());
        daytona.image = t.daytona_image.clone().filter(|s| !s.is_empty());
        daytona.cwd = t.cwd.clone();
        daytona.lease = lease;
        daytona.persistent = t.container_persistent;
        daytona.keep = Duration::from_secs(t.daytona_keep_seconds);
        daytona
    });
    let modal = caduceus_worker::backends::modal::ModalSettings::from_env(
        caduceus_common::process_env::var,
    )
    .map(|mut modal| {
        if let Some(image) = t.modal_image.clone().filter(|s| !s.is_empty()) {
            modal.image = image;
        }
        modal.cwd = t.cwd.clone();
        modal.lease = lease;
        modal.timeout = Duration::from_secs(t.modal_timeout_seconds.max(1));
        modal
    });
    caduceus_worker::backends::BackendOptions {
        ssh,
        daytona,
        modal,
        singularity,
        docker: t.docker_settings(),
        lease: t.lease_policy(),
        warm_pools: t.warm_pools().unwrap_or_else(|err| {
            tracing::warn!("{err:#}; no warm pools");
            Vec::new()
        }),
        local_user: None,
        local_confinement: None,
        file_server: file_server::program(),
        worker: String::new(),
        worker_instance: String::new(),
        // `Worker::new` decides (it knows whether it has Chromium).
        host_processes: false,
    }
}

async fn worker(args: WorkerArgs, config: &Config) -> Result<()> {
    let mut config = config.clone();
    if args.run_as.is_some() {
        config.worker.run_as = args.run_as.clone();
    }
    config.worker.allow_root_sandbox |= args.allow_root_sandbox;
    config.worker.host_mcp |= args.host_mcp;
    if let Some(mode) = &args.local_isolation {
        config.terminal.local_isolation = mode.clone();
    }
    let config = &config;
    let url = args
        .coordinator
        .or_else(|| config.coordinator.clone())
        .ok_or_else(|| anyhow!("worker needs the coordinator's address: pass --coordinator or set CADUCEUS_COORDINATOR"))?;
    let token = args.token.resolve(config)?.ok_or_else(|| {
        anyhow!("worker needs the coordinator's token: pass --token or --token-file, or set CADUCEUS_TOKEN or CADUCEUS_TOKEN_FILE")
    })?;
    redact::register_secret(&token);
    let name = args
        .name
        .or_else(|| config.worker.name.clone())
        .unwrap_or_else(host_name);
    let backends = args
        .backends
        .or_else(|| config.worker.backends.clone())
        .unwrap_or_else(|| vec!["local".to_owned()]);
    let mut labels = config.worker.labels.clone();
    labels.extend(parse_labels(&args.labels)?);
    config.terminal.warm_pools()?;
    let worker = Worker::new(worker_config(
        config,
        name,
        backends,
        labels,
        args.capacity.or(config.worker.capacity),
        args.max_envs.or(config.worker.max_envs),
    )?);
    // Installed before anything else can take time: from here on SIGTERM
    // and SIGINT mean a graceful stop, never the default instant exit.
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let shutdown = CancellationToken::new();
    if let Some(address) = &args.metrics {
        let listener = metrics_listener(address, "worker").await?;
        tokio::spawn(caduceus_worker::metrics::serve_metrics(
            worker.clone(),
            listener,
            token.clone(),
            shutdown.clone(),
        ));
    }
    worker.start_housekeeping(shutdown.clone()).await;
    let stop = shutdown.clone();
    let stopping = worker.clone();
    let grace = Duration::from_secs_f64(args.shutdown_grace);
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        };
        tracing::info!(
            "{name}: stopping; running calls get {:.1}s to finish",
            grace.as_secs_f64()
        );
        // Later signals land in the streams kept here and change nothing.
        stopping.stop_gracefully(grace).await;
        stop.cancel();
        let _keep = (terminate, interrupt);
    });
    let options = LinkOptions {
        url,
        token,
        ca_cert: args.tls_ca.or_else(|| config.tls.ca.clone()),
        identity: args.tls_cert.zip(args.tls_key),
        connect_timeout: Duration::from_secs(10),
    };
    // Returns on a signal, or when the coordinator drained this worker.
    let outcome = caduceus_worker::link::run_grpc(worker.clone(), options, shutdown).await;
    worker.shutdown().await;
    tracing::info!("worker stopped; every environment ended");
    outcome.map_err(|e| anyhow!("{e}"))
}

fn host_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "worker".to_owned())
}

/// `caduceus call`'s exit status after Ctrl-C (128 + SIGINT, as shells report it).
const INTERRUPTED: i32 = 130;

/// How long an interrupted `call` waits for its coordinator to take the cancel.
const CANCEL_CONFIRM: Duration = Duration::from_secs(10);

/// One tool call. Whatever happens to the call itself, stdout gets one JSON
/// result: the tool's, or one saying the coordinator was lost or the call
/// was interrupted (Ctrl-C cancels it on the worker and exits 130; a second
/// Ctrl-C exits at once).
#[allow(clippy::print_stderr)] // the binary's edge
async fn call(args: CallArgs, config: &Config) -> Result<()> {
    let remote = remote(&args.client, config)?;
    // Registered before the call starts, so no Ctrl-C goes unseen.
    let mut interrupts = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("cannot watch for Ctrl-C")?;
    let labels = parse_labels(&args.labels)?;
    let mut target = Target::open(&remote, config, gate(config), 1).await?;
    let reply = tokio::select! {
        reply = target.call(&args.tool, &args.arguments, &args.task, labels) => Some(reply),
        _ = interrupts.recv() => None,
    };
    let Some(reply) = reply else {
        // The call's future is gone: that cancels it (remote: its stream is
        // reset and the coordinator cancels it on the worker; embedded: the
        // worker is told directly). A second Ctrl-C does not wait for that.
        tokio::spawn(async move {
            interrupts.recv().await;
            eprintln!("interrupted again: exiting without waiting");
            std::process::exit(INTERRUPTED);
        });
        let message = match &remote.url {
            Some(url) if target.confirm_abandoned(CANCEL_CONFIRM).await => format!(
                "Interrupted (Ctrl-C): the call was cancelled; the coordinator at {url} stops its command on the worker."
            ),
            Some(url) => format!(
                "Interrupted (Ctrl-C): the call was abandoned, but the coordinator at {url} did not answer within {}s, so whether its command was stopped is unknown.",
                CANCEL_CONFIRM.as_secs()
            ),
            None => {
                "Interrupted (Ctrl-C): the call was cancelled and its command stopped.".to_owned()
            }
        };
        // Embedded: ends the worker's environments (and the stopped command's shell).
        target.close().await;
        out(&caduceus_common::result::tool_error(message))?;
        std::process::exit(INTERRUPTED);
    };
    target.close().await;
    match reply {
        Ok(reply) if args.json => out(&reply.to_json().to_string()),
        Ok(reply) => out(&reply.result),
        Err(err) => match err.downcast_ref::<target::ConnectionLost>() {
            Some(lost) => out(&caduceus_common::result::tool_error(format!(
                "The connection to the coordinator at {} was lost while this call was running ({}). The command was stopped: a worker stops a call when it loses its coordinator, and a coordinator stops a call when it loses its caller. What it did before that remains; check before repeating it.",
                remote.url.as_deref().unwrap_or("(embedded)"),
                lost.0
            ))),
            None => Err(err),
        },
    }
}

async fn tools(args: ToolsArgs, config: &Config) -> Result<()> {
    let mut target = Target::open(&remote(&args.client, config)?, config, gate(config), 1).await?;
    let filter = ToolFilter {
        enabled_toolsets: args.toolsets,
        disabled_toolsets: args.disable,
        blocked_tools: Vec::new(),
    };
    let definitions = target.definitions(filter).await;
    target.close().await;
    let definitions = definitions?;
    if args.json {
        return out(&serde_json::to_string_pretty(&definitions)?);
    }
    for def in &definitions {
        let function = &def["function"];
        let description = function["description"].as_str().unwrap_or_default();
        let first = description.lines().next().unwrap_or_default();
        out(&format!(
            "{:<16} {}",
            function["name"].as_str().unwrap_or_default(),
            first
        ))?;
    }
    Ok(())
}

async fn status(args: StatusArgs, config: &Config) -> Result<()> {
    let mut target = Target::open(&remote(&args.client, config)?, config, gate(config), 1).await?;
    let status = target.status().await;
    target.close().await;
    let status = status?;
    let workers: Vec<Value> = status.workers.iter().map(worker_json).collect();
    if args.json {
        return out(&serde_json::to_string_pretty(&json!({
            "coordinator": status.coordinator_id,
            "version": status.version,
            "registry_generation": status.registry_generation,
            "sessions": status.sessions.iter().map(|s| json!({
                "session_id": s.session_id,
                "parent_id": s.parent_id,
                "state": s.state,
                "api_calls": s.api_calls,
            })).collect::<Vec<_>>(),
            "workers": workers,
        }))?);
    }
    out(&format!(
        "coordinator {} (caduceus {})",
        status.coordinator_id, status.version
    ))?;
    if status.workers.is_empty() {
        return out("no workers attached");
    }
    for w in &status.workers {
        out(&worker_line(w))?;
        for e in &w.environments {
            out(&format!(
                "    task {:<20} {} cwd={} idle={}s",
                e.task_id,
                e.backend,
                e.cwd,
                e.idle_ms / 1000
            ))?;
        }
    }
    Ok(())
}

/// One worker as `status --json` and `workers … --json` print it.
pub(crate) fn worker_json(w: &caduceus_proto::WorkerStatus) -> Value {
    json!({
        "id": w.worker_id,
        "name": w.name,
        "version": w.version,
        "state": w.state,
        "backends": w.backends,
        "labels": w.labels,
        "capacity": w.capacity,
        "running_calls": w.running_calls,
        "max_environments": w.max_environments,
        "placed_environments": w.placed_environments,
        "peer": w.peer,
        "attached_seconds": w.attached_ms / 1000,
        "last_heartbeat_ms": w.last_heartbeat_ms,
        "environments": w.environments.iter().map(|e| json!({
            "task_id": e.task_id,
            "backend": e.backend,
            "sandbox": e.sandbox_id,
            "cwd": e.cwd,
            "running_calls": e.running_calls,
            "background_processes": e.background_processes,
            "idle_seconds": e.idle_ms / 1000,
        })).collect::<Vec<_>>(),
    })
}

/// One worker as `status` and `workers list` print it.
pub(crate) fn worker_line(w: &caduceus_proto::WorkerStatus) -> String {
    let mut labels: Vec<String> = w.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    let max = if w.max_environments == 0 {
        "-".to_owned()
    } else {
        w.max_environments.to_string()
    };
    format!(
        "{:<16} {:<9} backends={:<14} load={}/{} envs={}/{} labels={}",
        w.name,
        w.state,
        w.backends.join(","),
        w.running_calls,
        w.capacity,
        w.placed_environments,
        max,
        labels.join(",")
    )
}

#[cfg(test)]
#[path = "lib_tests.rs"]
mod tests;
