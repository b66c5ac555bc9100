//! Real or stand-in components the remote-backend tests need: an `sshd` on
//! 127.0.0.1 with keys in a temp dir, and the Apptainer stand-in with its
//! Debian root file system.
//!
//! A component that is missing skips its tests LOUDLY (a banner on stderr);
//! with `CADUCEUS_REQUIRE_ALL=1` a missing component fails the test instead.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether missing components fail instead of skipping.
pub fn require_all() -> bool {
    std::env::var("CADUCEUS_REQUIRE_ALL")
        .map(|v| v == "1")
        .unwrap_or(false)
}

/// Reports a missing component: panics under `CADUCEUS_REQUIRE_ALL=1`,
/// otherwise prints a banner and returns `None` so the test can return.
pub fn missing<T>(test: &str, what: &str) -> Option<T> {
    if require_all() {
        panic!("{test}: {what} (CADUCEUS_REQUIRE_ALL=1, so this fails instead of skipping)");
    }
    eprintln!(
        "\n========== SKIPPED {test}: {what} (set CADUCEUS_REQUIRE_ALL=1 to fail instead) ==========\n"
    );
    None
}

/// An sshd for one test, stopped (by pid) when dropped.
pub struct Sshd {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub pid: u32,
    /// The client's private key.
    pub key: PathBuf,
    pub known_hosts: PathBuf,
    /// A short directory for the control socket.
    pub control_dir: PathBuf,
}

