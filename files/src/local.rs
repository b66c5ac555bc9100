//! [`FileSystem`] on the worker's own disk, with direct syscalls.
//!
//! Small reads run inline on the calling task: a `stat` + `read` of a 60 KB
//! file from the page cache takes tens of microseconds, less than a hop to the
//! blocking pool and back. Anything that may take longer (files above
//! [`LocalFs::with_inline_limit`], every write, every search) runs on
//! `spawn_blocking`.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::UNIX_EPOCH;

use async_trait::async_trait;

use crate::fs::{
    CheckRun, FileBytes, FileKind, FileStat, FileSystem, FsError, LineRead, SyntaxChecker,
    WriteOutcome,
};
use crate::lines::{BINARY_SNIFF_BYTES, LineCollector, LinePage, LineWindow, looks_binary};
use crate::search::{self, SearchHits, SearchQuery};

/// Files up to this size are read without leaving the task.
const DEFAULT_INLINE_LIMIT: u64 = 1 << 20;
const CHUNK: usize = 64 * 1024;

/// Local-disk [`FileSystem`].
#[derive(Debug, Clone)]
pub struct LocalFs {
    inline_limit: u64,
}

impl Default for LocalFs {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalFs {
    pub fn new() -> Self {
        Self {
            inline_limit: DEFAULT_INLINE_LIMIT,
        }
    }

    /// Size in bytes up to which reads run inline; larger ones go to the
    /// blocking pool. `0` sends everything there.
    pub fn with_inline_limit(bytes: u64) -> Self {
        Self {
            inline_limit: bytes,
        }
    }

    async fn run<T, F>(&self, inline: bool, job: F) -> Result<T, FsError>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, FsError> + Send + 'static,
    {
        if inline {
            job()
        } else {
            tokio::task::spawn_blocking(job)
                .await
                .map_err(|error| FsError::Backend(format!("blocking file task failed: {error}")))?
        }
    }

    fn fits_inline(&self, size: u64) -> bool {
        size <= self.inline_limit
    }
}

#[async_trait]
impl FileSystem for LocalFs {
    async fn stat(&self, path: &str) -> Result<Option<FileStat>, FsError> {
        stat_path(path)
    }

    async fn read_range(
        &self,
        path: &str,
        offset: u64,
        max_len: Option<u64>,
    ) -> Result<Option<FileBytes>, FsError> {
        let Some(stat) = regular_file_stat(path)? else {
            return Ok(None);
        };
        let wanted = stat
            .size
            .saturating_sub(offset)
            .min(max_len.unwrap_or(u64::MAX));
        let owned = path.to_owned();
        self.run(self.fits_inline(wanted), move || {
            read_range_blocking(&owned, stat, offset, max_len)
        })
        .await
    }

    async fn read_lines(&self, path: &str, window: &LineWindow) -> Result<LineRead, FsError> {
        let Some(stat) = regular_file_stat(path)? else {
            return Ok(LineRead::NotFound);
        };
        if window.unless_unchanged.is_some() && stat.stamp() == window.unless_unchanged {
            return Ok(LineRead::Unchanged(stat));
        }
        let owned = path.to_owned();
        let window = window.clone();
        self.run(self.fits_inline(stat.size), move || {
            read_lines_blocking(&owned, stat, &window)
        })
        .await
    }

    /// Always on the blocking pool: renaming over an existing file on ext4
    /// starts writeback of the new data, which stalls for milliseconds on a
    /// busy disk (measured: p90 4 ms inline on the build machine).
    async fn write_atomic(&self, path: &str, data: &[u8]) -> Result<WriteOutcome, FsError> {
        let owned = path.to_owned();
        let data = data.to_vec();
        self.run(false, move || write_atomic_blocking(&owned, &data))
            .await
    }

    async fn remove(&self, path: &str) -> Result<(), FsError> {
        match fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => Err(FsError::IsADirectory(path.to_owned())),
            Ok(_) => fs::remove_file(path).map_err(|error| FsError::from_io(path, &error)),
            Err(error) => Err(FsError::from_io(path, &error)),
        }
    }

    async fn rename(&self, from: &str, to: &str) -> Result<(), FsError> {
        if let Some(parent) = Path::new(to).parent() {
            fs::create_dir_all(parent).map_err(|error| FsError::from_io(to, &error))?;
        }
        fs::rename(from, to).map_err(|error| FsError::from_io(from, &error))
    }

