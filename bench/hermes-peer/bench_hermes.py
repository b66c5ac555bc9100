#!/usr/bin/env python3
"""Side-by-side benchmark: hermes-agent 0.19.0 tool calls (no LLM), caduceus, and raw limits.

caduceus' rows come from its bench binary (`caduceus-bench`, built by run_all.sh from
this repository) and are interleaved with hermes' and the raw rows in the same rounds.

Everything is measured in ONE process run so ratios are comparable on a noisy
2-core box. Hermes and raw measurements for the same operation are interleaved
in rounds (R rounds of N/R calls each) so drift hits both sides equally.

Run via run_all.sh beside this file (creates venv, builds the Rust raw bench).
Env knobs: BENCH_N (default 200), BENCH_ROUNDS (default 4).
Outputs: $PEER_DIR/results/results.json and a markdown table on stdout.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.environ.get("PEER_DIR", os.path.join(os.environ.get("TMPDIR", "/tmp"), "peer"))
WORK = f"{ROOT}/work"
DATA = f"{WORK}/data"
RESULTS = f"{ROOT}/results"
RAWBENCH = f"{ROOT}/rawbench/target/release/rawbench"
CADBENCH = os.environ.get("CADBENCH", "")  # caduceus-bench (run_all.sh sets it)
RG_DIR = f"{ROOT}/rgtool/bin"  # ripgrep from the PyPI 'ripgrep' wheel (optional)

ONLY_EXECUTE_CODE = sys.argv[1:] == ["--only-execute-code"]
DOCKER_IMAGE = os.environ.get("CADBENCH_DOCKER_IMAGE", "caduceus-base:bookworm")

# --- hermes needs only these two env vars for direct, LLM-free tool calls ---
os.environ["TERMINAL_ENV"] = "local"                 # local backend (default anyway)
if ONLY_EXECUTE_CODE:
    # The remote path of execute_code: the script runs in hermes' Docker
    # container and its tool calls travel as files polled every 100 ms.
    os.environ["TERMINAL_ENV"] = "docker"
    os.environ["TERMINAL_DOCKER_IMAGE"] = DOCKER_IMAGE
    os.environ["TERMINAL_CONTAINER_PERSISTENT"] = "false"
os.environ["HERMES_HOME"] = f"{ROOT}/hermes_home"    # keep config/state out of ~/.hermes
os.makedirs(os.environ["HERMES_HOME"], exist_ok=True)
os.makedirs(RESULTS, exist_ok=True)
os.chdir(WORK)  # hermes local backend's initial cwd = process cwd (TERMINAL_CWD unset)

N = int(os.environ.get("BENCH_N", "200"))
R = int(os.environ.get("BENCH_ROUNDS", "4"))
TASK = "bench"

_t0 = time.perf_counter()
from model_tools import handle_function_call  # noqa: E402  (the dispatcher the agent loop uses)
IMPORT_MODEL_TOOLS_S = time.perf_counter() - _t0


# ----------------------------------------------------------------- helpers
def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def stats(xs):
    return {
        "n": len(xs),
        "p50_ms": pct(xs, 0.50),
        "p95_ms": pct(xs, 0.95),
        "mean_ms": statistics.fmean(xs) if xs else float("nan"),
        "min_ms": min(xs) if xs else float("nan"),
        "calls_per_s": (1000.0 / statistics.fmean(xs)) if xs else float("nan"),
    }


def timed(fn, n, before=None):
    out = []
    for _ in range(n):
        if before:
            before()
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def hcall(name, args):
    r = handle_function_call(name, args, task_id=TASK)
    return r


def rust(mode, n):
    if not os.path.exists(RAWBENCH):
        return None
    p = subprocess.run([RAWBENCH, mode, str(n), WORK], capture_output=True, text=True, check=True)
    return json.loads(p.stdout)["samples_ms"]


def cad(mode, n):
    """caduceus' bench binary: same JSON shape as rawbench. None when unavailable."""
    if not CADBENCH or not os.path.exists(CADBENCH):
        return None
    p = subprocess.run([CADBENCH, mode, str(n), WORK], capture_output=True, text=True)
    if p.returncode != 0:
        NOTES.setdefault("caduceus_errors", {})[mode] = p.stderr[-2000:]
        return None
    out = json.loads(p.stdout)
    if "calls_per_s" in out:
        NOTES.setdefault("caduceus_throughput_calls_per_s", {})[mode] = round(out["calls_per_s"], 1)
    return out["samples_ms"]


SAMPLES = {}  # label -> list of ms
NOTES = {}


def add(label, xs):
    if xs is None:
        return
    SAMPLES.setdefault(label, []).extend(xs)