impl Sshd {
    /// Starts sshd on 127.0.0.1 (crates.md §5). `None` (after the banner)
    /// when sshd or ssh-keygen is missing or we are not root.
    pub fn start(test: &str) -> Option<Sshd> {
        let sshd = Path::new("/usr/sbin/sshd");
        if !sshd.exists()
            || !Path::new("/usr/bin/ssh-keygen").exists()
            || !Path::new("/usr/bin/ssh").exists()
        {
            return missing(
                test,
                "openssh-server/openssh-client are not installed (apt-get install openssh-server)",
            );
        }
        if !nix_is_root() {
            return missing(test, "starting sshd needs root");
        }
        let _ = std::fs::create_dir_all("/run/sshd");
        // Short: the control socket path must stay under ~108 bytes.
        let dir = tempfile::Builder::new()
            .prefix("cs")
            .tempdir_in("/tmp")
            .unwrap();
        let d = dir.path();
        for name in ["host_ed25519", "client_ed25519"] {
            let status = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(d.join(name))
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success(), "ssh-keygen failed");
        }
        std::fs::copy(d.join("client_ed25519.pub"), d.join("authorized_keys")).unwrap();
        set_mode(&d.join("authorized_keys"), 0o600);
        let port = free_port();
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_ed25519\nPidFile {d}/sshd.pid\nAuthorizedKeysFile {d}/authorized_keys\n\
             PermitRootLogin prohibit-password\nPubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             UsePAM no\nStrictModes no\nMaxSessions 100\nMaxStartups 100:30:200\n",
            d = d.display()
        );
        std::fs::write(d.join("sshd_config"), config).unwrap();
        let out = Command::new(sshd)
            .arg("-f")
            .arg(d.join("sshd_config"))
            .arg("-E")
            .arg(d.join("sshd.log"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "sshd failed to start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        let pid = loop {
            if let Some(pid) = std::fs::read_to_string(d.join("sshd.pid"))
                .ok()
                .and_then(|p| p.trim().parse::<u32>().ok())
                && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            {
                break pid;
            }
            assert!(
                Instant::now() < deadline,
                "sshd did not come up: {}",
                std::fs::read_to_string(d.join("sshd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let control_dir = d.join("c");
        std::fs::create_dir_all(&control_dir).unwrap();
        Some(Sshd {
            key: d.join("client_ed25519"),
            known_hosts: d.join("known_hosts"),
            control_dir,
            port,
            pid,
            dir,
        })
    }

    /// `ssh -i key -p port root@127.0.0.1 <command>` without multiplexing.
    pub fn plain_ssh(&self, command: &str) -> std::process::Output {
        Command::new("ssh")
            .args([
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=accept-new",
                "-o",
                "IdentitiesOnly=yes",
            ])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", self.known_hosts.display()))
            .arg("-i")
            .arg(&self.key)
            .arg("-p")
            .arg(self.port.to_string())
            .arg("root@127.0.0.1")
            .arg(command)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        // Masters started by the test first, through their own sockets.
        for socket in sockets_under(&self.control_dir) {
            let _ = Command::new("ssh")
                .arg("-S")
                .arg(&socket)
                .args(["-O", "exit", "none"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = Command::new("kill").arg(self.pid.to_string()).status();
    }
}

fn sockets_under(dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            found.extend(sockets_under(&entry.path()));
        } else if kind.is_socket() {
            found.push(entry.path());
        }
    }
    found
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn nix_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// The Apptainer stand-in and the root file system it serves images from.
pub struct FakeApptainer {
    /// A wrapper that runs the stand-in with this test's state and rootfs.
    pub exe: PathBuf,
    pub rootfs: PathBuf,
    /// Instance state of this test run (`FAKE_APPTAINER_STATE`).
    pub state: tempfile::TempDir,
}

impl FakeApptainer {
    /// `None` (after the banner) when the root file system is missing
    /// (`tests/fake-apptainer/make-rootfs.sh` builds it), or without root,
    /// unshare or nsenter.
    pub fn find(test: &str) -> Option<FakeApptainer> {
        let exe = Path::new(env!("CARGO_MANIFEST_DIR")).join("fake-apptainer/apptainer");
        let rootfs = std::env::var_os("CADUCEUS_TEST_ROOTFS")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/cache/caduceus/rootfs-bookworm"));
        if !nix_is_root() {
            return missing(test, "the Apptainer stand-in needs root");
        }
        for tool in ["/usr/bin/unshare", "/usr/bin/nsenter"] {
            if !Path::new(tool).exists() {
                return missing(test, &format!("{tool} is missing (util-linux)"));
            }
        }
        if !rootfs.join("bin/bash").exists() {
            return missing(
                test,
                &format!(
                    "no Debian root file system at {} (run tests/fake-apptainer/make-rootfs.sh)",
                    rootfs.display()
                ),
            );
        }
        let state = tempfile::Builder::new()
            .prefix("fa")
            .tempdir_in("/tmp")
            .unwrap();
        let wrapper = state.path().join("apptainer");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nFAKE_APPTAINER_STATE='{}/state' FAKE_APPTAINER_ROOTFS='{}' exec '{}' \"$@\"\n",
                state.path().display(),
                rootfs.display(),
                exe.display()
            ),
        )
        .unwrap();
        set_mode(&wrapper, 0o755);
        Some(FakeApptainer {
            exe: wrapper,
            rootfs,
            state,
        })
    }

    /// `apptainer instance list --json` names.
    pub fn instances(&self) -> Vec<String> {
        let out = Command::new(&self.exe)
            .args(["instance", "list", "--json"])
            .output()
            .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["instance"].as_str().unwrap().to_owned())
            .collect()
    }
}

impl Drop for FakeApptainer {
    fn drop(&mut self) {
        let _ = Command::new(&self.exe)
            .args(["instance", "stop", "--all", "--force"])
            .stderr(Stdio::null())
            .status();
    }
}

/// The pinned version of the official Daytona SDK the stand-in answers to.
pub const DAYTONA_SDK_VERSION: &str = "0.226.1";

/// The Daytona stand-in (`tests/fake-daytona`, the `fake-daytona` binary of
/// this crate) on a free port of 127.0.0.1, killed (by pid) when dropped.
pub struct FakeDaytona {
    child: std::process::Child,
    pub port: u16,
    /// Its sandboxes' directories.
    pub dir: tempfile::TempDir,
    /// What it printed on stderr (creations, auto-stops), read so far.
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl FakeDaytona {
    /// The test API key (tests/fake-daytona/README.md).
    pub const API_KEY: &'static str = "dtn_fake_test_key_0123456789";
    /// The test JWT and its organization.
    pub const JWT: &'static str = "fake-daytona-test-jwt";
    pub const ORGANIZATION: &'static str = "fake-org";

    /// Starts it; one Daytona "minute" (auto-stop and friends) lasts
    /// `minute_seconds` here.
    pub fn start(minute_seconds: f64) -> FakeDaytona {
        use std::io::{BufRead, BufReader};
        let exe = std::env::var_os("CARGO_BIN_EXE_fake-daytona")
            .map(PathBuf::from)
            .unwrap_or_else(|| crate::bin().with_file_name("fake-daytona"));
        let dir = tempfile::Builder::new()
            .prefix("fdt")
            .tempdir_in("/tmp")
            .unwrap();
        let mut child = Command::new(&exe)
            .args([
                "--port",
                "0",
                "--minute-seconds",
                &minute_seconds.to_string(),
            ])
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", exe.display()));
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let port = line
            .trim()
            .strip_prefix("listening on 127.0.0.1:")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("fake-daytona said {line:?}"));
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(mut log) = sink.lock() {
                    log.push_str(&line);
                    log.push('\n');
                }
            }
        });
        FakeDaytona {
            child,
            port,
            dir,
            log,
        }
    }

    /// `DAYTONA_API_URL` of the stand-in.
    pub fn api_url(&self) -> String {
        format!("http://127.0.0.1:{}/api", self.port)
    }

    pub fn log(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Its process id (to SIGSTOP it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `DELETE /api/sandbox/{id}` behind the worker's back; true when the
    /// stand-in took it.
    pub fn delete(&self, id: &str) -> bool {
        let (status, body) = crate::http_request(
            &self.address(),
            "DELETE",
            &format!("/api/sandbox/{id}"),
            Some(Self::API_KEY),
        );
        if status != 200 {
            eprintln!("fake-daytona: DELETE {id} answered {status}: {body}");
        }
        status == 200
    }

    /// Ids of the sandboxes labelled with worker `name` that are not being
    /// deleted (what would still cost money).
    pub fn sandboxes_of_worker(&self, name: &str) -> Vec<String> {
        self.sandboxes_with(&serde_json::json!({"caduceus.worker": name}))
            .iter()
            .filter(|s| !matches!(s["state"].as_str(), Some("destroying" | "destroyed")))
            .filter_map(|s| s["id"].as_str().map(str::to_owned))
            .collect()
    }

    /// The environments (`/proc/<pid>/environ`, NUL-separated) of every
    /// process running in one of this stand-in's sandboxes.
    pub fn sandbox_environments(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let ours: Vec<String> = self
            .sandboxes_with(&serde_json::json!({}))
            .iter()
            .filter_map(|s| {
                s["id"]
                    .as_str()
                    .map(|id| format!("DAYTONA_SANDBOX_ID={id}"))
            })
            .collect();
        entries
            .flatten()
            .filter_map(|entry| std::fs::read(entry.path().join("environ")).ok())
            .map(|raw| String::from_utf8_lossy(&raw).into_owned())
            .filter(|env| env.split('\0').any(|v| ours.iter().any(|o| o == v)))
            .collect()
    }

    /// `GET /api/sandbox?labels=…` with the test key: the sandboxes carrying
    /// every label in `labels` (a JSON object).
    pub fn sandboxes_with(&self, labels: &serde_json::Value) -> Vec<serde_json::Value> {
        let query: String = labels
            .to_string()
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                    (b as char).to_string()
                }
                other => format!("%{other:02X}"),
            })
            .collect();
        let (status, body) = crate::http_get(
            &format!("127.0.0.1:{}", self.port),
            &format!("/api/sandbox?labels={query}"),
            Some(Self::API_KEY),
        );
        assert_eq!(status, 200, "{body}");
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
        doc["items"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for FakeDaytona {
    /// The stand-in, then every process of its sandboxes (one directory
    /// each, named by the id their `DAYTONA_SANDBOX_ID` carries): a test
    /// that failed or panicked, or a stand-in that was SIGSTOPped, leaves
    /// nothing running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        kill_sandboxes_of(self.dir.path(), "DAYTONA_SANDBOX_ID");
    }
}

