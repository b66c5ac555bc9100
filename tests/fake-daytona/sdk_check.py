"""The official `daytona` SDK (pinned: daytona==0.226.1) against the stand-in.

    DAYTONA_API_URL=http://127.0.0.1:P/api python sdk_check.py

Creates a sandbox, runs `process.exec`, a session command (state persists in
the session, async command with logs and exit code), uploads and downloads a
file, stops, starts, lists by label and deletes. Prints `SDK CHECK OK` at the
end; any failure is an exception (exit status 1).
"""

import os
import sys
import time

os.environ.setdefault("DAYTONA_USE_DEPRECATED_POLLING", "true")

import daytona  # noqa: E402
from daytona import (  # noqa: E402
    CreateSandboxFromImageParams,
    CreateSandboxFromSnapshotParams,
    Daytona,
    DaytonaConfig,
    ListSandboxesQuery,
    SessionExecuteRequest,
)

API_KEY = os.environ.get("DAYTONA_API_KEY", "dtn_fake_test_key_0123456789")


def check(condition, what):
    if not condition:
        raise AssertionError(what)
    print(f"ok: {what}", flush=True)


def main():
    api_url = os.environ["DAYTONA_API_URL"]
    client = Daytona(DaytonaConfig(api_key=API_KEY, api_url=api_url, target="us"))
    label = f"sdk-check-{os.getpid()}"

    sandbox = client.create(
        CreateSandboxFromSnapshotParams(
            snapshot="fake-default",
            labels={"caduceus.check": label},
            auto_stop_interval=15,
            auto_archive_interval=60,
            auto_delete_interval=120,
        ),
        timeout=60,
    )
    check(sandbox.state == "started", f"create from a snapshot reaches started ({sandbox.id})")
    check(sandbox.auto_stop_interval == 15, "auto_stop_interval is kept")

    result = sandbox.process.exec("echo hi; echo err >&2; exit 3", timeout=10)
    check(result.exit_code == 3, f"process.exec exit code ({result.exit_code})")
    check(result.result == "hi\nerr\n", f"process.exec merges stdout and stderr ({result.result!r})")
    cwd = sandbox.process.exec("pwd", cwd="/tmp", timeout=10)
    check(cwd.result.strip() == "/tmp", "process.exec honours cwd")

    sandbox.process.create_session("s1")
    sandbox.process.execute_session_command("s1", SessionExecuteRequest(command="cd /tmp && export SDK_X=42"))
    run = sandbox.process.execute_session_command(
        "s1", SessionExecuteRequest(command="echo $SDK_X $PWD; echo e >&2")
    )
    check(run.exit_code == 0, "session command exit code")
    check(run.stdout == "42 /tmp\n", f"a session keeps cd and export, stdout split ({run.stdout!r})")
    check(run.stderr == "e\n", f"session stderr split ({run.stderr!r})")
    started = sandbox.process.execute_session_command(
        "s1", SessionExecuteRequest(command="sleep 0.3; echo late; exit 7", run_async=True)
    )
    check(started.cmd_id, "an async session command has an id")
    deadline = time.time() + 20
    while True:
        command = sandbox.process.get_session_command("s1", started.cmd_id)
        if command.exit_code is not None:
            break
        if time.time() > deadline:
            raise AssertionError("the async command never finished")
        time.sleep(0.05)
    check(command.exit_code == 7, f"async command exit code ({command.exit_code})")
    logs = sandbox.process.get_session_command_logs("s1", started.cmd_id)
    check(logs.stdout == "late\n", f"async command logs ({logs.stdout!r})")
    session = sandbox.process.get_session("s1")
    check(len(session.commands) == 3, "the session lists its commands")
    sandbox.process.delete_session("s1")

    payload = bytes(range(256)) * 64
    sandbox.fs.upload_file(payload, "data/blob.bin")
    back = sandbox.fs.download_file("data/blob.bin")
    check(back == payload, "upload then download returns the same bytes")
    seen = sandbox.process.exec("wc -c < data/blob.bin", timeout=10)
    check(seen.result.strip() == str(len(payload)), "the uploaded file is in the sandbox")
    try:
        sandbox.fs.download_file("data/missing.bin")
        raise AssertionError("downloading a missing file succeeded")
    except daytona.DaytonaError as err:
        check("not found" in str(err).lower(), f"a missing file is an error ({err})")

    found = list(client.list(ListSandboxesQuery(labels={"caduceus.check": label})))
    check([s.id for s in found] == [sandbox.id], "list by label finds the sandbox")

    sandbox.stop(timeout=60)
    sandbox.refresh_data()
    check(sandbox.state == "stopped", "stop reaches stopped")
    sandbox.start(timeout=60)
    check(sandbox.state == "started", "start reaches started again")
    after = sandbox.process.exec("cat data/blob.bin | wc -c", timeout=10)
    check(after.result.strip() == str(len(payload)), "files survive stop and start")

    client.delete(sandbox, timeout=60)
    # delete does not wait (the SDK's default): the sandbox is destroying, then gone.
    deadline = time.time() + 20
    while list(client.list(ListSandboxesQuery(labels={"caduceus.check": label}))):
        if time.time() > deadline:
            raise AssertionError("the deleted sandbox is still listed")
        time.sleep(0.05)
    check(True, "delete removes the sandbox")

    image = client.create(
        CreateSandboxFromImageParams(image="debian:bookworm-slim", labels={"caduceus.check": label}),
        timeout=60,
    )
    check(image.state == "started", "create from an image goes through the build states to started")
    client.delete(image)

    try:
        list(Daytona(DaytonaConfig(api_key="wrong-key", api_url=api_url)).list())
        raise AssertionError("a wrong key was accepted")
    except daytona.DaytonaError as err:
        check("401" in str(err) or "credentials" in str(err).lower(), f"a wrong key is refused ({err})")

    jwt = Daytona(
        DaytonaConfig(jwt_token="fake-daytona-test-jwt", organization_id="fake-org", api_url=api_url)
    )
    check(isinstance(list(jwt.list()), list), "a JWT with its organization is accepted")
    try:
        list(Daytona(DaytonaConfig(jwt_token="fake-daytona-test-jwt", organization_id="other", api_url=api_url)).list())
        raise AssertionError("a JWT with the wrong organization was accepted")
    except daytona.DaytonaError as err:
        check(True, f"a JWT with the wrong organization is refused ({err})")

    print("SDK CHECK OK", flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception as err:  # noqa: BLE001
        print(f"SDK CHECK FAILED: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        raise
