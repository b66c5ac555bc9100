//! Appends "always" approvals to `command_allowlist` in the configuration
//! file the coordinator loaded, keeping the rest of the file as written
//! (other sections, comments, order). Only the `command_allowlist` block is
//! rewritten, at the end of the file; when the file's layout makes a textual
//! edit unsafe (flow style, a quoted key, several documents) the whole file is
//! re-serialized instead, which keeps every value but drops comments.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

pub const ALLOWLIST_KEY: &str = "command_allowlist";

#[derive(Debug, thiserror::Error)]
pub enum AllowlistFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid YAML: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Shape { path: PathBuf, message: String },
}

/// The configuration file that receives "always" approvals.
#[derive(Debug, Clone)]
pub struct AllowlistFile {
    path: PathBuf,
}

impl AllowlistFile {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        AllowlistFile { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Adds `entry` to the file's `command_allowlist` (creating the file and
    /// the key when missing). Returns false when the entry was already there.
    pub fn append(&self, entry: &str) -> Result<bool, AllowlistFileError> {
        let text = self.read()?;
        let mut document = self.parse(&text)?;
        let mut entries = self.entries(&document)?;
        if entries.iter().any(|e| e == entry) {
            return Ok(false);
        }
        entries.push(entry.to_owned());
        let list = Value::Sequence(entries.iter().cloned().map(Value::String).collect());
        document.insert(Value::String(ALLOWLIST_KEY.to_owned()), list);

        let edited = replace_block(&text, &entries);
        let new_text = match self.parse(&edited) {
            Ok(reparsed) if reparsed == document => edited,
            _ => serde_yaml::to_string(&Value::Mapping(document)).map_err(|err| {
                AllowlistFileError::Parse {
                    path: self.path.clone(),
                    message: err.to_string(),
                }
            })?,
        };
        self.write(&new_text)?;
        Ok(true)
    }

    /// The entries the file lists now.
    pub fn read_entries(&self) -> Result<Vec<String>, AllowlistFileError> {
        self.entries(&self.parse(&self.read()?)?)
    }

    /// The file's text; a missing file reads as empty.
    fn read(&self) -> Result<String, AllowlistFileError> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => Ok(text),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
            Err(source) => Err(AllowlistFileError::Read {
                path: self.path.clone(),
                source,
            }),
        }
    }

    fn parse(&self, text: &str) -> Result<Mapping, AllowlistFileError> {
        if text.trim().is_empty() {
            return Ok(Mapping::new());
        }
        match serde_yaml::from_str::<Value>(text) {
            Ok(Value::Mapping(map)) => Ok(map),
            Ok(Value::Null) => Ok(Mapping::new()),
            Ok(_) => Err(AllowlistFileError::Shape {
                path: self.path.clone(),
                message: "the configuration is not a mapping of sections".to_owned(),
            }),
            Err(err) => Err(AllowlistFileError::Parse {
                path: self.path.clone(),
                message: err.to_string(),
            }),
        }
    }

    fn entries(&self, document: &Mapping) -> Result<Vec<String>, AllowlistFileError> {
        let not_strings = || AllowlistFileError::Shape {
            path: self.path.clone(),
            message: format!("{ALLOWLIST_KEY} must be a list of strings"),
        };
        match document.get(ALLOWLIST_KEY) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Sequence(items)) => items
                .iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(not_strings()),
                })
                .collect(),
            Some(_) => Err(not_strings()),
        }
    }

    /// Writes through a temporary file in the same directory and renames it
    /// over the original, so a crash never leaves half a configuration.
    fn write(&self, text: &str) -> Result<(), AllowlistFileError> {
        let fail = |source| AllowlistFileError::Write {
            path: self.path.clone(),
            source,
        };
        let dir = self
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| Path::new("."));
        std::fs::create_dir_all(dir).map_err(fail)?;
        let file_name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "config.yaml".to_owned());
        let temp = dir.join(format!(
            ".{file_name}.{}.tmp",
            uuid::Uuid::new_v4().simple()
        ));
        let result = (|| {
            let mut file = std::fs::File::create(&temp)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            if let Ok(meta) = std::fs::metadata(&self.path) {
                std::fs::set_permissions(&temp, meta.permissions())?;
            }
            std::fs::rename(&temp, &self.path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        result.map_err(fail)
    }
}

/// `text` without its top-level `command_allowlist:` block, with a new block
/// listing `entries` at the end.
fn replace_block(text: &str, entries: &[String]) -> String {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut kept: Vec<&str> = Vec::with_capacity(lines.len());
    let mut index = 0;
    while index < lines.len() {
        let line = lines[index];
        if is_allowlist_key_line(line) {
            index += 1;
            // The block's value: indented lines, block-sequence items at
            // column 0, and blank lines between them.
            let mut end = index;
            let mut last_content = index;
            while end < lines.len() && continues_block(lines[end]) {
                end += 1;
                if !lines[end - 1].trim().is_empty() {
                    last_content = end;
                }
            }
            // Blank lines after the block belong to what follows.
            index = last_content;
            continue;
        }
        kept.push(line);
        index += 1;
    }
    let mut out: String = kept.concat();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(ALLOWLIST_KEY);
    out.push_str(":\n");
    for entry in entries {
        out.push_str("  - ");
        out.push_str(&serde_json::Value::String(entry.clone()).to_string());
        out.push('\n');
    }
    out
}

fn is_allowlist_key_line(line: &str) -> bool {
    line.strip_prefix(ALLOWLIST_KEY)
        .is_some_and(|rest| rest.trim_start().starts_with(':'))
}

fn continues_block(line: &str) -> bool {
    line.trim().is_empty()
        || line.starts_with(' ')
        || line.starts_with('\t')
        || (line.starts_with('-') && !line.starts_with("---"))
}

#[cfg(test)]
#[path = "allowlist_file_tests.rs"]
mod tests;