/// SIGKILLs the processes of every sandbox a stand-in keeps under `dir`
/// (a directory per sandbox id; its processes carry `<variable>=<id>`).
fn kill_sandboxes_of(dir: &std::path::Path, variable: &str) {
    let marks: Vec<Vec<u8>> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| format!("{variable}={}", e.file_name().to_string_lossy()).into_bytes())
        .collect();
    if !marks.is_empty() {
        kill_processes_with_env(|var| marks.iter().any(|m| m == var));
    }
}

/// The Python of a venv with the official SDK `daytona==0.226.1`
/// (`CADUCEUS_DAYTONA_PYTHON`, else `~/.cache/caduceus/daytona-0.226.1`,
/// which `.ci/run` makes); `None` after the banner when it is missing.
pub fn daytona_sdk(test: &str) -> Option<PathBuf> {
    let python = std::env::var_os("CADUCEUS_DAYTONA_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            PathBuf::from(home).join(format!(
                ".cache/caduceus/daytona-{DAYTONA_SDK_VERSION}/bin/python"
            ))
        });
    let version = Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('daytona'))",
        ])
        .output();
    match version {
        Ok(out) if String::from_utf8_lossy(&out.stdout).trim() == DAYTONA_SDK_VERSION => {
            Some(python)
        }
        Ok(out) => missing(
            test,
            &format!(
                "{} has no daytona=={DAYTONA_SDK_VERSION} ({}{}): python3 -m venv ~/.cache/caduceus/daytona-{DAYTONA_SDK_VERSION} && ~/.cache/caduceus/daytona-{DAYTONA_SDK_VERSION}/bin/pip install daytona=={DAYTONA_SDK_VERSION} (.ci/run does this)",
                python.display(),
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ),
        Err(err) => missing(
            test,
            &format!(
                "no Python at {} ({err}): python3 -m venv ~/.cache/caduceus/daytona-{DAYTONA_SDK_VERSION} && ~/.cache/caduceus/daytona-{DAYTONA_SDK_VERSION}/bin/pip install daytona=={DAYTONA_SDK_VERSION} (.ci/run does this)",
                python.display()
            ),
        ),
    }
}

