//! The `apptainer`/`singularity` command line: the verbs the backend uses,
//! each with a timeout, and the parsing of their output.

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use tokio::process::Command;

/// Failures of a CLI call; each names the command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("cannot run {exe}: {reason}")]
    Run { exe: String, reason: String },
    #[error("`{command}` failed: {stderr}")]
    Failed { command: String, stderr: String },
    #[error("`{command}` did not finish within {secs}s")]
    Timeout { command: String, secs: u64 },
    #[error("`{command}` printed output this backend cannot read: {reason}")]
    Unreadable { command: String, reason: String },
}

/// One running instance, from `instance list --json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct InstanceInfo {
    pub instance: String,
    #[serde(default)]
    pub pid: i64,
    #[serde(default)]
    pub img: String,
}

#[derive(Deserialize)]
struct InstanceList {
    #[serde(default)]
    instances: Option<Vec<InstanceInfo>>,
}

/// Parses `instance list --json` (`{"instances":[{"instance":…,"pid":…,"img":…}]}`).
/// Empty output means no instances.
pub fn parse_instance_list(stdout: &str) -> Result<Vec<InstanceInfo>, String> {
    if stdout.trim().is_empty() {
        return Ok(Vec::new());
    }
    let list: InstanceList = serde_json::from_str(stdout).map_err(|e| e.to_string())?;
    Ok(list.instances.unwrap_or_default())
}

/// The Apptainer (or Singularity) executable.
#[derive(Debug, Clone)]
pub struct Cli {
    pub exe: PathBuf,
}

/// What `instance start` needs.
#[derive(Debug, Clone, Default)]
pub struct StartSpec {
    pub image: String,
    pub name: String,
    /// Persistent overlay directory; `--writable-tmpfs` when `None`.
    pub overlay: Option<PathBuf>,
    /// `src[:dst[:ro]]` specs.
    pub binds: Vec<String>,
    pub memory_mb: u64,
    pub cpus: f64,
}

impl StartSpec {
    pub fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = ["instance", "start", "--containall", "--no-home"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        match &self.overlay {
            Some(dir) => {
                args.push("--overlay".to_owned());
                args.push(dir.display().to_string());
            }
            None => args.push("--writable-tmpfs".to_owned()),
        }
        for bind in &self.binds {
            args.push("--bind".to_owned());
            args.push(bind.clone());
        }
        if self.memory_mb > 0 {
            args.push("--memory".to_owned());
            args.push(format!("{}M", self.memory_mb));
        }
        if self.cpus > 0.0 {
            args.push("--cpus".to_owned());
            args.push(format!("{}", self.cpus));
        }
        args.push(self.image.clone());
        args.push(self.name.clone());
        args
    }
}

pub struct CliOutput {
    pub stdout: String,
    pub stderr: String,
    pub status: Option<i32>,
}

impl Cli {
    /// `--version`'s first line, e.g. "apptainer version 1.3.4".
    pub async fn version(&self) -> Result<String, CliError> {
        let out = self
            .run(&["--version"], &[], Duration::from_secs(10))
            .await?;
        Ok(out.stdout.lines().next().unwrap_or("").trim().to_owned())
    }

    /// `build <sif> <source>` with the cache directories set.
    pub async fn build(
        &self,
        sif: &Path,
        source: &str,
        cache_dir: &Path,
        timeout: Duration,
    ) -> Result<(), CliError> {
        let tmp = cache_dir.join("tmp");
        let _ = std::fs::create_dir_all(&tmp);
        let sif = sif.display().to_string();
        let env = [
            ("APPTAINER_CACHEDIR", cache_dir.display().to_string()),
            ("APPTAINER_TMPDIR", tmp.display().to_string()),
        ];
        self.run(&["build", &sif, source], &env, timeout)
            .await
            .map(|_| ())
    }

    pub async fn start(&self, spec: &StartSpec, timeout: Duration) -> Result<(), CliError> {
        let args = spec.args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.run(&args, &[], timeout).await.map(|_| ())
    }

