//! Helpers for the backend conformance suite (`tests/tests/conformance.rs`):
//! which backends this machine can test, a coordinator plus one worker per
//! backend as real processes, and a gRPC client for calls.
//!
//! Adding a backend: write a `BackendUnderTest` constructor below (its
//! config, worker flags, and a `missing()` check that names what the machine
//! lacks and how to get it), then one `#[test]` in the suite calling
//! `run_suite`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use caduceus_proto::control_client::ControlClient;
use caduceus_proto::{
    CallToolRequest, ReleaseEnvironmentRequest, StatusRequest, StatusResponse, bearer,
};
use serde_json::Value;
use tonic::Request;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::{Fleet, Proc};

/// The image the Docker cases run in (`deploy/base-image.sh` builds it).
pub const DOCKER_IMAGE: &str = "caduceus-base:bookworm";

/// One backend the suite runs against.
#[derive(Clone)]
pub struct BackendUnderTest {
    /// Backend name as workers and `terminal.backend` know it.
    pub name: &'static str,
    /// Lines appended under `terminal:` in the fleet's config.yaml.
    pub terminal_config: String,
    /// Does the suite check this backend's sandbox lifecycle (a killed
    /// sandbox, a killed worker's sandboxes swept, none left after a
    /// graceful stop)? Docker and Daytona: SSH and Singularity sweeping is
    /// covered by `remote_backends.rs`.
    pub leased: bool,
    /// Stand-ins the backend needs while the suite runs (an sshd, the
    /// Apptainer stand-in's state), kept alive with it.
    pub fixture: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// Variables of the worker's own environment (credentials).
    pub worker_env: Vec<(String, String)>,
}

impl std::fmt::Debug for BackendUnderTest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendUnderTest")
            .field("name", &self.name)
            .finish()
    }
}

impl BackendUnderTest {
    pub fn local() -> Self {
        BackendUnderTest {
            name: "local",
            terminal_config: String::new(),
            leased: false,
            fixture: None,
            worker_env: Vec::new(),
        }
    }

    /// Docker with short leases (3 s, swept every second) so the suite can
    /// watch sandboxes of a killed worker go.
    pub fn docker() -> Self {
        BackendUnderTest {
            name: "docker",
            terminal_config: format!(
                "  docker_image: {DOCKER_IMAGE}\n  container_persistent: false\n  container_memory: 512\n  sandbox_lease_seconds: 3\n  sweep_interval_seconds: 1\n  backend_probe_seconds: 1\n  warm_pool:\n    docker: 1\n"
            ),
            leased: true,
            fixture: None,
            worker_env: Vec::new(),
        }
    }

    /// SSH to an sshd on 127.0.0.1 started for the suite; `None` (after the
    /// stand-in's banner, or a panic under `CADUCEUS_REQUIRE_ALL=1`) when
    /// this machine cannot run one.
    pub fn ssh() -> Option<Self> {
        let sshd = crate::standins::Sshd::start("conformance suite for the 'ssh' backend")?;
        let terminal_config = format!(
            "  ssh_host: 127.0.0.1\n  ssh_user: root\n  ssh_port: {}\n  ssh_key: {}\n  ssh_known_hosts: {}\n  ssh_control_dir: {}\n  ssh_connect_timeout: 5\n",
            sshd.port,
            sshd.key.display(),
            sshd.known_hosts.display(),
            sshd.control_dir.display()
        );
        Some(BackendUnderTest {
            name: "ssh",
            terminal_config,
            leased: false,
            fixture: Some(Arc::new(sshd)),
            worker_env: Vec::new(),
        })
    }

    /// Singularity through the Apptainer stand-in (`tests/fake-apptainer`);
    /// `None` as for [`ssh`](Self::ssh) when it cannot run here.
    pub fn singularity() -> Option<Self> {
        let fake = crate::standins::FakeApptainer::find(
            "conformance suite for the 'singularity' backend",
        )?;
        let terminal_config = format!(
            "  singularity_executable: {}\n  singularity_image: docker://debian:bookworm-slim\n  scratch_dir: {}\n  container_persistent: false\n",
            fake.exe.display(),
            fake.state.path().join("scratch").display()
        );
        Some(BackendUnderTest {
            name: "singularity",
            terminal_config,
            leased: false,
            fixture: Some(Arc::new(fake)),
            worker_env: Vec::new(),
        })
    }

