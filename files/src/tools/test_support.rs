//! A scratch environment for tool tests: a temp directory as cwd, a fake home
//! inside it, the local file system and a fresh tracker.

use std::path::PathBuf;

use serde_json::{Map, Value};

use caduceus_common::result::ToolReply;

use super::{FileToolContext, FileToolsConfig};
use crate::local::LocalFs;
use crate::tracker::ReadTracker;

pub(crate) struct Env {
    _dir: tempfile::TempDir,
    pub cwd: String,
    pub home: String,
    pub fs: LocalFs,
    pub tracker: ReadTracker,
    pub config: FileToolsConfig,
}

impl Env {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let cwd = root.join("work");
        let home = root.join("home");
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        Self {
            _dir: dir,
            cwd: cwd.to_string_lossy().into_owned(),
            home: home.to_string_lossy().into_owned(),
            fs: LocalFs::new(),
            tracker: ReadTracker::new(),
            config: FileToolsConfig::default(),
        }
    }

    pub fn ctx(&self) -> FileToolContext<'_> {
        FileToolContext {
            fs: &self.fs,
            cwd: &self.cwd,
            home: Some(&self.home),
            tracker: &self.tracker,
            config: &self.config,
        }
    }

    /// Absolute path of `rel` under the cwd.
    pub fn path(&self, rel: &str) -> PathBuf {
        PathBuf::from(&self.cwd).join(rel)
    }

    pub fn abs(&self, rel: &str) -> String {
        self.path(rel).to_string_lossy().into_owned()
    }

    pub fn put(&self, rel: &str, content: impl AsRef<[u8]>) {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    pub fn get(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }

    pub fn exists(&self, rel: &str) -> bool {
        self.path(rel).exists()
    }
}

pub fn args(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("arguments must be an object, got {other}"),
    }
}

/// Parses a tool result (search results may carry a hint after the JSON).
pub fn parse(result: &ToolReply) -> Value {
    parse_text(&result.body)
}

pub fn parse_text(result: &str) -> Value {
    let json = result.split("\n\n[Hint:").next().unwrap();
    serde_json::from_str(json).unwrap_or_else(|error| panic!("not JSON ({error}): {result}"))
}

/// Whether `program` is installed; when not, says so loudly, and under
/// `CADUCEUS_REQUIRE_ALL=1` fails instead of letting the test skip.
pub fn have_program(program: &str) -> bool {
    let found = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|out| out.status.success());
    if !found {
        assert!(
            std::env::var("CADUCEUS_REQUIRE_ALL").as_deref() != Ok("1"),
            "{program} is required (CADUCEUS_REQUIRE_ALL=1)"
        );
        eprintln!("SKIPPED: {program} is not installed, so this test proves nothing here");
    }
    found
}
