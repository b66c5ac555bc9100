//! Sessions, their transcripts, their tool calls, their event streams and
//! the placements of their environments in SQLite (`$CADUCEUS_HOME/state.db`),
//! written as a session goes: its row when it starts, every message as it
//! is appended, every tool call before it is dispatched (write-ahead: a
//! `pending` row, flushed before the call leaves) and again when its result
//! arrives, every event of the stream, the outcome when it ends. After a
//! restart this is what a session resumes from (see `resume.rs`).
//!
//! One writer thread owns the connection, so a slow disk never stalls an
//! agent loop; [`SessionStore::flush`] waits until everything sent so far is
//! on disk. Readers open their own connection ([`read_sessions`],
//! [`read_transcript`], …); WAL mode lets them read while the writer writes.
//!
//! ```sql
//! sessions(id PRIMARY KEY, parent_id, root_id, depth, task_id, model, prompt, state,
//!          started_at, ended_at, api_calls, exit_reason, final_response, error,
//!          input_tokens, output_tokens, parent_call_id, task_index, spec, owner, durable)
//! messages(id INTEGER PRIMARY KEY, session_id, idx, role, content, tool_calls, tool_call_id,
//!          tool_name, message, created_at, UNIQUE(session_id, idx))
//! messages_fts USING fts5(content)  -- rowid = messages.id, kept by triggers
//! calls(session_id, turn, call_id, tool, arguments, task_id, state, status, worker, result,
//!       started_at, finished_at, PRIMARY KEY(session_id, turn, call_id))
//! events(root_id, seq, session_id, kind, json, PRIMARY KEY(root_id, seq))
//! placements(task_id PRIMARY KEY, worker, updated_at)
//! ```
//! `message` is the whole message as sent to the model (JSON); the other
//! columns are for queries. `turn` is the index of the assistant message that
//! asked for the call; a call's `state` is `pending` (dispatched, no result
//! yet) or `done`. `spec` holds what a session needs to resume (its tool
//! filter, budget, role, …) as JSON; `owner` names the coordinator process
//! that runs it, whose lock file (`state.db.owners/OWNER.lock`) is held while
//! it lives; `durable` marks sessions a later coordinator resumes on its own
//! (served coordinators' sessions). Times are Unix seconds (floating point).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
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

/// What a session needs, beyond its row and transcript, to resume after a
/// restart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ResumeSpec {
    /// The environment was made for the session and is released when it ends.
    pub release_task: bool,
    pub enabled_toolsets: Vec<String>,
    pub disabled_toolsets: Vec<String>,
    pub blocked_tools: Vec<String>,
    pub max_iterations: u32,
    /// A child's role (`leaf`, `orchestrator`).
    pub role: Option<String>,
    pub interactive: bool,
    /// A child's `output_schema`.
    pub output_schema: Option<serde_json::Value>,
    /// The directory the session's environment starts in (a cron job's).
    pub workdir: Option<String>,
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
    /// A child's `delegate_task` call in its parent, and its position in it.
    pub parent_call_id: Option<String>,
    pub task_index: Option<usize>,
    pub spec: ResumeSpec,
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

/// A tool call about to be dispatched (the write-ahead record).
#[derive(Debug, Clone)]
pub struct CallStart {
    pub session_id: String,
    /// Index of the assistant message that asked for the call.
    pub turn: usize,
    pub call_id: String,
    pub tool: String,
    pub arguments: String,
    pub task_id: String,
}

/// The result of a recorded call, as the pipeline returned it.
#[derive(Debug, Clone)]
pub struct CallResult {
    pub session_id: String,
    pub turn: usize,
    pub call_id: String,
    pub result: String,
    /// The pipeline's status (`ok`, `error`, `cancelled`, …).
    pub status: String,
    pub worker: Option<String>,
}

enum Op {
    Started(Box<SessionRow>, String, bool),
    Message {
        session_id: String,
        index: usize,
        message: Box<ChatMessage>,
        tool_name: Option<String>,
    },
    Ended(SessionEnd),
    CallStarted(CallStart),
    CallFinished(CallResult),
    Event(StoredEvent),
    Placement {
        task_id: String,
        worker: String,
    },
    Flush(oneshot::Sender<()>),
}

/// The writing end; cheap to clone. It holds its owner lock while any clone lives.
#[derive(Clone)]
pub struct SessionStore {
    tx: mpsc::Sender<Op>,
    path: PathBuf,
    owner: std::sync::Arc<Owner>,
    durable: bool,
}

