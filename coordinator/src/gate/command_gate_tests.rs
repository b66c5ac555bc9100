use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::*;
use crate::call::CallContext;
use crate::gate::{Decision, Scope};
use crate::registry::{ToolEntry, builtin};

fn entry(name: &str) -> Arc<ToolEntry> {
    builtin::builtin_registry("local")
        .unwrap()
        .get(name)
        .unwrap()
        .clone()
}

fn settings() -> ApprovalSettings {
    ApprovalSettings::default()
}

fn args(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => panic!("not an object"),
    }
}

async fn admit_on(
    gate: &CommandGate,
    tool: &str,
    arguments: Value,
    backend: &str,
) -> Result<Admission, GateRefusal> {
    let entry = entry(tool);
    let ctx = CallContext {
        task_id: "t1".into(),
        ..CallContext::default()
    };
    let args = args(arguments);
    gate.admit(&GateCall {
        ctx: &ctx,
        entry: &entry,
        args: &args,
        backend,
    })
    .await
}

async fn run(gate: &CommandGate, command: &str) -> Result<Admission, GateRefusal> {
    admit_on(gate, "terminal", json!({"command": command}), "local").await
}

fn refusal(result: Result<Admission, GateRefusal>) -> (Value, CallStatus) {
    match result {
        Err(refusal) => (
            serde_json::from_str(&refusal.result).unwrap(),
            refusal.status,
        ),
        Ok(admission) => panic!("expected a refusal, got {admission:?}"),
    }
}

