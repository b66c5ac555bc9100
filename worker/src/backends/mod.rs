//! The backends this worker can create sandboxes on.

pub mod local;

use std::sync::Arc;

use serde_json::Value;

use crate::sandbox::{Sandbox, SandboxError};

/// Creates sandboxes for the backends this worker offers.
#[derive(Debug, Clone)]
pub struct Backends {
    offered: Vec<String>,
    /// Directory a local environment's shell starts in.
    local_cwd: String,
}

impl Backends {
    /// Keeps the requested backends this worker can actually serve; the rest
    /// are reported and dropped.
    pub fn new(requested: &[String], local_cwd: String) -> (Self, Vec<String>) {
        let mut offered = Vec::new();
        let mut refused = Vec::new();
        for backend in requested {
            match backend.as_str() {
                "local" => offered.push(backend.clone()),
                other => refused.push(format!("backend '{other}' is not supported by this worker")),
            }
        }
        (Backends { offered, local_cwd }, refused)
    }

    /// Backends offered right now.
    pub fn available(&self) -> Vec<String> {
        self.offered.clone()
    }

    /// Creates a sandbox for a task on `backend`.
    pub async fn create(&self, backend: &str, task_id: &str, _settings: &Value) -> Result<Arc<dyn Sandbox>, SandboxError> {
        if !self.offered.iter().any(|b| b == backend) {
            return Err(SandboxError::Unavailable(backend.to_owned()));
        }
        match backend {
            "local" => Ok(Arc::new(local::LocalSandbox::new(format!("local:{task_id}"), self.local_cwd.clone()))),
            other => Err(SandboxError::Unavailable(other.to_owned())),
        }
    }
}
