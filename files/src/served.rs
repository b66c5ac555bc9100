//! A [`FileSystem`] served by another process over a pipe.
//!
//! A root worker runs its local sandboxes as an unprivileged user, and their
//! file tools must have that user's rights and see what its commands see
//! (inside its namespaces when confined). Running a shell script per
//! primitive does that at the cost of a process per call (~3 ms each, a
//! `read_file` takes several); a file server started once per environment, as
//! that user and where its commands run, does it for a pipe round trip. It is
//! the caduceus binary itself (`caduceus __file-server`, [`serve`]) running
//! [`LocalFs`](crate::local::LocalFs); [`ServedFs`] is the client.
//!
//! Wire: each message is a frame `[u32 header length][u32 blob length]
//! [header: JSON][blob: raw bytes]`, big-endian. A request's header is a
//! [`Request`], its blob the bytes to write or check; an answer's header is
//! a `Result<Answer, FsError>`, its blob the bytes read (or a page's lines,
//! raw). A frame goes out in one write (a blob over 64 KiB in a second) and
//! both ends read through a buffer, so a round trip is one write and one read
//! each way. One request at a time per connection; the server ends at end of
//! input.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;

use crate::fs::{
    CheckRun, FileBytes, FileStat, FileSystem, FsError, LineRead, SyntaxChecker, WriteOutcome,
};
use crate::lines::{LinePage, LineWindow};
use crate::search::{SearchHits, SearchQuery};

/// The argument that makes the caduceus binary a file server.
pub const FILE_SERVER_ARG: &str = "__file-server";

/// Largest header accepted: a search answer of many hits is the biggest.
const MAX_HEADER: u32 = 256 << 20;
/// Read buffer of each end: a page of a file's lines fits in one read.
const READ_BUFFER: usize = 64 << 10;
/// The longest a primitive may take before the server is presumed hung
/// (stopped, or stuck on a dead network mount) and is replaced.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// One primitive of [`FileSystem`], as sent to the server.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Stat {
        path: String,
    },
    ReadRange {
        path: String,
        offset: u64,
        max_len: Option<u64>,
    },
    ReadLines {
        path: String,
        window: LineWindow,
    },
    /// The blob is the new content.
    WriteAtomic {
        path: String,
    },
    Remove {
        path: String,
    },
    Rename {
        from: String,
        to: String,
    },
    ListDir {
        path: String,
    },
    Search {
        query: SearchQuery,
    },
    /// The blob is the content to check.
    CheckSyntax {
        checker: SyntaxChecker,
        path: String,
    },
    ResolveSymlinks {
        path: String,
    },
}

impl Request {
    /// Running it twice has the effect of running it once, so a request lost
    /// with a dead server may be sent again to a new one.
    fn repeatable(&self) -> bool {
        !matches!(self, Request::Remove { .. } | Request::Rename { .. })
    }
}

/// What a primitive returned.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    Stat(Option<FileStat>),
    /// The blob is the bytes read.
    ReadRange(Option<FileStat>),
    /// Every [`LineRead`] but a page.
    ReadLines(LineRead),
    /// A [`LineRead::Page`]: its lines are the blob, one after the other,
    /// `line_bytes` long each (raw UTF-8 rather than JSON strings, which cost
    /// escaping on one side and unescaping on the other for every byte).
    Page {
        stat: FileStat,
        total_lines: usize,
        line_bytes: Vec<usize>,
    },
    Written(WriteOutcome),
    Done,
    ListDir(Option<Vec<String>>),
    Search(SearchHits),
    CheckSyntax(CheckRun),
    Resolved(String),
}

type Reply = Result<Answer, FsError>;

/// Blobs up to this size travel in the same write as their header: one
/// system call (and one wake-up of the reader) per message.
const COALESCE_BLOB: usize = 64 << 10;

