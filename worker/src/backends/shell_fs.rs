//! `ShellFs`: the file tools' [`FileSystem`] for any sandbox that can run
//! `bash` (SSH hosts, Singularity instances, containers without a file API).
//! Every primitive is one small script run through [`Sandbox::spawn`] — one
//! round trip — with file content on stdin or stdout and a trailer that carries
//! the script's exit code and stderr:
//!
//! ```text
//! <stdout bytes>\x1eCADFS<exit code>\x1e<stderr text>
//! ```

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use caduceus_files::fs::{
    CheckRun, FileBytes, FileKind, FileStat, FsError, SyntaxChecker, WriteOutcome,
};
use caduceus_files::lint;
use caduceus_files::search::shell::{parse_shell_output, shell_command};
use caduceus_files::{FileSystem, SearchHits, SearchQuery};

use crate::sandbox::{Sandbox, SpawnSpec};

/// Longest a file primitive may take (a search over a big tree included).
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
const TRAILER: &[u8] = b"\x1eCADFS";
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Prints `kind|size|mode|mtime_ns` of "$1" (symlinks followed) or `missing`.
const STAT_FN: &str = r#"st() {
  if [ ! -e "$1" ]; then echo missing; return; fi
  if [ -d "$1" ]; then k=dir; elif [ -f "$1" ]; then k=file; else k=other; fi
  s=$(stat -L -c '%s|%a|%.9Y' -- "$1" 2>/dev/null) || s=$(stat -L -c '%s|%a|%Y' -- "$1")
  echo "$k|$s"
}"#;

pub struct ShellFs {
    runner: Arc<dyn ScriptRunner>,
}

/// Runs one file script to completion: `argv` (`bash -c <script>
/// caduceus-fs <args…>`) with exactly `env`, `stdin` as its input (empty
/// when `None`), at most `limit`; everything it printed on stdout. The
/// default is a process of the sandbox ([`Sandbox::spawn`]); a backend with
/// a cheaper way to run a command to completion brings its own.
#[async_trait]
pub trait ScriptRunner: Send + Sync {
    async fn run(
        &self,
        argv: &[String],
        env: &[(String, String)],
        stdin: Option<&[u8]>,
        limit: Duration,
    ) -> Result<Vec<u8>, FsError>;
}

/// Scripts as processes of the sandbox, held weakly (the sandbox owns its
/// `ShellFs`).
struct SpawnRunner {
    sandbox: Weak<dyn Sandbox>,
}

#[async_trait]
impl ScriptRunner for SpawnRunner {
    async fn run(
        &self,
        argv: &[String],
        env: &[(String, String)],
        stdin: Option<&[u8]>,
        limit: Duration,
    ) -> Result<Vec<u8>, FsError> {
        let sandbox = self
            .sandbox
            .upgrade()
            .ok_or_else(|| FsError::Backend("the sandbox is gone".to_owned()))?;
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| FsError::Backend("an empty file script".to_owned()))?;
        let spec = SpawnSpec {
            program: program.clone(),
            args: args.to_vec(),
            cwd: None,
            env: env.to_vec(),
        };
        let process = sandbox
            .spawn(spec)
            .await
            .map_err(|e| FsError::Backend(e.to_string()))?;
        let (mut input, mut output, mut handle) = (process.stdin, process.output, process.handle);
        let work = async {
            if let Some(data) = stdin {
                // A script may stop reading early (a checker that is missing);
                // its output says why, so a closed pipe is not the failure.
                if let Err(error) = input.write_all(data).await
                    && error.kind() != std::io::ErrorKind::BrokenPipe
                {
                    return Err(error);
                }
            }
            input.shutdown().await?;
            // Dropping the writer is what closes the pipe (end of file).
            drop(input);
            let mut out = Vec::new();
            output.read_to_end(&mut out).await?;
            Ok::<_, std::io::Error>(out)
        };
        let out = match tokio::time::timeout(limit, work).await {
            Ok(Ok(out)) => out,
            Ok(Err(err)) => return Err(FsError::Backend(format!("file operation failed: {err}"))),
            Err(_) => {
                handle.kill().await;
                return Err(FsError::Backend(format!(
                    "file operation timed out after {}s",
                    limit.as_secs()
                )));
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), handle.wait()).await;
        Ok(out)
    }
}

struct ScriptOutput {
    stdout: Vec<u8>,
    stderr: String,
    code: i32,
}

impl ShellFs {
    /// File access through processes of `sandbox`; holds it weakly (the
    /// sandbox owns this).
    pub fn new(sandbox: Weak<dyn Sandbox>) -> Self {
        ShellFs {
            runner: Arc::new(SpawnRunner { sandbox }),
        }
    }

    /// File access through `runner`.
    pub fn with_runner(runner: Arc<dyn ScriptRunner>) -> Self {
        ShellFs { runner }
    }