/// The lock file that says this process still runs its sessions.
struct Owner {
    id: String,
    _lock: File,
}

impl std::fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStore")
            .field("path", &self.path)
            .field("owner", &self.owner.id)
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
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL, idx INTEGER NOT NULL, role TEXT NOT NULL, content TEXT,
            tool_calls TEXT, tool_call_id TEXT, tool_name TEXT, message TEXT NOT NULL,
            created_at REAL NOT NULL, UNIQUE (session_id, idx));
         CREATE TABLE IF NOT EXISTS calls (
            session_id TEXT NOT NULL, turn INTEGER NOT NULL, call_id TEXT NOT NULL,
            tool TEXT NOT NULL, arguments TEXT NOT NULL, task_id TEXT NOT NULL,
            state TEXT NOT NULL, status TEXT, worker TEXT, result TEXT,
            started_at REAL NOT NULL, finished_at REAL,
            PRIMARY KEY (session_id, turn, call_id));
         CREATE TABLE IF NOT EXISTS events (
            root_id TEXT NOT NULL, seq INTEGER NOT NULL, session_id TEXT NOT NULL,
            kind TEXT NOT NULL, json TEXT NOT NULL, PRIMARY KEY (root_id, seq));
         CREATE TABLE IF NOT EXISTS placements (
            task_id TEXT PRIMARY KEY, worker TEXT NOT NULL, updated_at REAL NOT NULL);",
    )?;
    // Databases written before sessions could resume lack these columns.
    let mut columns = conn.prepare("SELECT name FROM pragma_table_info('sessions')")?;
    let present: Vec<String> = columns
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    for (name, decl) in [
        ("parent_call_id", "TEXT"),
        ("task_index", "INTEGER"),
        ("spec", "TEXT"),
        ("owner", "TEXT"),
        ("durable", "INTEGER NOT NULL DEFAULT 0"),
    ] {
        if !present.iter().any(|p| p == name) {
            conn.execute_batch(&format!("ALTER TABLE sessions ADD COLUMN {name} {decl}"))?;
        }
    }
    drop(columns);
    migrate_message_ids(&conn)?;
    ensure_search_index(&conn)?;
    Ok(conn)
}

/// Creates the database, or brings an older one up to date (message ids,
/// the search index).
pub fn ensure_schema(path: &Path) -> Result<(), StoreError> {
    open(path).map(drop)
}

/// Databases written before session_search keyed messages by (session, idx)
/// alone; the search index and `around_message_id` need a stable integer id
/// per message. The table is rebuilt once with one, in the order messages
/// were written.
fn migrate_message_ids(conn: &Connection) -> Result<(), rusqlite::Error> {
    // Checked inside the write transaction: two processes opening an old
    // database at once migrate it once.
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let has_id: bool = conn.query_row(
        "SELECT COUNT(*) > 0 FROM pragma_table_info('messages') WHERE name = 'id'",
        [],
        |row| row.get(0),
    )?;
    if has_id {
        return conn.execute_batch("COMMIT");
    }
    conn.execute_batch(
        "CREATE TABLE messages_with_ids (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL, idx INTEGER NOT NULL, role TEXT NOT NULL, content TEXT,
            tool_calls TEXT, tool_call_id TEXT, tool_name TEXT, message TEXT NOT NULL,
            created_at REAL NOT NULL, UNIQUE (session_id, idx));
         INSERT INTO messages_with_ids
            (session_id, idx, role, content, tool_calls, tool_call_id, tool_name, message, created_at)
            SELECT session_id, idx, role, content, tool_calls, tool_call_id, tool_name, message, created_at
            FROM messages ORDER BY created_at, session_id, idx;
         DROP TABLE messages;
         ALTER TABLE messages_with_ids RENAME TO messages;
         COMMIT;",
    )
}

/// The text of a message the full-text index holds (hermes indexes the
/// tool name and the calls' arguments too).
const INDEXED_TEXT: &str = "COALESCE(new.content, '') || ' ' || COALESCE(new.tool_name, '') || ' ' || COALESCE(new.tool_calls, '')";