    /// Instances whose name matches `pattern` (a glob, as the CLI takes it).
    pub async fn list(&self, pattern: &str) -> Result<Vec<InstanceInfo>, CliError> {
        let out = self
            .run(
                &["instance", "list", "--json", pattern],
                &[],
                Duration::from_secs(30),
            )
            .await?;
        parse_instance_list(&out.stdout).map_err(|reason| CliError::Unreadable {
            command: format!("{} instance list --json", self.exe.display()),
            reason,
        })
    }

    /// `instance stop --timeout <secs> <name>`; an instance that is already
    /// gone counts as stopped.
    pub async fn stop(&self, name: &str) -> Result<(), CliError> {
        match self
            .run(
                &["instance", "stop", "--timeout", "5", name],
                &[],
                Duration::from_secs(60),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(CliError::Failed { stderr, .. }) if stderr.contains("no instance found") => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// The `exec instance://<name> <program> <args…>` command, not started.
    pub fn exec_command(&self, name: &str, program: &str, args: &[String]) -> Command {
        let mut command = Command::new(&self.exe);
        command
            .arg("exec")
            .arg("--cleanenv")
            .arg(format!("instance://{name}"))
            .arg(program)
            .args(args);
        command
    }

    /// Runs `exec instance://<name> bash -c <script>` and collects its output.
    pub async fn exec_script(
        &self,
        name: &str,
        script: &str,
        timeout: Duration,
    ) -> Result<CliOutput, CliError> {
        let mut command = self.exec_command(name, "bash", &["-c".to_owned(), script.to_owned()]);
        let describe = format!("{} exec instance://{name} bash -c …", self.exe.display());
        collect(&mut command, describe, &self.exe, timeout, false).await
    }

    async fn run(
        &self,
        args: &[&str],
        env: &[(&str, String)],
        timeout: Duration,
    ) -> Result<CliOutput, CliError> {
        let mut command = Command::new(&self.exe);
        command.args(args);
        for (key, value) in env {
            command.env(key, value);
        }
        let describe = format!("{} {}", self.exe.display(), args.join(" "));
        collect(&mut command, describe, &self.exe, timeout, true).await
    }
}

async fn collect(
    command: &mut Command,
    describe: String,
    exe: &Path,
    timeout: Duration,
    fail_on_status: bool,
) -> Result<CliOutput, CliError> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().map_err(|e| CliError::Run {
        exe: exe.display().to_string(),
        reason: e.to_string(),
    })?;
    let output = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => {
            return Err(CliError::Run {
                exe: exe.display().to_string(),
                reason: e.to_string(),
            });
        }
        Err(_) => {
            return Err(CliError::Timeout {
                command: describe,
                secs: timeout.as_secs(),
            });
        }
    };
    let out = CliOutput {
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        status: output.status.code(),
    };
    if fail_on_status && !output.status.success() {
        let stderr = if out.stderr.is_empty() {
            format!("exit status {:?}", out.status)
        } else {
            out.stderr
        };
        return Err(CliError::Failed {
            command: describe,
            stderr,
        });
    }
    Ok(out)
}

/// `apptainer`, else `singularity`, from `PATH`.
pub fn find_executable() -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    for name in ["apptainer", "singularity"] {
        for dir in std::env::split_paths(&paths) {
            let candidate = dir.join(name);
            if is_executable(&candidate) {
                return Some(candidate);
            }
        }
    }
    None
}

pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Where a `docker://` image's SIF is cached (hermes' naming:
/// `docker://org/img:tag` → `org-img-tag.sif`).
pub fn sif_path_for(image: &str, cache_dir: &Path) -> Option<PathBuf> {
    let rest = image.strip_prefix("docker://")?;
    let name: String = rest
        .chars()
        .map(|c| if c == '/' || c == ':' { '-' } else { c })
        .collect();
    Some(cache_dir.join(format!("{name}.sif")))
}
