//! docker-compose.yml on the host's Docker engine: `up -d --build` makes a
//! coordinator, three workers (local, Docker through the host's socket, SSH to
//! the sshd service) and the sshd target from locally built images; `status`
//! shows the three workers; one `caduceus run` (replay model) spreads its
//! subagents across them; each special backend serves a call; `down` leaves
//! no container, sandbox, volume or network of the project behind.
//!
//! This is also the compose step of `.ci/run` (it runs the suite with
//! CADUCEUS_REQUIRE_ALL=1, where a missing engine or compose fails).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use caduceus_tests::{Fleet, bin, json_lines, parse_result, require, subagent_calls};
use serde_json::{Value, json};

const BASE_IMAGE: &str = "caduceus-base:bookworm";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `docker compose` (the v2 plugin) when it is there, else `docker-compose` (1.29).
fn compose_program() -> Option<Vec<&'static str>> {
    if succeeds("docker", &["compose", "version"]) {
        Some(vec!["docker", "compose"])
    } else if succeeds("docker-compose", &["version"]) {
        Some(vec!["docker-compose"])
    } else {
        None
    }
}

/// Asserts a command succeeded, showing its stderr when it did not.
fn succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).output().unwrap()
}

/// One compose project of this test: its name, settings, and `down` at drop.
struct Project {
    program: Vec<&'static str>,
    name: String,
    env: Vec<(String, String)>,
}

impl Project {
    fn run(&self, args: &[&str], extra_env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(self.program[0]);
        cmd.args(&self.program[1..])
            .args(["-p", &self.name, "-f", "docker-compose.yml"])
            .args(args)
            .current_dir(repo());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }

    fn must(&self, args: &[&str], extra_env: &[(&str, &str)]) {
        let out = self.run(args, extra_env);
        assert!(
            out.status.success(),
            "compose {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn worker(&self, kind: &str) -> String {
        format!("{}-{kind}", self.name)
    }

    /// What the project left on the engine: its containers (stopped too),
    /// volumes and networks, and the sandboxes its workers made.
    fn leftovers(&self) -> Vec<String> {
        let project = format!("label=com.docker.compose.project={}", self.name);
        let mut left = Vec::new();
        for (what, args) in [
            ("container", vec!["ps", "-a", "-q", "--filter", &project]),
            ("volume", vec!["volume", "ls", "-q", "--filter", &project]),
            ("network", vec!["network", "ls", "-q", "--filter", &project]),
        ] {
            left.extend(
                lines(&docker(&args))
                    .into_iter()
                    .map(|id| format!("{what} {id}")),
            );
        }
        for kind in ["local", "docker", "ssh"] {
            let label = format!("label=caduceus.worker={}", self.worker(kind));
            left.extend(
                lines(&docker(&["ps", "-a", "-q", "--filter", &label]))
                    .into_iter()
                    .map(|id| format!("sandbox container {id} of {}", self.worker(kind))),
            );
        }
        left
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        // Whatever the test saw, take it all down (a failed test must not
        // leave a fleet running on the engine).
        let _ = self.run(&["down", "-v", "--remove-orphans", "-t", "5"], &[]);
        for kind in ["local", "docker", "ssh"] {
            let label = format!("label=caduceus.worker={}", self.worker(kind));
            for id in lines(&docker(&["ps", "-a", "-q", "--filter", &label])) {
                let _ = docker(&["rm", "-f", &id]);
            }
        }
    }
}

/// A build context with what the Dockerfiles copy: deploy/compose/'s
/// Dockerfiles and scripts, examples/ and the binary (as `caduceus`).
fn stage_context(dir: &Path, binary: &Path) {
    let out = Command::new("bash")
        .args([
            "-c",
            "cp -r --parents deploy/compose/*.Dockerfile deploy/compose/*.sh examples \"$0\"",
        ])
        .arg(dir)
        .current_dir(repo())
        .output()
        .unwrap();
    succeeded(&out);
    std::fs::copy(binary, dir.join("caduceus")).unwrap();
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn compose_fleet_runs_an_agent_across_three_workers_and_leaves_nothing() {
    let Some(program) = compose_program() else {
        require(
            "Docker Compose",
            "docker-compose 1.29 (apt-get install docker-compose) or the docker compose plugin",
            || false,
        );
        return;
    };
    if !require(
        "a Docker engine with the base image",
        "a running dockerd and deploy/base-image.sh (builds caduceus-base:bookworm)",
        || succeeds("docker", &["image", "inspect", BASE_IMAGE]),
    ) || !require(
        "ssh-keygen",
        "openssh-client, for the compose fleet's SSH keys",
        || succeeds("ssh-keygen", &["-?"]) || Path::new("/usr/bin/ssh-keygen").exists(),
    ) {
        return;
    }
    // The image copies the binary under test in, from the build context: the
    // repository when the binary lies in it (cargo's default target
    // directory), else a context put together here with what the Dockerfiles
    // copy (a CARGO_TARGET_DIR elsewhere).
    let binary = bin();
    let staged = tempfile::tempdir().unwrap();
    let (context, relative) = match binary.strip_prefix(repo()) {
        Ok(relative) => (repo(), relative.to_str().unwrap().to_owned()),
        Err(_) => {
            stage_context(staged.path(), &binary);
            (staged.path().to_path_buf(), "caduceus".to_owned())
        }
    };

    let fleet = Fleet::new();
    let secrets = tempfile::tempdir().unwrap();
    let out = Command::new(repo().join("deploy/compose/secrets.sh"))
        .arg(secrets.path())
        .output()
        .unwrap();
    succeeded(&out);
    let token_file = secrets.path().join("token");
    let port = free_port();
    let name = format!("cadtest{}", std::process::id());
    let project = Project {
        program,
        env: vec![
            (
                "CADUCEUS_SECRETS".into(),
                secrets.path().display().to_string(),
            ),
            ("CADUCEUS_BIN".into(), relative),
            (
                "CADUCEUS_BUILD_CONTEXT".into(),
                context.display().to_string(),
            ),
            ("CADUCEUS_PORT".into(), port.to_string()),
            // The worker names carry the project's name.
            ("COMPOSE_PROJECT_NAME".into(), name.clone()),
        ],
        name,
    };
    let url = format!("http://127.0.0.1:{port}");
    let client = |args: &[&str]| -> Output {
        fleet
            .command()
            .args(args)
            .args(["--coordinator", &url])
            .arg("--token-file")
            .arg(&token_file)
            .output()
            .unwrap()
    };
    let status = || -> Option<Value> {
        let out = client(&["status", "--json"]);
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).unwrap())
    };
    let want: BTreeSet<String> = ["local", "docker", "ssh"]
        .iter()
        .map(|k| project.worker(k))
        .collect();
    let wait_for_fleet = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let names: BTreeSet<String> = status()
                .map(|s| {
                    s["workers"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|w| w["name"].as_str().unwrap().to_owned())
                        .collect()
                })
                .unwrap_or_default();
            if names == want {
                return;
            }
            if Instant::now() > deadline {
                let logs = project.run(&["logs", "--tail", "30"], &[]);
                panic!(
                    "{what}: workers {names:?}, expected {want:?}; logs:\n{}",
                    String::from_utf8_lossy(&logs.stdout)
                );
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    };