async fn write_frame<W: AsyncWrite + Unpin + ?Sized>(
    writer: &mut W,
    header: &[u8],
    blob: &[u8],
) -> io::Result<()> {
    let too_big = || io::Error::new(io::ErrorKind::InvalidInput, "frame over 4 GiB");
    let header_len = u32::try_from(header.len()).map_err(|_| too_big())?;
    let blob_len = u32::try_from(blob.len()).map_err(|_| too_big())?;
    let inline = blob.len() <= COALESCE_BLOB;
    let mut frame = Vec::with_capacity(8 + header.len() + if inline { blob.len() } else { 0 });
    frame.extend_from_slice(&header_len.to_be_bytes());
    frame.extend_from_slice(&blob_len.to_be_bytes());
    frame.extend_from_slice(header);
    if inline {
        frame.extend_from_slice(blob);
    }
    writer.write_all(&frame).await?;
    if !inline {
        writer.write_all(blob).await?;
    }
    writer.flush().await
}

/// `None` at a clean end of input (before a frame starts).
async fn read_frame<R: AsyncRead + Unpin + ?Sized>(
    reader: &mut R,
) -> io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut lengths = [0u8; 8];
    match reader.read_exact(&mut lengths[..1]).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    reader.read_exact(&mut lengths[1..]).await?;
    let header_len = u32::from_be_bytes([lengths[0], lengths[1], lengths[2], lengths[3]]);
    let blob_len = u32::from_be_bytes([lengths[4], lengths[5], lengths[6], lengths[7]]);
    if header_len > MAX_HEADER {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame header of {header_len} bytes is not ours"),
        ));
    }
    let mut header = vec![0u8; header_len as usize];
    reader.read_exact(&mut header).await?;
    let mut blob = vec![0u8; blob_len as usize];
    reader.read_exact(&mut blob).await?;
    Ok(Some((header, blob)))
}

/// Answers requests from `reader` with `fs` until end of input.
pub async fn serve<R, W>(fs: &dyn FileSystem, reader: R, mut writer: W) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // A frame is read in several pieces: buffered, they cost one read(2).
    let mut reader = tokio::io::BufReader::with_capacity(READ_BUFFER, reader);
    while let Some((header, blob)) = read_frame(&mut reader).await? {
        let (reply, data) = match serde_json::from_slice::<Request>(&header) {
            Ok(request) => answer(fs, request, blob).await,
            Err(err) => (
                Err(FsError::Backend(format!(
                    "the file server got a bad request: {err}"
                ))),
                Vec::new(),
            ),
        };
        let header = serde_json::to_vec(&reply).map_err(io::Error::other)?;
        write_frame(&mut writer, &header, &data).await?;
    }
    Ok(())
}

async fn answer(fs: &dyn FileSystem, request: Request, blob: Vec<u8>) -> (Reply, Vec<u8>) {
    let reply = match request {
        Request::Stat { path } => fs.stat(&path).await.map(Answer::Stat),
        Request::ReadRange {
            path,
            offset,
            max_len,
        } => {
            return match fs.read_range(&path, offset, max_len).await {
                Ok(Some(bytes)) => (Ok(Answer::ReadRange(Some(bytes.stat))), bytes.data),
                Ok(None) => (Ok(Answer::ReadRange(None)), Vec::new()),
                Err(err) => (Err(err), Vec::new()),
            };
        }
        Request::ReadLines { path, window } => {
            return match fs.read_lines(&path, &window).await {
                Ok(LineRead::Page(page)) => {
                    let line_bytes = page.lines.iter().map(String::len).collect();
                    let mut data = Vec::with_capacity(page.lines.iter().map(String::len).sum());
                    for line in &page.lines {
                        data.extend_from_slice(line.as_bytes());
                    }
                    let answer = Answer::Page {
                        stat: page.stat,
                        total_lines: page.total_lines,
                        line_bytes,
                    };
                    (Ok(answer), data)
                }
                other => (other.map(Answer::ReadLines), Vec::new()),
            };
        }
        Request::WriteAtomic { path } => fs.write_atomic(&path, &blob).await.map(Answer::Written),
        Request::Remove { path } => fs.remove(&path).await.map(|()| Answer::Done),
        Request::Rename { from, to } => fs.rename(&from, &to).await.map(|()| Answer::Done),
        Request::ListDir { path } => fs.list_dir(&path).await.map(Answer::ListDir),
        Request::Search { query } => fs.search(&query).await.map(Answer::Search),
        Request::CheckSyntax { checker, path } => fs
            .check_syntax(checker, &path, &blob)
            .await
            .map(Answer::CheckSyntax),
        Request::ResolveSymlinks { path } => fs.resolve_symlinks(&path).await.map(Answer::Resolved),
    };
    (reply, Vec::new())
}

