//! Sessions and their transcripts in SQLite (`$CADUCEUS_HOME/state.db`),
//! written as a session goes: its row when it starts, every message as it
//! is appended, the outcome when it ends.
//!
//! One writer thread owns the connection, so a slow disk never stalls an
//! agent loop; [`SessionStore::flush`] waits until everything sent so far is
//! on disk. Readers open their own connection ([`read_sessions`],
//! [`read_transcript`]); WAL mode lets them read while the writer writes.
//!
//! ```sql
//! sessions(id PRIMARY KEY, parent_id, root_id, depth, task_id, model, prompt, state,
//!          started_at, ended_at, api_calls, exit_reason, final_response, error,
//!          input_tokens, output_tokens)
//! messages(session_id, idx, role, content, tool_calls, tool_call_id, tool_name, message, created_at,
//!          PRIMARY KEY(session_id, idx))
//! ```
//! `message` is the whole message as sent to the model (JSON); the other
//! columns are for queries. Times are Unix seconds (floating point).

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use tokio::sync::oneshot;

use caduceus_llm::ChatMessage;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the session database {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("cannot create {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("session database error: {0}")]
    Sql(#[from] rusqlite::Error),
}

/// A session row as it starts.
#[derive(Debug, Clone)]
pub struct SessionRow {
    pub id: String,
    pub parent_id: Option<String>,
    pub root_id: String,
    pub depth: u32,
    pub task_id: String,
    pub model: String,
    pub prompt: String,
}

/// How a session ended.
#[derive(Debug, Clone)]
pub struct SessionEnd {
    pub id: String,
    pub state: String,
    pub api_calls: u32,
    pub exit_reason: String,
    pub final_response: Option<String>,
    pub error: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

enum Op {
    Started(SessionRow),
    Message {
        session_id: String,
        index: usize,
        message: Box<ChatMessage>,
        tool_name: Option<String>,
    },
    Ended(SessionEnd),
    Flush(oneshot::Sender<()>),
}

/// The writing end; cheap to clone.
#[derive(Clone)]
pub struct SessionStore {
    tx: mpsc::Sender<Op>,
    path: PathBuf,
}

impl std::fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStore")
            .field("path", &self.path)
            .finish()
    }
}

/// A connection to `state.db` (created with its folder when missing) in WAL
/// mode, so that its several writers (sessions, tokens) and readers coexist.
pub(crate) fn connect(path: &Path) -> Result<Connection, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Dir {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let conn = Connection::open(path).map_err(|source| StoreError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(conn)
}

fn open(path: &Path) -> Result<Connection, StoreError> {
    let conn = connect(path)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS sessions (
            id TEXT PRIMARY KEY, parent_id TEXT, root_id TEXT NOT NULL, depth INTEGER NOT NULL,
            task_id TEXT NOT NULL, model TEXT NOT NULL, prompt TEXT NOT NULL, state TEXT NOT NULL,
            started_at REAL NOT NULL, ended_at REAL, api_calls INTEGER NOT NULL DEFAULT 0,
            exit_reason TEXT, final_response TEXT, error TEXT,
            input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0);
         CREATE INDEX IF NOT EXISTS sessions_root ON sessions(root_id);
         CREATE TABLE IF NOT EXISTS messages (
            session_id TEXT NOT NULL, idx INTEGER NOT NULL, role TEXT NOT NULL, content TEXT,
            tool_calls TEXT, tool_call_id TEXT, tool_name TEXT, message TEXT NOT NULL,
            created_at REAL NOT NULL, PRIMARY KEY (session_id, idx));",
    )?;
    Ok(conn)
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn apply(conn: &Connection, op: Op) -> Result<(), rusqlite::Error> {
    match op {
        Op::Started(row) => {
            conn.execute(
                "INSERT OR REPLACE INTO sessions (id, parent_id, root_id, depth, task_id, model, prompt, state, started_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'running', ?8)",
                params![row.id, row.parent_id, row.root_id, row.depth, row.task_id, row.model, row.prompt, now()],
            )?;
        }
        Op::Message {
            session_id,
            index,
            message,
            tool_name,
        } => {
            let tool_calls = (!message.tool_calls.is_empty())
                .then(|| serde_json::to_string(&message.tool_calls).unwrap_or_default());
            let whole = serde_json::to_string(&message).unwrap_or_default();
            conn.execute(
                "INSERT OR REPLACE INTO messages (session_id, idx, role, content, tool_calls, tool_call_id, tool_name, message, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    session_id,
                    i64::try_from(index).unwrap_or(i64::MAX),
                    message.role.as_str(),
                    message.content.as_ref().map(|c| c.text().into_owned()),
                    tool_calls,
                    message.tool_call_id,
                    tool_name,
                    whole,
                    now()
                ],
            )?;
        }
        Op::Ended(end) => {
            conn.execute(
                "UPDATE sessions SET state = ?2, ended_at = ?3, api_calls = ?4, exit_reason = ?5, final_response = ?6,
                 error = ?7, input_tokens = ?8, output_tokens = ?9 WHERE id = ?1",
                params![
                    end.id,
                    end.state,
                    now(),
                    end.api_calls,
                    end.exit_reason,
                    end.final_response,
                    end.error,
                    i64::try_from(end.input_tokens).unwrap_or(i64::MAX),
                    i64::try_from(end.output_tokens).unwrap_or(i64::MAX)
                ],
            )?;
        }
        Op::Flush(done) => {
            let _ = done.send(());
        }
    }
    Ok(())
}

impl SessionStore {
    /// Opens (creating if needed) the database and starts its writer thread.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let path = path.into();
        let conn = open(&path)?;
        let (tx, rx) = mpsc::channel::<Op>();
        let label = path.display().to_string();
        std::thread::Builder::new()
            .name("caduceus-state-db".to_owned())
            .spawn(move || {
                // Ends when every sender is gone.
                while let Ok(op) = rx.recv() {
                    if let Err(err) = apply(&conn, op) {
                        tracing::warn!(db = %label, "could not record a session change: {err}");
                    }
                }
            })
            .map_err(|source| StoreError::Dir {
                path: path.clone(),
                source,
            })?;
        Ok(SessionStore { tx, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn session_started(&self, row: SessionRow) {
        let _ = self.tx.send(Op::Started(row));
    }

    pub fn message(
        &self,
        session_id: &str,
        index: usize,
        message: &ChatMessage,
        tool_name: Option<&str>,
    ) {
        let _ = self.tx.send(Op::Message {
            session_id: session_id.to_owned(),
            index,
            message: Box::new(message.clone()),
            tool_name: tool_name.map(str::to_owned),
        });
    }

    pub fn session_ended(&self, end: SessionEnd) {
        let _ = self.tx.send(Op::Ended(end));
    }

    /// Waits until everything sent before is written.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Op::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }
}

/// A stored session, for listings and tests.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredSession {
    pub id: String,
    pub parent_id: Option<String>,
    pub root_id: String,
    pub depth: u32,
    pub task_id: String,
    pub model: String,
    pub prompt: String,
    pub state: String,
    pub api_calls: u32,
    pub exit_reason: Option<String>,
    pub final_response: Option<String>,
}

/// A stored message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredMessage {
    pub index: usize,
    pub role: String,
    pub content: Option<String>,
    pub tool_name: Option<String>,
    pub tool_call_id: Option<String>,
    /// The whole message as sent to the model.
    pub message: serde_json::Value,
}

/// Every session, oldest first.
pub fn read_sessions(path: &Path) -> Result<Vec<StoredSession>, StoreError> {
    let conn = open(path)?;
    let mut stmt = conn.prepare(
        "SELECT id, parent_id, root_id, depth, task_id, model, prompt, state, api_calls, exit_reason, final_response
         FROM sessions ORDER BY started_at, rowid",
    )?;
    let rows = stmt.query_map([], |row| {
        Ok(StoredSession {
            id: row.get(0)?,
            parent_id: row.get(1)?,
            root_id: row.get(2)?,
            depth: row.get(3)?,
            task_id: row.get(4)?,
            model: row.get(5)?,
            prompt: row.get(6)?,
            state: row.get(7)?,
            api_calls: row.get(8)?,
            exit_reason: row.get(9)?,
            final_response: row.get(10)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// One session's messages in order.
pub fn read_transcript(path: &Path, session_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
    let conn = open(path)?;
    let mut stmt =
        conn.prepare("SELECT idx, role, content, tool_name, tool_call_id, message FROM messages WHERE session_id = ?1 ORDER BY idx")?;
    let rows = stmt.query_map([session_id], |row| {
        let index: i64 = row.get(0)?;
        let message: String = row.get(5)?;
        Ok(StoredMessage {
            index: usize::try_from(index).unwrap_or_default(),
            role: row.get(1)?,
            content: row.get(2)?,
            tool_name: row.get(3)?,
            tool_call_id: row.get(4)?,
            message: serde_json::from_str(&message).unwrap_or(serde_json::Value::Null),
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The state of one session, if stored.
pub fn read_state(path: &Path, session_id: &str) -> Result<Option<String>, StoreError> {
    let conn = open(path)?;
    Ok(conn
        .query_row(
            "SELECT state FROM sessions WHERE id = ?1",
            [session_id],
            |row| row.get(0),
        )
        .optional()?)
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