    async fn list_dir(&self, path: &str) -> Result<Option<Vec<String>>, FsError> {
        let entries = match fs::read_dir(path) {
            Ok(entries) => entries,
            Err(error) if is_missing(&error) => return Ok(None),
            Err(error) => return Err(FsError::from_io(path, &error)),
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(Some(names))
    }

    async fn search(&self, query: &SearchQuery) -> Result<SearchHits, FsError> {
        let query = query.clone();
        self.run(false, move || search::local::search(&query)).await
    }

    /// The local backend's sandbox is this host: the check runs here, with
    /// only `PATH`, `HOME` and `LANG` of the worker's environment.
    async fn check_syntax(
        &self,
        checker: SyntaxChecker,
        path: &str,
        content: &[u8],
    ) -> Result<CheckRun, FsError> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut command = tokio::process::Command::new("bash");
        command
            .args(["-c", checker.script(), "caduceus-check", path])
            .env_clear()
            .envs(
                ["PATH", "HOME", "LANG"]
                    .iter()
                    .filter_map(|name| std::env::var_os(name).map(|value| (*name, value))),
            )
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        let failed = |error: std::io::Error| FsError::Backend(format!("syntax check: {error}"));
        let mut child = command.spawn().map_err(failed)?;
        let mut stdin = child.stdin.take();
        let mut stdout = child.stdout.take();
        let work = async {
            if let Some(mut input) = stdin.take() {
                // A checker that exits early closes the pipe; its output says why.
                let _ = input.write_all(content).await;
            }
            let mut out = Vec::new();
            if let Some(output) = stdout.as_mut() {
                output.read_to_end(&mut out).await?;
            }
            let status = child.wait().await?;
            Ok::<_, std::io::Error>((out, status.code().unwrap_or(-1)))
        };
        let (out, code) = tokio::time::timeout(crate::lint::CHECK_TIMEOUT, work)
            .await
            .map_err(|_| {
                FsError::Backend(format!(
                    "timed out after {}s",
                    crate::lint::CHECK_TIMEOUT.as_secs()
                ))
            })?
            .map_err(failed)?;
        checker
            .outcome(&String::from_utf8_lossy(&out), code)
            .map_err(FsError::Backend)
    }

    async fn resolve_symlinks(&self, path: &str) -> Result<String, FsError> {
        Ok(resolve_existing_prefix(Path::new(path))
            .to_string_lossy()
            .into_owned())
    }
}

fn is_missing(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

fn stat_path(path: &str) -> Result<Option<FileStat>, FsError> {
    match fs::metadata(path) {
        Ok(meta) => Ok(Some(to_stat(&meta))),
        Err(error) if is_missing(&error) => Ok(None),
        Err(error) => Err(FsError::from_io(path, &error)),
    }
}

/// Stat that insists on a regular file, so devices and FIFOs are never opened.
fn regular_file_stat(path: &str) -> Result<Option<FileStat>, FsError> {
    let Some(stat) = stat_path(path)? else {
        return Ok(None);
    };
    match stat.kind {
        FileKind::File => Ok(Some(stat)),
        FileKind::Dir => Err(FsError::IsADirectory(path.to_owned())),
        FileKind::Other => Err(FsError::NotRegularFile(path.to_owned())),
    }
}

fn to_stat(meta: &fs::Metadata) -> FileStat {
    let kind = if meta.is_file() {
        FileKind::File
    } else if meta.is_dir() {
        FileKind::Dir
    } else {
        FileKind::Other
    };
    FileStat {
        kind,
        size: meta.len(),
        mode: mode_of(meta),
        mtime_ns: meta
            .modified()
            .ok()
            .and_then(|time| time.duration_since(UNIX_EPOCH).ok())
            .and_then(|since| i64::try_from(since.as_nanos()).ok()),
    }
}

#[cfg(unix)]
fn mode_of(meta: &fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    Some(meta.permissions().mode() & 0o7777)
}

#[cfg(not(unix))]
fn mode_of(_meta: &fs::Metadata) -> Option<u32> {
    None
}

fn read_range_blocking(
    path: &str,
    stat: FileStat,
    offset: u64,
    max_len: Option<u64>,
) -> Result<Option<FileBytes>, FsError> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(error) if is_missing(&error) => return Ok(None),
        Err(error) => return Err(FsError::from_io(path, &error)),
    };
    let io = |error: std::io::Error| FsError::from_io(path, &error);
    if offset > 0 {
        file.seek(SeekFrom::Start(offset)).map_err(io)?;
    }
    let expected = stat.size.saturating_sub(offset);
    let limit = max_len.unwrap_or(u64::MAX);
    let mut data = Vec::with_capacity(usize::try_from(expected.min(limit)).unwrap_or(0));
    file.take(limit).read_to_end(&mut data).map_err(io)?;
    Ok(Some(FileBytes { stat, data }))
}

