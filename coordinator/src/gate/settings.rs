//! The `approvals:` and `command_allowlist:` settings the gate runs with.

use std::path::PathBuf;
use std::time::Duration;

/// What happens to a dangerous command (after the hardline floor, the
/// `sudo -S` guard and `approvals.deny`, which apply in every mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApprovalMode {
    /// A person decides: the session's client when one listens, otherwise
    /// the call returns `pending_approval` and an operator answers with
    /// `caduceus approvals approve|deny ID`. Never runs unapproved.
    #[default]
    Ask,
    /// Refused at once, with no approval request.
    Deny,
    /// Runs without asking (hermes `approvals.mode: off`, `--yolo`).
    Off,
}

impl ApprovalMode {
    /// Reads a configured mode. hermes' names are accepted: `manual` and
    /// `smart` mean `ask` (caduceus has no auxiliary-model approval, so a
    /// person still decides), and YAML `false`/`off` mean `off`.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "ask" | "manual" | "smart" | "true" | "on" => Ok(ApprovalMode::Ask),
            "deny" => Ok(ApprovalMode::Deny),
            "off" | "false" | "no" => Ok(ApprovalMode::Off),
            other => Err(format!(
                "unknown approvals.mode '{other}' (expected ask, deny or off)"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalMode::Ask => "ask",
            ApprovalMode::Deny => "deny",
            ApprovalMode::Off => "off",
        }
    }
}

/// Dangerous-command approvals on container backends (docker, singularity,
/// modal, daytona). The hardline floor, `sudo -S` and `approvals.deny` apply
/// there in every case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContainerApprovals {
    /// Dangerous commands run without approval inside containers (hermes
    /// skips its guards for isolated backends).
    #[default]
    Off,
    /// Containers follow `approvals.mode` like the host.
    Ask,
}

impl ContainerApprovals {
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "off" | "false" | "no" | "relaxed" => Ok(ContainerApprovals::Off),
            "ask" | "on" | "true" | "yes" => Ok(ContainerApprovals::Ask),
            other => Err(format!(
                "unknown approvals.containers '{other}' (expected off or ask)"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ContainerApprovals::Off => "off",
            ContainerApprovals::Ask => "ask",
        }
    }
}

/// Edits by `write_file` and `patch` (hermes' ACP edit approvals).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EditApprovals {
    /// Edits apply without asking.
    #[default]
    Off,
    /// Each edit waits for a person, who sees the diff it would apply;
    /// denied or unanswered, nothing is written.
    Ask,
}

impl EditApprovals {
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "off" | "false" | "no" => Ok(EditApprovals::Off),
            "ask" | "on" | "true" | "yes" | "manual" => Ok(EditApprovals::Ask),
            other => Err(format!(
                "unknown approvals.edits '{other}' (expected off or ask)"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EditApprovals::Off => "off",
            EditApprovals::Ask => "ask",
        }
    }
}

/// Backends whose sandboxes are containers or VMs rather than the worker host.
pub fn is_container_backend(backend: &str) -> bool {
    matches!(
        backend,
        "docker" | "singularity" | "apptainer" | "modal" | "daytona"
    )
}

#[derive(Debug, Clone)]
pub struct ApprovalSettings {
    /// `approvals.mode` (ask).
    pub mode: ApprovalMode,
    /// `approvals.timeout`: how long an approval request waits for its answer
    /// (60 s). A pending approval expires after it, too.
    pub timeout: Duration,
    /// `approvals.deny`: fnmatch globs refused in every mode.
    pub deny: Vec<String>,
    /// `command_allowlist`: commands or globs (`podman *`) and approval keys
    /// (`recursive delete`) that run without asking.
    pub allowlist: Vec<String>,
    /// `approvals.containers` (off).
    pub containers: ContainerApprovals,
    /// `approvals.edits` (off): `ask` holds every `write_file` and `patch`
    /// for a person, whatever `mode` says.
    pub edits: EditApprovals,
    /// Whether a sudo password is configured (hermes `SUDO_PASSWORD`). Without
    /// one, a command that feeds sudo from stdin (`sudo -S`) is refused.
    pub sudo_password_configured: bool,
    /// The configuration file the coordinator loaded; "always" approvals are
    /// appended to its `command_allowlist`. `None`: kept in memory only.
    pub allowlist_file: Option<PathBuf>,
}

/// hermes' `approvals.timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

impl Default for ApprovalSettings {
    fn default() -> Self {
        ApprovalSettings {
            mode: ApprovalMode::Ask,
            timeout: DEFAULT_TIMEOUT,
            deny: Vec::new(),
            allowlist: Vec::new(),
            containers: ContainerApprovals::Off,
            edits: EditApprovals::Off,
            sudo_password_configured: false,
            allowlist_file: None,
        }
    }
}
