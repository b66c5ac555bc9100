//! What an edit would do, without doing it: `write_file` or `patch` run
//! against [`DryRunFs`], which serves reads from the real sandbox and keeps
//! every write, removal and rename in memory. The tool itself decides what
//! it would change — with all its checks, fuzzy matching and refusals — so
//! the diff a person approves is the one the real call computes, and a
//! refused edit is refused before anyone is asked.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::{Map, Value};

use caduceus_common::result::{CallStatus, ToolReply};

use crate::fs::{
    CheckRun, FileBytes, FileKind, FileStat, FileSystem, FsError, SyntaxChecker, WriteOutcome,
};
use crate::search::{SearchHits, SearchQuery};
use crate::tools::FileToolContext;
use crate::tracker::ReadTracker;
use crate::{diff, patch, write_file};

/// The tools whose calls edit files (and so may wait for an edit approval).
pub fn is_edit_tool(tool: &str) -> bool {
    matches!(tool, "write_file" | "patch")
}

/// The outcome of a previewed edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditPreview {
    /// The edit would apply: a unified diff of every file it changes
    /// (`/dev/null` for created and deleted files) and their paths.
    Changes { diff: String, files: Vec<String> },
    /// The tool would refuse or fail; this is its answer, and nothing was
    /// written.
    Refused(ToolReply),
}

/// Runs `tool` (`write_file` or `patch`) with `args` on a dry-run view of
/// `ctx.fs`. The task's read tracker is not touched: the preview is not a
/// read or a write the model made.
pub async fn preview_edit(
    ctx: &FileToolContext<'_>,
    tool: &str,
    args: &Map<String, Value>,
) -> EditPreview {
    let dry = DryRunFs::new(ctx.fs);
    let tracker = ReadTracker::new();
    let dry_ctx = FileToolContext {
        fs: &dry,
        cwd: ctx.cwd,
        home: ctx.home,
        tracker: &tracker,
        config: ctx.config,
    };
    let reply = match tool {
        "write_file" => write_file(&dry_ctx, args).await,
        "patch" => patch(&dry_ctx, args).await,
        other => {
            return EditPreview::Refused(ToolReply::error(format!(
                "Tool '{other}' does not edit files"
            )));
        }
    };
    if reply.status != CallStatus::Ok {
        return EditPreview::Refused(reply);
    }
    let (diff, files) = dry.changes();
    EditPreview::Changes { diff, files }
}

/// Reads from the sandbox, writes to memory.
pub struct DryRunFs<'a> {
    inner: &'a dyn FileSystem,
    /// Path -> content after the edit (`None`: removed); the original
    /// content is read from `inner` when the diff is made.
    overlay: Mutex<BTreeMap<String, Overlaid>>,
}

struct Overlaid {
    original: Option<Vec<u8>>,
    current: Option<Vec<u8>>,
}

impl<'a> DryRunFs<'a> {
    pub fn new(inner: &'a dyn FileSystem) -> Self {
        DryRunFs {
            inner,
            overlay: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Overlaid>> {
        self.overlay.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The overlaid state of `path`: `Some(None)` removed, `Some(Some(_))`
    /// written, `None` untouched.
    fn overlaid(&self, path: &str) -> Option<Option<Vec<u8>>> {
        self.lock().get(path).map(|o| o.current.clone())
    }

    async fn original(&self, path: &str) -> Option<Vec<u8>> {
        match self.inner.read_range(path, 0, None).await {
            Ok(Some(bytes)) => Some(bytes.data),
            _ => None,
        }
    }

    async fn set(&self, path: &str, content: Option<Vec<u8>>) {
        let known = self.lock().contains_key(path);
        let original = if known {
            None
        } else {
            self.original(path).await
        };
        let mut overlay = self.lock();
        overlay
            .entry(path.to_owned())
            .or_insert(Overlaid {
                original,
                current: None,
            })
            .current = content;
    }

    /// The unified diff of everything written, and the paths it touches.
    pub fn changes(&self) -> (String, Vec<String>) {
        let overlay = self.lock();
        let mut out = String::new();
        let mut files = Vec::new();
        for (path, o) in overlay.iter() {
            if o.original == o.current {
                continue;
            }
            let text = |b: &Option<Vec<u8>>| {
                b.as_deref()
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .unwrap_or_default()
            };
            let from = match o.original {
                Some(_) => diff::label("a", path),
                None => "/dev/null".to_owned(),
            };
            let to = match o.current {
                Some(_) => diff::label("b", path),
                None => "/dev/null".to_owned(),
            };
            out.push_str(&diff::unified(
                &text(&o.original),
                &text(&o.current),
                &from,
                &to,
            ));
            files.push(path.clone());
        }
        (out, files)
    }
}

fn stat_of(data: &[u8]) -> FileStat {
    FileStat {
        kind: FileKind::File,
        size: data.len() as u64,
        mode: None,
        mtime_ns: None,
    }
}

#[async_trait]
impl FileSystem for DryRunFs<'_> {
    async fn stat(&self, path: &str) -> Result<Option<FileStat>, FsError> {
        match self.overlaid(path) {
            Some(Some(data)) => Ok(Some(stat_of(&data))),
            Some(None) => Ok(None),
            None => self.inner.stat(path).await,
        }
    }

    async fn read_range(
        &self,
        path: &str,
        offset: u64,
        max_len: Option<u64>,
    ) -> Result<Option<FileBytes>, FsError> {
        match self.overlaid(path) {
            Some(Some(data)) => {
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(data.len());
                let end = match max_len {
                    Some(len) => start.saturating_add(usize::try_from(len).unwrap_or(usize::MAX)),
                    None => data.len(),
                }
                .min(data.len());
                Ok(Some(FileBytes {
                    stat: stat_of(&data),
                    data: data[start..end].to_vec(),
                }))
            }
            Some(None) => Ok(None),
            None => self.inner.read_range(path, offset, max_len).await,
        }
    }

    async fn write_atomic(&self, path: &str, data: &[u8]) -> Result<WriteOutcome, FsError> {
        let existed = self.stat(path).await?.is_some();
        self.set(path, Some(data.to_vec())).await;
        Ok(WriteOutcome {
            bytes_written: data.len() as u64,
            created_dirs: false,
            created_file: !existed,
            mtime_ns: None,
        })
    }

    async fn remove(&self, path: &str) -> Result<(), FsError> {
        if self.stat(path).await?.is_none() {
            return Err(FsError::NotFound(path.to_owned()));
        }
        self.set(path, None).await;
        Ok(())
    }

    async fn rename(&self, from: &str, to: &str) -> Result<(), FsError> {
        let Some(bytes) = self.read_range(from, 0, None).await? else {
            return Err(FsError::NotFound(from.to_owned()));
        };
        self.set(to, Some(bytes.data)).await;
        self.set(from, None).await;
        Ok(())
    }

    async fn list_dir(&self, path: &str) -> Result<Option<Vec<String>>, FsError> {
        self.inner.list_dir(path).await
    }

    async fn search(&self, query: &SearchQuery) -> Result<SearchHits, FsError> {
        self.inner.search(query).await
    }

    async fn check_syntax(
        &self,
        _checker: SyntaxChecker,
        _path: &str,
        _content: &[u8],
    ) -> Result<CheckRun, FsError> {
        // The lint report is the real call's business; a preview only needs
        // what would change.
        Ok(CheckRun::Unavailable)
    }

    async fn resolve_symlinks(&self, path: &str) -> Result<String, FsError> {
        self.inner.resolve_symlinks(path).await
    }
}

#[cfg(test)]
#[path = "preview_tests.rs"]
mod tests;
