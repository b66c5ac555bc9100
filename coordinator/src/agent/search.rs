//! `session_search` (hermes `tools/session_search_tool.py`): recall over the
//! transcripts in `state.db`, through the FTS5 index the store keeps
//! (`messages_fts`). No model is asked; every shape returns stored messages.
//!
//! The shape follows from the arguments:
//! - discover (`query`): FTS5 hits, one per session (best first, or by time
//!   with `sort`), each with the hit's ±5 messages, the session's first and
//!   last three user/assistant messages, and the FTS snippet;
//! - scroll (`session_id` + `around_message_id`): ±`window` messages around
//!   a message;
//! - read (`session_id`): the whole session (first 20 + last 10 when longer);
//! - browse (nothing): the most recent sessions.
//!
//! Delegated children are not searched (hermes hides subagent sessions);
//! the calling session's own conversation is left out (it is in its context).

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::{Map, Value, json};

use caduceus_common::result::to_json;

use super::store::{StoreError, connect};
use crate::call::{CallContext, CallStatus, ToolReply};
use crate::registry::{Handler, LocalTool, ParallelClass, RegistryError, ToolEntry};

/// FTS rows read before de-duplicating by session.
const SCAN_LIMIT: i64 = 300;
/// Longest query text handed to the sanitizer.
const MAX_QUERY_CHARS: usize = 2048;
const DEFAULT_LIMIT: i64 = 3;
const DEFAULT_WINDOW: i64 = 5;
const BOOKEND: i64 = 3;
const READ_HEAD: usize = 20;
const READ_TAIL: usize = 10;

/// What a call asks for, after hermes' defaults and clamps.
#[derive(Debug, Clone, Default)]
pub struct SearchArgs {
    pub query: String,
    pub limit: Option<i64>,
    pub sort: Option<String>,
    pub session_id: Option<String>,
    pub around_message_id: Option<Value>,
    pub window: Option<Value>,
    pub role_filter: Option<String>,
}

impl SearchArgs {
    pub fn from_map(args: &Map<String, Value>) -> Self {
        let text = |key: &str| args.get(key).and_then(Value::as_str).map(str::to_owned);
        SearchArgs {
            query: text("query").unwrap_or_default(),
            limit: args.get("limit").and_then(as_int),
            sort: text("sort"),
            session_id: text("session_id"),
            around_message_id: args
                .get("around_message_id")
                .filter(|v| !v.is_null())
                .cloned(),
            window: args.get("window").filter(|v| !v.is_null()).cloned(),
            role_filter: text("role_filter"),
        }
    }
}

