//! The file-access primitives the four tools need from a sandbox.
//!
//! One implementation per backend (`LocalFs` here; Docker, SSH, Modal and Daytona
//! elsewhere). The primitives are shaped so that each tool call costs one round
//! trip on a remote backend where that is possible: `read_lines` returns the page,
//! the totals and the metadata together (and can answer "unchanged" instead), and
//! `search` returns every hit in one go, reporting a missing root as a value.
//!
//! All paths handed to a `FileSystem` are absolute and normalized (see
//! [`crate::paths::canonical_path`]); relative paths are the tools' business.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::lines::{self, LinePage, LineWindow};
use crate::search::{SearchHits, SearchQuery};

/// What a path names, after following symlinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileKind {
    File,
    Dir,
    /// Device, FIFO, socket: reading may block forever or never end.
    Other,
}

/// Metadata of a path (symlinks followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStat {
    pub kind: FileKind,
    pub size: u64,
    /// Permission bits (`0o644`), when the backend knows them.
    pub mode: Option<u32>,
    /// Modification time in nanoseconds since the epoch, when known.
    pub mtime_ns: Option<i64>,
}

impl FileStat {
    /// The change detector used by read dedup and staleness warnings; `None`
    /// when the backend reports no mtime (then nothing is ever "unchanged").
    pub fn stamp(&self) -> Option<FileStamp> {
        self.mtime_ns.map(|mtime_ns| FileStamp {
            mtime_ns,
            size: self.size,
        })
    }
}

/// Modification time plus size: two reads with the same stamp saw the same file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileStamp {
    pub mtime_ns: i64,
    pub size: u64,
}

/// Bytes of a file together with the metadata they were read under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileBytes {
    pub stat: FileStat,
    pub data: Vec<u8>,
}

/// Answer of [`FileSystem::read_lines`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LineRead {
    NotFound,
    /// The file's stamp equals [`LineWindow::unless_unchanged`]; nothing was read.
    Unchanged(FileStat),
    /// [`LineWindow::detect_binary`] was set and the first bytes look binary.
    Binary(FileStat),
    Page(LinePage),
}

/// What [`FileSystem::write_atomic`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteOutcome {
    pub bytes_written: u64,
    /// Some parent directory did not exist and was created.
    pub created_dirs: bool,
    /// The file did not exist before.
    pub created_file: bool,
    /// Modification time of the new file, when the backend reports it (lets a
    /// later write tell whether someone else changed the file since).
    pub mtime_ns: Option<i64>,
}

impl WriteOutcome {
    /// Stamp of the file as written.
    pub fn stamp(&self) -> Option<FileStamp> {
        self.mtime_ns.map(|mtime_ns| FileStamp {
            mtime_ns,
            size: self.bytes_written,
        })
    }
}

/// A syntax checker that runs inside the sandbox (see [`crate::lint`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SyntaxChecker {
    /// `ast.parse` by the sandbox's `python3`.
    Python,
    /// `node --check`.
    Node,
}

/// What a syntax check inside the sandbox found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CheckRun {
    /// The checker's program is not installed there.
    Unavailable,
    Clean,
    /// The checker's report.
    Errors(String),
}

/// Failures of a file-system primitive. "Not found" on reads is a value
/// (`Ok(None)`, [`LineRead::NotFound`], [`SearchHits::RootNotFound`]), not an error.
#[derive(Debug, thiserror::Error, Serialize, Deserialize)]
pub enum FsError {
    #[error("No such file or directory: {0}")]
    NotFound(String),
    #[error("Permission denied: {0}")]
    PermissionDenied(String),
    #[error("Is a directory: {0}")]
    IsADirectory(String),
    /// A device, FIFO or socket where a regular file was needed.
    #[error("Not a regular file: {0}")]
    NotRegularFile(String),
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    /// The search could not run (bad regex, bad glob, tool failure).
    #[error("{0}")]
    Search(String),
    /// The sandbox could not be reached or answered nonsense.
    #[error("{0}")]
    Backend(String),
}

