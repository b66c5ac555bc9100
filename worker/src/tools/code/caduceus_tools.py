"""caduceus tools for execute_code scripts (generated per run; `hermes_tools`
is the same module). Every function is a tool call that the coordinator runs
through its whole pipeline, as if the model had made it."""
import json, shlex, threading, time

# _rpc_out, _rpc_in, _token and _FRAME are set by the bootstrap.
_call_lock = threading.Lock()
_last_id = 0


def _call(tool_name, args, token=None):
    """Send a tool call to the coordinator and return the parsed result."""
    global _last_id
    with _call_lock:
        _last_id += 1
        ident = _last_id
        request = {"id": ident, "tool": tool_name, "args": args,
                   "token": _token if token is None else token}
        _rpc_out.write(_FRAME + json.dumps(request, ensure_ascii=False) + "\n")
        _rpc_out.flush()
        while True:
            line = _rpc_in.readline()
            if not line:
                raise RuntimeError("Agent process disconnected")
            answer = json.loads(line)
            if answer.get("id") == ident:
                break
    result = answer.get("body", "")
    try:
        return json.loads(result)
    except (json.JSONDecodeError, TypeError):
        return result


# ---------------------------------------------------------------------------
# Convenience helpers (avoid common scripting pitfalls)
# ---------------------------------------------------------------------------

def json_parse(text: str):
    """Parse JSON tolerant of control characters and UTF-8 BOM (strict=False).
    Use this instead of json.loads() when parsing output from terminal()
    or web_extract() that may contain raw tabs/newlines in strings,
    or from tools/files that prepend a UTF-8 BOM."""
    if isinstance(text, str) and text.startswith("\ufeff"):
        text = text[1:]
    return json.loads(text, strict=False)


def shell_quote(s: str) -> str:
    """Shell-escape a string for safe interpolation into commands.
    Use this when inserting dynamic content into terminal() commands:
        terminal(f"echo {shell_quote(user_input)}")
    """
    return shlex.quote(s)


def retry(fn, max_attempts=3, delay=2):
    """Retry a function up to max_attempts times with exponential backoff.
    Use for transient failures (network errors, API rate limits):
        result = retry(lambda: terminal("gh issue list ..."))
    """
    last_err = None
    for attempt in range(max_attempts):
        try:
            return fn()
        except Exception as e:
            last_err = e
            if attempt < max_attempts - 1:
                time.sleep(delay * (2 ** attempt))
    raise last_err

