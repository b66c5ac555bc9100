//! Approval state: pending requests, the answers waiting for a retry,
//! session grants and the permanent allowlist.
//!
//! Two ways a request is answered:
//!
//! * **A person is attached** (a session whose client listens, see
//!   [`Approvals::attach_listener`]): the call waits, up to
//!   `approvals.timeout`, while the request travels to the listener; the
//!   answer decides the call itself — it runs, or gets hermes' deny or
//!   timeout text.
//! * **Nobody is attached** (a plain `CallTool`, a session without an
//!   interactive client): the call returns `pending_approval` at once with
//!   the request's id — it fails closed, where hermes runs the command. The
//!   operator answers with `caduceus approvals approve|deny ID`; the answer
//!   is kept for the model's retry of *the same command* in the same
//!   session (or task, for calls without a session), which then runs (or
//!   gets the deny text). A request nobody answers within `approvals.timeout`
//!   expires; the next retry reads the timeout text.
//!
//! Scopes: `once` covers that one retry (or the waiting call); `session`
//! also lets every later command with the same approval key (the guard's
//! description, e.g. `recursive delete`) run in that session/task; `always`
//! does that and appends the key to `command_allowlist`, in memory and in the
//! configuration file, for every session from then on.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use caduceus_common::redact::{RedactMode, redact};

use super::allowlist_file::AllowlistFile;
use super::settings::{ApprovalMode, ApprovalSettings};
use super::texts;

/// How long an answer waits for the model's retry before it is forgotten.
pub const ANSWER_TTL: Duration = Duration::from_secs(3600);
/// Answers kept at most (the oldest are dropped first).
const MAX_ANSWERS: usize = 4096;

/// How far an approval reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// This command, once.
    Once,
    /// Every command with the same approval key, for the rest of the session
    /// (or task, for calls made without a session).
    Session,
    /// As `Session`, and the key is added to `command_allowlist` for good.
    Always,
}

impl Scope {
    /// `once` (also the empty string), `session`, `always`.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "once" | "o" => Ok(Scope::Once),
            "session" | "s" => Ok(Scope::Session),
            "always" | "a" => Ok(Scope::Always),
            other => Err(format!(
                "unknown approval scope '{other}' (expected once, session or always)"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Once => "once",
            Scope::Session => "session",
            Scope::Always => "always",
        }
    }
}

/// A person's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Approve(Scope),
    Deny { reason: Option<String> },
}

/// What a listener receives: one request to put to the person (the body of
/// an `approval_needed` event, see [`ApprovalRequest::to_json`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRequest {
    pub id: String,
    pub tool: String,
    /// The command with secrets masked (display only; the real one runs).
    pub command: String,
    pub description: String,
    pub pattern_key: String,
    pub task_id: String,
    pub session_id: Option<String>,
    /// How long the call waits for the answer.
    pub timeout: Duration,
    /// False when "always" would be downgraded to "session".
    pub allow_permanent: bool,
    /// An edit's unified diff (`approvals.edits: ask`); `None` for commands.
    pub diff: Option<String>,
}

impl ApprovalRequest {
    /// `{"approval_id", "tool", "command", "description", "pattern_key",
    /// "task_id", "session_id", "timeout_ms", "allow_permanent", "scopes"}`,
    /// and `"kind": "edit"` with the `"diff"` for an edit.
    pub fn to_json(&self) -> Value {
        let mut scopes = vec!["once", "session"];
        if self.allow_permanent {
            scopes.push("always");
        }
        let mut value = json!({
            "approval_id": self.id,
            "tool": self.tool,
            "command": self.command,
            "description": self.description,
            "pattern_key": self.pattern_key,
            "task_id": self.task_id,
            "session_id": self.session_id,
            "timeout_ms": u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
            "allow_permanent": self.allow_permanent,
            "scopes": scopes,
        });
        if let (Some(diff), Some(object)) = (&self.diff, value.as_object_mut()) {
            object.insert("kind".to_owned(), json!("edit"));
            object.insert("diff".to_owned(), json!(diff));
        }
        value
    }
}

