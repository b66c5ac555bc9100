//! The worker's link to its coordinator: attach (hello → welcome), heartbeat,
//! run calls concurrently, honour cancels, and reconnect with backoff when the
//! stream is lost, and deliver background-process notices (completion, watch
//! matches) as `WorkerEvent::Notice`. The connection logic is transport-agnostic
//! ([`serve_connection`]) so an embedded worker uses it over in-process
//! channels and a remote worker over gRPC ([`run_grpc`]).
//!
//! Heartbeats and the gRPC connection run on a thread of their own
//! ([`pulse`]), so tool work never delays them; a worker that finds itself
//! frozen past the coordinator's patience fences its connection.

mod pulse;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::metadata::MetadataValue;
use tonic::transport::Endpoint;
use tonic::{Code, Request, Status};

use caduceus_common::result::tool_error;
use caduceus_proto::worker_gateway_client::WorkerGatewayClient;
use caduceus_proto::{
    CallResult, EnvironmentReleased, WorkerCommand, WorkerEvent, bearer, worker_command,
    worker_event,
};

use crate::Worker;

/// How long a stopping worker waits for its queued events to be sent.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// Why a connection ended.
#[derive(Debug)]
pub enum Disconnect {
    /// The coordinator asked us to drain and every call finished.
    Drained,
    /// The stream broke or closed.
    Lost(String),
    /// We were asked to stop.
    Shutdown,
}

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("the coordinator refused this worker: {0}")]
    Refused(String),
    #[error("invalid coordinator address '{0}': {1}")]
    BadAddress(String, String),
    #[error("cannot read the CA certificate {0}: {1}")]
    CaFile(PathBuf, std::io::Error),
    #[error("cannot read the client certificate or key {0}: {1}")]
    IdentityFile(PathBuf, std::io::Error),
}

fn event(e: worker_event::Event) -> WorkerEvent {
    WorkerEvent { event: Some(e) }
}

/// Serves one attached connection until it ends. `commands` must start with
/// the coordinator's welcome (the caller has already sent the hello).
pub async fn serve_connection<S>(
    worker: Arc<Worker>,
    commands: S,
    events: mpsc::Sender<WorkerEvent>,
    shutdown: CancellationToken,
) -> Disconnect
where
    S: Stream<Item = Result<WorkerCommand, Status>> + Unpin,
{
    serve(worker, commands, events, shutdown, true).await
}

/// [`serve_connection`] for a worker in its coordinator's process (embedded
/// mode): a freeze (Ctrl-Z, SIGSTOP) stops both alike, so it is no loss and
/// does not fence the connection.
pub async fn serve_in_process<S>(
    worker: Arc<Worker>,
    commands: S,
    events: mpsc::Sender<WorkerEvent>,
    shutdown: CancellationToken,
) -> Disconnect
where
    S: Stream<Item = Result<WorkerCommand, Status>> + Unpin,
{
    serve(worker, commands, events, shutdown, false).await
}