impl FsError {
    /// Maps an `std::io::Error` on `path` onto the matching variant.
    pub fn from_io(path: &str, error: &std::io::Error) -> Self {
        use std::io::ErrorKind;
        match error.kind() {
            ErrorKind::NotFound => FsError::NotFound(path.to_owned()),
            ErrorKind::PermissionDenied => FsError::PermissionDenied(path.to_owned()),
            ErrorKind::IsADirectory => FsError::IsADirectory(path.to_owned()),
            _ => FsError::Io {
                path: path.to_owned(),
                message: error.to_string(),
            },
        }
    }
}

/// File access inside one sandbox. Object safe: the worker keeps an
/// `Arc<dyn FileSystem>` per environment.
#[async_trait]
pub trait FileSystem: Send + Sync {
    /// Metadata of `path`, following symlinks; `Ok(None)` when it does not exist.
    async fn stat(&self, path: &str) -> Result<Option<FileStat>, FsError>;

    /// Up to `max_len` bytes (all when `None`) of a regular file from byte
    /// `offset`, with its metadata. `Ok(None)` when it does not exist; a
    /// directory is [`FsError::IsADirectory`], a device/FIFO/socket
    /// [`FsError::NotRegularFile`] (and is never opened).
    async fn read_range(
        &self,
        path: &str,
        offset: u64,
        max_len: Option<u64>,
    ) -> Result<Option<FileBytes>, FsError>;

    /// A window of lines plus the file's total line count, in one call.
    ///
    /// The default reads the whole file through [`FileSystem::read_range`] and
    /// cuts it with [`lines::page_from_bytes`]; backends that can stream (or run a
    /// script next to the file) should override it so a 1 GB log costs one pass
    /// and a few KB of transfer.
    async fn read_lines(&self, path: &str, window: &LineWindow) -> Result<LineRead, FsError> {
        let Some(bytes) = self.read_range(path, 0, None).await? else {
            return Ok(LineRead::NotFound);
        };
        Ok(lines::page_from_bytes(bytes.stat, &bytes.data, window))
    }

    /// Replaces `path` with `data` atomically: a temp file in the same directory,
    /// given the existing file's permission bits, renamed over the target.
    /// Missing parent directories are created. Writing through a symlink
    /// replaces the file it points to, not the link.
    async fn write_atomic(&self, path: &str, data: &[u8]) -> Result<WriteOutcome, FsError>;

    /// Deletes a file (not a directory). Missing is [`FsError::NotFound`].
    async fn remove(&self, path: &str) -> Result<(), FsError>;

    /// Renames `from` to `to`, creating `to`'s missing parent directories.
    async fn rename(&self, from: &str, to: &str) -> Result<(), FsError>;

    /// Entry names of a directory, sorted; `Ok(None)` when it is not a
    /// directory. Used only to suggest similar names, so a backend may cap it.
    async fn list_dir(&self, path: &str) -> Result<Option<Vec<String>>, FsError>;

    /// Content or file-name search; see [`SearchQuery`] for the contract.
    async fn search(&self, query: &SearchQuery) -> Result<SearchHits, FsError>;

    /// Runs `checker` inside the sandbox on `content` as the content of
    /// `path` (which need not hold it): one round trip, at most
    /// [`crate::lint::CHECK_TIMEOUT`]. The script and the reading of its
    /// output are [`SyntaxChecker::script`] and [`SyntaxChecker::outcome`].
    async fn check_syntax(
        &self,
        checker: SyntaxChecker,
        path: &str,
        content: &[u8],
    ) -> Result<CheckRun, FsError>;

    /// `path` with symlinks resolved as far as it exists (`realpath`), for the
    /// safety checks. The default is the lexical path, which is what a backend
    /// without a cheap way to ask should return.
    async fn resolve_symlinks(&self, path: &str) -> Result<String, FsError> {
        Ok(path.to_owned())
    }
}