    async fn run(
        &self,
        script: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<ScriptOutput, FsError> {
        self.run_for(script, args, stdin, SCRIPT_TIMEOUT).await
    }

    async fn run_for(
        &self,
        script: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
        limit: Duration,
    ) -> Result<ScriptOutput, FsError> {
        let wrapped = format!(
            "errf=$(mktemp 2>/dev/null || echo /tmp/caduceus-fs-err.$$)\n( {script}\n) 2>\"$errf\"\nrc=$?\nprintf '\\036CADFS%d\\036' \"$rc\"\ncat \"$errf\" 2>/dev/null\nrm -f \"$errf\"\n"
        );
        let mut argv = vec![
            "bash".to_owned(),
            "-c".to_owned(),
            wrapped,
            "caduceus-fs".to_owned(),
        ];
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        let env = [
            ("PATH".to_owned(), PATH.to_owned()),
            ("LC_ALL".to_owned(), "C".to_owned()),
        ];
        let out = self.runner.run(&argv, &env, stdin, limit).await?;
        parse_output(out)
    }
}

fn parse_output(out: Vec<u8>) -> Result<ScriptOutput, FsError> {
    let at = out
        .windows(TRAILER.len())
        .rposition(|w| w == TRAILER)
        .ok_or_else(|| {
            FsError::Backend(format!(
                "the sandbox did not run the file script: {}",
                String::from_utf8_lossy(&out).trim()
            ))
        })?;
    let rest = &out[at + TRAILER.len()..];
    let end = rest.iter().position(|b| *b == 0x1e).unwrap_or(rest.len());
    let code = std::str::from_utf8(&rest[..end])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let stderr = String::from_utf8_lossy(rest.get(end + 1..).unwrap_or_default())
        .trim()
        .to_owned();
    let mut stdout = out;
    stdout.truncate(at);
    Ok(ScriptOutput {
        stdout,
        stderr,
        code,
    })
}

/// Parses `kind|size|mode|mtime` (mtime in seconds, maybe fractional).
fn parse_stat(line: &str) -> Option<FileStat> {
    let mut parts = line.trim().split('|');
    let kind = match parts.next()? {
        "file" => FileKind::File,
        "dir" => FileKind::Dir,
        _ => FileKind::Other,
    };
    let size = parts.next()?.parse().ok()?;
    let mode = u32::from_str_radix(parts.next()?, 8).ok();
    let mtime_ns = parts.next().and_then(|t| {
        let (secs, frac) = t.split_once('.').unwrap_or((t, "0"));
        let secs: i64 = secs.parse().ok()?;
        let frac = format!("{frac:0<9}");
        let nanos: i64 = frac.get(..9)?.parse().ok()?;
        Some(secs * 1_000_000_000 + nanos)
    });
    Some(FileStat {
        kind,
        size,
        mode,
        mtime_ns,
    })
}

fn error_for(path: &str, out: &ScriptOutput) -> FsError {
    let text = if out.stderr.is_empty() {
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    } else {
        out.stderr.clone()
    };
    if text.contains("No such file") {
        FsError::NotFound(path.to_owned())
    } else if text.contains("Permission denied") {
        FsError::PermissionDenied(path.to_owned())
    } else if text.contains("Is a directory") {
        FsError::IsADirectory(path.to_owned())
    } else {
        FsError::Io {
            path: path.to_owned(),
            message: if text.is_empty() {
                format!("exit {}", out.code)
            } else {
                text
            },
        }
    }
}

#[async_trait]
impl FileSystem for ShellFs {
    async fn stat(&self, path: &str) -> Result<Option<FileStat>, FsError> {
        let out = self
            .run(&format!("{STAT_FN}\nst \"$1\""), &[path], None)
            .await?;
        if out.code != 0 {
            return Err(error_for(path, &out));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        if text.trim() == "missing" {
            return Ok(None);
        }
        parse_stat(&text)
            .map(Some)
            .ok_or_else(|| FsError::Backend(format!("unreadable stat of {path}: {text}")))
    }

    async fn read_range(
        &self,
        path: &str,
        offset: u64,
        max_len: Option<u64>,
    ) -> Result<Option<FileBytes>, FsError> {
        // One line of metadata, then the bytes.
        let take = match max_len {
            Some(n) => format!("| head -c {n}"),
            None => String::new(),
        };
        let script = format!(
            "{STAT_FN}\ns=$(st \"$1\"); echo \"$s\"\ncase \"$s\" in file*) tail -c +$(( $2 + 1 )) -- \"$1\" {take};; esac"
        );
        let out = self
            .run(&script, &[path, &offset.to_string()], None)
            .await?;
        if out.code != 0 {
            return Err(error_for(path, &out));
        }
        let newline = out
            .stdout
            .iter()
            .position(|b| *b == b'\n')
            .unwrap_or(out.stdout.len());
        let header = String::from_utf8_lossy(&out.stdout[..newline]).into_owned();
        if header.trim() == "missing" {
            return Ok(None);
        }
        let stat = parse_stat(&header)
            .ok_or_else(|| FsError::Backend(format!("unreadable stat of {path}: {header}")))?;
        match stat.kind {
            FileKind::Dir => return Err(FsError::IsADirectory(path.to_owned())),
            FileKind::Other => return Err(FsError::NotRegularFile(path.to_owned())),
            FileKind::File => {}
        }
        let data = out.stdout.get(newline + 1..).unwrap_or_default().to_vec();
        Ok(Some(FileBytes { stat, data }))
    }

    async fn write_atomic(&self, path: &str, data: &[u8]) -> Result<WriteOutcome, FsError> {
        let script = format!(
            r#"{STAT_FN}
p=$1
if [ -L "$p" ]; then p=$(readlink -f -- "$p") || exit 1; fi
d=$(dirname -- "$p")
made=0; if [ ! -d "$d" ]; then mkdir -p -- "$d" || exit 1; made=1; fi
existed=0; if [ -e "$p" ]; then existed=1; fi
if [ -d "$p" ]; then echo "Is a directory" >&2; exit 1; fi
tmp=$(mktemp -- "$d/.caduceus-tmp.XXXXXX") || exit 1
if ! cat > "$tmp"; then rm -f -- "$tmp"; exit 1; fi
if [ "$existed" = 1 ]; then chmod --reference="$p" -- "$tmp" 2>/dev/null; else chmod 644 -- "$tmp"; fi
mv -f -- "$tmp" "$p" || {{ rm -f -- "$tmp"; exit 1; }}
echo "$made|$existed|$(st "$p")""#
        );
        let out = self.run(&script, &[path], Some(data)).await?;
        if out.code != 0 {
            return Err(error_for(path, &out));
        }
        let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let mut parts = text.splitn(3, '|');
        let created_dirs = parts.next() == Some("1");
        let existed = parts.next() == Some("1");
        let stat = parts.next().and_then(parse_stat);
        Ok(WriteOutcome {
            bytes_written: data.len() as u64,
            created_dirs,
            created_file: !existed,
            mtime_ns: stat.and_then(|s| s.mtime_ns),
        })
    }

    async fn remove(&self, path: &str) -> Result<(), FsError> {
        let script = "if [ ! -e \"$1\" ] && [ ! -L \"$1\" ]; then echo 'No such file' >&2; exit 1; fi\nif [ -d \"$1\" ]; then echo 'Is a directory' >&2; exit 1; fi\nrm -f -- \"$1\"";
        let out = self.run(script, &[path], None).await?;
        if out.code != 0 {
            return Err(error_for(path, &out));
        }
        Ok(())
    }

    async fn rename(&self, from: &str, to: &str) -> Result<(), FsError> {
        let script = "if [ ! -e \"$1\" ]; then echo 'No such file' >&2; exit 1; fi\nmkdir -p -- \"$(dirname -- \"$2\")\" && mv -f -- \"$1\" \"$2\"";
        let out = self.run(script, &[from, to], None).await?;
        if out.code != 0 {
            return Err(error_for(from, &out));
        }
        Ok(())
    }

    async fn list_dir(&self, path: &str) -> Result<Option<Vec<String>>, FsError> {
        let out = self.run("if [ -d \"$1\" ]; then echo dir; ls -1A -- \"$1\" | head -n 5000; else echo none; fi", &[path], None).await?;
        if out.code != 0 {
            return Err(error_for(path, &out));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        if lines.next() != Some("dir") {
            return Ok(None);
        }
        let mut names: Vec<String> = lines.map(str::to_owned).collect();
        names.sort();
        Ok(Some(names))
    }

    async fn search(&self, query: &SearchQuery) -> Result<SearchHits, FsError> {
        let out = self.run(&shell_command(query), &[], None).await?;
        parse_shell_output(
            query,
            &String::from_utf8_lossy(&out.stdout),
            &out.stderr,
            out.code,
        )
    }

    async fn check_syntax(
        &self,
        checker: SyntaxChecker,
        path: &str,
        content: &[u8],
    ) -> Result<CheckRun, FsError> {
        let out = self
            .run_for(
                checker.script(),
                &[path],
                Some(content),
                lint::CHECK_TIMEOUT,
            )
            .await?;
        checker
            .outcome(&String::from_utf8_lossy(&out.stdout), out.code)
            .map_err(FsError::Backend)
    }

    async fn resolve_symlinks(&self, path: &str) -> Result<String, FsError> {
        let out = self
            .run(
                "readlink -m -- \"$1\" 2>/dev/null || printf '%s\\n' \"$1\"",
                &[path],
                None,
            )
            .await?;
        let resolved = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        Ok(if resolved.is_empty() {
            path.to_owned()
        } else {
            resolved
        })
    }
}

#[cfg(test)]
#[path = "shell_fs_tests.rs"]
mod tests;