async fn serve<S>(
    worker: Arc<Worker>,
    mut commands: S,
    events: mpsc::Sender<WorkerEvent>,
    shutdown: CancellationToken,
    fence_freezes: bool,
) -> Disconnect
where
    S: Stream<Item = Result<WorkerCommand, Status>> + Unpin,
{
    let welcome = tokio::select! {
        first = tokio::time::timeout(Duration::from_secs(15), commands.next()) => first,
        () = shutdown.cancelled() => return Disconnect::Shutdown,
    };
    let welcome = match welcome {
        Ok(Some(Ok(WorkerCommand {
            command: Some(worker_command::Command::Welcome(welcome)),
        }))) => {
            tracing::info!(worker = %worker.name(), coordinator = %welcome.coordinator_id, id = %welcome.worker_id, "attached");
            worker.metrics().set_attached(true);
            welcome
        }
        Ok(Some(Ok(_))) => {
            return Disconnect::Lost("the coordinator did not start with a welcome".to_owned());
        }
        Ok(Some(Err(status))) => return Disconnect::Lost(status.message().to_owned()),
        Ok(None) => return Disconnect::Lost("the coordinator closed the stream".to_owned()),
        Err(_) => return Disconnect::Lost("no welcome within 15s".to_owned()),
    };
    let heartbeat_every = Duration::from_millis(u64::from(welcome.heartbeat_interval_ms.max(100)));
    let lost_after = match welcome.lost_after_ms {
        0 => heartbeat_every * 3,
        ms => Duration::from_millis(u64::from(ms)),
    };
    // Stale environments go before any call is read: none of them answers
    // again. Ending them (processes, sandbox) happens in the background.
    for stale in &welcome.stale {
        if let Some(env) = worker
            .environments()
            .take_stale(&stale.task_id, stale.epoch)
        {
            tracing::info!(task = %stale.task_id, epoch = stale.epoch, "ending a stale environment: its task was placed elsewhere meanwhile");
            tokio::spawn(async move { env.end().await });
        }
    }
    let stop_pulse = shutdown.child_token();
    let _stop_pulse = stop_pulse.clone().drop_guard();
    let pulse = pulse::Pulse::start(
        worker.clone(),
        events.clone(),
        heartbeat_every,
        lost_after,
        stop_pulse,
    );
    // Drain completion is checked on this tick (heartbeats go out from the pulse).
    let mut heartbeat = tokio::time::interval(heartbeat_every);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reaper = tokio::time::interval(worker.reap_interval());
    reaper.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    reaper.tick().await;
    let in_flight = Arc::new(AtomicUsize::new(0));
    // Cancelled when this connection is lost: a call received on it that has
    // not started yet does not start.
    let lost = CancellationToken::new();
    let mut draining = false;
    // Background-process notices raised while no link was up wait in this
    // queue; this connection delivers them (one connection holds it at a time).
    let mut notices = worker.notices().lock().await;
    // A new link knows nothing of the hosted servers: tell it everything.
    worker.hosted().resend_all();

    let end = loop {
        tokio::select! {
            command = commands.next() => match command {
                Some(Ok(WorkerCommand { command: Some(command) })) => {
                    if let (true, worker_command::Command::Run(_), Some(frozen)) = (fence_freezes, &command, pulse.frozen_for()) {
                        break frozen_disconnect(frozen, lost_after);
                    }
                    if handle_command(&worker, command, &events, &in_flight, &lost) {
                        draining = true;
                        worker.set_draining();
                        let _ = events.try_send(event(worker_event::Event::Heartbeat(worker.heartbeat())));
                    }
                }
                Some(Ok(WorkerCommand { command: None })) => {}
                Some(Err(status)) => break Disconnect::Lost(format!("{}: {}", status.code(), status.message())),
                None => break Disconnect::Lost("the coordinator closed the stream".to_owned()),
            },
            () = worker.heartbeat_due() => {
                let _ = events.try_send(event(worker_event::Event::Heartbeat(worker.heartbeat())));
            }
            () = pulse.frozen(), if fence_freezes => {
                break frozen_disconnect(pulse.frozen_for().unwrap_or(lost_after), lost_after);
            }
            _ = heartbeat.tick() => {
                if draining && in_flight.load(Ordering::Relaxed) == 0 {
                    break Disconnect::Drained;
                }
            }
            () = worker.hosted().changed() => {
                for announcement in worker.hosted().take_pending() {
                    if events.send(event(worker_event::Event::Hosted(announcement))).await.is_err() {
                        break;
                    }
                }
            }
            Some(notice) = notices.recv() => {
                if events.send(event(worker_event::Event::Notice(notice))).await.is_err() {
                    break Disconnect::Lost("the event stream closed".to_owned());
                }
            }
            _ = reaper.tick() => {
                for task_id in worker.reap_idle().await {
                    let _ = events.try_send(event(worker_event::Event::Released(EnvironmentReleased { task_id, reason: "idle".to_owned() })));
                }
            }
            () = shutdown.cancelled() => break Disconnect::Shutdown,
        }
    };
    if matches!(end, Disconnect::Shutdown | Disconnect::Drained) {
        // The worker is stopping (a signal, or drained by the coordinator):
        // its environments end with it. Telling the coordinator now lets it
        // answer the tasks' next calls with a reset notice at once instead
        // of waiting to notice a lost stream.
        let reason = if matches!(end, Disconnect::Drained) {
            "drain"
        } else {
            "shutdown"
        };
        for info in worker.environments().infos() {
            let _ = events.try_send(event(worker_event::Event::Released(EnvironmentReleased {
                task_id: info.task_id,
                reason: reason.to_owned(),
            })));
        }
        // Give the stream a moment to carry what is queued (results of the
        // calls that just finished, the releases) before it is dropped.
        let flushed = tokio::time::Instant::now() + FLUSH_WAIT;
        while events.capacity() < events.max_capacity() && tokio::time::Instant::now() < flushed {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    worker.metrics().set_attached(false);
    if matches!(end, Disconnect::Lost(_)) {
        // The coordinator already answered these calls with an error; stop
        // them rather than let unobserved commands carry on.
        lost.cancel();
        worker.cancel_all();
    }
    end
}

/// The connection of a worker that was frozen longer than its coordinator
/// waits is over: the coordinator has answered its calls and may have placed
/// its tasks elsewhere. Nothing received on it runs.
fn frozen_disconnect(frozen: Duration, lost_after: Duration) -> Disconnect {
    let reason = format!(
        "this worker was frozen for {:.1}s, longer than the coordinator waits ({:.1}s); it has been declared lost, so nothing received meanwhile runs",
        frozen.as_secs_f64(),
        lost_after.as_secs_f64()
    );
    tracing::warn!("{reason}");
    Disconnect::Lost(reason)
}

/// Handles one command; returns true when it asks us to drain.
fn handle_command(
    worker: &Arc<Worker>,
    command: worker_command::Command,
    events: &mpsc::Sender<WorkerEvent>,
    in_flight: &Arc<AtomicUsize>,
    lost: &CancellationToken,
) -> bool {
    match command {
        worker_command::Command::Run(call) => {
            let worker = worker.clone();
            let events = events.clone();
            let in_flight = in_flight.clone();
            let lost = lost.clone();
            in_flight.fetch_add(1, Ordering::Relaxed);
            // Registered before the call's task starts: the coordinator may
            // answer the script's first call before this task is polled.
            let script = (call.tool == crate::tools::code::TOOL)
                .then(|| worker.open_script(&call.call_id, events.clone()));
            tokio::spawn(async move {
                let result = match worker.environments().fence(&call.task_id, call.epoch).await {
                    // Nobody waits for it any more (see `lost`); run_call
                    // registers its cancel token before its first await, so
                    // a later loss cancels it.
                    Ok(()) if lost.is_cancelled() => {
                        worker.close_script(&call.call_id);
                        in_flight.fetch_sub(1, Ordering::Relaxed);
                        return;
                    }
                    Ok(()) => worker.run_call(call, script).await,
                    Err(stale) => {
                        worker.close_script(&call.call_id);
                        CallResult {
                            call_id: call.call_id,
                            body: tool_error(stale.to_string()),
                            status: caduceus_proto::CallStatus::Error.into(),
                            ..CallResult::default()
                        }
                    }
                };
                let _ = events
                    .send(event(worker_event::Event::Result(result)))
                    .await;
                in_flight.fetch_sub(1, Ordering::Relaxed);
            });
            false
        }
        worker_command::Command::Persist(persist) => {
            let worker = worker.clone();
            let events = events.clone();
            let in_flight = in_flight.clone();
            in_flight.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let result = worker.persist_result(persist).await;
                let _ = events
                    .send(event(worker_event::Event::Result(result)))
                    .await;
                in_flight.fetch_sub(1, Ordering::Relaxed);
            });
            false
        }
        worker_command::Command::Cancel(cancel) => {
            if worker.cancel(&cancel.call_id) {
                tracing::debug!(call_id = %cancel.call_id, reason = %cancel.reason, "call cancelled");
            }
            false
        }
        worker_command::Command::Release(release) => {
            let worker = worker.clone();
            let events = events.clone();
            tokio::spawn(async move {
                if worker.environments().release(&release.task_id).await {
                    let _ = events
                        .send(event(worker_event::Event::Released(EnvironmentReleased {
                            task_id: release.task_id,
                            reason: "released".to_owned(),
                        })))
                        .await;
                }
            });
            false
        }
        worker_command::Command::ScriptResult(answer) => {
            worker.script_answer(answer);
            false
        }
        worker_command::Command::Host(providers) => {
            // Starting servers takes a while (each one's first connection
            // attempt); calls and heartbeats go on meanwhile.
            let worker = worker.clone();
            tokio::spawn(async move { worker.hosted().host(providers).await });
            false
        }
        worker_command::Command::Drain(_) => true,
        worker_command::Command::Welcome(_) => false,
    }
}

