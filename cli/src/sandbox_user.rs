//! Which account a worker's local sandboxes run as (`worker.run_as`,
//! `--run-as`, `--allow-root-sandbox`).
//!
//! A process running as root reads any other process's `/proc/<pid>/environ`
//! and memory, non-dumpable or not, so local sandbox commands of a root
//! worker must not run as root: by default they run as `nobody`. Running them
//! as root anyway takes `--allow-root-sandbox`. A worker that is not root runs
//! them as itself (it cannot switch users); its non-dumpable flag keeps its
//! secrets from them.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use nix::unistd::{Uid, User};

use caduceus_worker::backends::local::SandboxUser;

/// The user a root worker's sandboxes run as when none is configured.
pub(crate) const DEFAULT_SANDBOX_USER: &str = "nobody";

/// The account for local sandboxes: `None` means the worker's own.
pub(crate) fn local_sandbox_user(
    run_as: Option<&str>,
    allow_root: bool,
) -> Result<Option<SandboxUser>> {
    let run_as = run_as.map(str::trim).filter(|n| !n.is_empty());
    let me = Uid::effective();
    if !me.is_root() {
        if let Some(name) = run_as {
            let user = lookup(name)?;
            if user.uid != me {
                bail!(
                    "--run-as {name} needs a worker running as root (this one runs as uid {me}); without it the sandboxes run as this worker's user"
                );
            }
        }
        return Ok(None);
    }
    let name = match run_as {
        Some(name) => name,
        None if allow_root => return Ok(None),
        None => DEFAULT_SANDBOX_USER,
    };
    let user = lookup(name)?;
    if user.uid.is_root() {
        if allow_root {
            return Ok(None);
        }
        bail!(
            "local sandboxes would run as root next to this worker's secrets (root reads any process's environment); pass --run-as USER, or --allow-root-sandbox to accept that"
        );
    }
    let home = sandbox_home(&user)?;
    Ok(Some(SandboxUser {
        name: user.name,
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        home: home.display().to_string(),
    }))
}

fn lookup(name: &str) -> Result<User> {
    match User::from_name(name) {
        Ok(Some(user)) => Ok(user),
        Ok(None) => bail!("--run-as {name}: there is no such user on this host"),
        Err(err) => Err(err).with_context(|| format!("--run-as {name}: cannot look the user up")),
    }
}

/// The user's own home when it has one it owns; otherwise
/// `$TMPDIR/caduceus-sandbox-<user>` (`nobody`'s home is `/nonexistent`),
/// made private to the user, and kept across runs like a home.
fn sandbox_home(user: &User) -> Result<PathBuf> {
    if owns_dir(&user.dir, user.uid) {
        return Ok(user.dir.clone());
    }
    let dir = std::env::temp_dir().join(format!("caduceus-sandbox-{}", user.name));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => nix::unistd::chown(&dir, Some(user.uid), Some(user.gid))
            .with_context(|| format!("cannot give {} to {}", dir.display(), user.name))?,
        // Only a real folder of that user (not a symlink, not someone
        // else's) is used.
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            if !owns_dir_no_follow(&dir, user.uid) {
                bail!(
                    "{} exists but is not a folder of {}: remove it, or give the user a home",
                    dir.display(),
                    user.name
                );
            }
        }
        Err(err) => return Err(err).with_context(|| format!("cannot create {}", dir.display())),
    }
    Ok(dir)
}

fn owns_dir_no_follow(path: &Path, uid: Uid) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir() && m.uid() == uid.as_raw())
}

fn owns_dir(path: &Path, uid: Uid) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_dir() && m.uid() == uid.as_raw())
}

#[cfg(test)]
#[path = "sandbox_user_tests.rs"]
mod tests;