def interleave(jobs, n=N, rounds=R):
    """jobs: list of (label, fn_returning_samples(k)). Runs rounds x (each job k calls)."""
    k = max(1, n // rounds)
    for _ in range(rounds):
        for label, job in jobs:
            add(label, job(k))


# ----------------------------------------------------------------- fixtures
def make_fixtures():
    if os.path.isdir(DATA):
        shutil.rmtree(DATA)
    os.makedirs(DATA)
    with open(f"{DATA}/file1000.txt", "w") as f:
        for i in range(1, 1001):
            f.write(f"line {i:04d}: lorem ipsum dolor sit amet, consectetur adipiscing\n")
    tree = f"{DATA}/tree500"
    for i in range(500):
        d = f"{tree}/d{i // 50:02d}"
        os.makedirs(d, exist_ok=True)
        with open(f"{d}/f{i:03d}.txt", "w") as f:
            for j in range(20):
                if i % 20 == 0 and j == 7:
                    f.write(f"    # TODO_FIXME item {i} needs work\n")
                else:
                    f.write(f"def func_{i}_{j}(x): return x * {j}  # filler text\n")
    # 25 files contain the pattern -> 25 matches (< hermes default limit 50)


# ----------------------------------------------------------------- raw (python)
def py_spawn(shell):
    def job(k):
        return timed(lambda: subprocess.run([shell, "-c", "echo hi"], stdin=subprocess.DEVNULL,
                                            capture_output=True, check=True), k)
    return job


class PersistentBash:
    def __init__(self):
        self.p = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, bufsize=0)
        self.r = self.p.stdout

    def rt(self):
        self.p.stdin.write(b"echo hi; echo __END__\n")
        buf = b""
        while not buf.endswith(b"__END__\n"):
            buf += os.read(self.r.fileno(), 65536)
        assert buf == b"hi\n__END__\n", buf

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def py_hermes_wrapper_job(env):
    """The exact script hermes builds for 'echo hi', run via plain subprocess.run:
    isolates shell-side cost (source snapshot, export -p, mv, $(pwd -P)) from
    hermes' Python-side dispatch/poll overhead."""
    script = env._wrap_command("echo hi", env.cwd)
    bash = shutil.which("bash")

    def job(k):
        return timed(lambda: subprocess.run([bash, "-c", script], stdin=subprocess.DEVNULL,
                                            capture_output=True, cwd=env.cwd, check=True), k)
    return job


def py_read_1000():
    with open(f"{DATA}/file1000.txt") as f:
        s = f.read()
    return "".join(f"{i:>6}|{l}\n" for i, l in enumerate(s.splitlines(), 1))


_wc = [0]


def py_write_small():
    _wc[0] += 1
    tmp, dst = f"{DATA}/.py.tmp", f"{DATA}/py_out_small.txt"
    with open(tmp, "w") as f:
        f.write(f"hello world {_wc[0]}\nsecond line\n")
    os.replace(tmp, dst)


def py_search_500():
    out = []
    for dp, dn, fn in os.walk(f"{DATA}/tree500"):
        dn.sort()
        for name in sorted(fn):
            p = os.path.join(dp, name)
            with open(p) as f:
                for i, line in enumerate(f, 1):
                    if "TODO_FIXME" in line:
                        out.append(f"{p}:{i}:{line}")
    assert out
    return out


# ----------------------------------------------------------------- spawn counter
def count_spawns(fn):
    from tools.environments.local import LocalEnvironment
    orig = LocalEnvironment._run_bash
    calls = []

    def wrapped(self, cmd_string, **kw):
        calls.append(cmd_string.split("eval '", 1)[-1].split("'\n__hermes_ec")[0][:80])
        return orig(self, cmd_string, **kw)

    LocalEnvironment._run_bash = wrapped
    try:
        fn()
    finally:
        LocalEnvironment._run_bash = orig
    return calls


# ----------------------------------------------------------------- main
def _cpu_busy_s():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    idle = v[3] + v[4]
    return (sum(v[:8]) - idle) / hz


