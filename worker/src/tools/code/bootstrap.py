# caduceus execute_code bootstrap: `python3 -c <this>` inside the task's
# environment. The worker writes one header line on stdin (JSON: token,
# module, script, temp_dir, limits, secret_words, harmless_names); from then on stdin carries
# only the answers to the script's tool calls and stdout only frames for the
# worker ("\x1ecaduceus-rpc <json>\n"). The script's own stdout and stderr go
# to files in a private run directory; at the end the bootstrap sends their
# head and tail in its exit frame (the worker reads the files itself when
# the script was killed).
import json, os, sys, tempfile, types

_rpc_out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
_rpc_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
_FRAME = "\x1ecaduceus-rpc "


def _frame(value):
    _rpc_out.write(_FRAME + json.dumps(value, ensure_ascii=False) + "\n")
    _rpc_out.flush()


_head = json.loads(_rpc_in.readline())
try:
    # One session (and process group) for everything the script starts, so
    # a timeout can end all of it.
    os.setsid()
except OSError:
    pass
_dir = tempfile.mkdtemp(prefix="caduceus_exec_", dir=_head.get("temp_dir") or None)
_private = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
_out = os.open(os.path.join(_dir, "stdout"), _private, 0o600)
_err = os.open(os.path.join(_dir, "stderr"), _private, 0o600)
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.dup2(_out, 1)
os.dup2(_err, 2)
for _fd in (_null, _out, _err):
    os.close(_fd)
_frame({"type": "started", "dir": _dir, "pid": os.getpid()})

# hermes' execute_code scrub: no secret-looking name reaches the script or
# what it starts, whatever the sandbox itself set.
_words = tuple(_head["secret_words"])
_harmless = set(_head["harmless_names"])
for _name in list(os.environ):
    if _name not in _harmless and any(w in _name.upper() for w in _words):
        del os.environ[_name]


def _write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


_module_path = os.path.join(_dir, "caduceus_tools.py")
_script_path = os.path.join(_dir, "script.py")
_write(_module_path, _head["module"])
_write(_script_path, _head["script"])
_module = types.ModuleType("caduceus_tools")
_module.__file__ = _module_path
_module.__dict__.update(_rpc_out=_rpc_out, _rpc_in=_rpc_in, _token=_head["token"], _FRAME=_FRAME)
sys.modules["caduceus_tools"] = _module
sys.modules["hermes_tools"] = _module
exec(compile(_head["module"], _module_path, "exec"), _module.__dict__)
_source = _head["script"]
_head_limits = _head["limits"]
del _head

_code = 0
_globals = {"__name__": "__main__", "__file__": _script_path, "__builtins__": __builtins__}
sys.argv = [_script_path]
try:
    exec(compile(_source, _script_path, "exec"), _globals)
except SystemExit as _exit:
    if _exit.code is None:
        _code = 0
    elif isinstance(_exit.code, int):
        _code = _exit.code
    else:
        print(_exit.code, file=sys.stderr)
        _code = 1
except BaseException as _error:
    import traceback

    # The bootstrap's own frame is not the script's business.
    traceback.print_exception(type(_error), _error, _error.__traceback__.tb_next)
    _code = 1
try:
    import atexit

    atexit._run_exitfuncs()
except BaseException:
    pass
for _stream in (sys.stdout, sys.stderr):
    try:
        _stream.flush()
    except BaseException:
        pass
# The output, read here while the interpreter is still up: one round trip
# less for the worker on a remote backend. The run directory goes, all but
# the full stdout when it is too long to show.
_captured = None
try:
    import shutil

    _limits = _head_limits
    _stdout_path = os.path.join(_dir, "stdout")
    _total = os.path.getsize(_stdout_path)
    with open(_stdout_path, "rb") as _f:
        if _total <= _limits["stdout"]:
            _shown, _tail = _f.read(), b""
        else:
            _shown = _f.read(_limits["head"])
            _f.seek(_total - _limits["tail"])
            _tail = _f.read()
    with open(os.path.join(_dir, "stderr"), "rb") as _f:
        _errors = _f.read(_limits["stderr"])
    _captured = {
        "stdout_total": _total,
        "head": _shown.decode("utf-8", "replace"),
        "tail": _tail.decode("utf-8", "replace"),
        "stderr": _errors.decode("utf-8", "replace"),
    }
    if _total <= _limits["stdout"]:
        shutil.rmtree(_dir, ignore_errors=True)
    else:
        for _name in ("stderr", "script.py", "caduceus_tools.py"):
            os.unlink(os.path.join(_dir, _name))
except BaseException:
    _captured = None
_frame({"type": "exit", "code": _code, "captured": _captured})
# Whatever the script left running in its process group ends with it.
try:
    import signal

    os.killpg(0, signal.SIGKILL)
except BaseException:
    pass
os._exit(_code & 0xFF)