/// One unanswered request, as `caduceus approvals list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingApproval {
    pub id: String,
    pub tool: String,
    /// Secrets masked.
    pub command: String,
    pub description: String,
    pub pattern_key: String,
    pub task_id: String,
    pub session_id: Option<String>,
    pub age: Duration,
    pub expires_in: Duration,
    /// A call is blocked on this answer (a listener is attached), rather
    /// than waiting for the model's retry.
    pub waiting: bool,
    pub allow_permanent: bool,
    /// An edit's unified diff; `None` for commands.
    pub diff: Option<String>,
}

/// The outcome of [`Approvals::answer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    /// The decision as applied ("always" becomes "session" for keys that may
    /// not be permanent).
    pub decision: Decision,
    /// One line for the operator.
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error(
        "no pending approval '{0}' (it was already answered, it expired, or it never existed; `caduceus approvals list` shows the pending ones)"
    )]
    NotFound(String),
}

/// What the gate does with a call that needs approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ruling {
    /// Run it; the note goes into the result.
    Admit { note: Option<String> },
    /// Refuse it with this text (`status: blocked`).
    Refuse(String),
    /// Held: the `pending_approval` result.
    Pending {
        id: String,
        command: String,
        expires_in: Duration,
        allow_permanent: bool,
    },
}

/// A call that needs approval.
#[derive(Debug, Clone)]
pub(crate) struct Query<'a> {
    pub tool: &'a str,
    pub command: &'a str,
    pub description: &'a str,
    pub pattern_key: &'a str,
    pub task_id: &'a str,
    pub session_id: Option<&'a str>,
}

impl Query<'_> {
    fn scope_key(&self) -> String {
        scope_key(self.session_id, self.task_id)
    }
}

/// Session grants and answers belong to the session, or to the task when a
/// call has no session.
fn scope_key(session_id: Option<&str>, task_id: &str) -> String {
    match session_id.filter(|s| !s.is_empty()) {
        Some(session) => format!("session:{session}"),
        None => format!("task:{task_id}"),
    }
}

struct Pending {
    scope_key: String,
    tool: String,
    command: String,
    display_command: String,
    description: String,
    pattern_key: String,
    task_id: String,
    session_id: Option<String>,
    created: Instant,
    expires: Instant,
    allow_permanent: bool,
    diff: Option<String>,
    /// Set when a call waits for the answer.
    waiter: Option<oneshot::Sender<Decision>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Approved,
    Denied(Option<String>),
    TimedOut,
}

/// An answer (or an expiry) waiting for the model's retry.
struct Answer {
    scope_key: String,
    command: String,
    description: String,
    outcome: Outcome,
    until: Instant,
}

struct Listener {
    generation: u64,
    route: Route,
}

/// Where a session's requests go.
#[derive(Clone)]
enum Route {
    /// To a person, through a listener's channel.
    Person(mpsc::UnboundedSender<ApprovalRequest>),
    /// Answered at once, without asking anyone.
    Auto(AutoAnswer),
}

/// A standing answer for a session nobody watches, e.g. a delegated child
/// (hermes: `delegation.subagent_auto_approve` → approve once, else deny).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoAnswer {
    /// Each dangerous command runs (scope once; nothing is granted).
    ApproveOnce,
    /// Each dangerous command is refused.
    Deny,
}

#[derive(Default)]
struct State {
    pending: HashMap<String, Pending>,
    answers: Vec<Answer>,
    /// (scope key, approval key)
    grants: HashSet<(String, String)>,
    allowlist: Vec<String>,
    listeners: HashMap<String, Listener>,
    next_generation: u64,
}

/// All approval state of one coordinator. Share it behind an `Arc`.
pub struct Approvals {
    settings: ApprovalSettings,
    state: Mutex<State>,
    file: Option<AllowlistFile>,
    /// Serializes writes of the configuration file.
    file_lock: Mutex<()>,
    weak: Weak<Approvals>,
}

