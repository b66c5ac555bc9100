//! `execute_code`: a Python script run inside the task's environment, whose
//! `caduceus_tools` module (also importable as hermes' `hermes_tools`) calls
//! tools back through the coordinator's whole pipeline.
//!
//! The script runs under a small bootstrap (`bootstrap.py`, started as
//! `python3 -c` through [`Sandbox::spawn`](crate::sandbox::Sandbox::spawn), so
//! it works on every backend that has Python): the process's stdin and stdout
//! become the run's private channel, and the script's own stdout and stderr go
//! to files in a run directory inside the sandbox. A tool call is a frame line
//! on stdout carrying the run's token; the worker checks the token, forwards
//! the call to the coordinator (`ScriptToolCall`) and writes the answer back
//! on stdin. Nothing polls: the worker waits on the process's stream and on
//! the link.
//!
//! Limits follow hermes: the coordinator's timeout (300 s) ends the whole
//! session of the script; stdout is cut to 50,000 bytes (40 % head, 60 %
//! tail, the full text left in the sandbox) and stderr to 10,000; the call
//! limit (50) is counted by the coordinator, which owns it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use caduceus_common::env_hygiene::{HARMLESS_NAMES, SECRET_WORDS, is_secret_env_name};
use caduceus_common::redact::{RedactMode, redact};
use caduceus_common::result::{CallStatus, ToolReply, tool_error};
use caduceus_common::text::{group_thousands, strip_ansi};
use caduceus_proto::{ScriptToolCall, ScriptToolResult, WorkerEvent, worker_event};

use crate::env::Environment;
use crate::sandbox::{BoxedWriter, SandboxError, SpawnSpec, StopSignal};

pub const TOOL: &str = "execute_code";

const BOOTSTRAP: &str = include_str!("bootstrap.py");
const MODULE_HEADER: &str = include_str!("caduceus_tools.py");
/// What starts a frame line of the bootstrap or the module on stdout.
const FRAME: &[u8] = b"\x1ecaduceus-rpc ";
/// hermes `MAX_STDOUT_BYTES` / `MAX_STDERR_BYTES`.
const MAX_STDOUT_BYTES: u64 = 50_000;
const MAX_STDERR_BYTES: u64 = 10_000;
/// hermes `head_tail_split`: 40 % head, 60 % tail.
const STDOUT_HEAD_BYTES: u64 = MAX_STDOUT_BYTES * 2 / 5;
/// A frame longer than this is dropped unread (a script cannot make the
/// worker buffer without bound); the gRPC message limit is 64 MiB.
const MAX_FRAME_BYTES: usize = 32 << 20;
/// Used when the coordinator sent no timeout (hermes `DEFAULT_TIMEOUT`).
const DEFAULT_TIMEOUT: Duration =
    Duration::from_secs(caduceus_common::execute_code::DEFAULT_TIMEOUT_SECS);
/// How long the run's leftovers may take to go (reading its files, removing
/// its directory, the kill of its session).
const CLEANUP_WAIT: Duration = Duration::from_secs(15);

/// One stub of `caduceus_tools`: hermes' `_TOOL_STUBS` (signature,
/// docstring, the arguments sent).
struct Stub {
    name: &'static str,
    signature: &'static str,
    doc: &'static str,
    args: &'static str,
}