    project.must(&["up", "-d", "--build"], &[]);
    wait_for_fleet("after up");

    // The token and the keys are the project's secrets, in no image's
    // configuration or history.
    let token = std::fs::read_to_string(&token_file).unwrap();
    let client_key = std::fs::read_to_string(secrets.path().join("ssh_client_key.pub")).unwrap();
    let client_key = client_key.split_whitespace().nth(1).unwrap();
    for image in ["caduceus:latest", "caduceus-sshd:latest"] {
        for args in [
            vec!["image", "inspect", image],
            vec!["history", "--no-trunc", image],
        ] {
            let shown = String::from_utf8_lossy(&docker(&args).stdout).into_owned();
            assert!(!shown.contains(token.trim()), "{image} holds the token");
            assert!(!shown.contains(client_key), "{image} holds the SSH key");
        }
    }

    // The human status lists the three workers.
    let out = client(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    for name in &want {
        assert!(text.contains(name.as_str()), "{text}");
    }

    // One agent run across the fleet: three subagents, one per worker.
    let out = client(&[
        "run",
        "--json",
        "--model",
        "replay:/opt/caduceus/examples/fleet-demo.jsonl",
        "Report the host of each of three subagents.",
    ]);
    assert!(
        out.status.success(),
        "run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = json_lines(&out.stdout);
    let root = events[0]["session_id"].as_str().unwrap().to_owned();
    let calls = subagent_calls(&events, &root);
    assert_eq!(calls.len(), 3, "{events:?}");
    let workers: BTreeSet<String> = calls
        .iter()
        .map(|e| e["data"]["worker"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(workers, want, "the subagents ran on {workers:?}");
    let last = events.last().unwrap();
    assert_eq!(last["data"]["status"], "completed", "{last}");

    // The Docker and SSH workers serve their own backends: the coordinator
    // is recreated with another terminal backend, the workers reattach.
    for (backend, kind) in [("docker", "docker"), ("ssh", "ssh")] {
        // `-t 5`: a coordinator with attached workers does not yet finish
        // its SIGINT stop on its own; the workers outlive it and reattach.
        project.must(
            &["up", "-d", "-t", "5", "coordinator"],
            &[("CADUCEUS_TERMINAL_BACKEND", backend)],
        );
        wait_for_fleet(&format!("after switching to {backend}"));
        let task = format!("compose-{backend}");
        let out = client(&[
            "call",
            "terminal",
            &json!({"command": "echo served-by-$((6*7))"}).to_string(),
            "--task",
            &task,
        ]);
        succeeded(&out);
        let result = parse_result(&out.stdout);
        assert_eq!(result["output"], "served-by-42", "{backend}: {result}");
        // Environments are reported with the workers' heartbeats.
        let deadline = Instant::now() + Duration::from_secs(20);
        let (holder, status) = loop {
            let status = status().unwrap();
            let holder = status["workers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|w| {
                    w["environments"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|e| e["task_id"] == task.as_str() && e["backend"] == backend)
                })
                .cloned();
            if let Some(holder) = holder {
                break (holder, status);
            }
            assert!(
                Instant::now() < deadline,
                "no {backend} environment for {task}: {status}"
            );
            std::thread::sleep(Duration::from_millis(300));
        };
        assert_eq!(holder["name"], project.worker(kind).as_str(), "{status}");
    }
    // The Docker backend's sandbox is a sibling container on the host's engine.
    let label = format!("label=caduceus.worker={}", project.worker("docker"));
    assert_eq!(
        lines(&docker(&["ps", "-q", "--filter", &label])).len(),
        1,
        "one Docker sandbox runs"
    );

    // down: the workers stop gracefully (SIGTERM, within compose's timeout)
    // and end their sandboxes; nothing of the project is left.
    project.must(&["down"], &[]);
    let left = project.leftovers();
    assert!(left.is_empty(), "left behind after down: {left:?}");
}
