//! Results too large for the context are saved inside the task's sandbox and
//! replaced by a preview. (stub: to be completed)

/// Directory under the sandbox's temp dir that holds persisted results.
pub const RESULTS_DIR_NAME: &str = "caduceus-results";
