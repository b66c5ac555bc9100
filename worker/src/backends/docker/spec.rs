//! The container a sandbox runs in, as an engine create request: hermes'
//! hardening (all capabilities dropped but the five a root shell needs to
//! manage files and users, no new privileges, small tmpfs for /tmp, /var/tmp
//! and /run, 256 processes), resource limits, network, volumes, environment,
//! persistent or tmpfs home and workspace, an init process reaping orphans,
//! and a lease watchdog as the main process.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};

use super::settings::DockerSettings;

/// Capabilities kept (everything else is dropped).
pub const CAPS_KEPT: &[&str] = &["DAC_OVERRIDE", "CHOWN", "FOWNER", "SETUID", "SETGID"];

/// What this engine accepted so far (learned from refusals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineSupport {
    /// `--storage-opt size=` (overlay2 on xfs+pquota, btrfs, zfs, …).
    pub storage_opt: bool,
    /// CPU and memory limits (cgroups usable).
    pub resources: bool,
    /// A bind mount of the worker's file server: an engine on another host
    /// (or in another mount namespace) has no such path.
    pub file_server: bool,
}

impl Default for EngineSupport {
    fn default() -> Self {
        EngineSupport {
            storage_opt: true,
            resources: true,
            file_server: true,
        }
    }
}

/// Where the task's persistent directories are on the host, when persistent.
#[derive(Debug, Clone)]
pub struct PersistentMounts {
    pub home: String,
    pub workspace: String,
}

/// The container's main process (`sh -c WATCHDOG caduceus-watchdog TTL`):
/// the container ends itself when its lease is not renewed, whether or not
/// any worker is left to sweep it. It reads `renewed_at` and `ttl_secs` from
/// the lease file the worker renews (`/.caduceus-lease`, one JSON line) with
/// shell builtins, counting from its own start until the first renewal; a
/// `renewed_at` more than 30 s ahead is ignored, as the sweeper does. It
/// looks every tenth of the lease (1–30 s), so a container outlives its last
/// renewal by at most 1.1 leases; when it exits, the init process stops the
/// container and everything in it. POSIX sh and `date`/`sleep` only.
pub const WATCHDOG: &str = r#"ttl=$1; last=$(date +%s)
while :; do
  step=$((ttl / 10)); [ "$step" -lt 1 ] && step=1; [ "$step" -gt 30 ] && step=30
  sleep "$step"
  now=$(date +%s)
  l=; IFS= read -r l < /.caduceus-lease 2>/dev/null
  case $l in *'"renewed_at":'*)
    k='"renewed_at":'; r=${l#*"$k"}; r=${r%%[!0-9]*}
    k='"ttl_secs":'; t=${l#*"$k"}; t=${t%%[!0-9]*}
    if [ -n "$r" ] && [ "$r" -gt "$last" ] && [ "$r" -le $((now + 30)) ]; then last=$r; fi
    [ -n "$t" ] && [ "$t" -gt 0 ] && ttl=$t;;
  esac
  [ $((now - last)) -gt "$ttl" ] && exit 0
done"#;

/// The create request for one sandbox container; `lease_seconds` is its
/// lease (see [`WATCHDOG`]).
pub fn container_body(
    settings: &DockerSettings,
    labels: HashMap<String, String>,
    persistent: Option<&PersistentMounts>,
    support: EngineSupport,
    lease_seconds: u64,
) -> ContainerCreateBody {
    let mut tmpfs = HashMap::from([
        ("/tmp".to_owned(), "rw,nosuid,size=512m".to_owned()),
        (
            "/var/tmp".to_owned(),
            "rw,noexec,nosuid,size=256m".to_owned(),
        ),
        ("/run".to_owned(), "rw,noexec,nosuid,size=64m".to_owned()),
    ]);
    let mut binds: Vec<String> = settings.volumes.clone();
    match persistent {
        Some(dirs) => {
            binds.push(format!("{}:/root", dirs.home));
            binds.push(format!("{}:/workspace", dirs.workspace));
        }
        None => {
            tmpfs.insert("/workspace".to_owned(), "rw,exec,size=10g".to_owned());
            tmpfs.insert("/home".to_owned(), "rw,exec,size=1g".to_owned());
            tmpfs.insert("/root".to_owned(), "rw,exec,size=1g".to_owned());
        }
    }
    // `Mounts`, not `Binds`: a bind whose source is missing on the engine's
    // host is refused instead of created there as an empty directory.
    let mounts = settings
        .file_server
        .as_ref()
        .filter(|_| support.file_server)
        .map(|program| {
            vec![Mount {
                target: Some(FILE_SERVER_PATH.to_owned()),
                source: Some(program.clone()),
                typ: Some(MountType::BIND),
                read_only: Some(true),
                ..Mount::default()
            }]
        });
    let mut host = HostConfig {
        mounts,
        init: Some(true),
        cap_drop: Some(vec!["ALL".to_owned()]),
        cap_add: Some(CAPS_KEPT.iter().map(|c| (*c).to_owned()).collect()),
        security_opt: Some(vec!["no-new-privileges".to_owned()]),
        tmpfs: Some(tmpfs),
        binds: (!binds.is_empty()).then_some(binds),
        pids_limit: (settings.pids_limit > 0).then_some(settings.pids_limit),
        network_mode: (!settings.network).then(|| "none".to_owned()),
        ..HostConfig::default()
    };
    if support.resources {
        if settings.cpu > 0.0 {
            host.nano_cpus = Some((settings.cpu * 1e9).round() as i64);
        }
        if settings.memory_mb > 0 {
            host.memory = Some(
                i64::try_from(settings.memory_mb).unwrap_or(i64::MAX / (1 << 20)) * 1024 * 1024,
            );
        }
    }
    if support.storage_opt && settings.disk_mb > 0 {
        host.storage_opt = Some(HashMap::from([(
            "size".to_owned(),
            format!("{}m", settings.disk_mb),
        )]));
    }
    let env: Vec<String> = settings
        .env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    ContainerCreateBody {
        image: Some(settings.image.clone()),
        cmd: Some(vec![
            "sh".to_owned(),
            "-c".to_owned(),
            WATCHDOG.to_owned(),
            "caduceus-watchdog".to_owned(),
            lease_seconds.max(1).to_string(),
        ]),
        entrypoint: Some(Vec::new()),
        working_dir: Some(settings.cwd.clone()),
        env: (!env.is_empty()).then_some(env),
        labels: Some(labels),
        host_config: Some(host),
        ..ContainerCreateBody::default()
    }
}

/// Which optional feature an engine refusal names, so creation can be
/// retried without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    StorageOpt,
    Resources,
    FileServer,
}

/// Where containers see the worker's file server (a read-only bind mount).
pub const FILE_SERVER_PATH: &str = "/usr/local/libexec/caduceus-file-server";

pub fn refused_feature(message: &str) -> Option<Refused> {
    let m = message.to_ascii_lowercase();
    if m.contains(FILE_SERVER_PATH) || m.contains("bind source path does not exist") {
        return Some(Refused::FileServer);
    }
    if m.contains("storage-opt") || m.contains("storage opt") || m.contains("storageopt") {
        return Some(Refused::StorageOpt);
    }
    if m.contains("nanocpus")
        || m.contains("cfs")
        || m.contains("cgroup")
        || m.contains("memory limit")
    {
        return Some(Refused::Resources);
    }
    None
}
