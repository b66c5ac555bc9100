//! Processes in a container through the engine's exec API with attached
//! stdin/stdout/stderr: the multiplexed output stream becomes an `AsyncRead`,
//! the hijacked connection's write half is the process's stdin (shutting it
//! down closes stdin), and the exit code comes from inspecting the exec.
//!
//! The engine reports an exec's pid in the host's namespace only, so every
//! process is started through a one-line `sh` prelude that prints its own pid
//! (in the container's namespace, where `signal_tree` works) in a header the
//! reader strips before any output: `\x1eCADPID <pid>\x1e`.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, ReadBuf};

use super::engine::is_gone;
use crate::sandbox::{ProcessHandle, SandboxError, SpawnSpec, SpawnedProcess, StopSignal};

type LogStream = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

const PID_PRELUDE: &str = r#"printf '\036CADPID %s\036' "$$"; exec "$@""#;
const PID_TAG: &[u8] = b"\x1eCADPID ";
/// How long the pid header may take to arrive.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// Output of an exec as a byte stream (stdout and stderr frames in arrival order).
pub struct ExecOutput {
    stream: LogStream,
    pending: Bytes,
}

impl ExecOutput {
    fn new(stream: LogStream, pending: Bytes) -> Self {
        ExecOutput { stream, pending }
    }
}

impl AsyncRead for ExecOutput {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                let chunk = self.pending.split_to(n);
                buf.put_slice(&chunk);
                return Poll::Ready(Ok(()));
            }
            match self.stream.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame {
                    LogOutput::StdOut { message }
                    | LogOutput::StdErr { message }
                    | LogOutput::Console { message } => {
                        self.pending = message;
                    }
                    LogOutput::StdIn { .. } => {}
                },
                Poll::Ready(Some(Err(err))) => {
                    return Poll::Ready(Err(std::io::Error::other(err.to_string())));
                }
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Starts `spec` in `container` and waits for its pid header.
pub async fn spawn(
    docker: &Docker,
    container: &str,
    spec: &SpawnSpec,
) -> Result<SpawnedProcess, ExecFailure> {
    let mut cmd = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        PID_PRELUDE.to_owned(),
        "sh".to_owned(),
        spec.program.clone(),
    ];
    cmd.extend(spec.args.iter().cloned());
    let options = CreateExecOptions {
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        env: Some(
            spec.env
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>(),
        ),
        cmd: Some(cmd),
        working_dir: spec.cwd.clone(),
        ..Default::default()
    };
    let created = docker
        .create_exec(container, options)
        .await
        .map_err(|e| ExecFailure::from_engine(&e))?;
    let started = docker
        .start_exec(&created.id, None)
        .await
        .map_err(|e| ExecFailure::from_engine(&e))?;
    let StartExecResults::Attached { output, input } = started else {
        return Err(ExecFailure::Other(
            "the engine started the exec detached".to_owned(),
        ));
    };
    let (pid, rest, stream) =
        match tokio::time::timeout(HEADER_TIMEOUT, read_pid_header(output)).await {
            Ok(Ok(found)) => found,
            Ok(Err(text)) => {
                let code = exit_code(docker, &created.id).await;
                return Err(ExecFailure::Other(format!(
                    "exited before it started (exit {code:?}): {}",
                    text.trim()
                )));
            }
            Err(_) => {
                return Err(ExecFailure::Other(format!(
                    "did not start within {}s",
                    HEADER_TIMEOUT.as_secs()
                )));
            }
        };
    let handle = ExecHandle {
        docker: docker.clone(),
        container: container.to_owned(),
        exec_id: created.id,
        pid,
    };
    Ok(SpawnedProcess {
        stdin: input,
        output: Box::pin(ExecOutput::new(stream, rest)),
        pid: Some(pid),
        handle: Box::new(handle),
    })
}