    /// Daytona through the stand-in (`tests/fake-daytona`, always built with
    /// this crate; the official SDK checks it in `tests/tests/daytona.rs`).
    /// Leases of 3 s swept every second, as for Docker; one Daytona minute
    /// lasts 10 s there, so the sandboxes' own auto-stop (the lease rounded
    /// up to a minute) comes well after the sweep would have removed them.
    /// A warm pool of one, as for Docker.
    pub fn daytona() -> Self {
        Self::daytona_with(
            10.0,
            "  container_persistent: false\n  warm_pool:\n    daytona: 1\n",
        )
    }

    /// [`daytona`](Self::daytona) with a Daytona minute of `minute_seconds`
    /// and more `terminal:` lines.
    pub fn daytona_with(minute_seconds: f64, extra_config: &str) -> Self {
        let fake = crate::standins::FakeDaytona::start(minute_seconds);
        BackendUnderTest {
            name: "daytona",
            terminal_config: format!(
                "  sandbox_lease_seconds: 3\n  sweep_interval_seconds: 1\n  backend_probe_seconds: 1\n{extra_config}"
            ),
            leased: true,
            worker_env: vec![
                ("DAYTONA_API_URL".to_owned(), fake.api_url()),
                (
                    "DAYTONA_API_KEY".to_owned(),
                    crate::standins::FakeDaytona::API_KEY.to_owned(),
                ),
            ],
            fixture: Some(Arc::new(fake)),
        }
    }

    /// The Daytona stand-in of a `daytona` backend.
    pub fn fake_daytona(&self) -> Option<&crate::standins::FakeDaytona> {
        self.fixture
            .as_ref()
            .and_then(|f| f.downcast_ref::<crate::standins::FakeDaytona>())
    }

    /// Ends sandbox `id` behind the worker's back (`docker kill`, a Daytona
    /// `DELETE`); true when that worked.
    pub fn kill_sandbox(&self, id: &str) -> bool {
        match self.fake_daytona() {
            Some(fake) => fake.delete(id),
            None => docker(&["kill", id]),
        }
    }

    /// Sandboxes of worker `name` that still exist (containers running or
    /// not; Daytona sandboxes not being deleted).
    pub fn sandboxes_of_worker(&self, name: &str) -> Vec<String> {
        match self.fake_daytona() {
            Some(fake) => fake.sandboxes_of_worker(name),
            None => containers_with_label(&format!("caduceus.worker={name}")),
        }
    }

    /// Modal through the stand-in (`tests/fake-modal`, always built with this
    /// crate; the official SDK checks it in `tests/tests/modal.rs`).
    pub fn modal() -> Self {
        Self::modal_with("")
    }

    /// [`modal`](Self::modal) with more `terminal:` lines (a short sandbox
    /// timeout, a short lease).
    pub fn modal_with(extra_config: &str) -> Self {
        let fake = crate::standins::FakeModal::start();
        let mut worker_env = fake.env();
        // Never the machine's own ~/.modal.toml.
        worker_env.push((
            "MODAL_CONFIG_PATH".to_owned(),
            "/nonexistent/modal.toml".to_owned(),
        ));
        BackendUnderTest {
            name: "modal",
            terminal_config: format!("  backend_probe_seconds: 1\n{extra_config}"),
            leased: false,
            worker_env,
            fixture: Some(Arc::new(fake)),
        }
    }

    /// The Modal stand-in this backend runs against, when it is Modal.
    pub fn fake_modal(&self) -> Option<&crate::standins::FakeModal> {
        self.fixture.as_ref()?.downcast_ref()
    }

