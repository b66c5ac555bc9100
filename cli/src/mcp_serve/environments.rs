//! The environments of one MCP session. An environment is a coordinator
//! task: its id is the task id (so `caduceus status` shows the same name),
//! and the coordinator pins it to one worker, where every call naming it
//! runs. A session sees and releases only the environments it created, plus
//! its default one, made on first use by a call that names none.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// What `environment_create` asked for, shown back by `environment_list`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requested {
    pub backend: Option<String>,
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvironmentError {
    #[error(
        "unknown environment '{0}': create one with environment_create, or omit `environment` to use this session's default"
    )]
    Unknown(String),
    #[error(
        "this session already holds {0} environments; release some with environment_release first"
    )]
    TooMany(usize),
}

/// Environments one session may hold at once: each is a sandbox on some
/// worker, and a client looping on `environment_create` must not exhaust
/// the fleet.
pub const MAX_PER_SESSION: usize = 64;

/// One line of `environment_list`, as far as the session knows it.
#[derive(Debug, Clone)]
pub struct Listed {
    pub id: String,
    pub requested: Requested,
    pub default: bool,
    pub worker: Option<String>,
}

pub struct Environments {
    /// Random per session: task ids of different sessions never meet.
    prefix: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next: u64,
    created: BTreeMap<String, Requested>,
    /// Whether a call used the default environment.
    default_used: bool,
    /// The worker each environment's latest call ran on (the coordinator's
    /// status learns of a new environment only with its worker's next
    /// heartbeat).
    workers: BTreeMap<String, String>,
}

impl Environments {
    pub fn new() -> Self {
        let session = uuid::Uuid::new_v4().simple().to_string();
        Environments {
            prefix: format!("mcp-{}", &session[..12]),
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn default_id(&self) -> String {
        format!("{}-default", self.prefix)
    }

    /// A new environment's id, recorded with what was asked for.
    pub fn create(&self, requested: Requested) -> Result<String, EnvironmentError> {
        let mut state = self.lock();
        if state.created.len() >= MAX_PER_SESSION {
            return Err(EnvironmentError::TooMany(state.created.len()));
        }
        state.next += 1;
        let id = format!("{}-{}", self.prefix, state.next);
        state.created.insert(id.clone(), requested);
        Ok(id)
    }

    /// The task id a call runs in: the one named (it must be this
    /// session's), else the session's default.
    pub fn resolve(&self, named: Option<&str>) -> Result<String, EnvironmentError> {
        let default = self.default_id();
        match named.map(str::trim).filter(|n| !n.is_empty()) {
            None => {
                self.lock().default_used = true;
                Ok(default)
            }
            Some(id) if id == default || id == "default" => {
                self.lock().default_used = true;
                Ok(default)
            }
            Some(id) if self.lock().created.contains_key(id) => Ok(id.to_owned()),
            Some(id) => Err(EnvironmentError::Unknown(id.to_owned())),
        }
    }

    /// Forgets an environment; what was asked for it, or the error when the
    /// session does not hold it.
    pub fn remove(&self, id: &str) -> Result<Requested, EnvironmentError> {
        let id = id.trim();
        let mut state = self.lock();
        if id == self.default_id() || id == "default" {
            state.default_used = false;
            state.workers.remove(&self.default_id());
            return Ok(Requested::default());
        }
        state.workers.remove(id);
        state
            .created
            .remove(id)
            .ok_or_else(|| EnvironmentError::Unknown(id.to_owned()))
    }

    /// Records where a call in `id` ran.
    pub fn ran_on(&self, id: &str, worker: &str) {
        if !worker.is_empty() {
            self.lock().workers.insert(id.to_owned(), worker.to_owned());
        }
    }

    /// Every environment of the session (the default first, when used).
    pub fn all(&self) -> Vec<Listed> {
        let state = self.lock();
        let mut all = Vec::new();
        let default = self.default_id();
        if state.default_used {
            all.push(Listed {
                worker: state.workers.get(&default).cloned(),
                id: default,
                requested: Requested::default(),
                default: true,
            });
        }
        for (id, requested) in &state.created {
            all.push(Listed {
                id: id.clone(),
                requested: requested.clone(),
                default: false,
                worker: state.workers.get(id).cloned(),
            });
        }
        all
    }

    /// Takes every environment out (the session is ending).
    pub fn drain(&self) -> Vec<String> {
        let mut state = self.lock();
        state.workers.clear();
        let mut ids: Vec<String> = std::mem::take(&mut state.created).into_keys().collect();
        if std::mem::take(&mut state.default_used) {
            ids.push(self.default_id());
        }
        ids
    }
}

#[cfg(test)]
#[path = "environments_tests.rs"]
mod tests;