/// Serves [`LocalFs`](crate::local::LocalFs) on this process's stdin and
/// stdout: the file server's main (`caduceus __file-server`).
pub async fn serve_stdio() -> io::Result<()> {
    let fs = crate::local::LocalFs::new();
    // Pipes are what the worker gives it; epoll-driven pipe ends cost less
    // per message than tokio's blocking-thread stdio.
    use std::os::fd::AsFd;
    let reader: Pin<Box<dyn AsyncRead + Send>> = match std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .and_then(|fd| tokio::net::unix::pipe::Receiver::from_owned_fd(fd).ok())
    {
        Some(pipe) => Box::pin(pipe),
        None => Box::pin(tokio::io::stdin()),
    };
    let writer: Pin<Box<dyn AsyncWrite + Send>> = match std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .and_then(|fd| tokio::net::unix::pipe::Sender::from_owned_fd(fd).ok())
    {
        Some(pipe) => Box::pin(pipe),
        None => Box::pin(tokio::io::stdout()),
    };
    serve(&fs, reader, writer).await
}

/// A connection to a running file server. Dropping it must end the server
/// (`guard` is whatever does: the process handle, kill on drop).
pub struct Connection {
    pub reader: Pin<Box<dyn AsyncRead + Send>>,
    pub writer: Pin<Box<dyn AsyncWrite + Send>>,
    pub guard: Box<dyn Send>,
}

/// Checks that what answers on `connection` is a file server of ours (a
/// program that is something else, or an older caduceus without one, prints
/// anything but a frame): one `stat` of `/`, within `limit`.
pub async fn handshake(connection: &mut Connection, limit: Duration) -> Result<(), String> {
    let header = serde_json::to_vec(&Request::Stat {
        path: "/".to_owned(),
    })
    .map_err(|e| e.to_string())?;
    let exchange = async {
        write_frame(&mut connection.writer, &header, &[]).await?;
        read_frame(&mut connection.reader).await
    };
    match tokio::time::timeout(limit, exchange).await {
        Ok(Ok(Some((header, _)))) => match serde_json::from_slice::<Reply>(&header) {
            Ok(Ok(Answer::Stat(Some(_)))) => Ok(()),
            Ok(other) => Err(format!("it answered {other:?} to a stat of /")),
            Err(err) => Err(format!("it is not a file server: {err}")),
        },
        Ok(Ok(None)) => Err("it ended without answering".to_owned()),
        Ok(Err(err)) => Err(format!("it is not a file server: {err}")),
        Err(_) => Err(format!("it did not answer within {}s", limit.as_secs())),
    }
}

/// Starts a file server and connects to it.
pub type Dial =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<Connection, String>> + Send>> + Send + Sync>;

enum State {
    /// Not started yet, or the last one died: the next request dials.
    Idle,
    Connected(Connection),
    /// It could not be started: every request goes to the fallback.
    Unavailable,
}

/// [`FileSystem`] through a file server, started on first use and restarted
/// when it dies; where none can be started, `fallback` serves instead.
pub struct ServedFs {
    dial: Dial,
    fallback: Arc<dyn FileSystem>,
    state: Mutex<State>,
    timeout: Duration,
}

impl ServedFs {
    pub fn new(dial: Dial, fallback: Arc<dyn FileSystem>) -> Self {
        ServedFs {
            dial,
            fallback,
            state: Mutex::new(State::Idle),
            timeout: REQUEST_TIMEOUT,
        }
    }

