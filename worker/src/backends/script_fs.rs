//! A [`FileSystem`] for any backend that can run a command: each primitive is
//! one small POSIX `sh` script (GNU coreutils or busybox), run once — one
//! round trip per call. Docker uses it through the engine's exec API; SSH and
//! Singularity can plug in their own [`ScriptRunner`].
//!
//! Why scripts and not the engine's archive API for Docker: the archive API
//! does not see tmpfs mounts (`/tmp`, and the non-persistent `/root`,
//! `/workspace`), where most of a model's files live, and it archives
//! symlinks instead of following them.

#[cfg(test)]
#[path = "script_fs_tests.rs"]
mod tests;

use async_trait::async_trait;

use caduceus_files::fs::{
    FileBytes, FileKind, FileStat, FileSystem, FsError, LineRead, WriteOutcome,
};
use caduceus_files::lines::{
    BINARY_SNIFF_BYTES, LineCollector, LinePage, LineWindow, looks_binary,
};
use caduceus_files::search::{SearchHits, SearchQuery, shell};

/// What a script printed and how it ended.
#[derive(Debug, Clone, Default)]
pub struct ScriptOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: i32,
}

/// Runs `sh -c <script> sh <args…>` inside the sandbox, feeding `stdin`.
#[async_trait]
pub trait ScriptRunner: Send + Sync {
    async fn run_script(
        &self,
        script: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<ScriptOutput, FsError>;
}

pub struct ScriptFs<R> {
    runner: R,
}

impl<R: ScriptRunner> ScriptFs<R> {
    pub fn new(runner: R) -> Self {
        ScriptFs { runner }
    }

    async fn run(
        &self,
        script: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<ScriptOutput, FsError> {
        self.runner.run_script(script, args, stdin).await
    }
}

/// Parses `<size> <mtime> <mode> <type…>`.
fn parse_stat(line: &str) -> Option<FileStat> {
    let mut fields = line.trim().splitn(4, ' ');
    let size = fields.next()?.parse::<u64>().ok()?;
    let mtime = fields.next()?;
    let mode = u32::from_str_radix(fields.next()?, 8).ok();
    let kind = match fields.next()? {
        "regular file" | "regular empty file" => FileKind::File,
        "directory" => FileKind::Dir,
        _ => FileKind::Other,
    };
    Some(FileStat {
        kind,
        size,
        mode,
        mtime_ns: parse_mtime_ns(mtime),
    })
}

/// `1796001889.499379637` (or whole seconds) as nanoseconds.
fn parse_mtime_ns(text: &str) -> Option<i64> {
    let (secs, frac) = text.split_once('.').unwrap_or((text, ""));
    let secs: i64 = secs.parse().ok()?;
    let mut digits: String = frac.chars().filter(char::is_ascii_digit).take(9).collect();
    while digits.len() < 9 {
        digits.push('0');
    }
    let nanos: i64 = digits.parse().ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// Maps a script's failure onto the matching error.
fn failure(path: &str, out: &ScriptOutput) -> FsError {
    let text = String::from_utf8_lossy(if out.stderr.is_empty() {
        &out.stdout
    } else {
        &out.stderr
    })
    .trim()
    .to_owned();
    if text.contains("Permission denied") {
        FsError::PermissionDenied(path.to_owned())
    } else if text.contains("No such file") {
        FsError::NotFound(path.to_owned())
    } else if text.contains("Is a directory") {
        FsError::IsADirectory(path.to_owned())
    } else {
        FsError::Io {
            path: path.to_owned(),
            message: if text.is_empty() {
                format!("exit {}", out.exit_code)
            } else {
                text
            },
        }
    }
}

/// Splits off the first line.
fn first_line(data: &[u8]) -> (&str, &[u8]) {
    match data.iter().position(|b| *b == b'\n') {
        Some(at) => (
            std::str::from_utf8(&data[..at]).unwrap_or(""),
            &data[at + 1..],
        ),
        None => (std::str::from_utf8(data).unwrap_or(""), &[]),
    }
}

/// Interprets the common status line of the read scripts.
fn regular(path: &str, line: &str) -> Result<Option<FileStat>, FsError> {
    if line == "MISSING" {
        return Ok(None);
    }
    let stat = parse_stat(line)
        .ok_or_else(|| FsError::Backend(format!("unreadable stat of {path}: {line}")))?;
    match stat.kind {
        FileKind::File => Ok(Some(stat)),
        FileKind::Dir => Err(FsError::IsADirectory(path.to_owned())),
        FileKind::Other => Err(FsError::NotRegularFile(path.to_owned())),
    }
}

const STAT_SCRIPT: &str = r#"p=$1
if [ ! -e "$p" ]; then echo MISSING; exit 0; fi
stat -L -c '%s %.9Y %a %F' -- "$p""#;

/// Prints the status line, then (for a regular file) the bytes asked for.
const READ_RANGE_SCRIPT: &str = r#"p=$1 off=$2 len=$3
if [ ! -e "$p" ]; then echo MISSING; exit 0; fi
st=$(stat -L -c '%s %.9Y %a %F' -- "$p") || exit 1
echo "$st"
case $st in *" regular file"|*" regular empty file") ;; *) exit 0;; esac
if [ -n "$len" ]; then tail -c +$((off + 1)) -- "$p" | head -c "$len"; else tail -c +$((off + 1)) -- "$p"; fi"#;

/// Status line; `UNCHANGED` when the stamp matches; else the first bytes for
/// the binary check (length-prefixed), the line count and whether the last
/// line is open, then the window's lines cut to the byte budget.
const READ_LINES_SCRIPT: &str = r#"p=$1 first=$2 last=$3 max=$4 stamp=$5 sniff=$6
if [ ! -e "$p" ]; then echo MISSING; exit 0; fi
st=$(stat -L -c '%s %.9Y %a %F' -- "$p") || exit 1
echo "$st"
case $st in *" regular file"|*" regular empty file") ;; *) exit 0;; esac
set -- $st
if [ -n "$stamp" ] && [ "$1 $2" = "$stamp" ]; then echo UNCHANGED; exit 0; fi
open=0; [ -n "$(tail -c 1 -- "$p")" ] && open=1
echo "COUNT $(wc -l < "$p") $open $(head -c "$sniff" -- "$p" | wc -c)"
head -c "$sniff" -- "$p"
echo
echo LINES
sed -n "${first},${last}p;${last}q" -- "$p" | cut -b "1-$max""#;