/// The FTS5 index over messages (`messages_fts`, rowid = `messages.id`),
/// kept by triggers on every write; built from the transcripts already
/// there when it is first created.
fn ensure_search_index(conn: &Connection) -> Result<(), rusqlite::Error> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let exists: bool = conn.query_row(
        "SELECT COUNT(*) > 0 FROM sqlite_master WHERE name = 'messages_fts'",
        [],
        |row| row.get(0),
    )?;
    if exists {
        return conn.execute_batch("COMMIT");
    }
    let text = INDEXED_TEXT;
    let existing = text.replace("new.", "");
    conn.execute_batch(&format!(
        "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(content);
         CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages BEGIN
            INSERT INTO messages_fts(rowid, content) VALUES (new.id, {text});
         END;
         CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages BEGIN
            DELETE FROM messages_fts WHERE rowid = old.id;
         END;
         CREATE TRIGGER IF NOT EXISTS messages_fts_update AFTER UPDATE ON messages BEGIN
            DELETE FROM messages_fts WHERE rowid = old.id;
            INSERT INTO messages_fts(rowid, content) VALUES (new.id, {text});
         END;
         INSERT INTO messages_fts(rowid, content) SELECT id, {existing} FROM messages;
         COMMIT;"
    ))
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn sql_index(index: usize) -> i64 {
    i64::try_from(index).unwrap_or(i64::MAX)
}

fn apply(conn: &Connection, op: Op) -> Result<(), rusqlite::Error> {
    match op {
        Op::Started(row, owner, durable) => {
            let spec = serde_json::to_string(&row.spec).unwrap_or_default();
            conn.execute(
                // A resumed session is taken over: same row, new owner.
                "INSERT INTO sessions (id, parent_id, root_id, depth, task_id, model, prompt, state, started_at,
                 parent_call_id, task_index, spec, owner, durable)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'running', ?8, ?9, ?10, ?11, ?12, ?13)
                 ON CONFLICT(id) DO UPDATE SET state = 'running', owner = excluded.owner, durable = excluded.durable",
                params![
                    row.id,
                    row.parent_id,
                    row.root_id,
                    row.depth,
                    row.task_id,
                    row.model,
                    row.prompt,
                    now(),
                    row.parent_call_id,
                    row.task_index.map(sql_index),
                    spec,
                    owner,
                    durable
                ],
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
                // An upsert, not a replace: the message keeps its id, and the
                // search index's update trigger sees the change.
                "INSERT INTO messages (session_id, idx, role, content, tool_calls, tool_call_id, tool_name, message, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT(session_id, idx) DO UPDATE SET role = excluded.role, content = excluded.content,
                 tool_calls = excluded.tool_calls, tool_call_id = excluded.tool_call_id,
                 tool_name = excluded.tool_name, message = excluded.message",
                params![
                    session_id,
                    sql_index(index),
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
        Op::CallStarted(call) => {
            conn.execute(
                "INSERT OR REPLACE INTO calls (session_id, turn, call_id, tool, arguments, task_id, state, started_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', ?7)",
                params![
                    call.session_id,
                    sql_index(call.turn),
                    call.call_id,
                    call.tool,
                    call.arguments,
                    call.task_id,
                    now()
                ],
            )?;
        }
        Op::CallFinished(done) => {
            conn.execute(
                "UPDATE calls SET state = 'done', status = ?4, worker = ?5, result = ?6, finished_at = ?7
                 WHERE session_id = ?1 AND turn = ?2 AND call_id = ?3",
                params![
                    done.session_id,
                    sql_index(done.turn),
                    done.call_id,
                    done.status,
                    done.worker,
                    done.result,
                    now()
                ],
            )?;
        }
        Op::Event(event) => {
            conn.execute(
                "INSERT OR REPLACE INTO events (root_id, seq, session_id, kind, json) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    event.root_id,
                    i64::try_from(event.seq).unwrap_or(i64::MAX),
                    event.session_id,
                    event.kind,
                    event.json
                ],
            )?;
        }
        Op::Placement { task_id, worker } => {
            conn.execute(
                "INSERT OR REPLACE INTO placements (task_id, worker, updated_at) VALUES (?1, ?2, ?3)",
                params![task_id, worker, now()],
            )?;
        }
        Op::Flush(done) => {
            let _ = done.send(());
        }
    }
    Ok(())
}

/// Where the owner lock files of a database live.
fn owners_dir(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".owners");
    PathBuf::from(name)
}

