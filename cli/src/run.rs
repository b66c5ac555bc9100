//! `caduceus run "PROMPT"`: one agent session, with live progress and the
//! final answer (see `progress.rs` for what is shown).
//!
//! Without `--coordinator` it starts an embedded coordinator with two local
//! workers in this process (`--workers N` for another count), so delegated
//! subtasks run in parallel on different workers even on one machine. With
//! `--coordinator URL` the session runs on that coordinator and its workers;
//! `replay:FILE` then names a file on the coordinator's host.
//!
//! `--resume SESSION` reattaches to a recorded session instead of starting
//! one: its whole event stream (or the part after `--after SEQ`), then the
//! live events until it ends. A session whose coordinator died is resumed
//! first; Ctrl-C then only detaches (the session goes on).
//!
//! Ctrl-C cancels the session (its children and their running calls) and
//! waits for its final event; a second Ctrl-C exits at once. The exit status
//! is 0 when the session completed (or ended with a summary after its budget
//! ran out), 1 otherwise.

use std::io::{BufRead, IsTerminal};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;

use caduceus_coordinator::agent::StartRequest;
use caduceus_coordinator::gate::{Decision, Scope};
use caduceus_proto::{
    AnswerApprovalRequest, AnswerClarifyRequest, AttachSessionRequest, CancelSessionRequest,
    SessionEvent, StartSessionRequest,
};

use crate::ClientArgs;
use crate::config::Config;
use crate::progress::{Renderer, RootFinal};
use crate::target::Target;

#[derive(Args)]
pub(crate) struct RunArgs {
    /// What the agent should do.
    #[arg(required_unless_present = "resume")]
    prompt: Option<String>,
    /// Reattach to this recorded session (any session of its tree) instead
    /// of starting one: its events so far, then the live ones until it ends.
    #[arg(long, value_name = "SESSION", conflicts_with = "prompt")]
    resume: Option<String>,
    /// With --resume: only the events after this sequence number.
    #[arg(long, value_name = "SEQ", default_value_t = 0, requires = "resume")]
    after: u64,
    /// Model: a name served by the configured OpenAI-compatible endpoint, or
    /// `replay:FILE` to replay a recorded session (default: llm.model / CADUCEUS_MODEL).
    #[arg(long)]
    model: Option<String>,
    /// Only these toolsets (comma-separated).
    #[arg(long, value_delimiter = ',')]
    toolsets: Vec<String>,
    /// Without these toolsets (comma-separated).
    #[arg(long, value_delimiter = ',')]
    disable: Vec<String>,
    /// Print the session's events as JSON lines on stdout instead of progress.
    #[arg(long)]
    json: bool,
    /// Budget of model requests (default: agent.max_turns, 90).
    #[arg(long)]
    max_iterations: Option<u32>,
    /// Run in this task's environment (kept afterwards); default: a fresh one.
    #[arg(long)]
    task: Option<String>,
    /// Placement labels of the session's environment (and its children's),
    /// comma-separated key=value pairs (default: `placement.labels`).
    #[arg(long, value_delimiter = ',')]
    labels: Vec<String>,
    /// Embedded local workers (without --coordinator).
    #[arg(long, default_value_t = 2)]
    workers: usize,
    #[command(flatten)]
    client: ClientArgs,
}

enum Events {
    Remote(Box<tonic::Streaming<SessionEvent>>),
    Local(mpsc::UnboundedReceiver<SessionEvent>),
}

impl Events {
    async fn next(&mut self) -> Option<Result<SessionEvent>> {
        match self {
            Events::Remote(stream) => stream
                .next()
                .await
                .map(|r| r.map_err(|s| anyhow!("{}", s.message()))),
            Events::Local(rx) => rx.recv().await.map(Ok),
        }
    }
}

/// Sessions, on a remote or an embedded coordinator.
impl Target {
    async fn start_session(&mut self, request: StartSessionRequest) -> Result<Events> {
        match self {
            Target::Remote(client) => {
                let stream = client
                    .start_session(request)
                    .await
                    .map_err(|s| anyhow!("{}", s.message()))?
                    .into_inner();
                Ok(Events::Remote(Box::new(stream)))
            }
            Target::Embedded(embedded) => {
                let started = embedded
                    .coordinator
                    .sessions()
                    .start(StartRequest {
                        prompt: request.prompt,
                        model: request.model,
                        enabled_toolsets: request.enabled_toolsets,
                        disabled_toolsets: request.disabled_toolsets,
                        max_iterations: request.max_iterations,
                        task_id: request.task_id,
                        interactive: request.interactive,
                        caller: None,
                        labels: request.labels.into_iter().collect(),
                        session_id: String::new(),
                        workdir: None,
                    })
                    .await?;
                Ok(Events::Local(started.events))
            }
        }
    }