impl Approvals {
    pub fn new(settings: ApprovalSettings) -> Arc<Self> {
        let file = settings.allowlist_file.clone().map(AllowlistFile::new);
        let state = State {
            allowlist: settings.allowlist.clone(),
            ..State::default()
        };
        Arc::new_cyclic(|weak| Approvals {
            settings,
            state: Mutex::new(state),
            file,
            file_lock: Mutex::new(()),
            weak: weak.clone(),
        })
    }

    pub fn settings(&self) -> &ApprovalSettings {
        &self.settings
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The allowlist now: configured entries plus "always" answers.
    pub fn allowlist(&self) -> Vec<String> {
        self.lock().allowlist.clone()
    }

    /// Whether `command_allowlist` lets this command run: the command (or a
    /// glob) is listed, or its approval key is.
    pub fn allowlist_covers(&self, command: &str, pattern_key: &str) -> bool {
        covers(&self.lock().allowlist, command, pattern_key)
    }

    /// Requests for `session_id` go to the returned listener from now on (a
    /// later listener for the same session replaces this one). Dropping the
    /// listener detaches it; calls still waiting on its answers are refused
    /// with the "withdrawn" text.
    pub fn attach_listener(&self, session_id: &str) -> ApprovalListener {
        let (sender, receiver) = mpsc::unbounded_channel();
        let guard = self.register(session_id, Route::Person(sender));
        ApprovalListener { receiver, guard }
    }

    /// Answers every request of `session_id` at once with `answer`, until the
    /// guard is dropped (replacing any listener of that session meanwhile).
    pub fn auto_answer(&self, session_id: &str, answer: AutoAnswer) -> ListenerGuard {
        self.register(session_id, Route::Auto(answer))
    }

    fn register(&self, session_id: &str, route: Route) -> ListenerGuard {
        let mut state = self.lock();
        state.next_generation += 1;
        let generation = state.next_generation;
        state
            .listeners
            .insert(session_id.to_owned(), Listener { generation, route });
        ListenerGuard {
            approvals: self.weak.clone(),
            session_id: session_id.to_owned(),
            generation,
        }
    }

    fn detach(&self, session_id: &str, generation: u64) {
        let mut state = self.lock();
        if state
            .listeners
            .get(session_id)
            .is_some_and(|l| l.generation == generation)
        {
            state.listeners.remove(session_id);
            // Dropping the waiters' senders refuses their calls ("withdrawn").
            state.pending.retain(|_, p| {
                !(p.waiter.is_some() && p.session_id.as_deref() == Some(session_id))
            });
        }
    }

    /// Forgets a finished session's grants and unused answers.
    pub fn forget_session(&self, session_id: &str) {
        let key = scope_key(Some(session_id), "");
        let mut state = self.lock();
        state.grants.retain(|(scope, _)| *scope != key);
        state.answers.retain(|a| a.scope_key != key);
    }

    /// The unanswered requests, oldest first.
    pub fn list(&self) -> Vec<PendingApproval> {
        let now = Instant::now();
        let mut state = self.lock();
        expire(&mut state, now);
        let mut pending: Vec<PendingApproval> = state
            .pending
            .iter()
            .map(|(id, p)| PendingApproval {
                id: id.clone(),
                tool: p.tool.clone(),
                command: p.display_command.clone(),
                description: p.description.clone(),
                pattern_key: p.pattern_key.clone(),
                task_id: p.task_id.clone(),
                session_id: p.session_id.clone(),
                age: now.saturating_duration_since(p.created),
                expires_in: p.expires.saturating_duration_since(now),
                waiting: p.waiter.is_some(),
                allow_permanent: p.allow_permanent,
                diff: p.diff.clone(),
            })
            .collect();
        pending.sort_by(|a, b| b.age.cmp(&a.age).then_with(|| a.id.cmp(&b.id)));
        pending
    }

    /// Answers a pending request. "always" also appends the approval key to
    /// the configuration file's `command_allowlist`; when that write fails
    /// the approval still holds (in memory) and the message says so.
    pub fn answer(&self, id: &str, decision: Decision) -> Result<Answered, AnswerError> {
        let now = Instant::now();
        let (decision, entry, persist) = {
            let mut state = self.lock();
            expire(&mut state, now);
            let mut entry = state
                .pending
                .remove(id.trim())
                .ok_or_else(|| AnswerError::NotFound(id.trim().to_owned()))?;
            let decision = match decision {
                Decision::Approve(Scope::Always) if !entry.allow_permanent => {
                    Decision::Approve(Scope::Session)
                }
                other => other,
            };
            let mut persist = false;
            if let Decision::Approve(scope @ (Scope::Session | Scope::Always)) = decision {
                state
                    .grants
                    .insert((entry.scope_key.clone(), entry.pattern_key.clone()));
                if scope == Scope::Always && !state.allowlist.contains(&entry.pattern_key) {
                    state.allowlist.push(entry.pattern_key.clone());
                    persist = true;
                }
            }
            let delivered = match entry.waiter.take() {
                Some(waiter) => waiter.send(decision.clone()).is_ok(),
                None => false,
            };
            if !delivered {
                // Kept for the model's retry of the same command.
                let outcome = match &decision {
                    Decision::Approve(_) => Outcome::Approved,
                    Decision::Deny { reason } => Outcome::Denied(reason.clone()),
                };
                push_answer(
                    &mut state,
                    Answer {
                        scope_key: entry.scope_key.clone(),
                        command: entry.command.clone(),
                        description: entry.description.clone(),
                        outcome,
                        until: now + ANSWER_TTL,
                    },
                );
            }
            (decision, entry, persist)
        };

        let mut message = match &decision {
            Decision::Approve(scope) => {
                let reach = match scope {
                    Scope::Once => "this command, once".to_owned(),
                    Scope::Session => format!(
                        "every '{}' command of {} from now on",
                        entry.pattern_key,
                        describe_scope(&entry)
                    ),
                    Scope::Always => format!(
                        "every '{}' command, in every session, from now on (command_allowlist)",
                        entry.pattern_key
                    ),
                };
                format!(
                    "approved {id} ({}): `{}` — covers {reach}",
                    entry.description, entry.display_command
                )
            }
            Decision::Deny { .. } => format!(
                "denied {id} ({}): `{}`",
                entry.description, entry.display_command
            ),
        };
        if persist && let Some(file) = &self.file {
            let _write = self.file_lock.lock().unwrap_or_else(|e| e.into_inner());
            match file.append(&entry.pattern_key) {
                Ok(_) => message.push_str(&format!(
                    "; '{}' added to command_allowlist in {}",
                    entry.pattern_key,
                    file.path().display()
                )),
                Err(err) => {
                    tracing::warn!(%err, "could not save the command allowlist");
                    message.push_str(&format!(
                        "; WARNING: could not save command_allowlist ({err}); the approval lasts until the coordinator restarts"
                    ));
                }
            }
        } else if persist {
            message.push_str("; no configuration file is known, so command_allowlist is kept in memory until the coordinator restarts");
        }
        Ok(Answered { decision, message })
    }

    /// Decides a call that needs approval (the gate has already applied the
    /// hardline floor, `sudo -S`, deny rules, `mode: off` and the container
    /// relaxation): an answer kept for this command, a session grant, the
    /// allowlist, `mode: deny`, then a person.
    pub(crate) async fn request(&self, query: Query<'_>) -> Ruling {
        let now = Instant::now();
        let key = query.scope_key();
        let (id, receiver) = {
            let mut state = self.lock();
            expire(&mut state, now);

            // An answer to this very command, waiting for this retry.
            if let Some(at) = state
                .answers
                .iter()
                .position(|a| a.scope_key == key && a.command == query.command)
            {
                let answer = state.answers.remove(at);
                return match answer.outcome {
                    Outcome::Approved => Ruling::Admit {
                        note: Some(texts::approval_note(&answer.description)),
                    },
                    Outcome::Denied(reason) => {
                        Ruling::Refuse(texts::denied_for(query.tool, reason.as_deref()))
                    }
                    Outcome::TimedOut => Ruling::Refuse(texts::timed_out_for(query.tool)),
                };
            }
            if state
                .grants
                .contains(&(key.clone(), query.pattern_key.to_owned()))
            {
                return Ruling::Admit { note: None };
            }
            if covers(&state.allowlist, query.command, query.pattern_key) {
                return Ruling::Admit { note: None };
            }
            if self.settings.mode == ApprovalMode::Deny {
                return Ruling::Refuse(texts::mode_deny_for(query.tool, query.description));
            }

            let listener = match query.session_id.and_then(|s| state.listeners.get(s)) {
                Some(Listener {
                    route: Route::Auto(answer),
                    ..
                }) => {
                    tracing::warn!(
                        description = query.description,
                        ?answer,
                        "dangerous command answered automatically"
                    );
                    return match answer {
                        AutoAnswer::ApproveOnce => Ruling::Admit {
                            note: Some(texts::auto_approval_note(query.description)),
                        },
                        AutoAnswer::Deny => {
                            Ruling::Refuse(texts::auto_denied_for(query.tool, query.description))
                        }
                    };
                }
                Some(Listener {
                    route: Route::Person(sender),
                    ..
                }) if !sender.is_closed() => Some(sender.clone()),
                _ => None,
            };
            let display_command = redact(query.command, RedactMode::General).into_owned();

            let Some(listener) = listener else {
                return self.hold(&mut state, &query, &key, &display_command, now);
            };

            let id = new_id();
            let (sender, receiver) = oneshot::channel();
            let request = ApprovalRequest {
                id: id.clone(),
                tool: query.tool.to_owned(),
                command: display_command.clone(),
                description: query.description.to_owned(),
                pattern_key: query.pattern_key.to_owned(),
                task_id: query.task_id.to_owned(),
                session_id: query.session_id.map(str::to_owned),
                timeout: self.settings.timeout,
                allow_permanent: may_be_permanent(query.pattern_key),
                diff: None,
            };
            if listener.send(request).is_err() {
                // The listener went away between the check and the send.
                return self.hold(&mut state, &query, &key, &display_command, now);
            }
            state.pending.insert(
                id.clone(),
                self.pending_entry(&query, &key, &display_command, now, Some(sender)),
            );
            (id, receiver)
        };

        // Removes the request if this call is dropped while it waits.
        let _cleanup = WaitGuard {
            approvals: self,
            id: &id,
        };
        match tokio::time::timeout(self.settings.timeout, receiver).await {
            Ok(Ok(Decision::Approve(_))) => Ruling::Admit {
                note: Some(texts::approval_note(query.description)),
            },
            Ok(Ok(Decision::Deny { reason })) => {
                Ruling::Refuse(texts::denied_for(query.tool, reason.as_deref()))
            }
            Ok(Err(_)) => Ruling::Refuse(texts::withdrawn_for(query.tool)),
            Err(_) => {
                tracing::info!(%id, "approval timed out");
                Ruling::Refuse(texts::timed_out_for(query.tool))
            }
        }
    }

    /// Nobody can answer now: the call returns `pending_approval` and its
    /// request waits for an operator. A retry while the request is still
    /// open gets the same request back.
    fn hold(
        &self,
        state: &mut State,
        query: &Query<'_>,
        key: &str,
        display_command: &str,
        now: Instant,
    ) -> Ruling {
        if let Some((id, pending)) = state
            .pending
            .iter()
            .find(|(_, p)| p.waiter.is_none() && p.scope_key == key && p.command == query.command)
        {
            return pending_ruling(id.clone(), pending, now);
        }
        let id = new_id();
        let pending = self.pending_entry(query, key, display_command, now, None);
        let ruling = pending_ruling(id.clone(), &pending, now);
        state.pending.insert(id.clone(), pending);
        tracing::info!(%id, command = %display_command, description = query.description, "approval pending");
        ruling
    }

    fn pending_entry(
        &self,
        query: &Query<'_>,
        key: &str,
        display_command: &str,
        now: Instant,
        waiter: Option<oneshot::Sender<Decision>>,
    ) -> Pending {
        Pending {
            scope_key: key.to_owned(),
            tool: query.tool.to_owned(),
            command: query.command.to_owned(),
            display_command: display_command.to_owned(),
            description: query.description.to_owned(),
            pattern_key: query.pattern_key.to_owned(),
            task_id: query.task_id.to_owned(),
            session_id: query.session_id.map(str::to_owned),
            created: now,
            expires: now + self.settings.timeout,
            allow_permanent: may_be_permanent(query.pattern_key),
            diff: None,
            waiter,
        }
    }

    /// Decides an edit (`approvals.edits: ask`): a session grant for edits
    /// lets it apply; a standing answer decides at once; otherwise the call
    /// waits, up to `approvals.timeout`, for a person — the session's client
    /// when one listens, and `caduceus approvals approve|deny ID` in any
    /// case (an edit is never held for a retry: the diff the person saw is
    /// the one about to be applied).
    ///
    /// `Ok` carries the note for the result; `Err` the refusal the model reads.
    pub async fn request_edit(&self, query: EditQuery<'_>) -> Result<Option<String>, String> {
        let now = Instant::now();
        let key = scope_key(query.session_id, query.task_id);
        let files = query.files.join(", ");
        let command = format!("{} {files}", query.tool);
        let (id, receiver) = {
            let mut state = self.lock();
            expire(&mut state, now);
            if state.grants.contains(&(key.clone(), EDIT_KEY.to_owned())) {
                return Ok(None);
            }
            let listener = match query.session_id.and_then(|s| state.listeners.get(s)) {
                Some(Listener {
                    route: Route::Auto(answer),
                    ..
                }) => {
                    return match answer {
                        AutoAnswer::ApproveOnce => Ok(Some(texts::edit_approved(&files))),
                        AutoAnswer::Deny => Err(texts::edit_auto_denied()),
                    };
                }
                Some(Listener {
                    route: Route::Person(sender),
                    ..
                }) if !sender.is_closed() => Some(sender.clone()),
                _ => None,
            };
            let shown = redact(&command, RedactMode::General).into_owned();
            let diff = shown_diff(&redact(query.diff, RedactMode::General));
            let id = new_id();
            let (sender, receiver) = oneshot::channel();
            if let Some(listener) = listener {
                // A listener that went away meanwhile leaves the CLI to answer.
                let _ = listener.send(ApprovalRequest {
                    id: id.clone(),
                    tool: query.tool.to_owned(),
                    command: shown.clone(),
                    description: EDIT_KEY.to_owned(),
                    pattern_key: EDIT_KEY.to_owned(),
                    task_id: query.task_id.to_owned(),
                    session_id: query.session_id.map(str::to_owned),
                    timeout: self.settings.timeout,
                    allow_permanent: false,
                    diff: Some(diff.clone()),
                });
            }
            tracing::info!(%id, edit = %shown, "edit waits for approval");
            state.pending.insert(
                id.clone(),
                Pending {
                    scope_key: key,
                    tool: query.tool.to_owned(),
                    command: command.clone(),
                    display_command: shown,
                    description: EDIT_KEY.to_owned(),
                    pattern_key: EDIT_KEY.to_owned(),
                    task_id: query.task_id.to_owned(),
                    session_id: query.session_id.map(str::to_owned),
                    created: now,
                    expires: now + self.settings.timeout,
                    allow_permanent: false,
                    diff: Some(diff),
                    waiter: Some(sender),
                },
            );
            (id, receiver)
        };
        let _cleanup = WaitGuard {
            approvals: self,
            id: &id,
        };
        match tokio::time::timeout(self.settings.timeout, receiver).await {
            Ok(Ok(Decision::Approve(_))) => Ok(Some(texts::edit_approved(&files))),
            Ok(Ok(Decision::Deny { reason })) => Err(texts::edit_denied(reason.as_deref())),
            Ok(Err(_)) => Err(texts::edit_withdrawn()),
            Err(_) => {
                tracing::info!(%id, "edit approval timed out");
                Err(texts::edit_timed_out())
            }
        }
    }
}

/// The approval key of edits: approving one for the session lets every later
/// edit of that session (or task) apply without asking.
pub const EDIT_KEY: &str = "file edit";

/// Characters of an edit's diff a person is shown (a whole-file rewrite of a
/// large file would otherwise fill the event stream).
pub const SHOWN_DIFF_CHARS: usize = 64 * 1024;

fn shown_diff(diff: &str) -> String {
    let total = diff.chars().count();
    if total <= SHOWN_DIFF_CHARS {
        return diff.to_owned();
    }
    let mut shown: String = diff.chars().take(SHOWN_DIFF_CHARS).collect();
    shown.push_str(&format!(
        "\n[diff truncated: {} more characters]\n",
        total - SHOWN_DIFF_CHARS
    ));
    shown
}

/// An edit that needs approval, with the diff the worker previewed.
#[derive(Debug, Clone)]
pub struct EditQuery<'a> {
    pub tool: &'a str,
    /// The files it changes (absolute paths in the sandbox).
    pub files: &'a [String],
    pub diff: &'a str,
    pub task_id: &'a str,
    pub session_id: Option<&'a str>,
}

