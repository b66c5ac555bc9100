//! How a background process is started in the sandbox: `bash -c LAUNCHER
//! caduceus-bg SNAPSHOT CWD COMMAND PTY TOKEN` through `Sandbox::spawn`, so
//! it works on every backend.
//!
//! The launcher makes itself a session leader (`setsid -w`, when it is not
//! one and `setsid` exists) so that whatever the command leaves behind can be
//! found by its session, then prints `\x1eCADPID <$$> <pty>\x1e\n` (the pid
//! inside the sandbox's namespace, and whether a terminal was available),
//! merges stderr into stdout, restores the live shell's state from its
//! snapshot (variables, functions, aliases, options — as if the command had
//! been run with `&` in that shell), enters the shell's cwd and `eval`s the
//! command. With `pty` it runs the same inside `script(1)` so the command
//! gets a pseudo-terminal (30×120); without `script` it runs without one. On
//! exit an EXIT trap prints `\x1e<TOKEN> <code> -\x1e\n`: the exit code,
//! on every backend.

use crate::sandbox::SpawnSpec;

pub const PID_MARKER_PREFIX: &[u8] = b"\x1eCADPID ";

const LAUNCHER: &str = r#"{ IFS=' ' read -r _ _ _ _ _ __cad_sid _ < /proc/$$/stat; } 2>/dev/null
if [ -n "${__cad_sid:-}" ] && [ "$__cad_sid" != "$$" ] && setsid -w true 2>/dev/null; then
  exec setsid -w bash -c "$BASH_EXECUTION_STRING" caduceus-bg "$@"
fi
builtin unset -v __cad_sid
__cad_pty=0
if [ "$4" = 1 ] && command -v script >/dev/null 2>&1; then __cad_pty=1; fi
builtin printf '\036CADPID %s %s\036\n' "$$" "$__cad_pty"
exec 2>&1
if [ -n "$1" ] && [ -r "$1" ]; then
  # A snapshot being rewritten lacks its end line: read it again.
  for __cad_i in 1 2 3 4 5 6 7 8 9 10; do
    __cad_s=$(< "$1")
    case "$__cad_s" in *'# caduceus-snapshot-end') break;; esac
    sleep 0.05
  done
  builtin unset -v $(builtin compgen -e) 2>/dev/null
  builtin eval "$__cad_s" >/dev/null 2>&1 </dev/null
  builtin unset -v __cad_s __cad_i
fi
set +m +e +u
# Only the launcher itself prints the exit line. A subshell the command forks
# (`( … ) &`) still holds this trap until it has reset its traps, and a
# SIGTERM in that window (the sweep of leftovers after the launcher exits)
# would make it print a second exit line with the launcher's token.
trap "__cad_rc=\$?; [ \"\$BASHPID\" = $$ ] && builtin printf '\\036%s %d -\\036\\n' $5 \"\$__cad_rc\"" EXIT
builtin cd -- "$2" || builtin exit 126
export PYTHONUNBUFFERED=1
if [ "$__cad_pty" = 1 ]; then
  builtin unset -v __cad_pty
  __cad_inner='[ -n "$1" ] && [ -r "$1" ] && builtin eval "$(< "$1")" >/dev/null 2>&1 </dev/null; set +m +e +u; builtin cd -- "$2" 2>/dev/null; stty rows 30 cols 120 2>/dev/null; export PYTHONUNBUFFERED=1; builtin eval "$3"'
  SHELL=/bin/sh script -qfec "bash -c $(builtin printf %q "$__cad_inner") caduceus-bg $(builtin printf %q "$1") $(builtin printf %q "$2") $(builtin printf %q "$3")" /dev/null
else
  builtin unset -v __cad_pty
  builtin eval "$3"
fi
"#;

/// The spawn of a background command. `token` marks the end line the
/// launcher prints on exit, `\x1e<token> <exit code> -\x1e\n`, which
/// carries the exit code on backends whose handles cannot tell it.
pub fn spec(
    token: &str,
    command: &str,
    cwd: &str,
    snapshot: Option<&str>,
    env: Vec<(String, String)>,
    pty: bool,
) -> SpawnSpec {
    SpawnSpec {
        program: "bash".to_owned(),
        args: vec![
            "-c".to_owned(),
            LAUNCHER.to_owned(),
            "caduceus-bg".to_owned(),
            snapshot.unwrap_or_default().to_owned(),
            cwd.to_owned(),
            command.to_owned(),
            if pty { "1" } else { "0" }.to_owned(),
            token.to_owned(),
        ],
        cwd: None,
        env,
    }
}

/// Parses the launcher's first line out of `seen`: `(pid, pty, bytes used)`.
pub fn parse_pid_marker(seen: &[u8]) -> Option<(u32, bool, usize)> {
    let start = seen
        .windows(PID_MARKER_PREFIX.len())
        .position(|w| w == PID_MARKER_PREFIX)?;
    let rest = &seen[start + PID_MARKER_PREFIX.len()..];
    let end = rest.iter().position(|b| *b == 0x1e)?;
    let text = std::str::from_utf8(&rest[..end]).ok()?;
    let (pid, pty) = text.split_once(' ')?;
    // The line is complete only with its newline.
    if rest.get(end + 1) != Some(&b'\n') {
        return None;
    }
    let used = start + PID_MARKER_PREFIX.len() + end + 2;
    Some((pid.trim().parse().ok()?, pty.trim() == "1", used))
}
