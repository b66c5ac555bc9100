#!/usr/bin/env python3
"""Drives the Modal stand-in with the official SDK (`modal==1.6.4` from PyPI).

Run beside a stand-in (tests/fake-modal/serve --port P):

    MODAL_SERVER_URL=http://127.0.0.1:P MODAL_TOKEN_ID=ak-fakemodaltest000000000 \
    MODAL_TOKEN_SECRET=as-fakemodaltestsecret00000000 python sdk_check.py

Prints `SDK CHECK OK` when every step behaved as the SDK expects; any
failure raises. The SDK talks to it over plain HTTP/2 (grpclib) as it
would to api.modal.com; nothing here reaches Modal."""

import os
import sys
import time

import modal
import modal.exception


def step(name):
    print(f"-- {name}", flush=True)


def main():
    assert os.environ.get("MODAL_SERVER_URL", "").startswith("http://127.0.0.1:"), "point MODAL_SERVER_URL at the stand-in"

    step("wrong token: the SDK's hello is refused")
    try:
        modal.Client.from_credentials("ak-wrongwrongwrong", "as-wrongwrongwrong").hello()
        raise AssertionError("a wrong token was accepted")
    except (modal.exception.AuthError, modal.exception.PermissionDeniedError) as err:
        print(f"   refused: {err}")

    step("app and image")
    app = modal.App.lookup("caduceus-sdk-check", create_if_missing=True)
    assert app.app_id.startswith("ap-"), app.app_id
    image = modal.Image.from_registry("debian:bookworm-slim")

    step("create a sandbox (V2) with tags and env")
    sb = modal.Sandbox.create(
        "sleep", "infinity", app=app, image=image, timeout=120,
        tags={"caduceus.check": "sdk"}, env={"CHECK_VAR": "from-env"}, workdir="/tmp",
    )
    print(f"   sandbox {sb.object_id}")
    assert sb.returncode is None

    step('sandbox.exec("echo", "hi")')
    p = sb.exec("echo", "hi")
    assert p.stdout.read() == "hi\n"
    assert p.wait() == 0, p.returncode

    step("stderr, exit code, env and workdir")
    p = sb.exec("bash", "-c", 'echo "$CHECK_VAR $PWD"; echo oops >&2; exit 3')
    out, err = p.stdout.read(), p.stderr.read()
    assert out == "from-env /tmp\n", repr(out)
    assert err == "oops\n", repr(err)
    assert p.wait() == 3, p.returncode

    step("stdin: write, drain, eof")
    p = sb.exec("cat")
    p.stdin.write(b"hello ")
    p.stdin.drain()
    p.stdin.write(b"stand-in\n")
    p.stdin.write_eof()
    p.stdin.drain()
    assert p.stdout.read() == "hello stand-in\n"
    assert p.wait() == 0

    step("binary output in bytes mode, larger than one chunk")
    p = sb.exec("bash", "-c", "head -c 600000 /dev/zero | tr '\\0' 'x'; printf '\\377'", text=False)
    data = p.stdout.read()
    assert len(data) == 600001 and data.endswith(b"\xff"), len(data)
    assert p.wait() == 0

    step("a signal: exit code 128+n")
    p = sb.exec("bash", "-c", "kill -9 $$")
    code = p.wait()
    assert code == 137, code

    step("list by tag")
    sb.set_tags({"caduceus.check": "sdk", "extra": "1"})
    listed = [s.object_id for s in modal.Sandbox.list(app_id=app.app_id, tags={"caduceus.check": "sdk"})]
    assert sb.object_id in listed, listed
    assert sb.get_tags() == {"caduceus.check": "sdk", "extra": "1"}, sb.get_tags()
    assert not list(modal.Sandbox.list(app_id=app.app_id, tags={"caduceus.check": "other"}))

    step("terminate")
    sb.terminate()
    sb.wait(raise_on_termination=False)
    assert sb.returncode == 137, sb.returncode
    listed = [s.object_id for s in modal.Sandbox.list(app_id=app.app_id, tags={"caduceus.check": "sdk"})]
    assert sb.object_id not in listed, listed

    step("timeout: the sandbox ends on its own (returncode 124)")
    short = modal.Sandbox.create("sleep", "infinity", app=app, image=image, timeout=2)
    started = time.monotonic()
    try:
        short.wait(raise_on_termination=False)
        raise AssertionError("a timed-out sandbox did not raise SandboxTimeoutError")
    except modal.exception.SandboxTimeoutError:
        pass
    assert short.returncode == 124, short.returncode
    assert time.monotonic() - started >= 1.5

    step("idle timeout: a sandbox nothing runs in ends on its own, one that runs an exec does not")
    idle = modal.Sandbox.create("sleep", "infinity", app=app, image=image, timeout=120, idle_timeout=2)
    busy = modal.Sandbox.create("sleep", "infinity", app=app, image=image, timeout=120, idle_timeout=2)
    long_exec = busy.exec("sleep", "4")
    idle.wait(raise_on_termination=False)
    assert idle.returncode is not None
    assert busy.poll() is None, "a sandbox with a running exec ended as idle"
    long_exec.wait()
    busy.wait(raise_on_termination=False)
    assert busy.returncode is not None

    step("an entrypoint that exits: its code is the sandbox's")
    done = modal.Sandbox.create("bash", "-c", "exit 5", app=app, image=image)
    done.wait(raise_on_termination=False)
    assert done.returncode == 5, done.returncode

    print("SDK CHECK OK")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        import traceback

        traceback.print_exc()
        sys.exit(1)