fn read_lines_blocking(
    path: &str,
    stat: FileStat,
    window: &LineWindow,
) -> Result<LineRead, FsError> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(error) if is_missing(&error) => return Ok(LineRead::NotFound),
        Err(error) => return Err(FsError::from_io(path, &error)),
    };
    let io = |error: std::io::Error| FsError::from_io(path, &error);
    let mut buffer = vec![
        0u8;
        CHUNK.min(
            usize::try_from(stat.size)
                .unwrap_or(CHUNK)
                .max(BINARY_SNIFF_BYTES)
        )
    ];
    // Fill at least the sniff window (or hit EOF) before judging the content.
    let mut filled = 0;
    while filled < BINARY_SNIFF_BYTES.min(buffer.len()) {
        let read = file.read(&mut buffer[filled..]).map_err(io)?;
        if read == 0 {
            break;
        }
        filled += read;
    }
    if window.detect_binary && looks_binary(&buffer[..filled]) {
        return Ok(LineRead::Binary(stat));
    }
    let mut collector = LineCollector::new(window);
    collector.feed(&buffer[..filled]);
    if buffer.len() < CHUNK && filled == buffer.len() {
        // The file grew past its stat size, or was exactly the sniff size.
        buffer.resize(CHUNK, 0);
    }
    loop {
        let read = file.read(&mut buffer).map_err(io)?;
        if read == 0 {
            break;
        }
        collector.feed(&buffer[..read]);
    }
    let (lines, total_lines) = collector.finish();
    Ok(LineRead::Page(LinePage {
        stat,
        lines,
        total_lines,
    }))
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

fn temp_path_in(dir: &Path) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.subsec_nanos())
        .unwrap_or(0);
    let counter = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(
        ".caduceus-tmp.{}.{counter}.{nanos:x}",
        std::process::id()
    ))
}

fn write_atomic_blocking(path: &str, data: &[u8]) -> Result<WriteOutcome, FsError> {
    let io = |error: std::io::Error| FsError::from_io(path, &error);
    // Write through a symlink to the file it names, keeping the link.
    let target = match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            fs::canonicalize(path).unwrap_or_else(|_| PathBuf::from(path))
        }
        _ => PathBuf::from(path),
    };
    let existing = match fs::metadata(&target) {
        Ok(meta) if meta.is_dir() => return Err(FsError::IsADirectory(path.to_owned())),
        Ok(meta) => Some(meta),
        Err(error) if is_missing(&error) => None,
        Err(error) => return Err(io(error)),
    };
    let parent = target.parent().unwrap_or_else(|| Path::new("/"));
    let created_dirs = !parent.exists();
    if created_dirs {
        fs::create_dir_all(parent).map_err(io)?;
    }
    let temp = temp_path_in(parent);
    let result = write_temp_and_rename(&temp, &target, data, existing.as_ref());
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result.map_err(io)?;
    Ok(WriteOutcome {
        bytes_written: data.len() as u64,
        created_dirs,
        created_file: existing.is_none(),
        mtime_ns: fs::metadata(&target)
            .ok()
            .as_ref()
            .and_then(|meta| to_stat(meta).mtime_ns),
    })
}

fn write_temp_and_rename(
    temp: &Path,
    target: &Path,
    data: &[u8],
    existing: Option<&fs::Metadata>,
) -> std::io::Result<()> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(temp)?;
    file.write_all(data)?;
    if let Some(meta) = existing {
        // Same permission bits as the file being replaced (umask does not apply).
        file.set_permissions(meta.permissions())?;
    }
    drop(file);
    fs::rename(temp, target)
}

/// `realpath` of the longest existing prefix, with the missing tail appended.
fn resolve_existing_prefix(path: &Path) -> PathBuf {
    let mut tail = Vec::new();
    let mut current = path;
    loop {
        if let Ok(resolved) = fs::canonicalize(current) {
            let mut full = resolved;
            for part in tail.iter().rev() {
                full.push(part);
            }
            return full;
        }
        match (current.parent(), current.file_name()) {
            (Some(parent), Some(name)) => {
                tail.push(name.to_owned());
                current = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
#[path = "local_tests.rs"]
mod tests;
