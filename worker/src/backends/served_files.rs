//! A sandbox's file tools served by a file server running inside it
//! (`<program> __file-server`, see `caduceus_files::served`): one process per
//! environment, started the way the sandbox starts its commands, answering
//! each primitive over a pipe. Where none can start, every primitive runs a
//! shell script in the sandbox instead (`ShellFs`).

use std::sync::{Arc, Weak};

use caduceus_files::FileSystem;
use caduceus_files::served::{self, Connection, Dial, ServedFs};

use crate::backends::shell_fs::ShellFs;
use crate::sandbox::{SYSTEM_PATH, Sandbox, SpawnSpec};

/// The file system of `sandbox`: served by `program` when there is one,
/// else (and whenever it cannot start) by a shell script per primitive.
pub fn files(sandbox: Weak<dyn Sandbox>, program: Option<String>) -> Arc<dyn FileSystem> {
    let by_script: Arc<dyn FileSystem> = Arc::new(ShellFs::new(sandbox.clone()));
    match program {
        Some(program) => Arc::new(ServedFs::new(dial(sandbox, program), by_script)),
        None => by_script,
    }
}

/// Starts `program` as the sandbox's file server, the way its commands are
/// started (same user, same namespaces, no inherited environment).
fn dial(sandbox: Weak<dyn Sandbox>, program: String) -> Dial {
    Arc::new(move || {
        let sandbox = sandbox.clone();
        let program = program.clone();
        Box::pin(async move {
            let sandbox = sandbox
                .upgrade()
                .ok_or_else(|| "the sandbox is gone".to_owned())?;
            let process = sandbox
                .spawn(SpawnSpec {
                    program,
                    args: vec![served::FILE_SERVER_ARG.to_owned()],
                    cwd: None,
                    env: vec![
                        ("PATH".to_owned(), SYSTEM_PATH.to_owned()),
                        ("LC_ALL".to_owned(), "C".to_owned()),
                    ],
                })
                .await
                .map_err(|e| e.to_string())?;
            let mut connection = Connection {
                reader: process.output,
                writer: process.stdin,
                // Kills the server with the connection (kill on drop).
                guard: Box::new(process.handle),
            };
            served::handshake(&mut connection, std::time::Duration::from_secs(10)).await?;
            Ok(connection)
        })
    })
}