def _own_cpu_s():
    import resource
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def main():
    busy0, own0, wall0 = _cpu_busy_s(), _own_cpu_s(), time.time()
    load0 = os.getloadavg()
    make_fixtures()
    info = {
        "python": sys.version.split()[0],
        "bash": subprocess.run(["bash", "--version"], capture_output=True, text=True).stdout.splitlines()[0],
        "nproc": os.cpu_count(),
        "N": N, "rounds": R,
        "import_model_tools_s": round(IMPORT_MODEL_TOOLS_S, 3),
        "rg_on_system_path": shutil.which("rg"),
    }
    try:
        from importlib.metadata import version
        info["hermes_agent"] = version("hermes-agent")
    except Exception:
        pass

    # --- first call: creates LocalEnvironment (login-shell snapshot) -------
    t = time.perf_counter()
    r = json.loads(hcall("terminal", {"command": "echo hi"}))
    info["first_terminal_call_ms"] = round((time.perf_counter() - t) * 1e3, 1)
    assert r["output"] == "hi", r
    from tools.terminal_tool import _active_environments
    env = _active_environments["default"]
    info["env_class"] = type(env).__module__ + "." + type(env).__name__
    info["snapshot_path"] = env._snapshot_path

    # --- semantics: does state persist across terminal calls? ---------------
    sem = {}
    for label, seq in {
        "cwd": ["cd /tmp", "pwd"],
        "exported_env": ["export BENCH_X=1", "echo \"X=$BENCH_X\""],
        "plain_var": ["BENCH_Y=2", "echo \"Y=$BENCH_Y\""],
        "function": ["bench_fn() { echo fn-ok; }", "type bench_fn >/dev/null 2>&1 && bench_fn || echo no-fn"],
        "alias": ["alias bench_al='echo al-ok'", "alias bench_al 2>/dev/null || echo no-alias"],
        "shell_pid": ["echo $$", "echo $$"],
    }.items():
        outs = [json.loads(hcall("terminal", {"command": c}))["output"] for c in seq]
        sem[label] = {"commands": seq, "outputs": outs}
    hcall("terminal", {"command": f"cd {WORK}"})
    hcall("terminal", {"command": "unset BENCH_X"})
    NOTES["persistence"] = sem

    # --- spawn counts per tool (instrumented, separate from timing) ---------
    from tools.file_tools import reset_file_dedup, notify_other_tool_call

    def fresh_read():
        reset_file_dedup(TASK)
        notify_other_tool_call(TASK)

    def fresh():
        fresh_read()

    ops = {
        "terminal echo hi": lambda: hcall("terminal", {"command": "echo hi"}),
        "read_file 1000 lines": lambda: fresh() or hcall("read_file", {"path": f"{DATA}/file1000.txt", "limit": 1000}),
        "write_file small": lambda: hcall("write_file", {"path": f"{DATA}/h_out_small.txt", "content": f"hello world {time.time()}\nsecond line\n"}),
        "search_files 500 files (grep)": lambda: fresh() or hcall("search_files", {"pattern": "TODO_FIXME", "path": f"{DATA}/tree500"}),
        "patch small": lambda: hcall("patch", {"path": f"{DATA}/h_out_small.txt", "old_string": "second line", "new_string": "2nd line"}),
    }
    spawns = {}
    for k, op in ops.items():
        first = count_spawns(op)          # cold: includes cached `command -v` probes etc.
        if k == "patch small":
            hcall("write_file", {"path": f"{DATA}/h_out_small.txt", "content": "x\nsecond line\n"})
        spawns[k] = count_spawns(op)      # steady state (reported)
        spawns[k + " [first call]"] = first
    NOTES["bash_spawns_per_call"] = {k: {"count": len(v), "commands": v} for k, v in spawns.items()}

    # --- (a) terminal echo hi vs raw spawns -----------------------------------
    pb = PersistentBash()
    from tools.registry import registry
    interleave([
        ("a.hermes terminal 'echo hi'", lambda k: timed(lambda: hcall("terminal", {"command": "echo hi"}), k)),
        ("a.hermes-layer registry.dispatch terminal", lambda k: timed(
            lambda: registry.dispatch("terminal", {"command": "echo hi"}, task_id=TASK), k)),
        ("a.hermes-layer LocalEnvironment.execute", lambda k: timed(
            lambda: env.execute("echo hi", bounded_capture=True), k)),
        ("a.raw py subprocess sh -c echo", py_spawn("sh")),
        ("a.raw py subprocess bash -c echo", py_spawn("bash")),
        ("a.raw py persistent bash RT", lambda k: timed(pb.rt, k)),
        ("a.raw py hermes-wrapper-script via bash -c", py_hermes_wrapper_job(env)),
        ("a.raw rust spawn sh -c echo", lambda k: rust("spawn_sh", k)),
        ("a.raw rust spawn bash -c echo", lambda k: rust("spawn_bash", k)),
        ("a.raw rust persistent bash RT", lambda k: rust("persistent_bash", k)),
        ("a.caduceus terminal 'echo hi' embedded", lambda k: cad("embedded_echo", k)),
        ("a.caduceus terminal 'echo hi' coordinator+worker loopback", lambda k: cad("loopback_echo", k)),
    ])
    # caduceus: K concurrent clients on one loopback worker (distinct tasks).
    add("h.caduceus bare gRPC round trip to the coordinator (floor of one hop)", cad("loopback_rpc_floor", N))
    for clients in (1, 2, 4, 8):
        add(f"h.caduceus loopback {clients} clients (latency)", cad(f"loopback_clients_{clients}", max(20, N // 4)))
    pb.close()

    # --- (b) read_file 1000 lines ---------------------------------------------
    fresh_read()
    r = json.loads(hcall("read_file", {"path": f"{DATA}/file1000.txt", "limit": 1000}))
    NOTES["read_file_result"] = {"total_lines": r.get("total_lines"), "truncated": r.get("truncated"),
                                 "content_chars": len(r.get("content") or ""),
                                 "content_head": (r.get("content") or "")[:60],
                                 "content_tail": (r.get("content") or "")[-40:]}
    rd = json.loads(hcall("read_file", {"path": f"{DATA}/file1000.txt", "limit": 1000}))
    NOTES["read_file_repeat_without_reset"] = {k: rd.get(k) for k in ("status", "dedup", "error") if k in rd}
    interleave([
        ("b.hermes read_file 1000 lines (limit=1000)", lambda k: timed(
            lambda: hcall("read_file", {"path": f"{DATA}/file1000.txt", "limit": 1000}), k, before=fresh_read)),
        ("b.hermes read_file dedup stub (repeat read)", lambda k: timed(
            lambda: hcall("read_file", {"path": f"{DATA}/file1000.txt", "limit": 1000}), k,
            before=lambda: notify_other_tool_call(TASK))),
        ("b.raw py read+number in-process", lambda k: timed(py_read_1000, k)),
        ("b.raw rust read+number in-process", lambda k: rust("read_1000", k)),
        ("b.caduceus read_file 1000 lines embedded", lambda k: cad("embedded_read_1000", k)),
        ("b.caduceus read_file 1000 lines coordinator+worker loopback", lambda k: cad("loopback_read_1000", k)),
    ])

    # --- (c) write_file small ----------------------------------------------
    wc = [0]

    def h_write():
        wc[0] += 1
        r = hcall("write_file", {"path": f"{DATA}/h_out_small.txt", "content": f"hello world {wc[0]}\nsecond line\n"})
        assert '"bytes_written"' in r, r

    interleave([
        ("c.hermes write_file small", lambda k: timed(h_write, k)),
        ("c.raw py write+rename in-process", lambda k: timed(py_write_small, k)),
        ("c.raw rust write+rename in-process", lambda k: rust("write_small", k)),
        ("c.caduceus write_file small embedded", lambda k: cad("embedded_write_small", k)),
        ("c.caduceus write_file small coordinator+worker loopback", lambda k: cad("loopback_write_small", k)),
    ])

    # --- (d) search_files in 500 files (grep fallback; rg if available) -------
    def fresh_search():  # defeat the "same search N times in a row" loop guard
        notify_other_tool_call(TASK)

    def search_note():
        fresh_search()
        raw = hcall("search_files", {"pattern": "TODO_FIXME", "path": f"{DATA}/tree500"})
        r = json.loads(raw.split("\n\n[Hint")[0])
        return {"keys": sorted(r), "total_count": r.get("total_count"), "result_chars": len(raw),
                "head": raw[:300]}

    NOTES["search_result_grep"] = search_note()
    jobs = [
        ("d.hermes search_files (grep backend)", lambda k: timed(
            lambda: hcall("search_files", {"pattern": "TODO_FIXME", "path": f"{DATA}/tree500"}), k,
            before=fresh_search)),
        ("d.raw py subprocess grep -rnH", lambda k: timed(lambda: subprocess.run(
            ["grep", "-rnH", "TODO_FIXME", f"{DATA}/tree500"], capture_output=True), k)),
        ("d.raw py in-process scan", lambda k: timed(py_search_500, k)),
        ("d.raw rust in-process scan", lambda k: rust("search_500", k)),
        ("d.caduceus search_files embedded", lambda k: cad("embedded_search_500", k)),
        ("d.caduceus search_files coordinator+worker loopback", lambda k: cad("loopback_search_500", k)),
    ]
    if os.path.exists(f"{RG_DIR}/rg"):
        jobs.append(("d.raw py subprocess rg", lambda k: timed(lambda: subprocess.run(
            [f"{RG_DIR}/rg", "--line-number", "--no-heading", "--with-filename", "TODO_FIXME",
             f"{DATA}/tree500"], capture_output=True), k)))
    interleave(jobs)
    if os.path.exists(f"{RG_DIR}/rg"):
        # Make rg visible inside hermes' shell (env persists via snapshot) and
        # drop the cached `command -v rg` answer so the rg backend is used.
        hcall("terminal", {"command": f"export PATH={RG_DIR}:$PATH"})
        from tools.file_tools import _get_file_ops
        _get_file_ops(TASK)._command_cache.clear()
        NOTES["search_result_rg"] = search_note()
        NOTES["bash_spawns_per_call"]["search_files (rg backend)"] = {
            "count": len(c := count_spawns(lambda: fresh_search() or hcall("search_files", {"pattern": "TODO_FIXME", "path": f"{DATA}/tree500"}))),
            "commands": c}
        interleave([
            ("d.hermes search_files (rg backend)", lambda k: timed(
                lambda: hcall("search_files", {"pattern": "TODO_FIXME", "path": f"{DATA}/tree500"}), k,
                before=fresh_search)),
            ("d.raw py subprocess rg", lambda k: timed(lambda: subprocess.run(
                [f"{RG_DIR}/rg", "--line-number", "--no-heading", "--with-filename", "TODO_FIXME",
                 f"{DATA}/tree500"], capture_output=True), k)),
        ])
        hcall("terminal", {"command": "export PATH=${PATH#%s:}" % RG_DIR})
        _get_file_ops(TASK)._command_cache.clear()

    # --- (g) patch (bonus) ----------------------------------------------------
    with open(f"{DATA}/patch_target.txt", "w") as f:
        f.write("alpha\nbeta\ngamma\n")
    flip = [0]

    def h_patch():
        a, b = ("beta", "BETA") if flip[0] % 2 == 0 else ("BETA", "beta")
        flip[0] += 1
        r = hcall("patch", {"path": f"{DATA}/patch_target.txt", "old_string": a, "new_string": b})
        assert '"success": true' in r, r

    interleave([
        ("g.hermes patch (replace) small file", lambda k: timed(h_patch, k)),
        ("g.caduceus patch small embedded", lambda k: cad("embedded_patch_small", k)),
        ("g.caduceus patch small coordinator+worker loopback", lambda k: cad("loopback_patch_small", k)),
    ], n=max(20, N // 2))

    # --- (f) 10 MB output -------------------------------------------------------
    big = "head -c 10000000 /dev/zero | tr '\\0' a"
    NB = 5
    t = time.perf_counter()
    raw_json = hcall("terminal", {"command": big})
    first_ms = (time.perf_counter() - t) * 1e3
    rj = json.loads(raw_json)
    out = rj["output"]
    NOTES["big_output"] = {
        "json_result_chars": len(raw_json),
        "output_chars_model_sees": len(out),
        "count_of_a": out.count("a"),
        "notice": out[out.find("\n\n..."):out.find("...\n\n", out.find("\n\n...") + 5) + 3] if "TRUNCATED" in out else None,
        "exit_code": rj.get("exit_code"),
        "first_call_ms": round(first_ms, 1),
    }
    interleave([
        ("f.hermes terminal 10MB output", lambda k: timed(lambda: hcall("terminal", {"command": big}), k)),
        ("f.raw py subprocess.run capture 10MB", lambda k: timed(lambda: subprocess.run(
            ["sh", "-c", big], capture_output=True, check=True), k)),
        ("f.raw rust Command.output 10MB", lambda k: rust("big_output", k)),
        ("f.caduceus terminal 10MB output loopback", lambda k: cad("loopback_big_output", k)),
    ], n=NB * 2, rounds=2)

    # --- (e) batch of 8 terminal 'sleep 0.2' through hermes' agent loop --------
    batch_e()

    # ------------------------------------------------------------------ report
    wall = time.time() - wall0
    other = (_cpu_busy_s() - busy0) - (_own_cpu_s() - own0)
    info["machine_load"] = {
        "loadavg_start": load0, "loadavg_end": os.getloadavg(), "bench_wall_s": round(wall, 1),
        "other_processes_cpu_s_during_run": round(other, 1),
        "other_processes_avg_cores_busy": round(other / wall, 2),
    }
    # hermes' _wait_for_process polls proc.poll() after sleeps of 5ms * 1.5^k (cap 200ms):
    # completion is only noticed at these cumulative instants -> latency quantization.
    pts, acc, slp = [], 0.0, 5.0
    while acc < 1000:
        acc += slp
        pts.append(round(acc, 1))
        slp = min(slp * 1.5, 200.0)
    NOTES["poll_points_ms"] = pts
    NOTES["echo_latency_by_poll_bucket"] = _bucket(SAMPLES.get("a.hermes terminal 'echo hi'", []), pts)
    res = {"info": info, "stats": {k: stats(v) for k, v in SAMPLES.items()}, "notes": NOTES,
           "samples_ms": {k: [round(x, 4) for x in v] for k, v in SAMPLES.items()}}
    with open(f"{RESULTS}/results.json", "w") as f:
        json.dump(res, f, indent=2, default=str)
    print_table(res)
    with open(f"{RESULTS}/table.md", "w") as f:
        f.write(comparison_table(res["stats"]))
        f.write("\n" + caduceus_table(res["stats"]))
    print("\n" + comparison_table(res["stats"]))
    print("\n" + caduceus_table(res["stats"]))


def batch_e():
    from types import SimpleNamespace as NS
    from agent.tool_dispatch_helpers import _plan_tool_batch_segments
    from run_agent import AIAgent
    t = time.perf_counter()
    agent = AIAgent(base_url="http://127.0.0.1:9/v1", api_key="sk-local-bench", model="bench-model",
                    quiet_mode=True, skip_context_files=True, skip_memory=True,
                    enabled_toolsets=["terminal", "file"])
    NOTES["aiagent_init_ms"] = round((time.perf_counter() - t) * 1e3, 1)
    NOTES["aiagent_default_tool_delay_s"] = agent.tool_delay

    def tcs(name, argsf):
        return [NS(id=f"call_{i}", type="function",
                   function=NS(name=name, arguments=json.dumps(argsf(i)))) for i in range(8)]

    sleeps = tcs("terminal", lambda i: {"command": "sleep 0.2"})
    reads = tcs("read_file", lambda i: {"path": f"{DATA}/tree500/d00/f{i:03d}.txt"})
    NOTES["batch_plan"] = {
        "8x terminal": [(k, len(c)) for k, c in _plan_tool_batch_segments(sleeps)],
        "8x read_file distinct paths": [(k, len(c)) for k, c in _plan_tool_batch_segments(reads)],
    }

    def run_batch(calls, mode):
        msgs = []
        msg = NS(role="assistant", content=None, tool_calls=calls)
        t = time.perf_counter()
        if mode == "loop":
            agent._execute_tool_calls(msg, msgs, TASK)
        elif mode == "concurrent":
            agent._execute_tool_calls_concurrent(msg, msgs, TASK)
        dt = (time.perf_counter() - t) * 1e3
        assert len(msgs) == 8, msgs
        return dt

    def reset_reads():
        from tools.file_tools import reset_file_dedup, notify_other_tool_call
        reset_file_dedup(TASK)
        notify_other_tool_call(TASK)

    agent.tool_delay = 1.0  # library default (no caller in the package overrides it)
    add("e.hermes agent loop 8x sleep 0.2 (default tool_delay=1.0)", [run_batch(sleeps, "loop")])
    agent.tool_delay = 0.0
    for _ in range(3):
        add("e.hermes agent loop 8x sleep 0.2 (tool_delay=0)", [run_batch(sleeps, "loop")])
        add("e.hermes forced concurrent helper 8x sleep 0.2", [run_batch(sleeps, "concurrent")])
        reset_reads()
        add("e.hermes agent loop 8x read_file (parallel-safe)", [run_batch(reads, "loop")])
        add("e.raw py 8 parallel Popen sleep 0.2", [_py_parallel_sleep()])
        add("e.raw rust 8 parallel spawn sleep 0.2", rust("parallel8_sleep", 1))
        add("e.caduceus agent loop 8x sleep 0.2 (embedded, replayed model)", cad("agent_batch8_sleep", 1))
        add("e.caduceus delegate 3 children x sleep 1 on 2 workers", cad("agent_fanout3", 1))
        add("e.caduceus delegate 3 children x sleep 1 on 2 workers (login state cached)", cad("agent_fanout3_warm", 1))
    agent.tool_delay = 1.0


def _bucket(xs, pts):
    """Count samples falling before each poll instant (first poll point >= sample)."""
    out = {}
    for x in xs:
        b = next((p for p in pts if x <= p + 2.0), "later")  # 2ms slack for post-poll work
        out[str(b)] = out.get(str(b), 0) + 1
    return out


def _py_parallel_sleep():
    t = time.perf_counter()
    ps = [subprocess.Popen(["sh", "-c", "sleep 0.2"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
          for _ in range(8)]
    for p in ps:
        p.wait()
    return (time.perf_counter() - t) * 1e3


COMPARISONS = [
    # (operation, hermes label, raw-limit label)
    ("terminal `echo hi` (fg, local)", "a.hermes terminal 'echo hi'", "a.raw rust spawn bash -c echo"),
    ("  same, vs persistent bash round trip", "a.hermes terminal 'echo hi'", "a.raw rust persistent bash RT"),
    ("  same, vs Python subprocess sh -c", "a.hermes terminal 'echo hi'", "a.raw py subprocess sh -c echo"),
    ("  layer: registry.dispatch terminal", "a.hermes-layer registry.dispatch terminal", "a.raw rust spawn bash -c echo"),
    ("  layer: LocalEnvironment.execute", "a.hermes-layer LocalEnvironment.execute", "a.raw rust spawn bash -c echo"),
    ("  layer: hermes wrapper script, plain subprocess.run", "a.raw py hermes-wrapper-script via bash -c", "a.raw rust spawn bash -c echo"),
    ("read_file 1000 lines (limit=1000)", "b.hermes read_file 1000 lines (limit=1000)", "b.raw rust read+number in-process"),
    ("  read_file repeat (dedup stub)", "b.hermes read_file dedup stub (repeat read)", "b.raw rust read+number in-process"),
    ("write_file small", "c.hermes write_file small", "c.raw rust write+rename in-process"),
    ("search_files 500 files, grep backend", "d.hermes search_files (grep backend)", "d.raw rust in-process scan"),
    ("  same, vs subprocess grep -rnH", "d.hermes search_files (grep backend)", "d.raw py subprocess grep -rnH"),
    ("search_files 500 files, rg backend", "d.hermes search_files (rg backend)", "d.raw py subprocess rg"),
    ("patch (replace) small file", "g.hermes patch (replace) small file", "c.raw rust write+rename in-process"),
    ("terminal 10 MB output", "f.hermes terminal 10MB output", "f.raw rust Command.output 10MB"),
    ("8x terminal `sleep 0.2`, agent loop (tool_delay=1.0 default)", "e.hermes agent loop 8x sleep 0.2 (default tool_delay=1.0)", "e.raw rust 8 parallel spawn sleep 0.2"),
    ("8x terminal `sleep 0.2`, agent loop (tool_delay=0)", "e.hermes agent loop 8x sleep 0.2 (tool_delay=0)", "e.raw rust 8 parallel spawn sleep 0.2"),
    ("8x terminal `sleep 0.2`, forced concurrent helper", "e.hermes forced concurrent helper 8x sleep 0.2", "e.raw rust 8 parallel spawn sleep 0.2"),
    ("8x read_file (parallel-safe), agent loop", "e.hermes agent loop 8x read_file (parallel-safe)", "b.raw rust read+number in-process"),
]


def _fmt_ratio(x):
    if x != x:
        return "n/a"
    return f"{x:.1f}x" if x < 10 else f"{x:,.0f}x"


def comparison_table(st):
    out = ["| operation | hermes p50 ms | hermes p95 ms | hermes calls/s | raw limit (same run) | raw p50 ms "
           "| ratio p50 | hermes min ms | raw min ms | ratio min |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for op, h, r in COMPARISONS:
        if h not in st or r not in st:
            continue
        hs, rs = st[h], st[r]
        ratio = hs["p50_ms"] / rs["p50_ms"] if rs["p50_ms"] > 0 else float("nan")
        ratio_min = hs["min_ms"] / rs["min_ms"] if rs["min_ms"] > 0 else float("nan")
        out.append(f"| {op} | {hs['p50_ms']:.2f} | {hs['p95_ms']:.2f} | {hs['calls_per_s']:.1f} (n={hs['n']}) | "
                   f"{r.split('.', 1)[1]} | {rs['p50_ms']:.3f} | {_fmt_ratio(ratio)} | "
                   f"{hs['min_ms']:.2f} | {rs['min_ms']:.3f} | {_fmt_ratio(ratio_min)} |")
    return "\n".join(out) + "\n"


CADUCEUS_COMPARISONS = [
    # (operation, caduceus label, hermes label, raw label)
    ("terminal `echo hi`, embedded", "a.caduceus terminal 'echo hi' embedded", "a.hermes terminal 'echo hi'", "a.raw rust spawn bash -c echo"),
    ("terminal `echo hi`, coordinator+worker (loopback gRPC)", "a.caduceus terminal 'echo hi' coordinator+worker loopback", "a.hermes terminal 'echo hi'", "a.raw rust spawn bash -c echo"),
    ("read_file 1000 lines, embedded", "b.caduceus read_file 1000 lines embedded", "b.hermes read_file 1000 lines (limit=1000)", "b.raw rust read+number in-process"),
    ("read_file 1000 lines, coordinator+worker", "b.caduceus read_file 1000 lines coordinator+worker loopback", "b.hermes read_file 1000 lines (limit=1000)", "b.raw rust read+number in-process"),
    ("write_file small, embedded", "c.caduceus write_file small embedded", "c.hermes write_file small", "c.raw rust write+rename in-process"),
    ("write_file small, coordinator+worker", "c.caduceus write_file small coordinator+worker loopback", "c.hermes write_file small", "c.raw rust write+rename in-process"),
    ("search_files 500 files, embedded", "d.caduceus search_files embedded", "d.hermes search_files (grep backend)", "d.raw rust in-process scan"),
    ("search_files 500 files, coordinator+worker", "d.caduceus search_files coordinator+worker loopback", "d.hermes search_files (grep backend)", "d.raw rust in-process scan"),
    ("patch (replace) small file, embedded", "g.caduceus patch small embedded", "g.hermes patch (replace) small file", "c.raw rust write+rename in-process"),
    ("patch (replace) small file, coordinator+worker", "g.caduceus patch small coordinator+worker loopback", "g.hermes patch (replace) small file", "c.raw rust write+rename in-process"),
    ("terminal 10 MB output, coordinator+worker", "f.caduceus terminal 10MB output loopback", "f.hermes terminal 10MB output", "f.raw rust Command.output 10MB"),
    ("8x terminal `sleep 0.2` in one agent turn (hermes default tool_delay=1.0)", "e.caduceus agent loop 8x sleep 0.2 (embedded, replayed model)", "e.hermes agent loop 8x sleep 0.2 (default tool_delay=1.0)", "e.raw rust 8 parallel spawn sleep 0.2"),
    ("8x terminal `sleep 0.2` in one agent turn (hermes tool_delay=0)", "e.caduceus agent loop 8x sleep 0.2 (embedded, replayed model)", "e.hermes agent loop 8x sleep 0.2 (tool_delay=0)", "e.raw rust 8 parallel spawn sleep 0.2"),
]


def caduceus_table(st):
    out = ["| operation | caduceus p50 ms | hermes p50 ms | hermes / caduceus | raw limit | raw p50 ms | caduceus / raw | caduceus min ms | hermes min ms |",
           "|---|---|---|---|---|---|---|---|---|"]
    for op, c, h, r in CADUCEUS_COMPARISONS:
        if c not in st or h not in st or r not in st:
            continue
        cs, hs, rs = st[c], st[h], st[r]
        out.append(f"| {op} | {cs['p50_ms']:.3f} | {hs['p50_ms']:.2f} | {_fmt_ratio(hs['p50_ms'] / cs['p50_ms'])} | "
                   f"{r.split('.', 1)[1]} | {rs['p50_ms']:.3f} | {_fmt_ratio(cs['p50_ms'] / rs['p50_ms'])} | "
                   f"{cs['min_ms']:.3f} | {hs['min_ms']:.2f} |")
    return "\n".join(out) + "\n"


def print_table(res):
    st = res["stats"]
    print(json.dumps(res["info"], indent=1))
    print("\n| label | n | p50 ms | p95 ms | mean ms | calls/s |")
    print("|---|---|---|---|---|---|")
    for k in sorted(st):
        s = st[k]
        print(f"| {k} | {s['n']} | {s['p50_ms']:.3f} | {s['p95_ms']:.3f} | {s['mean_ms']:.3f} | {s['calls_per_s']:.1f} |")
    print("\nNOTES:", json.dumps(res["notes"], indent=1, default=str)[:6000])


READ50 = """
from hermes_tools import read_file
for i in range(50):
    r = read_file(f"/tmp/bench50/f{i}.txt")
    assert "content" in r, r
print("read 50")
"""


def execute_code_main():
    """`--only-execute-code`: one script with 50 read_file calls in a Docker
    environment, hermes (its remote file-polling RPC) interleaved with
    caduceus (`docker_execute_code_read50`: the script's calls stream over the
    worker's link) in the same rounds. BENCH_N scripts per side (default 8)."""
    from tools.file_tools import reset_file_dedup, notify_other_tool_call
    n = int(os.environ.get("BENCH_N", "8"))
    rounds = int(os.environ.get("BENCH_ROUNDS", "2"))
    setup = json.loads(hcall("terminal", {"command": "mkdir -p /tmp/bench50 && for i in $(seq 0 49); do seq 1 20 | sed \"s/^/line $i /\" > /tmp/bench50/f$i.txt; done && echo ok"}))
    assert setup["output"] == "ok", setup

    def script():
        r = json.loads(handle_function_call("execute_code", {"code": READ50}, task_id=TASK,
                                            enabled_tools=["read_file"]))
        assert r.get("output", "").strip() == "read 50" and r.get("tool_calls_made") == 50, r
        return r

    script()  # warm: container and interpreter started

    def h_job(k):
        out = []
        for _ in range(k):
            reset_file_dedup(TASK)
            notify_other_tool_call(TASK)
            t = time.perf_counter()
            script()
            out.append((time.perf_counter() - t) * 1e3)
        return out

    interleave([
        ("x.hermes execute_code 50x read_file (docker, file polling)", h_job),
        ("x.caduceus execute_code 50x read_file (docker, worker link)", lambda k: cad("docker_execute_code_read50", k)),
    ], n=n, rounds=rounds)
    st = {k: stats(v) for k, v in SAMPLES.items()}
    res = {"info": {"image": DOCKER_IMAGE, "N": n, "rounds": rounds}, "stats": st, "notes": NOTES}
    with open(f"{RESULTS}/execute_code.json", "w") as f:
        json.dump(res, f, indent=1)
    print("| operation | p50 ms | p95 ms | min ms | n |")
    print("|---|---|---|---|---|")
    for k in sorted(st):
        s_ = st[k]
        print(f"| {k} | {s_['p50_ms']:.1f} | {s_['p95_ms']:.1f} | {s_['min_ms']:.1f} | {s_['n']} |")
    h = st.get("x.hermes execute_code 50x read_file (docker, file polling)")
    c = st.get("x.caduceus execute_code 50x read_file (docker, worker link)")
    if h and c:
        print(f"\nhermes / caduceus p50: {_fmt_ratio(h['p50_ms'] / c['p50_ms'])}")
    if NOTES:
        print("NOTES:", json.dumps(NOTES, indent=1, default=str)[:4000])


if __name__ == "__main__":
    if ONLY_EXECUTE_CODE:
        execute_code_main()
        sys.stdout.flush()
        os._exit(0)
    if sys.argv[1:] == ["--table-only"]:  # re-render table.md from results.json
        with open(f"{RESULTS}/results.json") as f:
            st = json.load(f)["stats"]
            print(comparison_table(st))
            print(caduceus_table(st))
        sys.exit(0)
    main()
    # hermes registers atexit cleanup; exit promptly
    sys.stdout.flush()