    async fn attach_session(&mut self, session_id: &str, after_seq: u64) -> Result<Events> {
        match self {
            Target::Remote(client) => {
                let stream = client
                    .attach_session(AttachSessionRequest {
                        session_id: session_id.to_owned(),
                        after_seq,
                    })
                    .await
                    .map_err(|s| anyhow!("{}", s.message()))?
                    .into_inner();
                Ok(Events::Remote(Box::new(stream)))
            }
            Target::Embedded(embedded) => Ok(Events::Local(
                embedded
                    .coordinator
                    .sessions()
                    .attach(session_id, after_seq)
                    .await?,
            )),
        }
    }

    async fn cancel_session(&mut self, session_id: &str) {
        match self {
            Target::Remote(client) => {
                let _ = client
                    .cancel_session(CancelSessionRequest {
                        session_id: session_id.to_owned(),
                    })
                    .await;
            }
            Target::Embedded(embedded) => {
                embedded.coordinator.sessions().cancel(session_id);
            }
        }
    }

    async fn answer_clarify(&mut self, session_id: &str, question_id: &str, answer: &str) -> bool {
        match self {
            Target::Remote(client) => client
                .answer_clarify(AnswerClarifyRequest {
                    session_id: session_id.to_owned(),
                    question_id: question_id.to_owned(),
                    answer: answer.to_owned(),
                })
                .await
                .map(|r| r.into_inner().accepted)
                .unwrap_or(false),
            Target::Embedded(embedded) => {
                embedded
                    .coordinator
                    .sessions()
                    .answer_clarify(session_id, question_id, answer)
                    .await
            }
        }
    }

    /// Answers an approval request the gate is waiting on.
    async fn answer_approval(&mut self, id: &str, decision: Decision) -> bool {
        match self {
            Target::Remote(client) => {
                let (approve, scope) = match decision {
                    Decision::Approve(scope) => (true, scope.as_str()),
                    Decision::Deny { .. } => (false, ""),
                };
                client
                    .answer_approval(AnswerApprovalRequest {
                        id: id.to_owned(),
                        approve,
                        scope: scope.to_owned(),
                        reason: String::new(),
                    })
                    .await
                    .map(|r| r.into_inner().accepted)
                    .unwrap_or(false)
            }
            Target::Embedded(embedded) => embedded
                .coordinator
                .approvals()
                .is_some_and(|approvals| approvals.answer(id, decision).is_ok()),
        }
    }
}

pub(crate) async fn run(args: RunArgs, config: &Config) -> Result<()> {
    let interactive =
        !args.json && std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let mut target = Target::open(
        &crate::remote(&args.client, config)?,
        config,
        crate::gate(config),
        args.workers.max(1),
    )
    .await?;
    if let Some(session) = &args.resume {
        let outcome = match target.attach_session(session, args.after).await {
            Ok(events) => follow(&mut target, events, args.json, false, false).await,
            Err(err) => Err(err),
        };
        target.close().await;
        return conclude(outcome?);
    }
    let request = StartSessionRequest {
        prompt: args.prompt.unwrap_or_default(),
        model: args.model.unwrap_or_default(),
        enabled_toolsets: args.toolsets,
        disabled_toolsets: args.disable,
        max_iterations: args.max_iterations.unwrap_or(0),
        task_id: args.task.unwrap_or_default(),
        interactive,
        labels: crate::parse_labels(&args.labels)?.into_iter().collect(),
    };
    let outcome = match target.start_session(request).await {
        Ok(events) => follow(&mut target, events, args.json, interactive, true).await,
        Err(err) => Err(err),
    };
    target.close().await;
    conclude(outcome?)
}

/// The exit status of `run`: success when the session completed.
fn conclude(ending: RootFinal) -> Result<()> {
    match ending.status.as_str() {
        "completed" | "max_iterations" => Ok(()),
        "interrupted" => bail!("the session was interrupted"),
        status => bail!(
            "the session ended {status}: {}",
            ending
                .error
                .or(ending.text)
                .unwrap_or_else(|| "no answer".to_owned())
        ),
    }
}

