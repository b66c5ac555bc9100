//! The file tools of a Daytona sandbox: `ShellFs`'s scripts, each run by one
//! `POST /process/execute` instead of a process of its own (a session, its
//! command, stdin, output polls and the clean-up: six round trips or more,
//! README "Daytona"). Input up to [`INLINE`] bytes travels inside the
//! command as base64; more is uploaded first (`/files/upload-v2`) to a temp
//! file that the command reads and removes: two round trips. The output
//! comes back as base64, since `execute`'s `result` is text.

use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;

use caduceus_files::fs::FsError;

use super::api::DaytonaError;
use super::toolbox::{Kind, Toolbox};
use crate::backends::shell_fs::ScriptRunner;
use crate::shell::shell_quote;

/// Largest input sent inside the command (its base64 stays well under the
/// 128 KiB a single argument may have where the command is passed as one).
pub const INLINE: usize = 32 * 1024;

/// Where a script's input comes from.
pub enum Input<'a> {
    None,
    Inline(&'a [u8]),
    /// A file in the sandbox, removed once read.
    File(&'a str),
}

/// The `execute` command running `argv` with exactly `env` on `input`,
/// printing its stdout (and its shell's stderr) as one base64 line. POSIX
/// sh: the daemon hands the command to whichever shell the image has.
pub fn command(argv: &[String], env: &[(String, String)], input: &Input<'_>) -> String {
    let mut run = String::from("env -i");
    for (key, value) in env {
        run.push(' ');
        run.push_str(&shell_quote(&format!("{key}={value}")));
    }
    for arg in argv {
        run.push(' ');
        run.push_str(&shell_quote(arg));
    }
    let inner = match input {
        Input::None => format!("{run} < /dev/null"),
        Input::Inline(data) => format!(
            "printf %s {} | base64 -d | {run}",
            shell_quote(&base64::engine::general_purpose::STANDARD.encode(data))
        ),
        Input::File(path) => {
            let path = shell_quote(path);
            format!("{run} < {path}; rm -f -- {path}")
        }
    };
    format!("{{ {inner}; }} 2>&1 | base64 -w0")
}

/// `ShellFs` scripts through one sandbox's toolbox.
pub struct ToolboxScripts {
    pub toolbox: Toolbox,
}

fn backend(err: &DaytonaError) -> FsError {
    FsError::Backend(err.to_string())
}

#[async_trait]
impl ScriptRunner for ToolboxScripts {
    async fn run(
        &self,
        argv: &[String],
        env: &[(String, String)],
        stdin: Option<&[u8]>,
        limit: Duration,
    ) -> Result<Vec<u8>, FsError> {
        let staged = match stdin {
            Some(data) if data.len() > INLINE => {
                let path = format!("/tmp/.caduceus-fs-in.{}", uuid::Uuid::new_v4().simple());
                self.toolbox
                    .upload(&path, data)
                    .await
                    .map_err(|e| backend(&e))?;
                Some(path)
            }
            _ => None,
        };
        let input = match (&staged, stdin) {
            (Some(path), _) => Input::File(path),
            (None, Some(data)) => Input::Inline(data),
            (None, None) => Input::None,
        };
        let secs = limit.as_secs().max(1);
        let (_, result) = self
            .toolbox
            .execute(Kind::Long, &command(argv, env, &input), secs)
            .await
            .map_err(|err| match err.status() {
                Some(status) if status.as_u16() == 408 => {
                    FsError::Backend(format!("file operation timed out after {secs}s"))
                }
                _ => backend(&err),
            })?;
        base64::engine::general_purpose::STANDARD
            .decode(result.trim())
            .map_err(|_| {
                FsError::Backend(format!(
                    "the sandbox did not run the file script: {}",
                    result.trim().chars().take(300).collect::<String>()
                ))
            })
    }
}
