//! What a worker credential may claim when it attaches: which labels, and
//! which hosted providers (MCP servers with `on:`) it may run. The
//! coordinator is the one owner of this decision; a worker's hello only
//! asks.
//!
//! | credential | labels | hosted providers |
//! |---|---|---|
//! | the shared `--token`, an admin token, an in-process worker | any | every one whose labels match |
//! | a worker token with an entry in `worker_grants` | only those its entry grants | only those its entry names (and whose labels match) |
//! | a worker token without an entry, `worker_grants` configured | none | none |
//! | a worker token, no `worker_grants` at all | any (placement only, as before) | none |
//!
//! A hello claiming a label beyond the grant is refused at attach
//! (`PERMISSION_DENIED`, naming the label and the token) rather than
//! trimmed: a worker silently serving with fewer labels than its operator
//! gave it would take work it was not meant for, or none, with nobody told.
//! Admin credentials are unrestricted because they can reconfigure the
//! coordinator anyway (create tokens, answer approvals).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{Caller, Role};

/// `worker_grants:` in the configuration: token name -> its grant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerGrants(pub BTreeMap<String, Grant>);

/// One token's grant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grant {
    /// label key -> the value it may take (`None`: any value, `"*"` in YAML).
    pub labels: BTreeMap<String, Option<String>>,
    /// The hosted providers it may run.
    pub host: HostGrant,
}

/// Which hosted providers a credential may run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum HostGrant {
    #[default]
    None,
    /// Those named.
    Named(BTreeSet<String>),
    /// Every one (`host: "*"`, and admin credentials).
    All,
}

impl HostGrant {
    pub fn allows(&self, provider: &str) -> bool {
        match self {
            HostGrant::None => false,
            HostGrant::Named(names) => names.contains(provider),
            HostGrant::All => true,
        }
    }
}

/// What one attaching worker may claim, decided from its credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerGrant {
    /// The credential, as refusals and logs name it.
    pub token: String,
    /// `None`: any label.
    pub labels: Option<BTreeMap<String, Option<String>>>,
    pub host: HostGrant,
}

impl WorkerGrant {
    /// Any labels, every provider: in-process workers and admin credentials.
    pub fn unrestricted(token: &str) -> Self {
        WorkerGrant {
            token: token.to_owned(),
            labels: None,
            host: HostGrant::All,
        }
    }

    /// The grant of a worker attaching as `caller` under `grants` (`None`:
    /// the configuration has no `worker_grants`).
    pub fn for_caller(caller: Option<&Caller>, grants: Option<&WorkerGrants>) -> Self {
        let Some(caller) = caller else {
            return WorkerGrant::unrestricted(super::SHARED_TOKEN_NAME);
        };
        let name = caller.name();
        if caller.role == Role::Admin {
            return WorkerGrant::unrestricted(&name);
        }
        match grants {
            None => WorkerGrant {
                token: name,
                labels: None,
                host: HostGrant::None,
            },
            Some(grants) => {
                let grant = grants.0.get(&name).cloned().unwrap_or_default();
                WorkerGrant {
                    token: name,
                    labels: Some(grant.labels),
                    host: grant.host,
                }
            }
        }
    }

    /// Refuses the first label of `claimed` this grant does not cover, with
    /// the message the worker sees.
    pub fn check_labels(&self, claimed: &HashMap<String, String>) -> Result<(), String> {
        let Some(granted) = &self.labels else {
            return Ok(());
        };
        let mut claimed: Vec<(&String, &String)> = claimed.iter().collect();
        claimed.sort();
        for (key, value) in claimed {
            let allowed = match granted.get(key) {
                Some(None) => true,
                Some(Some(only)) => only == value,
                None => false,
            };
            if !allowed {
                let what = match granted.get(key) {
                    Some(Some(only)) => format!("it grants {key}={only} only"),
                    _ => "it does not grant that label".to_owned(),
                };
                return Err(format!(
                    "the worker token '{}' may not claim the label {key}={value}: {what} (the coordinator's worker_grants.{} decides which labels its workers carry)",
                    self.token, self.token
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "grants_tests.rs"]
mod tests;