fn as_int(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn failure(error: impl Into<String>) -> Value {
    json!({"success": false, "error": error.into()})
}

/// Runs one `session_search` over the database at `path`, on behalf of
/// `current_session` (whose conversation is left out).
pub fn session_search(path: &Path, args: &SearchArgs, current_session: Option<&str>) -> Value {
    let conn = match open_for_reading(path) {
        Ok(conn) => conn,
        Err(err) => return failure(format!("Session database unavailable: {err}")),
    };
    match run(&conn, args, current_session) {
        Ok(value) => value,
        Err(err) => failure(format!("Search failed: {err}")),
    }
}

fn open_for_reading(path: &Path) -> Result<Connection, StoreError> {
    // The schema and the index were made when the tool was registered.
    connect(path)
}

fn run(
    conn: &Connection,
    args: &SearchArgs,
    current_session: Option<&str>,
) -> Result<Value, rusqlite::Error> {
    let current_root = match current_session {
        Some(id) => Some(root_of(conn, id)?.unwrap_or_else(|| id.to_owned())),
        None => None,
    };
    let session_id = args
        .session_id
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    if let (Some(session_id), Some(anchor)) = (session_id, &args.around_message_id) {
        return scroll(
            conn,
            session_id,
            anchor,
            args.window.as_ref(),
            current_root.as_deref(),
        );
    }
    if let Some(session_id) = session_id {
        return read(conn, session_id);
    }
    let limit = args.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, 10);
    let query = args.query.trim();
    if query.is_empty() {
        return browse(conn, limit, current_root.as_deref());
    }
    let roles: Vec<String> = args
        .role_filter
        .as_deref()
        .map(|r| {
            r.split(',')
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .filter(|r: &Vec<String>| !r.is_empty())
        .unwrap_or_else(|| vec!["user".to_owned(), "assistant".to_owned()]);
    let sort = args
        .sort
        .as_deref()
        .map(|s| s.trim().to_lowercase())
        .filter(|s| s == "newest" || s == "oldest");
    discover(
        conn,
        query,
        &roles,
        limit,
        sort.as_deref(),
        current_root.as_deref(),
    )
}

fn root_of(conn: &Connection, session_id: &str) -> Result<Option<String>, rusqlite::Error> {
    conn.query_row(
        "SELECT root_id FROM sessions WHERE id = ?1",
        [session_id],
        |row| row.get(0),
    )
    .optional()
}

/// A stored message as the tool shows it.
fn shape(row: &rusqlite::Row<'_>, anchor: Option<i64>) -> rusqlite::Result<Value> {
    let id: i64 = row.get("id")?;
    let mut message = Map::new();
    message.insert("id".into(), json!(id));
    message.insert("role".into(), json!(row.get::<_, String>("role")?));
    message.insert(
        "content".into(),
        json!(row.get::<_, Option<String>>("content")?),
    );
    message.insert("timestamp".into(), json!(row.get::<_, f64>("created_at")?));
    if let Some(name) = row
        .get::<_, Option<String>>("tool_name")?
        .filter(|n| !n.is_empty())
    {
        message.insert("tool_name".into(), json!(name));
    }
    if let Some(calls) = row.get::<_, Option<String>>("tool_calls")? {
        let calls: Value = serde_json::from_str(&calls).unwrap_or_else(|_| json!([]));
        if calls.as_array().is_some_and(|a| !a.is_empty()) {
            message.insert("tool_calls".into(), calls);
        }
    }
    if let Some(call_id) = row
        .get::<_, Option<String>>("tool_call_id")?
        .filter(|c| !c.is_empty())
    {
        message.insert("tool_call_id".into(), json!(call_id));
    }
    if anchor == Some(id) {
        message.insert("anchor".into(), json!(true));
    }
    Ok(Value::Object(message))
}

const MESSAGE_COLUMNS: &str = "id, role, content, created_at, tool_name, tool_calls, tool_call_id";

struct SessionMeta {
    started_at: f64,
    model: String,
    durable: bool,
}

fn meta(conn: &Connection, session_id: &str) -> Result<Option<SessionMeta>, rusqlite::Error> {
    conn.query_row(
        "SELECT started_at, model, durable FROM sessions WHERE id = ?1",
        [session_id],
        |row| {
            Ok(SessionMeta {
                started_at: row.get(0)?,
                model: row.get(1)?,
                durable: row.get::<_, Option<bool>>(2)?.unwrap_or(false),
            })
        },
    )
    .optional()
}

impl SessionMeta {
    /// Where the session ran: a served coordinator or an embedded `caduceus run`.
    fn source(&self) -> &'static str {
        if self.durable { "serve" } else { "cli" }
    }

    fn json(&self) -> Value {
        json!({
            "when": format_timestamp(self.started_at),
            "source": self.source(),
            "model": self.model,
            "title": null,
        })
    }
}

/// `November 30, 2026 at 02:05 PM` (hermes' spelling; UTC).
pub fn format_timestamp(seconds: f64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let secs = seconds.max(0.0) as i64;
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let hour = of_day / 3600;
    let minute = (of_day % 3600) / 60;
    let (hour12, half) = match hour {
        0 => (12, "AM"),
        1..=11 => (hour, "AM"),
        12 => (12, "PM"),
        _ => (hour - 12, "PM"),
    };
    let month_name = MONTHS
        .get(usize::try_from(month - 1).unwrap_or(0))
        .copied()
        .unwrap_or("January");
    format!("{month_name} {day:02}, {year} at {hour12:02}:{minute:02} {half}")
}

/// The messages around an anchor: shaped, their roles, and how many there
/// were before and after it.
struct Window {
    messages: Vec<Value>,
    roles: Vec<String>,
    before: i64,
    after: i64,
}

/// Messages `window` either side of `anchor` in `session_id` (the anchor
/// included), and how many of each side there were.
fn around(
    conn: &Connection,
    session_id: &str,
    anchor: i64,
    window: i64,
) -> Result<Option<Window>, rusqlite::Error> {
    let exists: bool = conn.query_row(
        "SELECT COUNT(*) > 0 FROM messages WHERE id = ?1 AND session_id = ?2",
        params![anchor, session_id],
        |row| row.get(0),
    )?;
    if !exists {
        return Ok(None);
    }
    let mut before = conn.prepare(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ?1 AND id <= ?2 ORDER BY id DESC LIMIT ?3"
    ))?;
    let mut rows: Vec<(Value, String)> = before
        .query_map(params![session_id, anchor, window + 1], |row| {
            Ok((shape(row, Some(anchor))?, row.get::<_, String>("role")?))
        })?
        .collect::<Result<_, _>>()?;
    let messages_before = i64::try_from(rows.len()).unwrap_or(0) - 1;
    rows.reverse();
    let mut after = conn.prepare(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ?1 AND id > ?2 ORDER BY id ASC LIMIT ?3"
    ))?;
    let later: Vec<(Value, String)> = after
        .query_map(params![session_id, anchor, window], |row| {
            Ok((shape(row, Some(anchor))?, row.get::<_, String>("role")?))
        })?
        .collect::<Result<_, _>>()?;
    let messages_after = i64::try_from(later.len()).unwrap_or(0);
    rows.extend(later);
    let (messages, roles) = rows.into_iter().unzip();
    Ok(Some(Window {
        messages,
        roles,
        before: messages_before.max(0),
        after: messages_after,
    }))
}