    /// What this machine lacks to test the backend, and how to get it.
    pub fn missing(&self) -> Option<String> {
        match self.name {
            "local" | "daytona" | "modal" => None,
            "docker" => docker_missing(),
            other => Some(format!("no readiness check for backend '{other}'")),
        }
    }

    /// `Some(self)` when the machine can test it; otherwise says so loudly on
    /// stderr and returns `None` — or panics when `CADUCEUS_REQUIRE_ALL=1`.
    pub fn ready_or_skip(self) -> Option<Self> {
        let Some(missing) = self.missing() else {
            return Some(self);
        };
        if std::env::var("CADUCEUS_REQUIRE_ALL").ok().as_deref() == Some("1") {
            panic!(
                "CADUCEUS_REQUIRE_ALL=1 and the '{}' backend cannot be tested here: {missing}",
                self.name
            );
        }
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "SKIPPED conformance suite for the '{}' backend: {missing}",
                self.name
            );
        }
        None
    }
}

fn docker_missing() -> Option<String> {
    let version = std::process::Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output();
    match version {
        Err(_) => return Some("the docker CLI is not installed (the tests use it to inspect containers): apt-get install docker.io".to_owned()),
        Ok(out) if !out.status.success() => {
            return Some(format!(
                "no reachable Docker engine ({}): install docker.io and start dockerd",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(_) => {}
    }
    let image = std::process::Command::new("docker")
        .args(["image", "inspect", DOCKER_IMAGE])
        .output();
    match image {
        Ok(out) if out.status.success() => None,
        _ => Some(format!(
            "the image {DOCKER_IMAGE} is missing: build it with deploy/base-image.sh (no registry needed)"
        )),
    }
}

/// Ids of containers carrying `label` (`key=value`), running or not.
pub fn containers_with_label(label: &str) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--no-trunc",
            "--filter",
            &format!("label={label}"),
        ])
        .output();
    match out {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect(),
        _ => Vec::new(),
    }
}

/// Runs `docker <args>`; true on success (stderr is shown on failure).
pub fn docker(args: &[&str]) -> bool {
    match std::process::Command::new("docker").args(args).output() {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!(
                    "docker {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            false
        }
        Err(_) => false,
    }
}

/// A coordinator and one worker for a backend, with a unique worker name.
pub struct Stand {
    pub fleet: Fleet,
    pub coordinator: Proc,
    pub worker: Proc,
    pub worker_name: String,
    pub backend: BackendUnderTest,
}

impl Stand {
    /// Writes the config, starts `serve` and a worker offering the backend,
    /// and waits until the coordinator sees the backend available.
    pub async fn start(backend: BackendUnderTest) -> Stand {
        let fleet = Fleet::new();
        let config = format!(
            "terminal:\n  backend: {}\n{}",
            backend.name, backend.terminal_config
        );
        std::fs::write(fleet.home.path().join("config.yaml"), config)
            .unwrap_or_else(|e| panic!("cannot write config.yaml: {e}"));
        let coordinator = fleet.serve(&[]);
        let worker_name = format!(
            "conf-{}-{}-{}",
            backend.name,
            std::process::id(),
            uuid_fragment()
        );
        let worker = start_worker(&fleet, &coordinator, &worker_name, &backend);
        let stand = Stand {
            fleet,
            coordinator,
            worker,
            worker_name,
            backend,
        };
        stand.wait_for_backend(Duration::from_secs(30)).await;
        stand
    }

