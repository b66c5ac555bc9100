//! The shared token every command that talks to a coordinator needs, and the
//! one place that decides where it comes from.
//!
//! Precedence, first found wins: `--token` or `--token-file` (not both), then
//! the environment's `CADUCEUS_TOKEN` or `CADUCEUS_TOKEN_FILE` (not both),
//! then the config file's `token` or `token_file` (not both). A token file is
//! read once, at start; whitespace around the token (the newline `echo`
//! leaves) is not part of it. Files exist so that a token can come from a
//! mounted Docker or Kubernetes secret instead of a command line that every
//! user of the host sees in `ps`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::config::Config;

#[derive(Args, Clone, Default)]
pub struct TokenArgs {
    /// Shared token (else CADUCEUS_TOKEN, else the config's `token`). Visible
    /// to other users in `ps`: prefer --token-file.
    #[arg(long, conflicts_with = "token_file")]
    pub token: Option<String>,
    /// File holding the shared token, e.g. a mounted secret (else
    /// CADUCEUS_TOKEN_FILE, else the config's `token_file`).
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
}

/// Where a token comes from: given as it is, or a file holding it.
#[derive(Clone)]
pub enum TokenSource {
    Value(String),
    File(PathBuf),
}

/// A configuration printed for debugging must not show the token.
impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenSource::Value(_) => f.write_str("Value(<redacted>)"),
            TokenSource::File(path) => f.debug_tuple("File").field(path).finish(),
        }
    }
}

impl TokenArgs {
    /// The token from the flags, else from the configuration (environment
    /// over file); `None` when nothing names one.
    pub fn resolve(&self, config: &Config) -> Result<Option<String>> {
        let flag = match (&self.token, &self.token_file) {
            (Some(token), _) => Some(TokenSource::Value(token.clone())),
            (None, Some(path)) => Some(TokenSource::File(path.clone())),
            (None, None) => None,
        };
        flag.or_else(|| config.token.clone())
            .map(|source| source.read())
            .transpose()
    }
}

impl TokenSource {
    /// One of a pair of settings (`token` / `token_file`, or their
    /// environment variables), refusing both: which one was meant is not ours
    /// to guess.
    pub fn one_of(
        value: Option<String>,
        file: Option<PathBuf>,
        names: (&str, &str),
    ) -> Result<Option<TokenSource>> {
        match (value, file) {
            (Some(_), Some(_)) => bail!("{} and {} are both set; set one", names.0, names.1),
            (Some(value), None) => Ok(Some(TokenSource::Value(value))),
            (None, Some(path)) => Ok(Some(TokenSource::File(path))),
            (None, None) => Ok(None),
        }
    }

    fn read(self) -> Result<String> {
        match self {
            TokenSource::Value(token) => Ok(token),
            TokenSource::File(path) => read_token_file(&path),
        }
    }
}

fn read_token_file(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        bail!("the token file {} is empty", path.display());
    }
    Ok(token.to_owned())
}

#[cfg(test)]
#[path = "token_tests.rs"]
mod tests;