/// The stubs of `caduceus_common::execute_code::SANDBOX_TOOLS`, sorted by
/// name (hermes generates them so).
const STUBS: &[Stub] = &[
    Stub {
        name: "patch",
        signature: r#"path: str = None, old_string: str = None, new_string: str = None, replace_all: bool = False, mode: str = "replace", patch: str = None"#,
        doc: r#""""Targeted find-and-replace (mode="replace") or V4A multi-file patches (mode="patch"). Returns dict with status.""""#,
        args: r#"{"path": path, "old_string": old_string, "new_string": new_string, "replace_all": replace_all, "mode": mode, "patch": patch}"#,
    },
    Stub {
        name: "read_file",
        signature: "path: str, offset: int = 1, limit: int = 2000",
        doc: r#""""Read a file (1-indexed lines). Returns dict with "content" and "total_lines".""""#,
        args: r#"{"path": path, "offset": offset, "limit": limit}"#,
    },
    Stub {
        name: "search_files",
        signature: r#"pattern: str, target: str = "content", path: str = ".", file_glob: str = None, limit: int = 50, offset: int = 0, output_mode: str = "content", context: int = 0"#,
        doc: r#""""Search file contents (target="content") or find files by name (target="files"). Returns dict with "matches".""""#,
        args: r#"{"pattern": pattern, "target": target, "path": path, "file_glob": file_glob, "limit": limit, "offset": offset, "output_mode": output_mode, "context": context}"#,
    },
    Stub {
        name: "terminal",
        signature: "command: str, timeout: int = None, workdir: str = None",
        doc: r#""""Run a shell command (foreground only). Returns dict with "output" and "exit_code".""""#,
        args: r#"{"command": command, "timeout": timeout, "workdir": workdir}"#,
    },
    Stub {
        name: "web_extract",
        signature: "urls: list, char_limit: int = None",
        doc: r#""""Extract content from URLs (no LLM summarization). Returns dict with results list of {url, title, content, error}.""""#,
        args: r#"{"urls": urls, "char_limit": char_limit}"#,
    },
    Stub {
        name: "web_search",
        signature: "query: str, limit: int = 5",
        doc: r#""""Search the web. Returns dict with data.web list of {url, title, description}.""""#,
        args: r#"{"query": query, "limit": limit}"#,
    },
    Stub {
        name: "write_file",
        signature: "path: str, content: str",
        doc: r#""""Write content to a file (always overwrites). Returns dict with status.""""#,
        args: r#"{"path": path, "content": content}"#,
    },
];

/// The source of `caduceus_tools` offering `tools` (the others are left
/// out, so a script that imports one gets Python's own ImportError).
pub fn module_source(tools: &[String]) -> String {
    let mut source = MODULE_HEADER.to_owned();
    for stub in STUBS.iter().filter(|s| tools.iter().any(|t| t == s.name)) {
        source.push_str(&format!(
            "\ndef {}({}):\n    {}\n    return _call({:?}, {})\n",
            stub.name, stub.signature, stub.doc, stub.name, stub.args
        ));
    }
    source
}

/// The run's way to the coordinator: calls go up the worker's event
/// stream, answers come back routed by the link.
pub struct ScriptLink {
    pub upstream: mpsc::Sender<WorkerEvent>,
    pub answers: mpsc::UnboundedReceiver<ScriptToolResult>,
}

/// One `execute_code` call.
pub struct CodeCall<'a> {
    pub env: &'a Arc<Environment>,
    pub call_id: &'a str,
    pub args: &'a Map<String, Value>,
    /// The tools the module offers (`RunCall.script_tools`).
    pub tools: &'a [String],
    pub timeout: Option<Duration>,
    pub cancel: &'a CancellationToken,
    pub link: Option<ScriptLink>,
}

/// How the script's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Exited,
    Timeout,
    Interrupted,
}

