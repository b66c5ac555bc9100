//! Scoped tokens, stored hashed in `state.db`:
//!
//! ```sql
//! tokens(id PRIMARY KEY, name, role, hash UNIQUE, created_at, expires_at, revoked_at)
//! ```
//!
//! `hash` is the hex SHA-256 of the token; the token itself is returned once,
//! by [`TokenStore::create`], and never stored. A token carries 244 random
//! bits from the operating system's generator, so a plain hash is enough (nothing to
//! brute-force, unlike passwords). Every token is also kept in memory by hash,
//! so checking one on a request reads no disk; this store is the only writer
//! of the table, so memory and disk agree. Times are Unix seconds; 0 in the
//! API means "never" / "not revoked".

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, params};
use sha2::{Digest, Sha256};

use crate::agent::store::{StoreError, connect};

/// What a token may do (see [`super::required_role`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// May only attach a worker (`WorkerGateway.Attach`).
    Worker,
    /// Tools, sessions, status (every `Control` call but approvals and tokens).
    Client,
    /// Everything, including approvals and tokens. The shared `--token` is one.
    Admin,
}

impl Role {
    pub fn parse(text: &str) -> Result<Role, TokenError> {
        match text.trim() {
            "worker" => Ok(Role::Worker),
            "client" => Ok(Role::Client),
            "admin" => Ok(Role::Admin),
            other => Err(TokenError::Role(other.to_owned())),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Client => "client",
            Role::Admin => "admin",
        }
    }
}

/// A stored token (never its secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    pub id: String,
    pub name: String,
    pub role: Role,
    pub created_at: u64,
    pub expires_at: Option<u64>,
    pub revoked_at: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("unknown role '{0}': a token's role is worker, client or admin")]
    Role(String),
    #[error("no live token has the id or name '{0}'")]
    NotFound(String),
    #[error("cannot open the token table in {path}: {source}")]
    Store { path: PathBuf, source: StoreError },
    #[error("token table error: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("the token change was interrupted: {0}")]
    Interrupted(String),
}

type Hash = [u8; 32];

/// The token table and its in-memory copy.
pub struct TokenStore {
    conn: Mutex<Connection>,
    by_hash: RwLock<HashMap<Hash, TokenInfo>>,
}

impl std::fmt::Debug for TokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenStore").finish_non_exhaustive()
    }
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn to_sql(secs: u64) -> i64 {
    i64::try_from(secs).unwrap_or(i64::MAX)
}

fn from_sql(secs: i64) -> u64 {
    u64::try_from(secs).unwrap_or(0)
}

fn hash(secret: &str) -> Hash {
    Sha256::digest(secret.as_bytes()).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str) -> Option<Hash> {
    let mut out = [0u8; 32];
    if text.len() != 64 {
        return None;
    }
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// 128 random bits from the OS generator (uuid's v4 reads getrandom).
fn random_hex() -> String {
    hex(uuid::Uuid::new_v4().as_bytes())
}

impl TokenStore {
    /// Opens the table in `state_db`, or in memory when there is none (then
    /// tokens live as long as the coordinator).
    pub fn open(state_db: Option<&Path>) -> Result<TokenStore, TokenError> {
        let conn = match state_db {
            Some(path) => connect(path).map_err(|source| TokenError::Store {
                path: path.to_path_buf(),
                source,
            })?,
            None => Connection::open_in_memory()?,
        };
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS tokens (
                id TEXT PRIMARY KEY, name TEXT NOT NULL, role TEXT NOT NULL, hash TEXT NOT NULL UNIQUE,
                created_at INTEGER NOT NULL, expires_at INTEGER, revoked_at INTEGER);",
        )?;
        let by_hash = read_rows(&conn)?.into_iter().collect();
        Ok(TokenStore {
            conn: Mutex::new(conn),
            by_hash: RwLock::new(by_hash),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new token: its record and the secret (shown once).
    pub fn create(
        &self,
        role: Role,
        name: &str,
        expires_in: Option<Duration>,
    ) -> Result<(TokenInfo, String), TokenError> {
        let id = format!("tok_{}", &random_hex()[..12]);
        let secret = format!("cdt_{}{}", random_hex(), random_hex());
        let created_at = now_secs();
        let name = name.trim();
        let info = TokenInfo {
            name: if name.is_empty() {
                id.clone()
            } else {
                name.to_owned()
            },
            id,
            role,
            created_at,
            expires_at: expires_in.map(|d| created_at.saturating_add(d.as_secs().max(1))),
            revoked_at: None,
        };
        let digest = hash(&secret);
        self.conn().execute(
            "INSERT INTO tokens (id, name, role, hash, created_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                info.id,
                info.name,
                role.as_str(),
                hex(&digest),
                to_sql(info.created_at),
                info.expires_at.map(to_sql)
            ],
        )?;
        self.by_hash
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(digest, info.clone());
        Ok((info, secret))
    }

    /// Every token, oldest first.
    pub fn list(&self) -> Result<Vec<TokenInfo>, TokenError> {
        Ok(read_rows(&self.conn())?
            .into_iter()
            .map(|(_, info)| info)
            .collect())
    }

    /// Revokes the token with id `which`, or every live token named `which`.
    pub fn revoke(&self, which: &str) -> Result<Vec<TokenInfo>, TokenError> {
        let which = which.trim();
        let now = now_secs();
        let conn = self.conn();
        let mut by_hash = self.by_hash.write().unwrap_or_else(|e| e.into_inner());
        let mut revoked = Vec::new();
        for info in by_hash.values_mut() {
            if info.revoked_at.is_none() && (info.id == which || info.name == which) {
                conn.execute(
                    "UPDATE tokens SET revoked_at = ?2 WHERE id = ?1",
                    params![info.id, to_sql(now)],
                )?;
                info.revoked_at = Some(now);
                revoked.push(info.clone());
            }
        }
        if revoked.is_empty() {
            return Err(TokenError::NotFound(which.to_owned()));
        }
        Ok(revoked)
    }

    /// The record of the token `secret`, revoked and expired ones included.
    pub fn lookup(&self, secret: &str) -> Option<TokenInfo> {
        self.by_hash
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&hash(secret))
            .cloned()
    }
}

/// Every readable row, in the order the tokens were created.
fn read_rows(conn: &Connection) -> Result<Vec<(Hash, TokenInfo)>, TokenError> {
    let mut stmt = conn.prepare(
        "SELECT id, name, role, hash, created_at, expires_at, revoked_at FROM tokens ORDER BY rowid",
    )?;
    let rows = stmt.query_map([], |row| {
        Ok((
            row.get::<_, String>(3)?,
            row.get::<_, String>(2)?,
            TokenInfo {
                id: row.get(0)?,
                name: row.get(1)?,
                role: Role::Worker,
                created_at: from_sql(row.get(4)?),
                expires_at: row.get::<_, Option<i64>>(5)?.map(from_sql),
                revoked_at: row.get::<_, Option<i64>>(6)?.map(from_sql),
            },
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (digest, role, mut info) = row?;
        // A row this version cannot read grants nothing.
        let (Some(digest), Ok(role)) = (from_hex(&digest), Role::parse(&role)) else {
            tracing::warn!(id = %info.id, "ignoring an unreadable token row");
            continue;
        };
        info.role = role;
        out.push((digest, info));
    }
    Ok(out)
}

#[cfg(test)]
#[path = "tokens_tests.rs"]
mod tests;