fn blocked_error(result: Result<Admission, GateRefusal>) -> String {
    let (value, status) = refusal(result);
    assert_eq!(status, CallStatus::Blocked, "{value}");
    assert_eq!(value["status"], "blocked");
    assert_eq!(value["output"], "");
    assert_eq!(value["exit_code"], -1);
    value["error"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn safe_commands_and_other_tools_pass() {
    let gate = CommandGate::new(settings());
    assert_eq!(run(&gate, "ls -la").await.unwrap(), Admission::default());
    assert_eq!(
        run(&gate, "git branch -d feat").await.unwrap(),
        Admission::default()
    );
    let read = admit_on(&gate, "read_file", json!({"path": "/etc/passwd"}), "local").await;
    assert!(read.is_ok());
    // Not a string: the terminal tool answers with its own error.
    let odd = admit_on(
        &gate,
        "terminal",
        json!({"command": ["rm", "-rf", "/"]}),
        "local",
    )
    .await;
    assert!(odd.is_ok());
}

#[tokio::test]
async fn hardline_is_refused_in_every_mode_and_on_every_backend() {
    for (mode, backend) in [
        (ApprovalMode::Ask, "local"),
        (ApprovalMode::Off, "local"),
        (ApprovalMode::Off, "docker"),
        (ApprovalMode::Deny, "modal"),
    ] {
        let gate = CommandGate::new(ApprovalSettings {
            mode,
            allowlist: vec![
                "rm -rf /".into(),
                "recursive delete of root filesystem".into(),
            ],
            ..settings()
        });
        let result = admit_on(&gate, "terminal", json!({"command": "rm -rf /"}), backend).await;
        assert_eq!(
            blocked_error(result),
            texts::hardline("recursive delete of root filesystem"),
            "{mode:?} on {backend}"
        );
    }
    let gate = CommandGate::new(settings());
    let background = admit_on(
        &gate,
        "terminal",
        json!({"command": "sleep 1; reboot", "background": true}),
        "local",
    )
    .await;
    assert!(blocked_error(background).starts_with("BLOCKED (hardline): system shutdown/reboot."));
}

#[tokio::test]
async fn sudo_from_stdin_needs_a_configured_password() {
    let gate = CommandGate::new(ApprovalSettings {
        mode: ApprovalMode::Off,
        ..settings()
    });
    assert_eq!(
        blocked_error(run(&gate, "echo hunter2 | sudo -S id").await),
        texts::sudo_stdin("sudo password guessing via stdin (sudo -S)")
    );
    let configured = CommandGate::new(ApprovalSettings {
        mode: ApprovalMode::Off,
        sudo_password_configured: true,
        ..settings()
    });
    assert!(run(&configured, "echo hunter2 | sudo -S id").await.is_ok());
}

#[tokio::test]
async fn deny_rules_refuse_even_when_approvals_are_off() {
    let gate = CommandGate::new(ApprovalSettings {
        mode: ApprovalMode::Off,
        deny: vec!["git push*".into(), "curl *evil*".into()],
        allowlist: vec!["git push origin main".into()],
        ..settings()
    });
    assert_eq!(
        blocked_error(run(&gate, "git push origin main").await),
        texts::deny_rule("git push*")
    );
    // Case and quoting tricks do not get past a rule.
    assert_eq!(
        blocked_error(run(&gate, "GIT pu\"\"sh").await),
        texts::deny_rule("git push*")
    );
    assert!(run(&gate, "git pull").await.is_ok());
    let docker = admit_on(
        &gate,
        "terminal",
        json!({"command": "curl https://evil.example"}),
        "docker",
    )
    .await;
    assert_eq!(blocked_error(docker), texts::deny_rule("curl *evil*"));
}

#[tokio::test]
async fn dangerous_commands_are_held_for_approval_when_nobody_listens() {
    let gate = CommandGate::new(settings());
    let (value, status) = refusal(run(&gate, "rm -rf build").await);
    assert_eq!(status, CallStatus::PendingApproval);
    assert_eq!(value["status"], "pending_approval");
    assert_eq!(value["approval_pending"], true);
    assert_eq!(value["exit_code"], -1);
    assert_eq!(value["command"], "rm -rf build");
    assert_eq!(value["description"], "recursive delete");
    assert_eq!(value["pattern_key"], "recursive delete");
    assert_eq!(value["expires_in_s"], 60);
    let id = value["approval_id"].as_str().unwrap().to_owned();
    let listed = gate.approvals.list();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, id);
    assert_eq!(listed[0].tool, "terminal");

    gate.approvals
        .answer(&id, Decision::Approve(Scope::Once))
        .unwrap();
    assert_eq!(
        run(&gate, "rm -rf build").await.unwrap(),
        Admission {
            approval_note: Some(texts::approval_note("recursive delete"))
        }
    );
}

#[tokio::test]
async fn background_commands_are_guarded_too() {
    let gate = CommandGate::new(settings());
    let result = admit_on(
        &gate,
        "terminal",
        json!({"command": "git push --force", "background": true}),
        "local",
    )
    .await;
    let (value, status) = refusal(result);
    assert_eq!(status, CallStatus::PendingApproval);
    assert_eq!(
        value["description"],
        "git force push (rewrites remote history)"
    );
}

#[tokio::test]
async fn mode_off_runs_and_mode_deny_refuses_dangerous_commands() {
    let off = CommandGate::new(ApprovalSettings {
        mode: ApprovalMode::Off,
        ..settings()
    });
    assert_eq!(
        run(&off, "rm -rf build").await.unwrap(),
        Admission::default()
    );

    let deny = CommandGate::new(ApprovalSettings {
        mode: ApprovalMode::Deny,
        allowlist: vec!["git reset --hard".into()],
        ..settings()
    });
    assert_eq!(
        blocked_error(run(&deny, "rm -rf build").await),
        texts::mode_deny("recursive delete")
    );
    assert!(deny.approvals.list().is_empty(), "no request in deny mode");
    assert!(run(&deny, "git reset --hard").await.is_ok());
}

#[tokio::test]
async fn the_allowlist_matches_commands_globs_and_approval_keys() {
    let gate = CommandGate::new(ApprovalSettings {
        allowlist: vec![
            "git reset --hard".into(),
            "git push --force origin *".into(),
            "recursive delete".into(),
        ],
        ..settings()
    });
    assert!(run(&gate, "git reset --hard").await.is_ok());
    assert!(run(&gate, "git push --force origin feature").await.is_ok());
    assert!(run(&gate, "rm -rf anything").await.is_ok());
    // Compound commands never match command entries.
    let compound = run(&gate, "git reset --hard && git push --force origin x").await;
    assert_eq!(refusal(compound).1, CallStatus::PendingApproval);
    let other = run(&gate, "chmod 777 x").await;
    assert_eq!(refusal(other).1, CallStatus::PendingApproval);
}

#[tokio::test]
async fn container_backends_relax_approvals_but_not_the_floor() {
    let relaxed = CommandGate::new(settings());
    for backend in ["docker", "singularity", "modal", "daytona"] {
        let result = admit_on(
            &relaxed,
            "terminal",
            json!({"command": "rm -rf build"}),
            backend,
        )
        .await;
        assert!(result.is_ok(), "{backend}");
    }
    for backend in ["local", "ssh"] {
        let result = admit_on(
            &relaxed,
            "terminal",
            json!({"command": "rm -rf build"}),
            backend,
        )
        .await;
        assert_eq!(refusal(result).1, CallStatus::PendingApproval, "{backend}");
    }
    let strict = CommandGate::new(ApprovalSettings {
        containers: ContainerApprovals::Ask,
        ..settings()
    });
    let result = admit_on(
        &strict,
        "terminal",
        json!({"command": "rm -rf build"}),
        "docker",
    )
    .await;
    assert_eq!(refusal(result).1, CallStatus::PendingApproval);
}

#[tokio::test]
async fn a_listening_session_answers_inline() {
    let gate = Arc::new(CommandGate::new(ApprovalSettings {
        timeout: Duration::from_secs(30),
        ..settings()
    }));
    let approvals = gate.approvals.clone();
    let mut listener = approvals.attach_listener("s1");
    let call = {
        let gate = gate.clone();
        tokio::spawn(async move {
            let entry = entry("terminal");
            let ctx = CallContext {
                task_id: "t1".into(),
                session_id: Some("s1".into()),
                ..CallContext::default()
            };
            let args = args(json!({"command": "git reset --hard"}));
            gate.admit(&GateCall {
                ctx: &ctx,
                entry: &entry,
                args: &args,
                backend: "local",
            })
            .await
        })
    };
    let request = listener.recv().await.unwrap();
    assert_eq!(request.tool, "terminal");
    assert_eq!(request.command, "git reset --hard");
    approvals
        .answer(
            &request.id,
            Decision::Deny {
                reason: Some("not on main".into()),
            },
        )
        .unwrap();
    assert_eq!(
        blocked_error(call.await.unwrap()),
        texts::denied_by_user(Some("not on main"))
    );
}

#[test]
fn modes_parse_with_hermes_names() {
    assert_eq!(ApprovalMode::parse("ask"), Ok(ApprovalMode::Ask));
    assert_eq!(ApprovalMode::parse("manual"), Ok(ApprovalMode::Ask));
    assert_eq!(ApprovalMode::parse("smart"), Ok(ApprovalMode::Ask));
    assert_eq!(ApprovalMode::parse("OFF"), Ok(ApprovalMode::Off));
    assert_eq!(ApprovalMode::parse("false"), Ok(ApprovalMode::Off));
    assert_eq!(ApprovalMode::parse("deny"), Ok(ApprovalMode::Deny));
    assert!(ApprovalMode::parse("yolo").is_err());
    assert_eq!(
        ContainerApprovals::parse("ask"),
        Ok(ContainerApprovals::Ask)
    );
    assert_eq!(
        ContainerApprovals::parse("off"),
        Ok(ContainerApprovals::Off)
    );
    assert!(ContainerApprovals::parse("maybe").is_err());
}

async fn script(gate: &CommandGate, code: &str, backend: &str) -> Result<Admission, GateRefusal> {
    admit_on(gate, "execute_code", json!({"code": code}), backend).await
}

#[tokio::test]
async fn a_script_is_read_whole_before_it_runs() {
    let gate = CommandGate::new(settings());
    // Harmless: runs without asking.
    assert_eq!(
        script(&gate, "print(open('x').read())", "local")
            .await
            .unwrap(),
        Admission::default()
    );
    // A dangerous command in the text: the whole script waits for a person.
    let (held, status) = refusal(
        script(
            &gate,
            "import os\nos.system('chmod -R 777 /srv/app')\n",
            "local",
        )
        .await,
    );
    assert_eq!(status, CallStatus::PendingApproval, "{held}");
    assert_eq!(held["status"], "error");
    assert_eq!(held["tool_calls_made"], 0);
    assert_eq!(held["approval_pending"], true);
    assert_eq!(held["pattern_key"], "execute_code");
    let description = held["description"].as_str().unwrap();
    assert!(description.starts_with("script contains: "), "{held}");
    assert!(description.contains("writable"), "{held}");
    let listed = gate.approvals.list();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].command,
        "execute_code <<'PY'\nimport os\nos.system('chmod -R 777 /srv/app')\n\nPY"
    );
    // A hardline command: refused outright, in execute_code's shape.
    let (refused, status) =
        refusal(script(&gate, "import os\nos.system('rm -rf /')\n", "local").await);
    assert_eq!(status, CallStatus::Blocked);
    assert_eq!(refused["status"], "error");
    assert!(
        refused["error"].as_str().unwrap().starts_with(
            "BLOCKED (hardline): the script contains recursive delete of root filesystem."
        ),
        "{refused}"
    );
    // In a container with `approvals.containers: off` (the default), and
    // with `mode: off`, it runs.
    assert_eq!(
        script(
            &gate,
            "import os\nos.system('chmod -R 777 /srv/app')\n",
            "docker"
        )
        .await
        .unwrap(),
        Admission::default()
    );
    let off = CommandGate::new(ApprovalSettings {
        mode: ApprovalMode::Off,
        ..settings()
    });
    assert_eq!(
        script(
            &off,
            "import os\nos.system('chmod -R 777 /srv/app')\n",
            "local"
        )
        .await
        .unwrap(),
        Admission::default()
    );
}
