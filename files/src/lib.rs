//! The file tools an agent edits code with — `read_file`, `write_file`,
//! `patch`, `search_files` — over any sandbox's file access.
//!
//! * [`FileSystem`] is what a backend implements (one round trip per tool call
//!   where the backend allows it); [`LocalFs`] is the worker's own disk.
//! * [`read_file`], [`write_file`], [`patch`], [`search_files`] take the
//!   model's parsed arguments and return the result JSON the model sees, with
//!   hermes-agent's texts and limits (see the crate README for the spec and
//!   every deliberate difference).
//! * [`paths`] holds the pure path logic the agent loop's batch planner shares.
//! * [`search::shell`] builds and parses the `rg`/`grep` script a command-only
//!   backend runs to serve [`FileSystem::search`].

pub mod diff;
pub mod extract;
pub mod fs;
pub mod fuzzy;
pub mod lines;
pub mod lint;
pub mod local;
pub mod paths;
pub mod preview;
pub mod safety;
pub mod search;
pub mod served;
pub mod text;
mod tools;
mod tracker;
pub mod v4a;

pub use fs::{
    CheckRun, FileBytes, FileKind, FileStamp, FileStat, FileSystem, FsError, LineRead,
    SyntaxChecker, WriteOutcome,
};
pub use lines::{LinePage, LineWindow};
pub use local::LocalFs;
pub use search::{SearchHits, SearchQuery};
pub use tools::{
    FileToolContext, FileToolsConfig, WriteRefusal, patch, read_file, search_files, write_file,
};
pub use tracker::ReadTracker;