/// Takes this process's owner lock (held until the store is dropped or the
/// process dies, however it dies).
fn take_owner(path: &Path) -> Result<Owner, StoreError> {
    let dir = owners_dir(path);
    std::fs::create_dir_all(&dir).map_err(|source| StoreError::Dir {
        path: dir.clone(),
        source,
    })?;
    let id = format!("own-{}", &uuid::Uuid::new_v4().simple().to_string()[..16]);
    let file_path = dir.join(format!("{id}.lock"));
    let lock = File::create(&file_path)
        .and_then(|file| file.lock().map(|()| file))
        .map_err(|source| StoreError::Dir {
            path: file_path,
            source,
        })?;
    Ok(Owner { id, _lock: lock })
}

/// Whether the process that recorded sessions as `owner` still runs: its lock
/// file is still locked. A missing file means gone; a gone owner's file is removed.
pub fn owner_alive(path: &Path, owner: &str) -> bool {
    if owner.is_empty() || owner.contains(['/', '.']) {
        return false;
    }
    let file_path = owners_dir(path).join(format!("{owner}.lock"));
    let Ok(file) = File::open(&file_path) else {
        return false;
    };
    match file.try_lock() {
        Ok(()) => {
            let _ = std::fs::remove_file(&file_path);
            false
        }
        Err(_) => true,
    }
}

impl SessionStore {
    /// Opens (creating if needed) the database, takes an owner lock, and starts
    /// the writer thread. `durable`: a later coordinator resumes this one's
    /// running sessions on its own when this process is gone.
    pub fn open(path: impl Into<PathBuf>, durable: bool) -> Result<Self, StoreError> {
        let path = path.into();
        let conn = open(&path)?;
        let owner = take_owner(&path)?;
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
        Ok(SessionStore {
            tx,
            path,
            owner: std::sync::Arc::new(owner),
            durable,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The id this process records its sessions under.
    pub fn owner(&self) -> &str {
        &self.owner.id
    }

    /// Records a session as running, owned by this process (a resumed
    /// session is taken over this way).
    pub fn session_started(&self, row: SessionRow) {
        let _ = self.tx.send(Op::Started(
            Box::new(row),
            self.owner.id.clone(),
            self.durable,
        ));
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

    /// The write-ahead record of a call: on disk when this returns, so a call
    /// that was dispatched is never mistaken for one that was not.
    pub async fn call_started(&self, call: CallStart) {
        let _ = self.tx.send(Op::CallStarted(call));
        self.flush().await;
    }

    pub fn call_finished(&self, done: CallResult) {
        let _ = self.tx.send(Op::CallFinished(done));
    }

    pub fn event(&self, event: StoredEvent) {
        let _ = self.tx.send(Op::Event(event));
    }

    /// The worker that last ran a call in `task_id`'s environment.
    pub fn placement(&self, task_id: &str, worker: &str) {
        let _ = self.tx.send(Op::Placement {
            task_id: task_id.to_owned(),
            worker: worker.to_owned(),
        });
    }

    /// Waits until everything sent before is written.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Op::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }
}

/// A stored session, for listings, tests and resuming.
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
    pub error: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub started_at: f64,
    pub ended_at: Option<f64>,
    pub parent_call_id: Option<String>,
    pub task_index: Option<usize>,
    #[serde(skip)]
    pub spec: ResumeSpec,
    pub owner: Option<String>,
    pub durable: bool,
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

/// A stored tool call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredCall {
    pub turn: usize,
    pub call_id: String,
    pub tool: String,
    pub arguments: String,
    pub task_id: String,
    /// `pending` (dispatched, no result recorded) or `done`.
    pub state: String,
    pub status: Option<String>,
    pub worker: Option<String>,
    pub result: Option<String>,
}

/// One event of a session tree's stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredEvent {
    pub root_id: String,
    pub seq: u64,
    pub session_id: String,
    pub kind: String,
    pub json: String,
}

const SESSION_COLUMNS: &str = "id, parent_id, root_id, depth, task_id, model, prompt, state, api_calls, exit_reason,
     final_response, error, input_tokens, output_tokens, started_at, ended_at, parent_call_id, task_index, spec, owner, durable";

fn session_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoredSession> {
    let count = |i: usize| -> rusqlite::Result<u64> {
        Ok(u64::try_from(row.get::<_, i64>(i)?).unwrap_or_default())
    };
    let spec: Option<String> = row.get(18)?;
    let task_index: Option<i64> = row.get(17)?;
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
        error: row.get(11)?,
        input_tokens: count(12)?,
        output_tokens: count(13)?,
        started_at: row.get(14)?,
        ended_at: row.get(15)?,
        parent_call_id: row.get(16)?,
        task_index: task_index.and_then(|i| usize::try_from(i).ok()),
        spec: spec
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default(),
        owner: row.get(19)?,
        durable: row.get(20)?,
    })
}