    /// Kills the worker with SIGKILL (no clean-up) and starts it again under
    /// the same name.
    pub async fn crash_and_restart_worker(&mut self) {
        self.worker.kill();
        // The coordinator notices the closed stream; wait until the name is free.
        let deadline = Instant::now() + Duration::from_secs(30);
        while self
            .fleet
            .worker_names(&self.coordinator)
            .contains(&self.worker_name)
        {
            assert!(
                Instant::now() < deadline,
                "the coordinator still lists the killed worker"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.worker = start_worker(
            &self.fleet,
            &self.coordinator,
            &self.worker_name,
            &self.backend,
        );
        self.wait_for_backend(Duration::from_secs(30)).await;
    }

    /// Waits until the worker offers the backend (again).
    pub async fn wait_for_backend(&self, within: Duration) {
        let deadline = Instant::now() + within;
        let mut control = self.control().await;
        loop {
            let status = control.status().await;
            if status.workers.iter().any(|w| {
                w.name == self.worker_name && w.backends.iter().any(|b| b == self.backend.name)
            }) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "worker {} never offered the '{}' backend: {status:?}",
                self.worker_name,
                self.backend.name
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn control(&self) -> Control {
        Control::connect(&self.coordinator.url(), &self.fleet.token).await
    }
}

fn start_worker(fleet: &Fleet, coordinator: &Proc, name: &str, backend: &BackendUnderTest) -> Proc {
    let env: Vec<(&str, &str)> = backend
        .worker_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    fleet.worker_with_env(coordinator, name, &["--backends", backend.name], &env)
}

fn uuid_fragment() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{nanos:08x}")
}

type AuthFn = Box<dyn FnMut(Request<()>) -> Result<Request<()>, tonic::Status> + Send>;
type Client = ControlClient<InterceptedService<Channel, AuthFn>>;

/// A Control client presenting the fleet's token.
pub struct Control {
    client: Client,
}

impl Control {
    pub async fn connect(url: &str, token: &str) -> Control {
        let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
            .unwrap_or_else(|e| panic!("bad url {url}: {e}"))
            .connect()
            .await
            .unwrap_or_else(|e| panic!("cannot reach {url}: {e}"));
        let value: MetadataValue<_> = bearer(token)
            .parse()
            .unwrap_or_else(|_| panic!("bad token"));
        let auth: AuthFn = Box::new(move |mut req: Request<()>| {
            req.metadata_mut().insert("authorization", value.clone());
            Ok(req)
        });
        Control {
            client: ControlClient::with_interceptor(channel, auth),
        }
    }

    /// Calls a tool and parses its result.
    pub async fn call(&mut self, task: &str, tool: &str, arguments: &Value) -> Value {
        let response = self
            .client
            .call_tool(CallToolRequest {
                tool: tool.into(),
                arguments_json: arguments.to_string(),
                task_id: task.into(),
                session_id: String::new(),
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("call_tool failed: {e}"))
            .into_inner();
        serde_json::from_str(&response.result)
            .unwrap_or_else(|e| panic!("result is not JSON ({e}): {}", response.result))
    }

    /// `terminal {command, timeout?}`.
    pub async fn terminal(&mut self, task: &str, command: &str, timeout: Option<u64>) -> Value {
        let mut args = serde_json::json!({"command": command});
        if let Some(timeout) = timeout {
            args["timeout"] = timeout.into();
        }
        self.call(task, "terminal", &args).await
    }

    pub async fn release(&mut self, task: &str) -> bool {
        self.client
            .release_environment(ReleaseEnvironmentRequest {
                task_id: task.into(),
            })
            .await
            .unwrap_or_else(|e| panic!("release failed: {e}"))
            .into_inner()
            .released
    }

    pub async fn status(&mut self) -> StatusResponse {
        self.client
            .status(StatusRequest {})
            .await
            .unwrap_or_else(|e| panic!("status failed: {e}"))
            .into_inner()
    }

    /// Waits until no worker reports an environment for `task`.
    pub async fn wait_until_released(&mut self, task: &str) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let status = self.status().await;
            if !status
                .workers
                .iter()
                .flat_map(|w| w.environments.iter())
                .any(|e| e.task_id == task)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the environment of {task} was not released"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The backend id of the sandbox hosting `task`, once the coordinator
    /// has heard of it.
    pub async fn sandbox_of(&mut self, task: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let status = self.status().await;
            if let Some(env) = status
                .workers
                .iter()
                .flat_map(|w| w.environments.iter())
                .find(|e| e.task_id == task)
            {
                return env.sandbox_id.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no environment for task {task} in {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