/// Runs the script and returns hermes' result document.
pub async fn run(call: CodeCall<'_>) -> ToolReply {
    let started = Instant::now();
    let code = match script_of(call.args) {
        Ok(code) => code,
        Err(reply) => return reply,
    };
    let Some(link) = call.link else {
        return ToolReply::error(
            "execute_code needs the coordinator's link for its tool calls; this worker got none",
        );
    };
    let timeout = call.timeout.unwrap_or(DEFAULT_TIMEOUT);
    let sandbox = call.env.sandbox.clone();
    let cwd = call.env.shell.cwd();
    let spec = SpawnSpec {
        program: "python3".to_owned(),
        args: vec!["-c".to_owned(), BOOTSTRAP.to_owned()],
        cwd: (!cwd.is_empty()).then_some(cwd),
        env: script_env(&call.env.base_env),
    };
    let backend = call.env.backend.clone();
    let mut process = match sandbox.spawn(spec).await {
        Ok(process) => process,
        Err(SandboxError::Spawn { .. }) => return no_python(&backend, started),
        Err(err) => return failure(&err.to_string(), 0, started),
    };
    let token = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let header = json!({
        "token": token,
        "module": module_source(call.tools),
        "script": code,
        "temp_dir": sandbox.temp_dir(),
        "limits": {
            "stdout": MAX_STDOUT_BYTES,
            "head": STDOUT_HEAD_BYTES,
            "tail": MAX_STDOUT_BYTES - STDOUT_HEAD_BYTES,
            "stderr": MAX_STDERR_BYTES,
        },
        "secret_words": SECRET_WORDS,
        "harmless_names": HARMLESS_NAMES,
    });
    let mut line = header.to_string();
    line.push('\n');
    if process.stdin.write_all(line.as_bytes()).await.is_err()
        || process.stdin.flush().await.is_err()
    {
        // The interpreter is not there to read it: `python3` is missing
        // (a remote shell answering 127) or died at once.
        let code = tokio::time::timeout(CLEANUP_WAIT, process.handle.wait())
            .await
            .ok()
            .flatten();
        return if code == Some(127) || code.is_none() {
            no_python(&backend, started)
        } else {
            failure(
                &format!("the script's interpreter exited at once (code {code:?})"),
                0,
                started,
            )
        };
    }

    let mut session = Session {
        call_id: call.call_id,
        token: &token,
        stdin: process.stdin,
        link,
        pending: HashMap::new(),
        next_seq: 0,
        made: 0,
        pid: None,
        dir: None,
        exit_code: None,
        captured: None,
        stray: Vec::new(),
    };
    let ending = session
        .serve(&mut process.output, timeout, call.cancel)
        .await;
    if ending != Ending::Exited {
        // The whole session of the script: its process and everything it
        // started, wherever they went.
        if let Some(pid) = session.pid {
            let _ = tokio::time::timeout(
                CLEANUP_WAIT,
                sandbox.signal_tree(pid, StopSignal::Kill, true),
            )
            .await;
        }
        process.handle.kill().await;
    }
    let waited = tokio::time::timeout(CLEANUP_WAIT, process.handle.wait())
        .await
        .ok()
        .flatten();
    let Some(dir) = session.dir.clone() else {
        let said = String::from_utf8_lossy(&session.stray).trim().to_owned();
        return if waited == Some(127) || said.contains("python3") && said.contains("not found") {
            no_python(&backend, started)
        } else if ending == Ending::Timeout {
            failure(
                &format!(
                    "Script timed out after {}s and was killed.",
                    timeout.as_secs()
                ),
                session.made,
                started,
            )
        } else {
            failure(
                &if said.is_empty() {
                    format!("the execute_code bootstrap did not start (exit {waited:?})")
                } else {
                    format!("the execute_code bootstrap did not start: {said}")
                },
                session.made,
                started,
            )
        };
    };
    let exit_code = session.exit_code.or(waited).unwrap_or(-1);
    let captured = match session.captured.take() {
        Some(captured) => captured.shown(&dir),
        None => capture(call.env, &dir).await,
    };
    let document = result_document(&Finished {
        ending,
        exit_code,
        tool_calls_made: session.made,
        duration: started.elapsed(),
        timeout,
        captured,
    });
    let status = match (ending, document["status"].as_str()) {
        (Ending::Timeout, _) => CallStatus::Timeout,
        (Ending::Interrupted, _) => CallStatus::Cancelled,
        (Ending::Exited, Some("success")) => CallStatus::Ok,
        _ => CallStatus::Error,
    };
    ToolReply::new(status, caduceus_common::result::to_json(&document))
}

/// The script, or hermes' answer to a call without one.
fn script_of(args: &Map<String, Value>) -> Result<String, ToolReply> {
    match args.get("code") {
        None if args.contains_key("command") => Err(ToolReply::error(
            "execute_code received a 'command' parameter, but it requires Python source in 'code'. Use terminal(command=...) for shell commands; for Python, retry as execute_code(code=...).",
        )),
        Some(Value::String(code)) if !code.trim().is_empty() => Ok(code.clone()),
        Some(other @ (Value::Number(_) | Value::Bool(_) | Value::Array(_) | Value::Object(_))) => {
            Err(ToolReply::error(format!(
                "execute_code received a {} in 'code', but it requires Python source as a string. Retry as execute_code(code=\"...\").",
                caduceus_common::result::python_type(other)
            )))
        }
        _ => Err(ToolReply::error(
            "No code provided. execute_code requires a non-empty 'code' parameter containing Python source. To run shell commands, use terminal(command=...) instead.",
        )),
    }
}

/// The script's environment: the environment's own, without anything
/// secret-looking even when the terminal's passthrough lets it through
/// (hermes' execute_code scrub), plus hermes' interpreter settings.
fn script_env(base: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = base
        .iter()
        .filter(|(name, _)| !is_secret_env_name(name))
        .filter(|(name, _)| name != "PYTHONDONTWRITEBYTECODE" && name != "PYTHONUNBUFFERED")
        .cloned()
        .collect();
    env.push(("PYTHONDONTWRITEBYTECODE".to_owned(), "1".to_owned()));
    // The script's prints reach its file as they happen, so a script killed
    // by its timeout still shows what it printed.
    env.push(("PYTHONUNBUFFERED".to_owned(), "1".to_owned()));
    env
}

