//! The isolated local backend (issue 12 item 2): `terminal.local_isolation`
//! with real workers. A root worker's sandboxes run as nobody; confined,
//! they see their own PID namespace, write only in the workspace and the
//! temporary directory, and in `strict` have no network. Each check runs
//! against an unconfined worker too, so that it can fail.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use caduceus_tests::conformance::{BackendUnderTest, DOCKER_IMAGE};
use caduceus_tests::{Fleet, Proc, require};
use serde_json::{Value, json};

/// Can this host make the namespaces a confined environment needs? (Root,
/// util-linux, a kernel that allows PID, mount and network namespaces.)
fn namespaces_available() -> bool {
    require(
        "local isolation (PID, mount and network namespaces)",
        "a root test run on a kernel that allows `unshare --pid --mount --net`",
        || {
            Command::new("unshare")
                .args([
                    "--pid",
                    "--fork",
                    "--mount-proc",
                    "--mount",
                    "--net",
                    "--",
                    "true",
                ])
                .output()
                .is_ok_and(|o| o.status.success())
        },
    )
}

/// A directory nobody may write, outside the temporary directory (so only
/// the file policy can stop a write there).
fn open_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("isolation-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// A root worker's default: sandboxes run as nobody (the fleet's commands
/// allow root sandboxes, which isolation refuses).
fn worker(fleet: &Fleet, coordinator: &Proc, name: &str, mode: &str) -> Proc {
    let mut cmd = fleet.command();
    cmd.args([
        "worker",
        "--coordinator",
        &coordinator.url(),
        "--token",
        &fleet.token,
        "--name",
        name,
        "--local-isolation",
        mode,
    ])
    .env_remove("CADUCEUS_ALLOW_ROOT_SANDBOX");
    Proc::spawn(cmd, name)
}

fn run(fleet: &Fleet, coordinator: &Proc, task: &str, command: &str) -> String {
    let result = fleet.call(
        coordinator,
        "terminal",
        &json!({ "command": command }),
        task,
    );
    result["output"].as_str().unwrap_or_default().to_owned()
}

fn labels(fleet: &Fleet, coordinator: &Proc, name: &str) -> Value {
    let status = fleet.status(coordinator);
    status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == name)
        .map(|w| w["labels"].clone())
        .unwrap()
}

/// One fleet with a worker in `mode` whose workspace is `workspace`; the
/// task routes its calls there by the worker's name.
fn fleet_with(mode: &str, workspace: &Path) -> (Fleet, Proc, Proc) {
    let fleet = Fleet::new();
    fleet.write_config(&format!(
        "terminal:\n  cwd: {}\n  login_shell: false\n",
        workspace.display()
    ));
    let coordinator = fleet.serve(&["--heartbeat-ms", "3000"]);
    let w = worker(&fleet, &coordinator, mode, mode);
    fleet.wait_for_workers(&coordinator, &[mode], Duration::from_secs(60));
    (fleet, coordinator, w)
}

