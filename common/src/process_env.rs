//! The secret-named variables of caduceus' own process, taken out of its
//! environment at start.
//!
//! A worker or coordinator starts with credentials in its environment
//! (`CADUCEUS_TOKEN`, `OPENAI_API_KEY`, `AWS_SECRET_ACCESS_KEY`, …). Every
//! program it starts without an explicit environment (ssh, apptainer, a
//! syntax checker) would inherit them, so the binary withholds every variable
//! [`is_secret_env_name`] flags right after parsing its arguments: [`withhold`]
//! records them here and returns their names, and the binary removes them from
//! its environment before any thread exists (removing is only sound then).
//!
//! Code that needs a variable reads it through [`var`] (the environment, then
//! the withheld values), and the sandbox environment is built from [`vars`]
//! so that `terminal.env_passthrough` still passes a withheld variable on
//! purpose. [`withheld_values`] lists the secrets for redaction.
//!
//! Removing a variable does not erase it from `/proc/<pid>/environ` (that file
//! shows the block the process was started with); the binary also makes
//! itself non-dumpable, which is what keeps that file from other processes.

use std::ffi::OsString;
use std::sync::OnceLock;

use crate::env_hygiene::is_secret_env_name;

static WITHHELD: OnceLock<Withheld> = OnceLock::new();

/// Secret variables of the process, in the order they were found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Withheld {
    vars: Vec<(String, String)>,
}

impl Withheld {
    /// The secret-named variables among `vars` (names and values that are not
    /// UTF-8 are compared and kept lossily).
    pub fn from_vars(vars: impl Iterator<Item = (OsString, OsString)>) -> (Self, Vec<OsString>) {
        let mut withheld = Vec::new();
        let mut names = Vec::new();
        for (name, value) in vars {
            let text = name.to_string_lossy().into_owned();
            if is_secret_env_name(&text) {
                withheld.push((text, value.to_string_lossy().into_owned()));
                names.push(name);
            }
        }
        (Withheld { vars: withheld }, names)
    }

    /// The withheld value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// `current` (the environment as it is now) followed by the withheld
    /// variables it lacks.
    pub fn merged(&self, current: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
        let mut all: Vec<(String, String)> = current.collect();
        for (name, value) in &self.vars {
            if !all.iter().any(|(n, _)| n == name) {
                all.push((name.clone(), value.clone()));
            }
        }
        all
    }

    pub fn values(&self) -> impl Iterator<Item = &str> {
        self.vars.iter().map(|(_, v)| v.as_str())
    }
}

/// Records the secret-named variables of this process's environment and
/// returns their names for the caller to remove. Only the first call records;
/// later calls return no names.
pub fn withhold() -> Vec<OsString> {
    let (withheld, names) = Withheld::from_vars(std::env::vars_os());
    if WITHHELD.set(withheld).is_ok() {
        names
    } else {
        Vec::new()
    }
}

/// The variable `name`: from the environment, else its withheld value.
/// Empty values count as unset.
pub fn var(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .or_else(|| WITHHELD.get()?.get(name).map(str::to_owned))
        .filter(|v| !v.is_empty())
}

/// The whole environment the process started with: the current variables
/// (UTF-8 ones) and the withheld ones.
pub fn vars() -> Vec<(String, String)> {
    let current = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    match WITHHELD.get() {
        Some(withheld) => withheld.merged(current),
        None => current.collect(),
    }
}

/// Values of the withheld variables (for masking them wherever they appear).
pub fn withheld_values() -> impl Iterator<Item = &'static str> {
    WITHHELD.get().into_iter().flat_map(Withheld::values)
}

#[cfg(test)]
#[path = "process_env_tests.rs"]
mod tests;