fn no_python(backend: &str, started: Instant) -> ToolReply {
    failure(
        &format!(
            "Python 3 is not available in the {backend} terminal environment. Install Python to use execute_code with remote backends."
        ),
        0,
        started,
    )
}

/// hermes `_error_result`.
fn failure(error: &str, tool_calls_made: u32, started: Instant) -> ToolReply {
    ToolReply::failed_json(&json!({
        "status": "error",
        "error": error,
        "tool_calls_made": tool_calls_made,
        "duration_seconds": seconds(started.elapsed()),
    }))
}

fn seconds(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 100.0).round() / 100.0
}

/// The running script, seen from the worker.
struct Session<'a> {
    call_id: &'a str,
    token: &'a str,
    stdin: BoxedWriter,
    link: ScriptLink,
    /// Forwarded calls: wire seq -> the module's id.
    pending: HashMap<u32, u64>,
    next_seq: u32,
    /// Calls the coordinator ran through its pipeline.
    made: u32,
    pid: Option<u32>,
    dir: Option<String>,
    exit_code: Option<i32>,
    /// The output as the bootstrap read it at the end (absent when killed).
    captured: Option<Reported>,
    /// Bytes on stdout that were not frames (an interpreter failing to start).
    stray: Vec<u8>,
}

impl Session<'_> {
    /// Serves the script's calls until its stream ends, the timeout passes
    /// or the call is cancelled.
    async fn serve(
        &mut self,
        output: &mut crate::sandbox::BoxedReader,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Ending {
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut buf = vec![0u8; 64 * 1024];
        let mut line: Vec<u8> = Vec::new();
        let mut skipping = false;
        loop {
            tokio::select! {
                read = output.read(&mut buf) => {
                    let n = match read {
                        Ok(0) | Err(_) => return Ending::Exited,
                        Ok(n) => n,
                    };
                    let mut rest = &buf[..n];
                    while let Some(at) = memchr::memchr(b'\n', rest) {
                        if !skipping {
                            line.extend_from_slice(&rest[..at]);
                            let taken = std::mem::take(&mut line);
                            self.frame(&taken).await;
                        }
                        skipping = false;
                        line.clear();
                        rest = &rest[at + 1..];
                    }
                    if !skipping {
                        line.extend_from_slice(rest);
                        if line.len() > MAX_FRAME_BYTES {
                            tracing::warn!(call = %self.call_id, "execute_code frame over {MAX_FRAME_BYTES} bytes dropped");
                            line.clear();
                            skipping = true;
                        }
                    }
                }
                Some(answer) = self.link.answers.recv() => {
                    if let Some(id) = self.pending.remove(&answer.seq) {
                        if answer.counted {
                            self.made += 1;
                        }
                        self.answer(id, &answer.body).await;
                    }
                }
                () = &mut deadline => return Ending::Timeout,
                () = cancel.cancelled() => return Ending::Interrupted,
            }
        }
    }

    /// One line from the script's channel.
    async fn frame(&mut self, line: &[u8]) {
        let Some(body) = line.strip_prefix(FRAME) else {
            if self.stray.len() < 4096 {
                self.stray.extend_from_slice(line);
                self.stray.push(b'\n');
            }
            return;
        };
        let Ok(Value::Object(frame)) = serde_json::from_slice::<Value>(body) else {
            tracing::debug!(call = %self.call_id, "malformed execute_code frame dropped");
            return;
        };
        match frame.get("type").and_then(Value::as_str) {
            Some("started") => {
                self.pid = frame
                    .get("pid")
                    .and_then(Value::as_u64)
                    .and_then(|p| u32::try_from(p).ok());
                self.dir = frame.get("dir").and_then(Value::as_str).map(str::to_owned);
            }
            Some("exit") => {
                self.exit_code = frame
                    .get("code")
                    .and_then(Value::as_i64)
                    .and_then(|c| i32::try_from(c).ok());
                self.captured = frame
                    .get("captured")
                    .and_then(|c| serde_json::from_value(c.clone()).ok());
            }
            _ => self.request(&frame).await,
        }
    }

    /// A tool call of the script: refused here when its token is not this
    /// run's, else sent to the coordinator.
    async fn request(&mut self, frame: &Map<String, Value>) {
        let Some(id) = frame.get("id").and_then(Value::as_u64) else {
            return;
        };
        let presented = frame.get("token").and_then(Value::as_str).unwrap_or("");
        if !caduceus_proto::tokens_match(self.token, presented) {
            tracing::warn!(call = %self.call_id, "execute_code call with a wrong token refused");
            self.answer(id, &tool_error("Unauthorized RPC request"))
                .await;
            return;
        }
        self.next_seq += 1;
        let seq = self.next_seq;
        let call = ScriptToolCall {
            call_id: self.call_id.to_owned(),
            seq,
            tool: frame
                .get("tool")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            arguments_json: frame
                .get("args")
                .map_or_else(|| "{}".to_owned(), Value::to_string),
        };
        let sent = self
            .link
            .upstream
            .send(WorkerEvent {
                event: Some(worker_event::Event::ScriptCall(call)),
            })
            .await;
        if sent.is_ok() {
            self.pending.insert(seq, id);
        } else {
            self.answer(id, &tool_error("the coordinator's link is gone"))
                .await;
        }
    }

    /// Writes an answer line for the module's call `id`.
    async fn answer(&mut self, id: u64, body: &str) {
        let mut line = json!({"id": id, "body": body}).to_string();
        line.push('\n');
        // A script that stopped reading ends by its timeout.
        let _ = self.stdin.write_all(line.as_bytes()).await;
        let _ = self.stdin.flush().await;
    }
}