/// Shows the events until the root's final one. `owned`: this client started
/// the session, so Ctrl-C cancels it; otherwise Ctrl-C detaches.
async fn follow(
    target: &mut Target,
    mut events: Events,
    json: bool,
    interactive: bool,
    owned: bool,
) -> Result<RootFinal> {
    let mut renderer = Renderer::new(
        json,
        std::io::stderr().is_terminal(),
        Box::new(std::io::stdout()),
        Box::new(std::io::stderr()),
    );
    let mut ticker = tokio::time::interval(Duration::from_millis(100));
    let mut interrupts = 0;
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(event)) => {
                    if let Some(ending) = renderer.event(&event) {
                        return Ok(ending);
                    }
                    if interactive {
                        ask_and_answer(target, &event).await?;
                    }
                }
                Some(Err(err)) => return Err(err.context("the session's event stream failed")),
                None => bail!("the session's event stream ended before its final event"),
            },
            _ = ticker.tick() => renderer.tick(),
            _ = tokio::signal::ctrl_c() => {
                interrupts += 1;
                if interrupts > 1 || !owned {
                    bail!("interrupted");
                }
                if let Some(root) = renderer.root().map(str::to_owned) {
                    target.cancel_session(&root).await;
                }
            }
        }
    }
}

/// Puts a clarify question, or an approval request the gate waits on, to the
/// person at the terminal and sends the answer back. Other events ask nothing.
async fn ask_and_answer(target: &mut Target, event: &SessionEvent) -> Result<()> {
    if !matches!(event.kind.as_str(), "clarify" | "approval_needed") {
        return Ok(());
    }
    let asked: Value = serde_json::from_str(&event.json).unwrap_or_default();
    if event.kind == "clarify" {
        let answer = ask_clarify(&asked).await?;
        let question_id = asked["question_id"].as_str().unwrap_or_default();
        if !target
            .answer_clarify(&event.session_id, question_id, &answer)
            .await
        {
            tracing::warn!("the session no longer waits for this answer");
        }
    } else if asked.get("scopes").is_some() {
        // Only requests the gate waits on carry `scopes`; the others report a
        // pending approval (answered with `caduceus approvals`).
        let decision = ask_approval(&asked).await?;
        let id = asked["approval_id"].as_str().unwrap_or_default();
        if !target.answer_approval(id, decision).await {
            tracing::warn!("the approval was no longer pending");
        }
    }
    Ok(())
}

/// Asks the person at the terminal to approve a flagged command. Anything but
/// an explicit yes is a deny (hermes' Enter-means-once is a known complaint).
async fn ask_approval(asked: &Value) -> Result<Decision> {
    let permanent = asked["allow_permanent"].as_bool().unwrap_or(false);
    // An edit shows the diff it would apply above the question.
    let diff = match asked["diff"].as_str() {
        Some(diff) => format!("{}\n", diff.trim_end()),
        None => String::new(),
    };
    let line = read_answer(format!(
        "{diff}  approve {}? [o]nce, [s]ession{}, [d]eny (default deny): ",
        asked["command"].as_str().unwrap_or_default(),
        if permanent { ", [a]lways" } else { "" }
    ))
    .await?;
    // `Scope::parse` reads an empty answer as once; here it denies.
    let scope = Some(line.as_str())
        .filter(|l| !l.is_empty())
        .and_then(|l| Scope::parse(l).ok())
        .filter(|scope| *scope != Scope::Always || permanent);
    Ok(match scope {
        Some(scope) => Decision::Approve(scope),
        None => Decision::Deny { reason: None },
    })
}

/// Puts a clarify question to the person at the terminal: a choice's number
/// picks that choice, anything else is the answer itself.
async fn ask_clarify(asked: &Value) -> Result<String> {
    let choices: Vec<String> = asked["choices"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut prompt = String::new();
    for (index, choice) in choices.iter().enumerate() {
        prompt.push_str(&format!("  {}. {choice}\n", index + 1));
    }
    if !choices.is_empty() {
        prompt.push_str(&format!(
            "  {}. Other (type your answer)\n",
            choices.len() + 1
        ));
    }
    prompt.push_str("> ");
    let line = read_answer(prompt).await?;
    Ok(match line.parse::<usize>() {
        Ok(n) if n >= 1 && n <= choices.len() => choices[n - 1].clone(),
        _ => line,
    })
}

/// Shows `prompt` on stderr and reads one line from the terminal, trimmed
/// (on a blocking thread: reading stdin blocks).
async fn read_answer(prompt: String) -> Result<String> {
    let line = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
        let mut stderr = std::io::stderr();
        std::io::Write::write_all(&mut stderr, prompt.as_bytes())?;
        std::io::Write::flush(&mut stderr)?;
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        Ok(line)
    })
    .await
    .context("reading the answer failed")??;
    Ok(line.trim().to_owned())
}
