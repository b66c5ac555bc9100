//! `caduceus __file-server`: the file server of a sandbox whose file tools
//! must run as its user (see `caduceus_files::served`). The worker starts it
//! inside the sandbox from its own executable, so only a binary that calls
//! [`run_if_asked`] first thing offers it.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use caduceus_files::served;

static ENTRY_POINT: AtomicBool = AtomicBool::new(false);

/// Serves files on stdin/stdout and returns the exit code when this process
/// was started as a file server; otherwise notes that this executable can
/// be one and returns `None`.
pub fn run_if_asked() -> Option<ExitCode> {
    if std::env::args_os().nth(1).as_deref() != Some(served::FILE_SERVER_ARG.as_ref()) {
        ENTRY_POINT.store(true, Ordering::Relaxed);
        return None;
    }
    // stderr shares the pipe the answers go to: a panic message there would
    // corrupt the stream, and the worker sees a dead server either way.
    std::panic::set_hook(Box::new(|_| {}));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    Some(match runtime.block_on(served::serve_stdio()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    })
}

/// This executable, when it is a file server too.
pub(crate) fn program() -> Option<String> {
    if !ENTRY_POINT.load(Ordering::Relaxed) {
        return None;
    }
    std::env::current_exe()
        .ok()
        .map(|path| path.display().to_string())
}
