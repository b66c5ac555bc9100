//! Processes that backends start through a wrapper (an SSH channel, an
//! `apptainer exec`) report their pid first: `\x1ePID <n>\x1e\n`, then the
//! program's own output. This module reads that preamble and keeps whatever
//! output arrived with it.

use std::io::Cursor;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::shell::shell_quote;

/// The wrapper's last line: `exec env 'K=V'… 'program' 'arg'…`, every word
/// quoted, so the program keeps the wrapper's pid.
pub fn exec_with_env(env: &[(String, String)], program: &str, args: &[String]) -> String {
    let mut exec = String::from("exec env");
    for (key, value) in env {
        exec.push(' ');
        exec.push_str(&shell_quote(&format!("{key}={value}")));
    }
    exec.push(' ');
    exec.push_str(&shell_quote(program));
    for arg in args {
        exec.push(' ');
        exec.push_str(&shell_quote(arg));
    }
    exec
}

/// Finds `\x1ePID <n>\x1e\n` at the start of the output; returns the pid and
/// how many bytes it took.
pub fn parse_pid_line(head: &[u8]) -> Option<(u32, usize)> {
    const PREFIX: &[u8] = b"\x1ePID ";
    if head.len() < PREFIX.len() || !head.starts_with(PREFIX) {
        return None;
    }
    let rest = &head[PREFIX.len()..];
    let end = rest.iter().position(|b| *b == 0x1e)?;
    let pid = std::str::from_utf8(&rest[..end])
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let mut consumed = PREFIX.len() + end + 1;
    if head.get(consumed) == Some(&b'\n') {
        consumed += 1;
    } else if head.len() == consumed {
        // The newline has not arrived yet.
        return None;
    }
    Some((pid, consumed))
}

/// Reads the pid preamble from `stdout` within `timeout`. Returns the pid and
/// the output that followed it in the same reads; `None` when the process
/// ended or stayed silent first.
pub async fn read_pid<R: AsyncRead + Unpin>(
    stdout: &mut R,
    timeout: Duration,
) -> Option<(u32, Cursor<Vec<u8>>)> {
    let mut head = Vec::new();
    let found = tokio::time::timeout(timeout, async {
        let mut buf = [0u8; 1024];
        loop {
            if let Some(found) = parse_pid_line(&head) {
                return Some(found);
            }
            match stdout.read(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .ok()
    .flatten()?;
    let (pid, consumed) = found;
    Some((pid, Cursor::new(head.split_off(consumed))))
}

/// Reads what a wrapper printed on its stderr, for at most `timeout` (the
/// reason a start failed).
pub async fn read_error<R: AsyncRead + Unpin>(stderr: Option<&mut R>, timeout: Duration) -> String {
    let mut text = Vec::new();
    if let Some(stderr) = stderr {
        let _ = tokio::time::timeout(timeout, stderr.read_to_end(&mut text)).await;
    }
    String::from_utf8_lossy(&text).trim().to_owned()
}

/// Drains a wrapper's own stderr (the program's is merged into stdout) so its
/// pipe never fills, logging what it said at debug level.
pub fn drain_stderr<R: AsyncRead + Unpin + Send + 'static>(stderr: Option<R>, label: String) {
    if let Some(mut stderr) = stderr {
        tokio::spawn(async move {
            let mut text = Vec::new();
            let _ = stderr.read_to_end(&mut text).await;
            let text = String::from_utf8_lossy(&text);
            if !text.trim().is_empty() {
                tracing::debug!(%label, "wrapper stderr: {}", text.trim());
            }
        });
    }
}