/// The script's output as read back from its run directory.
#[derive(Debug, Default)]
struct Captured {
    /// The text shown (head and tail when cut).
    stdout: String,
    stdout_total: u64,
    stderr: String,
    /// Where the full stdout stays when it was cut.
    spill_path: Option<String>,
}

/// The output as the bootstrap sends it in its exit frame.
#[derive(Debug, serde::Deserialize)]
struct Reported {
    stdout_total: u64,
    head: String,
    tail: String,
    stderr: String,
}

impl Reported {
    fn shown(self, dir: &str) -> Captured {
        let cut = self.stdout_total > MAX_STDOUT_BYTES;
        Captured {
            stdout: if cut {
                cut_text(&self.head, self.stdout_total, &self.tail)
            } else {
                self.head
            },
            stdout_total: self.stdout_total,
            stderr: self.stderr,
            spill_path: cut.then(|| format!("{dir}/stdout")),
        }
    }
}

/// hermes' head/tail cut with its notice (`truncation_notice`, in bytes).
fn cut_text(head: &str, total: u64, tail: &str) -> String {
    format!(
        "{head}\n\n... [OUTPUT TRUNCATED - {} bytes omitted out of {} total] ...\n\n{tail}",
        group_thousands(total - MAX_STDOUT_BYTES),
        group_thousands(total),
    )
}

/// For a script that was killed: reads stdout (head and tail) and stderr
/// (its start), then removes the run directory — all but the full stdout
/// when it had to be cut.
async fn capture(env: &Environment, dir: &str) -> Captured {
    let files = env.sandbox.files();
    let stdout_path = format!("{dir}/stdout");
    let read = |path: String, offset: u64, len: u64| {
        let files = files.clone();
        async move {
            tokio::time::timeout(CLEANUP_WAIT, files.read_range(&path, offset, Some(len)))
                .await
                .ok()
                .and_then(Result::ok)
                .flatten()
        }
    };
    let mut captured = Captured::default();
    let head_len = STDOUT_HEAD_BYTES;
    let tail_len = MAX_STDOUT_BYTES - head_len;
    if let Some(first) = read(stdout_path.clone(), 0, MAX_STDOUT_BYTES).await {
        captured.stdout_total = first.stat.size.max(first.data.len() as u64);
        if captured.stdout_total <= MAX_STDOUT_BYTES {
            captured.stdout = String::from_utf8_lossy(&first.data).into_owned();
        } else {
            let total = captured.stdout_total;
            let head = &first.data[..first.data.len().min(head_len as usize)];
            let tail = read(stdout_path.clone(), total - tail_len, tail_len)
                .await
                .map(|t| t.data)
                .unwrap_or_default();
            captured.stdout = cut_text(
                &String::from_utf8_lossy(head),
                total,
                &String::from_utf8_lossy(&tail),
            );
            captured.spill_path = Some(stdout_path.clone());
        }
    }
    if let Some(stderr) = read(format!("{dir}/stderr"), 0, MAX_STDERR_BYTES).await {
        captured.stderr = String::from_utf8_lossy(&stderr.data).into_owned();
    }
    let remove = if captured.spill_path.is_some() {
        format!(
            "cd {} && rm -f stderr script.py caduceus_tools.py",
            caduceus_common::text::shell_quote(dir)
        )
    } else {
        format!("rm -rf -- {}", caduceus_common::text::shell_quote(dir))
    };
    let spec = SpawnSpec {
        program: "bash".to_owned(),
        args: vec!["-c".to_owned(), remove],
        cwd: None,
        env: vec![("PATH".to_owned(), crate::sandbox::SYSTEM_PATH.to_owned())],
    };
    if let Ok(mut cleanup) = env.sandbox.spawn(spec).await {
        drop(cleanup.stdin);
        let _ = tokio::time::timeout(CLEANUP_WAIT, cleanup.handle.wait()).await;
    }
    captured
}