#[test]
fn a_confined_environment_sees_no_worker_process_and_writes_only_its_workspace() {
    if !namespaces_available() {
        return;
    }
    let outside = open_dir("outside");
    for mode in ["none", "workspace"] {
        let workspace = open_dir(&format!("ws-{mode}"));
        let (fleet, coordinator, w) = fleet_with(mode, &workspace);
        let confined = mode != "none";
        let labels = labels(&fleet, &coordinator, mode);
        if confined {
            assert_eq!(labels["local_isolation"], mode, "{labels}");
        } else {
            // An unconfined worker adds no labels of its own.
            assert!(labels.get("local_isolation").is_none(), "{labels}");
        }

        let worker_pid = w.pid();
        let seen = run(
            &fleet,
            &coordinator,
            mode,
            &format!(
                "whoami; ps -eo pid | grep -cw {worker_pid}; test -e /proc/{worker_pid} && echo proc-visible; echo $$"
            ),
        );
        assert!(seen.contains("nobody"), "{mode}: {seen}");
        assert_eq!(
            seen.contains("proc-visible"),
            !confined,
            "{mode}: /proc/{worker_pid}: {seen}"
        );
        let lines: Vec<&str> = seen.lines().collect();
        assert_eq!(
            lines[1].trim() != "0",
            !confined,
            "{mode}: ps -eo pid shows the worker {worker_pid}: {seen}"
        );

        // Writes: the workspace and /tmp always, elsewhere only unconfined.
        let target = outside.join(format!("from-{mode}"));
        let wrote = run(
            &fleet,
            &coordinator,
            mode,
            &format!(
                "touch {ws}/inside && echo ws-ok; touch /tmp/iso-$$ && rm /tmp/iso-$$ && echo tmp-ok; touch {t} && echo outside-ok",
                ws = workspace.display(),
                t = target.display()
            ),
        );
        assert!(
            wrote.contains("ws-ok") && wrote.contains("tmp-ok"),
            "{mode}: {wrote}"
        );
        assert_eq!(wrote.contains("outside-ok"), !confined, "{mode}: {wrote}");
        assert_eq!(target.exists(), !confined, "{mode}");
        if confined {
            assert!(wrote.contains("Read-only file system"), "{wrote}");
        }

        // The file tools keep the same policy.
        let file = outside.join(format!("file-tool-{mode}"));
        let written = fleet.call(
            &coordinator,
            "write_file",
            &json!({ "path": file.display().to_string(), "content": "x\n" }),
            mode,
        );
        assert_eq!(file.exists(), !confined, "{mode}: {written}");
        let inside = workspace.join("by-file-tool");
        let written = fleet.call(
            &coordinator,
            "write_file",
            &json!({ "path": inside.display().to_string(), "content": "y\n" }),
            mode,
        );
        assert!(inside.exists(), "{mode}: {written}");
        // Served by one file server as the sandbox's user, inside its
        // namespaces: its own `ps` lists it.
        let servers = run(
            &fleet,
            &coordinator,
            mode,
            "ps -eo user:12,args | grep -c -- '^nobody .*__file-serve[r]'",
        );
        assert_eq!(servers.trim(), "1", "{mode}: {servers}");

        // A background process is stopped by the pid it reports inside.
        let started = fleet.call(
            &coordinator,
            "terminal",
            &json!({ "command": "sleep 300", "background": true }),
            mode,
        );
        let id = started["session_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(!id.is_empty(), "{started}");
        fleet.call(
            &coordinator,
            "process",
            &json!({ "action": "kill", "session_id": id }),
            mode,
        );
        let mut gone = false;
        for _ in 0..100 {
            let listed = run(
                &fleet,
                &coordinator,
                mode,
                "pgrep -x sleep -u nobody -c || true",
            );
            if listed.trim() == "0" || listed.trim().is_empty() {
                gone = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(gone, "{mode}: the background sleep was not killed");

        // An environment whose init is killed from outside is made afresh.
        if confined {
            let inits = inits_of(worker_pid);
            assert_eq!(inits.len(), 1, "one environment, one init: {inits:?}");
            Command::new("kill")
                .args(["-9", &inits[0].to_string()])
                .status()
                .unwrap();
            // Killed is dead or a zombie (`unshare` reaps it a moment later).
            let dead = |pid: u32| {
                std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
                    s.rsplit(')')
                        .next()
                        .is_some_and(|r| r.trim_start().starts_with('Z'))
                })
            };
            for _ in 0..100 {
                if dead(inits[0]) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let again = fleet.call(
                &coordinator,
                "terminal",
                &json!({ "command": "echo back-again" }),
                mode,
            );
            assert!(
                again["output"].as_str().unwrap().contains("back-again"),
                "{again}"
            );
            assert!(
                again["environment_reset"].is_string(),
                "the model is told: {again}"
            );
            assert_eq!(inits_of(worker_pid).len(), 1);
        }
        drop(w);
    }
}

#[test]
fn a_strict_environment_cannot_connect_to_a_listener_on_the_host() {
    if !namespaces_available() {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    for mode in ["workspace", "strict"] {
        let workspace = open_dir(&format!("net-{mode}"));
        let (fleet, coordinator, _w) = fleet_with(mode, &workspace);
        let labels = labels(&fleet, &coordinator, mode);
        assert_eq!(labels["local_isolation"], mode, "{labels}");
        let out = run(
            &fleet,
            &coordinator,
            mode,
            &format!(
                "(echo hi > /dev/tcp/127.0.0.1/{port}) 2>&1 && echo connected || echo no-connection"
            ),
        );
        assert_eq!(
            out.contains("connected") && !out.contains("no-connection"),
            mode == "workspace",
            "{mode}: {out}"
        );
    }
}

/// The outside-world tools run in the worker, not in the sandbox: for an
/// environment without network they refuse rather than reach the network
/// on its behalf (private URLs are allowed here, so the refusal is not the
/// URL judge's), and nothing reaches the host's listener.
#[test]
fn a_strict_environments_outside_world_tools_refuse_instead_of_reaching_the_network() {
    if !namespaces_available() {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    listener.set_nonblocking(true).unwrap();
    let workspace = open_dir("outside-world");
    let fleet = Fleet::new();
    fleet.write_config(&format!(
        "terminal:\n  cwd: {}\n  login_shell: false\nsecurity:\n  allow_private_urls: true\n",
        workspace.display()
    ));
    let coordinator = fleet.serve(&["--heartbeat-ms", "3000"]);
    let _w = worker(&fleet, &coordinator, "strict", "strict");
    fleet.wait_for_workers(&coordinator, &["strict"], Duration::from_secs(60));
    let got = fleet.call(
        &coordinator,
        "web_extract",
        &json!({ "urls": [url] }),
        "strict",
    );
    assert_eq!(
        got["error"],
        "web_extract is refused here: this environment has no network (terminal.local_isolation: strict), and the tool would reach the network from the worker on its behalf",
        "{got}"
    );
    assert_eq!(got["success"], false, "{got}");
    assert!(
        listener.accept().is_err(),
        "web_extract reached the host's listener"
    );
    // The shell still runs there: the refusal is the tool's alone.
    assert_eq!(
        run(&fleet, &coordinator, "strict", "echo still-here").trim(),
        "still-here"
    );
}

#[test]
fn an_unknown_isolation_mode_is_refused_at_start() {
    let fleet = Fleet::new();
    let coordinator = fleet.serve(&[]);
    let mut w = worker(&fleet, &coordinator, "w", "sealed");
    assert!(
        w.wait_exit(Duration::from_secs(30))
            .is_some_and(|s| !s.success())
    );
    let said = w.stderr_to_end();
    assert!(
        said.contains("'sealed' is not one of none, workspace, strict"),
        "{said}"
    );
}

/// Host pids of the environments' inits: the children of the worker's
/// `unshare` children.
fn inits_of(worker: u32) -> Vec<u32> {
    let children = |pid: u32| -> Vec<u32> {
        let mut out = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
        out
    };
    children(worker)
        .into_iter()
        .filter(|pid| {
            // argv[0] is unshare's path: `…/unshare\0--pid…`.
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.windows(8).any(|w| w == b"unshare\0"))
        })
        .flat_map(children)
        .collect()
}

/// The host as a container on Docker's default network reaches it: the
/// default route's gateway.
const GATEWAY: &str = r#"gw=$(awk '$2=="00000000"{print $3; exit}' /proc/net/route); printf '%d.%d.%d.%d' 0x${gw:6:2} 0x${gw:4:2} 0x${gw:2:2} 0x${gw:0:2}"#;

#[test]
fn a_docker_environment_with_network_none_cannot_reach_the_host() {
    if BackendUnderTest::docker().ready_or_skip().is_none() {
        return;
    }
    let listener = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    for network in ["bridge", "none"] {
        let fleet = Fleet::new();
        fleet.write_config(&format!(
            "terminal:\n  backend: docker\n  docker_image: {DOCKER_IMAGE}\n  docker_network: {network}\n  container_persistent: false\n  container_memory: 512\n  backend_probe_seconds: 1\n"
        ));
        let coordinator = fleet.serve(&["--heartbeat-ms", "3000"]);
        let _w = fleet.worker(
            &coordinator,
            network,
            &fleet.token,
            &["--backends", "docker"],
        );
        fleet.wait_for_workers(&coordinator, &[network], Duration::from_secs(60));
        wait_for_docker(&fleet, &coordinator, network);
        let result = fleet.call(
            &coordinator,
            "terminal",
            &json!({ "command": format!("ip=$({GATEWAY}); (echo hi > /dev/tcp/$ip/{port}) 2>&1 && echo connected || echo no-connection") }),
            network,
        );
        let out = result["output"].as_str().unwrap_or_default().to_owned();
        assert_eq!(
            out.contains("connected") && !out.contains("no-connection"),
            network == "bridge",
            "{network}: {out}"
        );
        if network == "none" {
            assert!(out.contains("no-connection"), "{out}");
            // Nor do the worker's outside-world tools reach out for it.
            let got = fleet.call(
                &coordinator,
                "web_extract",
                &json!({ "urls": [format!("http://127.0.0.1:{port}/")] }),
                network,
            );
            assert_eq!(
                got["error"],
                "web_extract is refused here: this environment has no network (docker_network: false), and the tool would reach the network from the worker on its behalf",
                "{got}"
            );
        }
    }
}

/// Until `worker` reports the Docker backend available (probed after start).
fn wait_for_docker(fleet: &Fleet, coordinator: &Proc, worker: &str) {
    for _ in 0..300 {
        let status = fleet.status(coordinator);
        let ready = status["workers"].as_array().unwrap().iter().any(|w| {
            w["name"] == worker
                && w["backends"]
                    .as_array()
                    .is_some_and(|b| b.iter().any(|b| b == "docker"))
        });
        if ready {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("docker never became available on {worker}");
}