/// Reads frames until the pid header is complete; returns the pid, the bytes
/// after the header and the rest of the stream. `Err` carries what the
/// stream said before it ended without a header (the engine's error text).
async fn read_pid_header(mut stream: LogStream) -> Result<(u32, Bytes, LogStream), String> {
    let mut seen: Vec<u8> = Vec::new();
    loop {
        if let Some(start) = find(&seen, PID_TAG) {
            let after = start + PID_TAG.len();
            if let Some(end) = seen[after..].iter().position(|b| *b == 0x1e) {
                let pid = std::str::from_utf8(&seen[after..after + end])
                    .ok()
                    .and_then(|s| s.trim().parse::<u32>().ok());
                let Some(pid) = pid else {
                    return Err("unreadable pid header".to_owned());
                };
                let mut rest = seen[..start].to_vec();
                rest.extend_from_slice(&seen[after + end + 1..]);
                return Ok((pid, Bytes::from(rest), stream));
            }
        }
        match stream.next().await {
            Some(Ok(frame)) => seen.extend_from_slice(frame.as_ref()),
            Some(Err(err)) => return Err(err.to_string()),
            None => return Err(String::from_utf8_lossy(&seen).into_owned()),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Why an exec could not start.
#[derive(Debug)]
pub enum ExecFailure {
    /// The container is gone or not running.
    Gone(String),
    Other(String),
}

impl ExecFailure {
    fn from_engine(err: &bollard::errors::Error) -> Self {
        if is_gone(err) {
            ExecFailure::Gone(err.to_string())
        } else {
            ExecFailure::Other(err.to_string())
        }
    }

    pub fn into_sandbox_error(self, program: &str) -> SandboxError {
        match self {
            ExecFailure::Gone(reason) => SandboxError::Gone(reason),
            ExecFailure::Other(reason) => SandboxError::Spawn {
                program: program.to_owned(),
                reason,
            },
        }
    }
}

/// Exit code of an exec once it ended; `None` while it runs or when unknown.
async fn exit_code(docker: &Docker, exec_id: &str) -> Option<i32> {
    let inspect = docker.inspect_exec(exec_id).await.ok()?;
    if inspect.running == Some(true) {
        return None;
    }
    inspect.exit_code.and_then(|c| i32::try_from(c).ok())
}

/// Waits for an exec to end. The engine has no "wait for exec": poll,
/// quickly at first.
async fn wait_exit(docker: &Docker, exec_id: &str) -> Option<i32> {
    let mut delay = Duration::from_millis(2);
    loop {
        match docker.inspect_exec(exec_id).await {
            Ok(inspect) if inspect.running != Some(true) => {
                return inspect.exit_code.and_then(|c| i32::try_from(c).ok());
            }
            Ok(_) => {}
            Err(_) => return None,
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(200));
    }
}

struct ExecHandle {
    docker: Docker,
    container: String,
    exec_id: String,
    pid: u32,
}

#[async_trait]
impl ProcessHandle for ExecHandle {
    async fn wait(&mut self) -> Option<i32> {
        wait_exit(&self.docker, &self.exec_id).await
    }

    async fn kill(&mut self) {
        let _ = signal_tree(
            &self.docker,
            &self.container,
            self.pid,
            StopSignal::Kill,
            true,
        )
        .await;
    }
}

/// Runs `SIGNAL_TREE_SCRIPT` in the container and waits for it.
pub async fn signal_tree(
    docker: &Docker,
    container: &str,
    pid: u32,
    signal: StopSignal,
    include_root: bool,
) -> Result<(), SandboxError> {
    let cmd = vec![
        "bash".to_owned(),
        "-c".to_owned(),
        crate::sandbox::SIGNAL_TREE_SCRIPT.to_owned(),
        "bash".to_owned(),
        pid.to_string(),
        signal.number().to_string(),
        if include_root { "1" } else { "0" }.to_owned(),
    ];
    run_to_end(docker, container, cmd, None).await.map(|_| ())
}

/// Runs a command without stdin, collecting its output (bounded to `limit`
/// bytes when given) and exit code.
pub async fn run_to_end(
    docker: &Docker,
    container: &str,
    cmd: Vec<String>,
    limit: Option<usize>,
) -> Result<(Vec<u8>, Option<i32>), SandboxError> {
    let options = CreateExecOptions::<String> {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        cmd: Some(cmd),
        ..Default::default()
    };
    let to_error = |err: bollard::errors::Error| {
        if is_gone(&err) {
            SandboxError::Gone(err.to_string())
        } else {
            SandboxError::Other(err.to_string())
        }
    };
    let created = docker
        .create_exec(container, options)
        .await
        .map_err(to_error)?;
    let started = docker
        .start_exec(&created.id, None)
        .await
        .map_err(to_error)?;
    let mut collected = Vec::new();
    if let StartExecResults::Attached { mut output, .. } = started {
        while let Some(frame) = output.next().await {
            let frame = frame.map_err(|e| SandboxError::Other(e.to_string()))?;
            if limit.is_none_or(|l| collected.len() < l) {
                collected.extend_from_slice(frame.as_ref());
            }
        }
    }
    Ok((collected, wait_exit(docker, &created.id).await))
}