/// Every session, oldest first.
pub fn read_sessions(path: &Path) -> Result<Vec<StoredSession>, StoreError> {
    let conn = open(path)?;
    let mut stmt = conn.prepare(&format!(
        "SELECT {SESSION_COLUMNS} FROM sessions ORDER BY started_at, rowid"
    ))?;
    let rows = stmt.query_map([], session_from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// One session, if stored.
pub fn read_session(path: &Path, session_id: &str) -> Result<Option<StoredSession>, StoreError> {
    let conn = open(path)?;
    Ok(conn
        .query_row(
            &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1"),
            [session_id],
            session_from_row,
        )
        .optional()?)
}

/// The children a `delegate_task` call started, by their position in it.
pub fn read_children(
    path: &Path,
    parent_id: &str,
    parent_call_id: &str,
) -> Result<Vec<StoredSession>, StoreError> {
    let conn = open(path)?;
    let mut stmt = conn.prepare(&format!(
        "SELECT {SESSION_COLUMNS} FROM sessions WHERE parent_id = ?1 AND parent_call_id = ?2 ORDER BY task_index"
    ))?;
    let rows = stmt.query_map([parent_id, parent_call_id], session_from_row)?;
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

/// One session's recorded tool calls, in the order they were asked for.
pub fn read_calls(path: &Path, session_id: &str) -> Result<Vec<StoredCall>, StoreError> {
    let conn = open(path)?;
    let mut stmt = conn.prepare(
        "SELECT turn, call_id, tool, arguments, task_id, state, status, worker, result
         FROM calls WHERE session_id = ?1 ORDER BY turn, started_at, rowid",
    )?;
    let rows = stmt.query_map([session_id], |row| {
        let turn: i64 = row.get(0)?;
        Ok(StoredCall {
            turn: usize::try_from(turn).unwrap_or_default(),
            call_id: row.get(1)?,
            tool: row.get(2)?,
            arguments: row.get(3)?,
            task_id: row.get(4)?,
            state: row.get(5)?,
            status: row.get(6)?,
            worker: row.get(7)?,
            result: row.get(8)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The events of a session tree with `seq` above `after` (and at most
/// `until`, when given), in order.
pub fn read_events(
    path: &Path,
    root_id: &str,
    after: u64,
    until: Option<u64>,
) -> Result<Vec<StoredEvent>, StoreError> {
    let conn = open(path)?;
    let mut stmt = conn.prepare(
        "SELECT seq, session_id, kind, json FROM events WHERE root_id = ?1 AND seq > ?2 AND seq <= ?3 ORDER BY seq",
    )?;
    let as_sql = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let rows = stmt.query_map(
        params![root_id, as_sql(after), as_sql(until.unwrap_or(u64::MAX))],
        |row| {
            let seq: i64 = row.get(0)?;
            Ok(StoredEvent {
                root_id: root_id.to_owned(),
                seq: u64::try_from(seq).unwrap_or_default(),
                session_id: row.get(1)?,
                kind: row.get(2)?,
                json: row.get(3)?,
            })
        },
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The last `seq` of a session tree's stream (0 when it has none).
pub fn last_seq(path: &Path, root_id: &str) -> Result<u64, StoreError> {
    let conn = open(path)?;
    let seq: Option<i64> = conn.query_row(
        "SELECT MAX(seq) FROM events WHERE root_id = ?1",
        [root_id],
        |row| row.get(0),
    )?;
    Ok(seq.and_then(|s| u64::try_from(s).ok()).unwrap_or(0))
}

/// The worker that last ran a call in `task_id`'s environment.
pub fn read_placement(path: &Path, task_id: &str) -> Result<Option<String>, StoreError> {
    let conn = open(path)?;
    Ok(conn
        .query_row(
            "SELECT worker FROM placements WHERE task_id = ?1",
            [task_id],
            |row| row.get(0),
        )
        .optional()?)
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

/// Top-level sessions still marked running whose coordinator is gone, and that
/// a coordinator resumes on its own (`durable`), oldest first.
pub fn orphaned_roots(path: &Path) -> Result<Vec<StoredSession>, StoreError> {
    Ok(read_sessions(path)?
        .into_iter()
        .filter(|s| s.parent_id.is_none() && s.state == "running" && s.durable)
        .filter(|s| !owner_alive(path, s.owner.as_deref().unwrap_or_default()))
        .collect())
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
