//! Metrics and traces of a real fleet: `serve --metrics` and `worker
//! --metrics` scraped before and after calls of mixed outcome, and one call's
//! trace id in the JSON logs of both processes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use caduceus_tests::{Fleet, Proc, control_client, http_get, sample};

/// The `host:port` a process printed after `caduceus <who> metrics on http://`.
fn metrics_address(proc: &mut Proc, who: &str) -> String {
    let needle = format!("caduceus {who} metrics on http://");
    let line = proc.wait_for_stderr(&needle, Duration::from_secs(30));
    line.rsplit("http://")
        .next()
        .unwrap()
        .trim_end_matches("/metrics")
        .to_owned()
}

fn scrape(address: &str, token: &str) -> String {
    let (status, body) = http_get(address, "/metrics", Some(token));
    assert_eq!(status, 200, "{body}");
    assert!(body.ends_with("# EOF\n"), "not OpenMetrics text: {body}");
    body
}

/// Waits until the worker is attached (its first call would otherwise race it).
fn wait_attached(fleet: &Fleet, coordinator: &Proc, name: &str) {
    fleet.wait_for_workers(coordinator, &[name], Duration::from_secs(30));
}

/// One call through the Control API; its status name and worker.
async fn call(
    client: &mut caduceus_tests::ControlClient,
    tool: &str,
    args: &str,
    task: &str,
) -> (String, String) {
    let response = client
        .call_tool(caduceus_proto::CallToolRequest {
            tool: tool.into(),
            arguments_json: args.into(),
            task_id: task.into(),
            session_id: String::new(),
            labels: Default::default(),
        })
        .await
        .unwrap()
        .into_inner();
    let status = caduceus_proto::call_status(response.status)
        .as_str()
        .to_owned();
    (status, response.worker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_move_by_exactly_the_calls_made() {
    let fleet = Fleet::new();
    let mut coordinator = fleet.serve(&["--metrics", "127.0.0.1:0"]);
    let coordinator_metrics = metrics_address(&mut coordinator, "coordinator");
    let mut worker = fleet.worker(
        &coordinator,
        "w1",
        &fleet.token,
        &["--metrics", "127.0.0.1:0"],
    );
    let worker_metrics = metrics_address(&mut worker, "worker");
    wait_attached(&fleet, &coordinator, "w1");

    // Nothing is served without a valid token, on either side.
    for address in [&coordinator_metrics, &worker_metrics] {
        assert_eq!(http_get(address, "/metrics", None).0, 401);
        assert_eq!(http_get(address, "/metrics", Some("wrong")).0, 401);
        assert_eq!(http_get(address, "/", Some(&fleet.token)).0, 404);
    }

    let before = scrape(&coordinator_metrics, &fleet.token);
    let worker_before = scrape(&worker_metrics, &fleet.token);

    let mut client = control_client(&coordinator.url(), &fleet.token).await;
    let written = fleet.home.path().join("written.txt");
    // Mixed outcomes: commands that succeed, a file that is not there, a
    // hardline command the gate blocks, arguments that are not JSON, a tool
    // that does not exist.
    let calls: Vec<(&str, String)> = vec![
        ("terminal", json!({"command": "echo one"}).to_string()),
        ("terminal", json!({"command": "echo two"}).to_string()),
        ("terminal", json!({"command": "exit 3"}).to_string()),
        (
            "read_file",
            json!({"path": "/nonexistent/caduceus-metrics"}).to_string(),
        ),
        ("terminal", json!({"command": "rm -rf /"}).to_string()),
        ("terminal", "{not json".to_owned()),
        ("no_such_tool", "{}".to_owned()),
        (
            "write_file",
            json!({"path": written, "content": "x"}).to_string(),
        ),
    ];
    let mut by_series: BTreeMap<(String, String), u32> = BTreeMap::new();
    let mut on_worker: BTreeMap<(String, String), u32> = BTreeMap::new();
    let mut placed = 0;
    for (tool, args) in &calls {
        let (status, ran_on) = call(&mut client, tool, args, "metrics-task").await;
        let label = if *tool == "no_such_tool" {
            "(unknown)"
        } else {
            tool
        };
        *by_series
            .entry((label.to_owned(), status.clone()))
            .or_default() += 1;
        if !ran_on.is_empty() {
            assert_eq!(ran_on, "w1");
            placed += 1;
            *on_worker.entry((label.to_owned(), status)).or_default() += 1;
        }
    }
    assert!(by_series.len() >= 3, "mixed statuses: {by_series:?}");

    let after = scrape(&coordinator_metrics, &fleet.token);
    let delta =
        |before: &str, after: &str, series: &str| sample(after, series) - sample(before, series);
    let mut total = 0.0;
    for ((tool, status), count) in &by_series {
        let series = format!(r#"caduceus_tool_calls_total{{tool="{tool}",status="{status}"}}"#);
        assert_eq!(
            delta(&before, &after, &series),
            f64::from(*count),
            "{series}\n{after}"
        );
        total += f64::from(*count);
    }
    assert_eq!(total as usize, calls.len());
    // Every call's latency is in its tool's histogram.
    for tool in ["terminal", "read_file", "write_file", "(unknown)"] {
        let want: u32 = by_series
            .iter()
            .filter(|((t, _), _)| t == tool)
            .map(|(_, n)| n)
            .sum();
        let series = format!(r#"caduceus_tool_call_duration_seconds_count{{tool="{tool}"}}"#);
        assert_eq!(
            delta(&before, &after, &series),
            f64::from(want),
            "{series}\n{after}"
        );
    }
    // Each call that reached a worker waited for its placement once.
    assert_eq!(
        delta(
            &before,
            &after,
            r#"caduceus_placement_wait_seconds_count{outcome="placed"}"#
        ),
        f64::from(placed),
        "{after}"
    );
    assert_eq!(
        sample(&after, r#"caduceus_workers{state="ready"}"#),
        1.0,
        "{after}"
    );
    assert_eq!(sample(&after, "caduceus_approvals_pending"), 0.0, "{after}");

    // The worker counted the calls that ran on it, by its own statuses.
    let worker_after = scrape(&worker_metrics, &fleet.token);
    for ((tool, status), count) in &on_worker {
        let series = format!(r#"caduceus_worker_calls_total{{tool="{tool}",status="{status}"}}"#);
        assert_eq!(
            delta(&worker_before, &worker_after, &series),
            f64::from(*count),
            "{series}\n{worker_after}"
        );
    }
    let terminal_on_worker: u32 = on_worker
        .iter()
        .filter(|((t, _), _)| t == "terminal")
        .map(|(_, n)| n)
        .sum();
    assert_eq!(
        delta(
            &worker_before,
            &worker_after,
            r#"caduceus_worker_call_duration_seconds_count{tool="terminal"}"#
        ),
        f64::from(terminal_on_worker)
    );
    assert_eq!(
        sample(
            &worker_after,
            r#"caduceus_worker_environments{backend="local"}"#
        ),
        1.0,
        "{worker_after}"
    );
    assert_eq!(sample(&worker_after, "caduceus_worker_attached"), 1.0);
    assert_eq!(sample(&worker_after, "caduceus_worker_attaches_total"), 1.0);

    // The coordinator learns of the environment from the worker's heartbeat.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = scrape(&coordinator_metrics, &fleet.token);
        if sample(&now, r#"caduceus_environments{backend="local"}"#) == 1.0 {
            break;
        }
        assert!(Instant::now() < deadline, "no environment gauge: {now}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A scoped client token may scrape the coordinator (a worker token may not).
    let created = fleet.client(
        &coordinator,
        &[
            "tokens",
            "create",
            "--role",
            "client",
            "--name",
            "prometheus",
        ],
    );
    assert!(created.status.success());
    let client_token = String::from_utf8_lossy(&created.stdout).trim().to_owned();
    assert_eq!(
        http_get(&coordinator_metrics, "/metrics", Some(&client_token)).0,
        200
    );
    let created = fleet.client(
        &coordinator,
        &[
            "tokens",
            "create",
            "--role",
            "worker",
            "--name",
            "not-prometheus",
        ],
    );
    let worker_token = String::from_utf8_lossy(&created.stdout).trim().to_owned();
    assert_eq!(
        http_get(&coordinator_metrics, "/metrics", Some(&worker_token)).0,
        401
    );

    // A worker killed outright is a lost worker.
    worker.kill();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = scrape(&coordinator_metrics, &fleet.token);
        if sample(&now, r#"caduceus_workers_lost_total{reason="stream"}"#) == 1.0 {
            assert_eq!(
                sample(&now, r#"caduceus_workers{state="ready"}"#),
                0.0,
                "{now}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the killed worker is not counted lost: {now}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The JSON log lines of a process's stderr so far (others are skipped: the
/// `listening on` lines scripts read are plain text).
fn json_lines(proc: &mut Proc) -> Vec<Value> {
    proc.stderr
        .iter()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// Waits for a JSON log line of the finished call with `trace_id` in its
/// span; returns it.
fn finished_line(proc: &mut Proc, trace_id: &str) -> Value {
    loop {
        proc.wait_for_stderr(trace_id, Duration::from_secs(20));
        let found = json_lines(proc).into_iter().find(|line| {
            line["span"]["trace_id"] == trace_id
                && line["fields"]["message"] == "tool call finished"
        });
        if let Some(line) = found {
            return line;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_id_per_call_in_both_json_logs() {
    let fleet = Fleet::new();
    let json_logs = [("CADUCEUS_LOG_FORMAT", "json")];
    let mut coordinator = fleet.serve_with_env(&[], &json_logs);
    let mut worker = fleet.worker_with_env(&coordinator, "w1", &[], &json_logs);
    wait_attached(&fleet, &coordinator, "w1");
    let mut client = control_client(&coordinator.url(), &fleet.token).await;

    // The client's trace continues through the coordinator to the worker.
    let theirs = "4bf92f3577b34da6a3ce929d0e0e4736";
    let mut request = tonic::Request::new(caduceus_proto::CallToolRequest {
        tool: "terminal".into(),
        arguments_json: json!({"command": "echo traced"}).to_string(),
        task_id: "traced".into(),
        session_id: String::new(),
        labels: Default::default(),
    });
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{theirs}-00f067aa0ba902b7-01").parse().unwrap(),
    );
    let response = client.call_tool(request).await.unwrap();
    let returned = response
        .metadata()
        .get("traceparent")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(returned.starts_with(&format!("00-{theirs}-")), "{returned}");
    assert!(
        !returned.contains("00f067aa0ba902b7"),
        "a span of its own: {returned}"
    );

    let on_coordinator = finished_line(&mut coordinator, theirs);
    assert_eq!(on_coordinator["span"]["tool"], "terminal");
    assert_eq!(on_coordinator["fields"]["status"], "ok");
    assert_eq!(on_coordinator["fields"]["worker"], "w1");
    let on_worker = finished_line(&mut worker, theirs);
    assert_eq!(on_worker["span"]["task"], "traced");
    // The worker's parent span is the coordinator's.
    assert_eq!(
        on_worker["span"]["parent_span_id"],
        on_coordinator["span"]["span_id"]
    );

    // Without one (or with a malformed one) the coordinator starts a trace.
    let mut request = tonic::Request::new(caduceus_proto::CallToolRequest {
        tool: "terminal".into(),
        arguments_json: json!({"command": "echo untraced"}).to_string(),
        task_id: "traced".into(),
        session_id: String::new(),
        labels: Default::default(),
    });
    request
        .metadata_mut()
        .insert("traceparent", "00-garbage".parse().unwrap());
    let response = client.call_tool(request).await.unwrap();
    let ours = caduceus_proto::trace::TraceParent::parse(
        response
            .metadata()
            .get("traceparent")
            .unwrap()
            .to_str()
            .unwrap(),
    )
    .unwrap()
    .trace_id_hex();
    assert_ne!(ours, theirs);
    finished_line(&mut coordinator, &ours);
    finished_line(&mut worker, &ours);

    // Every log line of both is a JSON object.
    for proc in [&mut coordinator, &mut worker] {
        for line in &proc.stderr {
            assert!(
                line.starts_with('{') || line.starts_with("caduceus "),
                "{}: not a JSON log line: {line}",
                proc.label
            );
        }
    }
}
