//! `caduceus audit tail [-n N] [--follow] [--json]`: the audit log of the
//! coordinator on this host (`$CADUCEUS_HOME/audit.jsonl`; see the
//! coordinator README, "Audit log").

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Subcommand;
use serde_json::Value;

use crate::config::home_dir;
use crate::out;

#[derive(Subcommand)]
pub enum AuditCommand {
    /// Print the last lines of the audit log, oldest first.
    Tail {
        /// How many lines.
        #[arg(short = 'n', long = "lines", default_value_t = 20)]
        lines: usize,
        /// Keep printing lines as they are written (follows rotation).
        #[arg(long, short = 'f')]
        follow: bool,
        /// Print the JSON lines as written, instead of one readable line each.
        #[arg(long)]
        json: bool,
    },
}

/// How often `--follow` looks for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(250);

pub async fn run(command: AuditCommand) -> Result<()> {
    let AuditCommand::Tail {
        lines,
        follow,
        json,
    } = command;
    let path = home_dir().join("audit.jsonl");
    tokio::task::spawn_blocking(move || tail(&path, lines, follow, json)).await?
}

#[allow(clippy::print_stderr)] // a note for the person; stdout has the lines only
fn tail(path: &Path, lines: usize, follow: bool, json: bool) -> Result<()> {
    let print = |line: &str| {
        out(&if json {
            line.to_owned()
        } else {
            readable(line)
        })
    };
    let (last, mut offset) = match File::open(path) {
        Ok(file) => last_lines(file, lines)
            .with_context(|| format!("cannot read the audit log {}", path.display()))?,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound && follow => (VecDeque::new(), 0),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            eprintln!(
                "no audit log at {} yet (a coordinator writes it on its first call)",
                path.display()
            );
            return Ok(());
        }
        Err(err) => {
            return Err(err)
                .with_context(|| format!("cannot read the audit log {}", path.display()));
        }
    };
    for line in &last {
        print(line)?;
    }
    if !follow {
        return Ok(());
    }
    let mut identity = file_identity(path);
    loop {
        std::thread::sleep(FOLLOW_POLL);
        let now = file_identity(path);
        // Rotated (a new file under the name) or truncated: start over. A file
        // that only grew is the same file: go on from the offset.
        let rotated = now.map(|(inode, _)| inode) != identity.map(|(inode, _)| inode);
        if rotated || now.is_some_and(|(_, len)| len < offset) {
            offset = 0;
        }
        identity = now;
        let Ok(mut file) = File::open(path) else {
            continue;
        };
        file.seek(SeekFrom::Start(offset))?;
        let mut reader = BufReader::new(file);
        let mut line = String::new();
        // Only whole lines: a line still being written is read next time.
        while reader.read_line(&mut line)? > 0 && line.ends_with('\n') {
            offset += line.len() as u64;
            print(line.trim_end())?;
            line.clear();
        }
    }
}

/// (inode, length) of the file, when it exists.
fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.ino(), m.len()))
}

/// The last `n` whole lines of `file`, and the offset after them.
fn last_lines(file: File, n: usize) -> std::io::Result<(VecDeque<String>, u64)> {
    let mut reader = BufReader::new(file);
    let mut last = VecDeque::with_capacity(n.min(10_000));
    let mut offset = 0u64;
    let mut line = String::new();
    while reader.read_line(&mut line)? > 0 && line.ends_with('\n') {
        offset += line.len() as u64;
        if n > 0 {
            if last.len() == n {
                last.pop_front();
            }
            last.push_back(line.trim_end().to_owned());
        }
        line.clear();
    }
    Ok((last, offset))
}

/// One audit line for a person:
/// `TIME tool_call terminal status=ok verdict=approved token=ops task=t1 …`.
pub(crate) fn readable(line: &str) -> String {
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(line) else {
        return line.to_owned();
    };
    let text = |key: &str| map.get(key).and_then(Value::as_str).unwrap_or("");
    let mut parts = vec![text("time").to_owned(), text("event").to_owned()];
    let mut field = |key: &str, label: &str| match map.get(key) {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) => parts.push(format!("{label}={s}")),
        Some(other) => parts.push(format!("{label}={other}")),
    };
    match text("event") {
        "tool_call" => {
            for key in [
                "tool",
                "status",
                "verdict",
                "token",
                "session",
                "task",
                "worker",
                "duration_ms",
                "arguments",
            ] {
                field(key, key);
            }
        }
        "approval" => {
            for key in [
                "approval_id",
                "decision",
                "scope",
                "answered_by",
                "accepted",
                "session",
                "task",
                "tool",
                "command",
            ] {
                field(key, key);
            }
        }
        _ => {
            for key in map
                .keys()
                .filter(|k| !matches!(k.as_str(), "time" | "event"))
            {
                field(key, key);
            }
        }
    }
    parts.join(" ")
}

#[cfg(test)]
#[path = "audit_tests.rs"]
mod tests;