/// Where and how to reach the coordinator.
#[derive(Debug, Clone)]
pub struct LinkOptions {
    /// `http://host:port` or `https://host:port` (a bare `host:port` means http).
    pub url: String,
    pub token: String,
    /// CA certificate (PEM) to trust for https; public roots otherwise.
    pub ca_cert: Option<PathBuf>,
    /// Client certificate and key (PEM) for a coordinator that demands them
    /// of workers (mutual TLS, `serve --tls-client-ca`).
    pub identity: Option<(PathBuf, PathBuf)>,
    pub connect_timeout: Duration,
}

/// Keeps the worker attached: connects, serves, and reconnects with
/// exponential backoff (0.2 s doubling to 10 s, with jitter) until `shutdown`.
/// A refused token (wrong, revoked, expired, or of a role that may not
/// attach) ends it with an error: retrying would not help.
pub async fn run_grpc(
    worker: Arc<Worker>,
    options: LinkOptions,
    shutdown: CancellationToken,
) -> Result<(), LinkError> {
    let endpoint = endpoint_for(&options)?;
    let mut backoff = Duration::from_millis(200);
    loop {
        match connect_once(&worker, &endpoint, &options.token, &shutdown).await {
            Ok(Disconnect::Shutdown) | Ok(Disconnect::Drained) => return Ok(()),
            Ok(Disconnect::Lost(reason)) => {
                tracing::warn!(%reason, "lost the coordinator; reconnecting");
                backoff = Duration::from_millis(200);
            }
            // A wrong, revoked or expired token, or one whose role may not
            // attach (a client token): retrying would not help.
            Err(status)
                if matches!(
                    status.code(),
                    Code::Unauthenticated | Code::PermissionDenied
                ) =>
            {
                return Err(LinkError::Refused(status.message().to_owned()));
            }
            Err(status) if status.code() == Code::InvalidArgument => {
                return Err(LinkError::Refused(status.message().to_owned()));
            }
            Err(status) => {
                tracing::warn!(code = ?status.code(), message = %status.message(), "cannot attach; retrying in {:?}", backoff)
            }
        }
        let jitter =
            Duration::from_millis(u64::try_from(uuid::Uuid::new_v4().as_u128() % 100).unwrap_or(0));
        tokio::select! {
            () = tokio::time::sleep(backoff + jitter) => {}
            () = shutdown.cancelled() => return Ok(()),
        }
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

fn endpoint_for(options: &LinkOptions) -> Result<Endpoint, LinkError> {
    let identity = options
        .identity
        .as_ref()
        .map(|(cert, key)| (cert.as_path(), key.as_path()));
    caduceus_proto::coordinator_endpoint(
        &options.url,
        options.ca_cert.as_deref(),
        identity,
        options.connect_timeout,
    )
    .map_err(|err| match err {
        caduceus_proto::EndpointError::CaFile { path, source } => LinkError::CaFile(path, source),
        caduceus_proto::EndpointError::IdentityFile { path, source } => {
            LinkError::IdentityFile(path, source)
        }
        caduceus_proto::EndpointError::BadAddress { reason, .. } => {
            LinkError::BadAddress(options.url.clone(), reason)
        }
    })
}

/// One attach: Ok(why it ended) once attached, Err(status) when refused.
async fn connect_once(
    worker: &Arc<Worker>,
    endpoint: &Endpoint,
    token: &str,
    shutdown: &CancellationToken,
) -> Result<Disconnect, Status> {
    let auth: MetadataValue<_> = bearer(token)
        .parse()
        .map_err(|_| Status::invalid_argument("the token is not valid in a header"))?;
    let (events, outbound) = mpsc::channel(256);
    events
        .send(event(worker_event::Event::Hello(worker.hello())))
        .await
        .map_err(|_| Status::internal("event channel closed"))?;
    let endpoint = endpoint.clone();
    // Made on the link thread, the connection's I/O tasks run there too, so
    // heartbeats reach the socket however busy the main runtime is.
    let mut attach = pulse::spawn(async move {
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| Status::unavailable(format!("cannot connect: {e}")))?;
        let mut client =
            WorkerGatewayClient::with_interceptor(channel, move |mut request: Request<()>| {
                request
                    .metadata_mut()
                    .insert(caduceus_proto::AUTHORIZATION, auth.clone());
                Ok(request)
            })
            .max_decoding_message_size(caduceus_proto::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(caduceus_proto::MAX_MESSAGE_BYTES);
        let response = client.attach(ReceiverStream::new(outbound)).await?;
        Ok::<_, Status>((client, response.into_inner()))
    });
    let (_client, commands) = tokio::select! {
        joined = &mut attach => joined.map_err(|e| Status::internal(format!("the link thread failed: {e}")))??,
        () = shutdown.cancelled() => {
            attach.abort();
            return Ok(Disconnect::Shutdown);
        }
    };
    Ok(serve_connection(worker.clone(), commands, events, shutdown.clone()).await)
}

#[cfg(test)]
#[path = "link_tests.rs"]
mod tests;