/// Resolves a symlink to the file it names, creates missing parents, writes
/// a temp file next to the target, copies the old permission bits and
/// renames it over; prints the new size and mtime and what was created.
const WRITE_SCRIPT: &str = r#"p=$1
if [ -L "$p" ]; then t=$(readlink -f -- "$p") && p=$t; fi
if [ -d "$p" ]; then echo ISDIR; exit 0; fi
d=$(dirname -- "$p"); dirs=0; new=1
if [ ! -d "$d" ]; then mkdir -p -- "$d" || exit 1; dirs=1; fi
[ -e "$p" ] && new=0
tmp="$d/.caduceus-tmp.$$"
cat > "$tmp" || { rm -f -- "$tmp"; exit 1; }
if [ $new = 0 ]; then chmod "$(stat -c %a -- "$p")" "$tmp" || { rm -f -- "$tmp"; exit 1; }; fi
mv -f -- "$tmp" "$p" || { rm -f -- "$tmp"; exit 1; }
echo "OK $dirs $new $(stat -c '%s %.9Y' -- "$p")""#;

const REMOVE_SCRIPT: &str = r#"p=$1
if [ ! -e "$p" ] && [ ! -L "$p" ]; then echo MISSING; exit 0; fi
if [ -d "$p" ] && [ ! -L "$p" ]; then echo ISDIR; exit 0; fi
rm -f -- "$p" && echo OK"#;

const RENAME_SCRIPT: &str = r#"if [ ! -e "$1" ] && [ ! -L "$1" ]; then echo MISSING; exit 0; fi
mkdir -p -- "$(dirname -- "$2")" && mv -f -- "$1" "$2" && echo OK"#;

const LIST_SCRIPT: &str = r#"if [ ! -d "$1" ]; then echo NOTDIR; exit 0; fi
echo DIR; ls -A1 -- "$1" | head -n 5000"#;

const RESOLVE_SCRIPT: &str =
    r#"readlink -m -- "$1" 2>/dev/null || readlink -f -- "$1" 2>/dev/null || printf '%s\n' "$1""#;

#[async_trait]
impl<R: ScriptRunner> FileSystem for ScriptFs<R> {
    async fn stat(&self, path: &str) -> Result<Option<FileStat>, FsError> {
        let out = self.run(STAT_SCRIPT, &[path], None).await?;
        if out.exit_code != 0 {
            return Err(failure(path, &out));
        }
        let (line, _) = first_line(&out.stdout);
        if line == "MISSING" {
            return Ok(None);
        }
        parse_stat(line)
            .map(Some)
            .ok_or_else(|| FsError::Backend(format!("unreadable stat of {path}: {line}")))
    }

    async fn read_range(
        &self,
        path: &str,
        offset: u64,
        max_len: Option<u64>,
    ) -> Result<Option<FileBytes>, FsError> {
        let offset_arg = offset.to_string();
        let len_arg = max_len.map(|l| l.to_string()).unwrap_or_default();
        let out = self
            .run(READ_RANGE_SCRIPT, &[path, &offset_arg, &len_arg], None)
            .await?;
        if out.exit_code != 0 {
            return Err(failure(path, &out));
        }
        let (line, data) = first_line(&out.stdout);
        let Some(stat) = regular(path, line)? else {
            return Ok(None);
        };
        Ok(Some(FileBytes {
            stat,
            data: data.to_vec(),
        }))
    }