    /// How long one primitive may take (tests use a short one).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// `None`: no server can run here; use the fallback.
    async fn call(
        &self,
        request: &Request,
        blob: &[u8],
    ) -> Option<Result<(Answer, Vec<u8>), FsError>> {
        let header = match serde_json::to_vec(request) {
            Ok(header) => header,
            Err(err) => return Some(Err(FsError::Backend(err.to_string()))),
        };
        let mut state = self.state.lock().await;
        let mut attempts = if request.repeatable() { 2 } else { 1 };
        loop {
            attempts -= 1;
            if matches!(*state, State::Idle) {
                match (self.dial)().await {
                    Ok(mut connection) => {
                        connection.reader = Box::pin(tokio::io::BufReader::with_capacity(
                            READ_BUFFER,
                            connection.reader,
                        ));
                        *state = State::Connected(connection);
                    }
                    Err(reason) => {
                        tracing::warn!(%reason, "no file server in this sandbox; its file tools run a shell script per primitive");
                        *state = State::Unavailable;
                    }
                }
            }
            let connection = match &mut *state {
                State::Connected(connection) => connection,
                State::Unavailable => return None,
                State::Idle => unreachable!("dialled above"),
            };
            let exchange = async {
                write_frame(&mut connection.writer, &header, blob).await?;
                read_frame(&mut connection.reader).await?.ok_or_else(|| {
                    io::Error::new(io::ErrorKind::UnexpectedEof, "the file server ended")
                })
            };
            let failure = match tokio::time::timeout(self.timeout, exchange).await {
                Ok(Ok((header, data))) => {
                    return Some(match serde_json::from_slice::<Reply>(&header) {
                        Ok(Ok(answer)) => Ok((answer, data)),
                        Ok(Err(err)) => Err(err),
                        Err(err) => {
                            *state = State::Idle;
                            Err(FsError::Backend(format!(
                                "the file server answered nonsense: {err}"
                            )))
                        }
                    });
                }
                Ok(Err(err)) => format!("the file server died ({err})"),
                Err(_) => format!(
                    "the file server did not answer within {}s",
                    self.timeout.as_secs()
                ),
            };
            // Dropping the connection ends that server; the next one is new.
            *state = State::Idle;
            if attempts == 0 {
                return Some(Err(FsError::Backend(failure)));
            }
            tracing::debug!(%failure, "starting a new file server");
        }
    }
}

/// The lines of a [`Answer::Page`] blob.
fn split_lines(data: &[u8], line_bytes: &[usize]) -> Result<Vec<String>, FsError> {
    let nonsense =
        || FsError::Backend("the file server sent a page that does not add up".to_owned());
    let mut lines = Vec::with_capacity(line_bytes.len());
    let mut rest = data;
    for &len in line_bytes {
        if len > rest.len() {
            return Err(nonsense());
        }
        let (line, tail) = rest.split_at(len);
        lines.push(String::from_utf8(line.to_vec()).map_err(|_| nonsense())?);
        rest = tail;
    }
    if rest.is_empty() {
        Ok(lines)
    } else {
        Err(nonsense())
    }
}

fn unexpected(answer: &Answer) -> FsError {
    FsError::Backend(format!("the file server answered out of turn: {answer:?}"))
}

#[async_trait]
impl FileSystem for ServedFs {
    async fn stat(&self, path: &str) -> Result<Option<FileStat>, FsError> {
        let request = Request::Stat {
            path: path.to_owned(),
        };
        match self.call(&request, &[]).await {
            None => self.fallback.stat(path).await,
            Some(Ok((Answer::Stat(stat), _))) => Ok(stat),
            Some(Ok((other, _))) => Err(unexpected(&other)),
            Some(Err(err)) => Err(err),
        }
    }

    async fn read_range(
        &self,
        path: &str,
        offset: u64,
        max_len: Option<u64>,
    ) -> Result<Option<FileBytes>, FsError> {
        let request = Request::ReadRange {
            path: path.to_owned(),
            offset,
            max_len,
        };
        match self.call(&request, &[]).await {
            None => self.fallback.read_range(path, offset, max_len).await,
            Some(Ok((Answer::ReadRange(stat), data))) => {
                Ok(stat.map(|stat| FileBytes { stat, data }))
            }
            Some(Ok((other, _))) => Err(unexpected(&other)),
            Some(Err(err)) => Err(err),
        }
    }