/// The pinned version of the official Modal SDK the stand-in answers to.
pub const MODAL_SDK_VERSION: &str = "1.6.4";

/// The Modal stand-in (`tests/fake-modal`, the `fake-modal` binary of this
/// crate) on a free port of 127.0.0.1, killed (by pid) when dropped.
pub struct FakeModal {
    child: std::process::Child,
    pub port: u16,
    /// Its sandboxes' directories.
    pub dir: tempfile::TempDir,
    /// What it printed on stderr (every RPC), read so far.
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl FakeModal {
    /// The test tokens (tests/fake-modal/README.md).
    pub const TOKEN_ID: &'static str = "ak-fakemodaltest000000000";
    pub const TOKEN_SECRET: &'static str = "as-fakemodaltestsecret00000000";

    pub fn start() -> FakeModal {
        use std::io::{BufRead, BufReader};
        let exe = std::env::var_os("CARGO_BIN_EXE_fake-modal")
            .map(PathBuf::from)
            .unwrap_or_else(|| crate::bin().with_file_name("fake-modal"));
        let dir = tempfile::Builder::new()
            .prefix("fmd")
            .tempdir_in("/tmp")
            .unwrap();
        let mut child = Command::new(&exe)
            .args(["--port", "0"])
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", exe.display()));
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let port = line
            .trim()
            .strip_prefix("listening on 127.0.0.1:")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("fake-modal said {line:?}"));
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(mut log) = sink.lock() {
                    log.push_str(&line);
                    log.push('\n');
                }
            }
        });
        FakeModal {
            child,
            port,
            dir,
            log,
        }
    }

    /// `MODAL_SERVER_URL` of the stand-in.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Its process id (to SIGSTOP it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The worker variables that point a Modal client at the stand-in.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("MODAL_SERVER_URL".to_owned(), self.url()),
            ("MODAL_TOKEN_ID".to_owned(), Self::TOKEN_ID.to_owned()),
            (
                "MODAL_TOKEN_SECRET".to_owned(),
                Self::TOKEN_SECRET.to_owned(),
            ),
        ]
    }
}

impl FakeModal {
    /// Live processes of sandbox `id` (they carry `MODAL_SANDBOX_ID`).
    pub fn processes_of(&self, id: &str) -> Vec<i32> {
        let needle = format!("MODAL_SANDBOX_ID={id}");
        processes_with_env(|var| var == needle.as_bytes())
    }
}

/// Pids of live processes (not zombies) with an environment variable that
/// `matches` (`NAME=value` bytes).
pub fn processes_with_env(matches: impl Fn(&[u8]) -> bool) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let state = stat.rsplit_once(')')?.1.split_whitespace().next()?;
            if state == "Z" {
                return None;
            }
            let environ = std::fs::read(entry.path().join("environ")).ok()?;
            environ.split(|b| *b == 0).any(&matches).then_some(pid)
        })
        .collect()
}

/// SIGKILLs every process with a variable that `matches`.
pub fn kill_processes_with_env(matches: impl Fn(&[u8]) -> bool) {
    for pid in processes_with_env(matches) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

impl Drop for FakeModal {
    /// The stand-in, then every process of its sandboxes (one directory
    /// each, named by the id their `MODAL_SANDBOX_ID` carries): a test that
    /// failed or panicked, or a stand-in that was SIGSTOPped, leaves
    /// nothing running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        kill_sandboxes_of(self.dir.path(), "MODAL_SANDBOX_ID");
    }
}

/// The Python of a venv with the official SDK `modal==1.6.4`
/// (`CADUCEUS_MODAL_PYTHON`, else `~/.cache/caduceus/modal-1.6.4`, which
/// `.ci/run` makes); `None` after the banner when it is missing.
pub fn modal_sdk(test: &str) -> Option<PathBuf> {
    let python = std::env::var_os("CADUCEUS_MODAL_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            PathBuf::from(home).join(format!(
                ".cache/caduceus/modal-{MODAL_SDK_VERSION}/bin/python"
            ))
        });
    let how = format!(
        "python3 -m venv ~/.cache/caduceus/modal-{MODAL_SDK_VERSION} && ~/.cache/caduceus/modal-{MODAL_SDK_VERSION}/bin/pip install modal=={MODAL_SDK_VERSION} (.ci/run does this)"
    );
    let version = Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('modal'))",
        ])
        .output();
    match version {
        Ok(out) if String::from_utf8_lossy(&out.stdout).trim() == MODAL_SDK_VERSION => Some(python),
        Ok(out) => missing(
            test,
            &format!(
                "{} has no modal=={MODAL_SDK_VERSION} ({}{}): {how}",
                python.display(),
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ),
        Err(err) => missing(
            test,
            &format!("no Python at {} ({err}): {how}", python.display()),
        ),
    }
}