fn scroll(
    conn: &Connection,
    session_id: &str,
    anchor: &Value,
    window: Option<&Value>,
    current_root: Option<&str>,
) -> Result<Value, rusqlite::Error> {
    let Some(anchor) = as_int(anchor) else {
        return Ok(failure("scroll requires integer around_message_id"));
    };
    let window = window
        .and_then(as_int)
        .unwrap_or(DEFAULT_WINDOW)
        .clamp(1, 20);
    if let Some(current) = current_root
        && root_of(conn, session_id)?.as_deref() == Some(current)
    {
        return Ok(failure(
            "scroll rejected: anchor lives in the current session lineage (already in your active context)",
        ));
    }
    let Some(meta) = meta(conn, session_id)? else {
        return Ok(failure(format!("session_id not found: {session_id}")));
    };
    let Some(Window {
        messages,
        before,
        after,
        ..
    }) = around(conn, session_id, anchor, window)?
    else {
        return Ok(failure(format!(
            "around_message_id {anchor} not in session_id {session_id}"
        )));
    };
    Ok(json!({
        "success": true,
        "mode": "scroll",
        "session_id": session_id,
        "around_message_id": anchor,
        "session_meta": meta.json(),
        "window": window,
        "messages": messages,
        "messages_before": before,
        "messages_after": after,
    }))
}

fn read(conn: &Connection, session_id: &str) -> Result<Value, rusqlite::Error> {
    let Some(meta) = meta(conn, session_id)? else {
        return Ok(failure(format!("session_id not found: {session_id}")));
    };
    let mut statement = conn.prepare(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ?1 ORDER BY id"
    ))?;
    let messages: Vec<Value> = statement
        .query_map([session_id], |row| shape(row, None))?
        .collect::<Result<_, _>>()?;
    let total = messages.len();
    let truncated = total > READ_HEAD + READ_TAIL;
    let shown: Vec<Value> = if truncated {
        messages[..READ_HEAD]
            .iter()
            .chain(&messages[total - READ_TAIL..])
            .cloned()
            .collect()
    } else {
        messages
    };
    let mut response = json!({
        "success": true,
        "mode": "read",
        "session_id": session_id,
        "session_meta": meta.json(),
        "message_count": total,
        "truncated": truncated,
        "messages": shown,
    });
    if truncated {
        response["message"] = json!(format!(
            "Session has {total} messages; showing first {READ_HEAD} + last {READ_TAIL}. Pass around_message_id (any id above) to scroll the middle."
        ));
    }
    Ok(response)
}

fn browse(
    conn: &Connection,
    limit: i64,
    current_root: Option<&str>,
) -> Result<Value, rusqlite::Error> {
    let mut statement = conn.prepare(
        "SELECT s.id, s.started_at, s.durable, s.prompt, s.model,
                COALESCE((SELECT MAX(created_at) FROM messages m WHERE m.session_id = s.id), s.started_at) AS last_active,
                (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) AS message_count
         FROM sessions s WHERE s.parent_id IS NULL AND s.id IS NOT ?1
         ORDER BY last_active DESC LIMIT ?2",
    )?;
    let results: Vec<Value> = statement
        .query_map(params![current_root, limit], |row| {
            let prompt: String = row.get(3)?;
            let preview = if prompt.chars().count() > 60 {
                format!("{}...", prompt.chars().take(60).collect::<String>())
            } else {
                prompt
            };
            let meta = SessionMeta {
                started_at: row.get(1)?,
                model: row.get(4)?,
                durable: row.get::<_, Option<bool>>(2)?.unwrap_or(false),
            };
            Ok(json!({
                "session_id": row.get::<_, String>(0)?,
                "title": null,
                "source": meta.source(),
                "started_at": meta.started_at,
                "last_active": row.get::<_, f64>(5)?,
                "message_count": row.get::<_, i64>(6)?,
                "preview": preview,
            }))
        })?
        .collect::<Result<_, _>>()?;
    let count = results.len();
    Ok(json!({
        "success": true,
        "mode": "browse",
        "results": results,
        "count": count,
        "message": format!("Showing {count} most recent sessions. Pass a query= to search, or session_id+around_message_id to scroll."),
    }))
}