/// Everything the result document is made of.
struct Finished {
    ending: Ending,
    exit_code: i32,
    tool_calls_made: u32,
    duration: Duration,
    timeout: Duration,
    captured: Captured,
}

/// hermes' result: `status, output, exit_code, tool_calls_made,
/// duration_seconds`, the stdout truncation fields, then `error` (key order
/// is part of the contract).
fn result_document(finished: &Finished) -> Value {
    let captured = &finished.captured;
    let mut output = captured.stdout.clone();
    if !captured.stderr.is_empty() {
        output.push_str("\n--- stderr ---\n");
        output.push_str(&captured.stderr);
    }
    // Code output echoes source and configuration: mask credentials, keep
    // the assignments and templates a script legitimately prints.
    let output = redact(&strip_ansi(&output), RedactMode::CodeOutput).into_owned();
    let total = captured.stdout_total;
    let shown = total.min(MAX_STDOUT_BYTES);
    let status = match finished.ending {
        Ending::Timeout => "timeout",
        Ending::Interrupted => "interrupted",
        Ending::Exited if finished.exit_code == 0 => "success",
        Ending::Exited => "error",
    };
    let mut document = Map::new();
    document.insert("status".to_owned(), json!(status));
    document.insert("output".to_owned(), json!(output));
    document.insert("exit_code".to_owned(), json!(finished.exit_code));
    document.insert(
        "tool_calls_made".to_owned(),
        json!(finished.tool_calls_made),
    );
    document.insert(
        "duration_seconds".to_owned(),
        json!(seconds(finished.duration)),
    );
    document.insert("stdout_truncated".to_owned(), json!(total > shown));
    document.insert("stdout_bytes_captured".to_owned(), json!(shown));
    document.insert("stdout_bytes_total".to_owned(), json!(total));
    document.insert("stdout_bytes_omitted".to_owned(), json!(total - shown));
    if let Some(path) = &captured.spill_path {
        document.insert(
            "warning".to_owned(),
            json!(format!(
                "execute_code stdout was truncated (head/tail shown); the script did run. FULL output saved to {path} — page it with read_file(path=\"{path}\", offset=...) instead of re-running."
            )),
        );
        document.insert("stdout_spill_path".to_owned(), json!(path));
    }
    match finished.ending {
        Ending::Timeout => {
            let message = format!(
                "Script timed out after {}s and was killed.",
                finished.timeout.as_secs()
            );
            let shown = document["output"].as_str().unwrap_or_default().to_owned();
            document.insert(
                "output".to_owned(),
                json!(if shown.is_empty() {
                    format!("⏰ {message}")
                } else {
                    format!("{shown}\n\n⏰ {message}")
                }),
            );
            document.insert("error".to_owned(), json!(message));
        }
        Ending::Interrupted => {
            let shown = document["output"].as_str().unwrap_or_default().to_owned();
            document.insert(
                "output".to_owned(),
                json!(if shown.is_empty() {
                    "[execution interrupted]".to_owned()
                } else {
                    format!("{shown}\n[execution interrupted]")
                }),
            );
        }
        Ending::Exited if finished.exit_code != 0 => {
            document.insert(
                "error".to_owned(),
                json!(format!("Script exited with code {}", finished.exit_code)),
            );
        }
        Ending::Exited => {}
    }
    Value::Object(document)
}

#[cfg(test)]
#[path = "code_tests.rs"]
mod tests;