    async fn read_lines(&self, path: &str, window: &LineWindow) -> Result<LineRead, FsError> {
        let request = Request::ReadLines {
            path: path.to_owned(),
            window: window.clone(),
        };
        match self.call(&request, &[]).await {
            None => self.fallback.read_lines(path, window).await,
            Some(Ok((Answer::ReadLines(read), _))) => Ok(read),
            Some(Ok((
                Answer::Page {
                    stat,
                    total_lines,
                    line_bytes,
                },
                data,
            ))) => Ok(LineRead::Page(LinePage {
                stat,
                lines: split_lines(&data, &line_bytes)?,
                total_lines,
            })),
            Some(Ok((other, _))) => Err(unexpected(&other)),
            Some(Err(err)) => Err(err),
        }
    }

    async fn write_atomic(&self, path: &str, data: &[u8]) -> Result<WriteOutcome, FsError> {
        let request = Request::WriteAtomic {
            path: path.to_owned(),
        };
        match self.call(&request, data).await {
            None => self.fallback.write_atomic(path, data).await,
            Some(Ok((Answer::Written(outcome), _))) => Ok(outcome),
            Some(Ok((other, _))) => Err(unexpected(&other)),
            Some(Err(err)) => Err(err),
        }
    }

    async fn remove(&self, path: &str) -> Result<(), FsError> {
        let request = Request::Remove {
            path: path.to_owned(),
        };
        match self.call(&request, &[]).await {
            None => self.fallback.remove(path).await,
            Some(Ok((Answer::Done, _))) => Ok(()),
            Some(Ok((other, _))) => Err(unexpected(&other)),
            Some(Err(err)) => Err(err),
        }
    }

    async fn rename(&self, from: &str, to: &str) -> Result<(), FsError> {
        let request = Request::Rename {
            from: from.to_owned(),
            to: to.to_owned(),
        };
        match self.call(&request, &[]).await {
            None => self.fallback.rename(from, to).await,
            Some(Ok((Answer::Done, _))) => Ok(()),
            Some(Ok((other, _))) => Err(unexpected(&other)),
            Some(Err(err)) => Err(err),
        }
    }

    async fn list_dir(&self, path: &str) -> Result<Option<Vec<String>>, FsError> {
        let request = Request::ListDir {
            path: path.to_owned(),
        };
        match self.call(&request, &[]).await {
            None => self.fallback.list_dir(path).await,
            Some(Ok((Answer::ListDir(names), _))) => Ok(names),
            Some(Ok((other, _))) => Err(unexpected(&other)),
            Some(Err(err)) => Err(err),
        }
    }

    async fn search(&self, query: &SearchQuery) -> Result<SearchHits, FsError> {
        let request = Request::Search {
            query: query.clone(),
        };
        match self.call(&request, &[]).await {
            None => self.fallback.search(query).await,
            Some(Ok((Answer::Search(hits), _))) => Ok(hits),
            Some(Ok((other, _))) => Err(unexpected(&other)),
            Some(Err(err)) => Err(err),
        }
    }

    async fn check_syntax(
        &self,
        checker: SyntaxChecker,
        path: &str,
        content: &[u8],
    ) -> Result<CheckRun, FsError> {
        let request = Request::CheckSyntax {
            checker,
            path: path.to_owned(),
        };
        match self.call(&request, content).await {
            None => self.fallback.check_syntax(checker, path, content).await,
            Some(Ok((Answer::CheckSyntax(run), _))) => Ok(run),
            Some(Ok((other, _))) => Err(unexpected(&other)),
            Some(Err(err)) => Err(err),
        }
    }

    async fn resolve_symlinks(&self, path: &str) -> Result<String, FsError> {
        let request = Request::ResolveSymlinks {
            path: path.to_owned(),
        };
        match self.call(&request, &[]).await {
            None => self.fallback.resolve_symlinks(path).await,
            Some(Ok((Answer::Resolved(resolved), _))) => Ok(resolved),
            Some(Ok((other, _))) => Err(unexpected(&other)),
            Some(Err(err)) => Err(err),
        }
    }
}

#[cfg(test)]
#[path = "served_tests.rs"]
mod tests;