fn pending_ruling(id: String, pending: &Pending, now: Instant) -> Ruling {
    Ruling::Pending {
        id,
        command: pending.display_command.clone(),
        expires_in: pending.expires.saturating_duration_since(now),
        allow_permanent: pending.allow_permanent,
    }
}

fn covers(allowlist: &[String], command: &str, pattern_key: &str) -> bool {
    allowlist.iter().any(|entry| entry.trim() == pattern_key)
        || caduceus_guard::policy::allowlisted(command, allowlist)
}

/// hermes never makes scanner verdicts (`tirith:<rule>`) permanent.
fn may_be_permanent(pattern_key: &str) -> bool {
    !pattern_key.starts_with("tirith:") && pattern_key != EDIT_KEY
}

fn describe_scope(entry: &Pending) -> String {
    match &entry.session_id {
        Some(session) => format!("session {session}"),
        None => format!("task {}", entry.task_id),
    }
}

fn new_id() -> String {
    let hex = uuid::Uuid::new_v4().simple().to_string();
    format!("appr_{}", &hex[..12])
}

/// Turns requests nobody answered in time into timeout answers for the
/// retry, and forgets answers nobody came back for. Requests a call waits on
/// are left to that call's own timer.
fn expire(state: &mut State, now: Instant) {
    let expired: Vec<String> = state
        .pending
        .iter()
        .filter(|(_, p)| p.waiter.is_none() && p.expires <= now)
        .map(|(id, _)| id.clone())
        .collect();
    for id in expired {
        if let Some(p) = state.pending.remove(&id) {
            tracing::info!(%id, "approval expired unanswered");
            push_answer(
                state,
                Answer {
                    scope_key: p.scope_key,
                    command: p.command,
                    description: p.description,
                    outcome: Outcome::TimedOut,
                    until: now + ANSWER_TTL,
                },
            );
        }
    }
    state.answers.retain(|a| a.until > now);
}

