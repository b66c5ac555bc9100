//! What the guard says about a command.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Value, json};

/// A rule that matched: its human-readable description and the key approvals are stored
/// under. As in hermes, the key is the description text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    pub description: String,
    pub pattern_key: String,
}

impl Match {
    pub(crate) fn new(description: impl Into<String>) -> Self {
        let description = description.into();
        Self {
            pattern_key: description.clone(),
            description,
        }
    }
}

/// The guard's verdict on one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing matched: run it.
    Allow,
    /// A dangerous pattern matched: run only with approval (or a bypass such as yolo).
    Approve {
        description: String,
        pattern_key: String,
    },
    /// On the unconditional blocklist: never run it, whatever the approval mode.
    Hardline { description: String },
}

impl Verdict {
    /// `"allow"`, `"approve"` or `"hardline"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Approve { .. } => "approve",
            Self::Hardline { .. } => "hardline",
        }
    }

    /// The matched rule's description (`None` for [`Verdict::Allow`]).
    pub fn description(&self) -> Option<&str> {
        match self {
            Self::Allow => None,
            Self::Approve { description, .. } | Self::Hardline { description } => Some(description),
        }
    }

    /// `{"verdict":"allow"|"approve"|"hardline","description":null|"…"}`, as printed by
    /// `caduceus guard check CMD`.
    pub fn to_json(&self) -> Value {
        json!({
            "verdict": self.kind(),
            "description": self.description(),
        })
    }
}

impl From<Option<Match>> for Verdict {
    /// A dangerous-pattern match (or none) as a verdict.
    fn from(found: Option<Match>) -> Self {
        match found {
            Some(Match {
                description,
                pattern_key,
            }) => Self::Approve {
                description,
                pattern_key,
            },
            None => Self::Allow,
        }
    }
}

impl Serialize for Verdict {
    /// Same shape as [`Verdict::to_json`].
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("verdict", self.kind())?;
        map.serialize_entry("description", &self.description())?;
        map.end()
    }
}