/// Makes model-written text safe for FTS5 MATCH (hermes
/// `SessionDB._sanitize_fts5_query`): balanced quoted phrases are kept,
/// stray operators and special characters dropped, dangling AND/OR/NOT
/// removed, and dotted or hyphenated words quoted (`chat-send`, `P2.2`).
pub fn sanitize_fts_query(query: &str) -> String {
    let query: String = query.chars().take(MAX_QUERY_CHARS).collect();
    let mut quoted: Vec<String> = Vec::new();
    let mut pieces = String::new();
    let mut rest = query.as_str();
    while let Some(start) = rest.find('"') {
        pieces.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        match after.find('"') {
            Some(end) => {
                pieces.push_str(&format!("\u{0}Q{}\u{0}", quoted.len()));
                quoted.push(format!("\"{}\"", &after[..end]));
                rest = &after[end + 1..];
            }
            None => {
                pieces.push(' ');
                rest = after;
            }
        }
    }
    pieces.push_str(rest);
    let specials = regex_replace(&pieces, r#"[+{}():"^]"#, " ");
    let stars = regex_replace(&specials, r"\*+", "*");
    let leading_star = regex_replace(&stars, r"(^|\s)\*", "$1");
    let no_leading_op = regex_replace(leading_star.trim(), r"(?i)^(AND|OR|NOT)\b\s*", "");
    let no_trailing_op = regex_replace(no_leading_op.trim(), r"(?i)\s+(AND|OR|NOT)\s*$", "");
    let mut sanitized = regex_replace(&no_trailing_op, r"\b(\w+(?:[._-]\w+)+)\b", "\"$1\"");
    for (i, phrase) in quoted.iter().enumerate() {
        sanitized = sanitized.replace(&format!("\u{0}Q{i}\u{0}"), phrase);
    }
    sanitized.trim().to_owned()
}

fn regex_replace(text: &str, pattern: &str, with: &str) -> String {
    match regex::Regex::new(pattern) {
        Ok(re) => re.replace_all(text, with).into_owned(),
        Err(_) => text.to_owned(),
    }
}

struct Hit {
    id: i64,
    session_id: String,
    role: String,
    snippet: String,
}

fn discover(
    conn: &Connection,
    query: &str,
    roles: &[String],
    limit: i64,
    sort: Option<&str>,
    current_root: Option<&str>,
) -> Result<Value, rusqlite::Error> {
    let matched = sanitize_fts_query(query);
    let order = match sort {
        Some("newest") => "ORDER BY m.created_at DESC, rank",
        Some("oldest") => "ORDER BY m.created_at ASC, rank",
        _ => "ORDER BY rank",
    };
    let role_list = roles
        .iter()
        .map(|r| format!("'{}'", r.replace('\'', "''")))
        .collect::<Vec<_>>()
        .join(",");
    let hits: Vec<Hit> = if matched.is_empty() {
        Vec::new()
    } else {
        let sql = format!(
            "SELECT m.id, m.session_id, m.role, snippet(messages_fts, 0, '>>>', '<<<', '...', 40)
             FROM messages_fts
             JOIN messages m ON m.id = messages_fts.rowid
             JOIN sessions s ON s.id = m.session_id
             WHERE messages_fts MATCH ?1 AND s.parent_id IS NULL AND m.role IN ({role_list})
             {order} LIMIT ?2"
        );
        let mut statement = conn.prepare(&sql)?;
        let found = statement
            .query_map(params![matched, SCAN_LIMIT], |row| {
                Ok(Hit {
                    id: row.get(0)?,
                    session_id: row.get(1)?,
                    role: row.get(2)?,
                    snippet: row.get(3)?,
                })
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>());
        match found {
            Ok(hits) => hits,
            // A query FTS5 still cannot parse (SQLITE_ERROR: "fts5: syntax
            // error …") finds nothing, as in hermes; a busy or broken
            // database is an error, not "no matches".
            Err(rusqlite::Error::SqliteFailure(err, _))
                if err.code == rusqlite::ErrorCode::Unknown =>
            {
                Vec::new()
            }
            Err(err) => return Err(err),
        }
    };
    let mut chosen: Vec<Hit> = Vec::new();
    for hit in hits {
        if chosen.len() >= usize::try_from(limit).unwrap_or(3) {
            break;
        }
        if current_root == Some(hit.session_id.as_str())
            || chosen.iter().any(|c| c.session_id == hit.session_id)
        {
            continue;
        }
        chosen.push(hit);
    }
    if chosen.is_empty() {
        return Ok(json!({
            "success": true,
            "mode": "discover",
            "query": query,
            "results": [],
            "count": 0,
            "message": "No matching sessions found.",
        }));
    }
    let searched = chosen.len();
    let mut results = Vec::new();
    for hit in &chosen {
        let Some(Window {
            messages: window,
            roles: window_roles,
            before,
            after,
        }) = around(conn, &hit.session_id, hit.id, DEFAULT_WINDOW)?
        else {
            continue;
        };
        let first_id = window
            .first()
            .and_then(|m| m["id"].as_i64())
            .unwrap_or(hit.id);
        let last_id = window
            .last()
            .and_then(|m| m["id"].as_i64())
            .unwrap_or(hit.id);
        // Tool noise is dropped from the window, never the hit itself.
        let window: Vec<Value> = window
            .into_iter()
            .zip(window_roles)
            .filter(|(m, role)| {
                m["id"].as_i64() == Some(hit.id) || role == "user" || role == "assistant"
            })
            .map(|(m, _)| m)
            .collect();
        let bookend = |sql: &str, id: i64| -> Result<Vec<Value>, rusqlite::Error> {
            let mut statement = conn.prepare(sql)?;
            let rows = statement
                .query_map(params![hit.session_id, id, BOOKEND], |row| shape(row, None))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        };
        let start = bookend(
            &format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ?1 AND id < ?2 AND role IN ('user','assistant') AND length(content) > 0 ORDER BY id ASC LIMIT ?3"
            ),
            first_id,
        )?;
        let mut end = bookend(
            &format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ?1 AND id > ?2 AND role IN ('user','assistant') AND length(content) > 0 ORDER BY id DESC LIMIT ?3"
            ),
            last_id,
        )?;
        end.reverse();
        let meta = meta(conn, &hit.session_id)?;
        results.push(json!({
            "session_id": hit.session_id,
            "when": meta.as_ref().map_or_else(|| "unknown".to_owned(), |m| format_timestamp(m.started_at)),
            "source": meta.as_ref().map_or("unknown", SessionMeta::source),
            "model": meta.as_ref().map_or("unknown", |m| m.model.as_str()),
            "title": null,
            "matched_role": hit.role,
            "match_message_id": hit.id,
            "snippet": hit.snippet,
            "bookend_start": start,
            "messages": window,
            "bookend_end": end,
            "messages_before": before,
            "messages_after": after,
        }));
    }
    let count = results.len();
    Ok(json!({
        "success": true,
        "mode": "discover",
        "query": query,
        "results": results,
        "count": count,
        "sessions_searched": searched,
    }))
}