fn push_answer(state: &mut State, answer: Answer) {
    // One answer per command and scope: the newest wins.
    state
        .answers
        .retain(|a| !(a.scope_key == answer.scope_key && a.command == answer.command));
    if state.answers.len() >= MAX_ANSWERS {
        state.answers.remove(0);
    }
    state.answers.push(answer);
}

struct WaitGuard<'a> {
    approvals: &'a Approvals,
    id: &'a str,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        self.approvals.lock().pending.remove(self.id);
    }
}

/// The receiving end of a session's approval requests.
pub struct ApprovalListener {
    receiver: mpsc::UnboundedReceiver<ApprovalRequest>,
    guard: ListenerGuard,
}

impl ApprovalListener {
    /// The next request; `None` once the approvals are gone.
    pub async fn recv(&mut self) -> Option<ApprovalRequest> {
        self.receiver.recv().await
    }

    pub fn session_id(&self) -> &str {
        &self.guard.session_id
    }
}

/// Keeps a listener registration alive; dropping it detaches.
pub struct ListenerGuard {
    approvals: Weak<Approvals>,
    session_id: String,
    generation: u64,
}

impl Drop for ListenerGuard {
    fn drop(&mut self) {
        if let Some(approvals) = self.approvals.upgrade() {
            approvals.detach(&self.session_id, self.generation);
        }
    }
}

#[cfg(test)]
#[path = "approvals_tests.rs"]
mod tests;