    async fn read_lines(&self, path: &str, window: &LineWindow) -> Result<LineRead, FsError> {
        let first = window.offset.max(1);
        let last = first.saturating_add(window.limit.max(1)) - 1;
        let stamp = window.unless_unchanged.map(|s| {
            format!(
                "{} {}.{:09}",
                s.size,
                s.mtime_ns.div_euclid(1_000_000_000),
                s.mtime_ns.rem_euclid(1_000_000_000)
            )
        });
        let args = [
            path.to_owned(),
            first.to_string(),
            last.to_string(),
            window.max_line_bytes.max(1).to_string(),
            stamp.unwrap_or_default(),
            BINARY_SNIFF_BYTES.to_string(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = self.run(READ_LINES_SCRIPT, &args, None).await?;
        if out.exit_code != 0 {
            return Err(failure(path, &out));
        }
        let (line, rest) = first_line(&out.stdout);
        let Some(stat) = regular(path, line)? else {
            return Ok(LineRead::NotFound);
        };
        let (next, rest) = first_line(rest);
        if next == "UNCHANGED" {
            return Ok(LineRead::Unchanged(stat));
        }
        let counts: Vec<usize> = next
            .strip_prefix("COUNT ")
            .unwrap_or("")
            .split(' ')
            .filter_map(|n| n.trim().parse().ok())
            .collect();
        let [newlines, open, sniffed] = counts[..] else {
            return Err(FsError::Backend(format!(
                "unreadable line count of {path}: {next}"
            )));
        };
        let head = rest.get(..sniffed).unwrap_or(rest);
        if window.detect_binary && looks_binary(head) {
            return Ok(LineRead::Binary(stat));
        }
        let body = rest.get(sniffed..).unwrap_or(&[]);
        let body = body.strip_prefix(b"\nLINES\n").unwrap_or(body);
        let mut collector = LineCollector::new(&LineWindow {
            offset: 1,
            limit: window.limit,
            ..window.clone()
        });
        collector.feed(body);
        let (lines, _) = collector.finish();
        Ok(LineRead::Page(LinePage {
            stat,
            lines,
            total_lines: newlines + open,
        }))
    }

    async fn write_atomic(&self, path: &str, data: &[u8]) -> Result<WriteOutcome, FsError> {
        let out = self.run(WRITE_SCRIPT, &[path], Some(data)).await?;
        let (line, _) = first_line(&out.stdout);
        if line == "ISDIR" {
            return Err(FsError::IsADirectory(path.to_owned()));
        }
        let fields: Vec<&str> = line.strip_prefix("OK ").unwrap_or("").split(' ').collect();
        match (out.exit_code, fields.as_slice()) {
            (0, [dirs, new, size, mtime]) => Ok(WriteOutcome {
                bytes_written: size.parse().unwrap_or(data.len() as u64),
                created_dirs: *dirs == "1",
                created_file: *new == "1",
                mtime_ns: parse_mtime_ns(mtime),
            }),
            _ => Err(failure(path, &out)),
        }
    }

    async fn remove(&self, path: &str) -> Result<(), FsError> {
        let out = self.run(REMOVE_SCRIPT, &[path], None).await?;
        match first_line(&out.stdout).0 {
            "OK" => Ok(()),
            "MISSING" => Err(FsError::NotFound(path.to_owned())),
            "ISDIR" => Err(FsError::IsADirectory(path.to_owned())),
            _ => Err(failure(path, &out)),
        }
    }

    async fn rename(&self, from: &str, to: &str) -> Result<(), FsError> {
        let out = self.run(RENAME_SCRIPT, &[from, to], None).await?;
        match first_line(&out.stdout).0 {
            "OK" => Ok(()),
            "MISSING" => Err(FsError::NotFound(from.to_owned())),
            _ => Err(failure(from, &out)),
        }
    }

    async fn list_dir(&self, path: &str) -> Result<Option<Vec<String>>, FsError> {
        let out = self.run(LIST_SCRIPT, &[path], None).await?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        match lines.next() {
            Some("NOTDIR") => Ok(None),
            Some("DIR") => {
                let mut names: Vec<String> = lines.map(str::to_owned).collect();
                names.sort();
                Ok(Some(names))
            }
            _ => Err(failure(path, &out)),
        }
    }

    async fn search(&self, query: &SearchQuery) -> Result<SearchHits, FsError> {
        let script = shell::shell_command(query);
        let out = self.run(&script, &[], None).await?;
        shell::parse_shell_output(
            query,
            &String::from_utf8_lossy(&out.stdout),
            &String::from_utf8_lossy(&out.stderr),
            out.exit_code,
        )
    }

    async fn resolve_symlinks(&self, path: &str) -> Result<String, FsError> {
        let out = self.run(RESOLVE_SCRIPT, &[path], None).await?;
        let resolved = String::from_utf8_lossy(&out.stdout)
            .trim_end_matches('\n')
            .to_owned();
        Ok(if resolved.is_empty() {
            path.to_owned()
        } else {
            resolved
        })
    }
}