/// The registry's handler of `session_search` over `state.db`.
pub struct SessionSearchTool {
    pub db: PathBuf,
}

#[async_trait]
impl LocalTool for SessionSearchTool {
    async fn call(&self, ctx: &CallContext, args: Map<String, Value>) -> ToolReply {
        let db = self.db.clone();
        let current = ctx.session_id.clone();
        let args = SearchArgs::from_map(&args);
        let value =
            tokio::task::spawn_blocking(move || session_search(&db, &args, current.as_deref()))
                .await
                .unwrap_or_else(|err| failure(format!("Search failed: {err}")));
        let status = if value["success"] == json!(false) {
            CallStatus::Error
        } else {
            CallStatus::Ok
        };
        ToolReply::new(status, to_json(&value))
    }
}

/// The registry entry of `session_search` over the database at `db`:
/// read-only, so the batch planner runs it beside other safe calls.
/// Creates or migrates the database first (the index must exist before the
/// first search).
pub fn registry_entry(db: PathBuf) -> Result<ToolEntry, RegistryError> {
    super::store::ensure_schema(&db).map_err(|err| RegistryError::InvalidSchema {
        name: "session_search".to_owned(),
        reason: err.to_string(),
    })?;
    let schema: Value = serde_json::from_str(include_str!("../../schemas/session_search.json"))
        .map_err(|err| RegistryError::InvalidSchema {
            name: "session_search".to_owned(),
            reason: err.to_string(),
        })?;
    Ok(ToolEntry::new(
        "session_search",
        "session_search",
        schema,
        Handler::Local(std::sync::Arc::new(SessionSearchTool { db })),
    )
    .with_parallel(ParallelClass::Safe)
    .with_emoji("🔍"))
}

#[cfg(test)]
#[path = "search_tests.rs"]
mod tests;
