//! The bash text the worker writes into a live shell: the start-up script
//! (login files, init files, sudo helper, restored state, ready marker) and
//! the per-command frame.

pub use caduceus_common::text::shell_quote;

/// Quotes a path for `.`/`[ -r ]`, keeping a leading `~/` expandable so init
/// files resolve against the sandbox's home (as hermes' `expanduser` does on
/// the host it runs on).
pub fn quote_home_path(path: &str) -> String {
    match path {
        "~" => "\"$HOME\"".to_owned(),
        _ => match path.strip_prefix("~/") {
            Some(rest) => format!("\"$HOME\"/{}", shell_quote(rest)),
            None => shell_quote(path),
        },
    }
}

/// How the shell process starts: `bash -c BOOT` becomes `bash --noprofile
/// --norc` reading the protocol from stdin — as the leader of its own
/// session when it is not one already (the local backend makes it one; a
/// `docker exec`, an SSH channel or an Apptainer `exec` may not) and `setsid`
/// exists, so that what a command leaves behind (an INT-ignoring background
/// job whose parent died) is still found by the shell's session and stopped.
pub const BOOT: &str = r#"{ IFS=' ' read -r _ _ _ _ _ __cad_sid _ < /proc/$$/stat; } 2>/dev/null
if [ -n "${__cad_sid:-}" ] && [ "$__cad_sid" != "$$" ] && setsid -w true 2>/dev/null; then
  exec setsid -w bash --noprofile --norc
fi
exec bash --noprofile --norc"#;

/// What the start-up script sets up besides the basics.
pub struct Startup<'a> {
    /// Source the login files (`/etc/profile`, then the first of
    /// `~/.bash_profile`, `~/.bash_login`, `~/.profile`), as `bash -l` does.
    pub login: bool,
    /// Extra files sourced after the login files (missing ones are skipped).
    pub init_files: &'a [String],
    /// Extra commands run once (after the files).
    pub init_commands: &'a [String],
    /// `PATH` the shell was started with: entries the login files dropped are
    /// appended again so tools the worker could reach stay reachable.
    pub original_path: Option<&'a str>,
    /// Path of the sudo askpass helper, when a sudo password is configured.
    pub sudo_askpass: Option<&'a str>,
    /// State snapshot to restore (a replacement shell inherits the old one's).
    pub restore_snapshot: Option<&'a str>,
    /// Where this shell saves its state snapshot.
    pub snapshot_path: &'a str,
    pub cwd: &'a str,
    pub ready_token: &'a str,
    /// Skip the login and init files (a retry after they broke the shell).
    pub skip_init: bool,
}

/// The script that brings a fresh `bash --noprofile --norc` to the state a
/// login shell would have, then prints `\x1eREADY <token> <$$>\x1e`.
pub fn startup_script(s: &Startup<'_>) -> String {
    let mut script = String::from("exec 2>&1\nset +m\n");
    if !s.skip_init {
        // Files are sourced with stdin from /dev/null (an rc file that reads
        // stdin would otherwise eat our protocol) and their output dropped.
        let mut sourced: Vec<String> = Vec::new();
        if s.login {
            script.push_str("[ -r /etc/profile ] && . /etc/profile </dev/null >/dev/null 2>&1\n");
            script.push_str(
                "for __cad_f in \"$HOME/.bash_profile\" \"$HOME/.bash_login\" \"$HOME/.profile\"; do \
                 if [ -r \"$__cad_f\" ]; then . \"$__cad_f\" </dev/null >/dev/null 2>&1; break; fi; done; \
                 __cad_login=$__cad_f; unset __cad_f\n",
            );
            sourced.push("__cad_login".to_owned());
        }
        for file in s.init_files {
            let quoted = quote_home_path(file);
            // A file the login step already read is not read twice.
            let skip = if s.login {
                format!("[ {quoted} != \"$__cad_login\" ] && ")
            } else {
                String::new()
            };
            script.push_str(&format!(
                "{skip}[ -r {quoted} ] && . {quoted} </dev/null >/dev/null 2>&1\n"
            ));
        }
        if s.login {
            script.push_str("unset __cad_login\n");
        }
        for line in s.init_commands {
            script.push_str(line);
            script.push('\n');
        }
        if let Some(path) = s.original_path {
            script.push_str(&format!(
                "__cad_p={}; __cad_ifs=$IFS; IFS=:; for __cad_d in $__cad_p; do \
                 case \":$PATH:\" in *\":$__cad_d:\"*) ;; *) PATH=\"${{PATH:+$PATH:}}$__cad_d\";; esac; done; \
                 IFS=$__cad_ifs; unset __cad_p __cad_d __cad_ifs; export PATH\n",
                shell_quote(path)
            ));
        }
    }
    if let Some(snapshot) = s.restore_snapshot {
        script.push_str(&format!(
            "builtin source {} >/dev/null 2>&1 </dev/null\n",
            shell_quote(snapshot)
        ));
    }
    if let Some(askpass) = s.sudo_askpass {
        // sudo asks the helper only when it needs a password, so the password
        // never lands on a command's stdin (hermes' `sudo -S` feeds it even
        // when sudo has cached credentials, and the command reads it).
        script.push_str(&format!(
            "sudo() {{ case \" $* \" in *\" -S \"*|*\" --stdin \"*|*\" -A \"*|*\" --askpass \"*) command sudo \"$@\";; \
             *) SUDO_ASKPASS={} command sudo -A \"$@\";; esac; }}\n",
            shell_quote(askpass)
        ));
    }
    // Whatever the rc files did: no job control, no prompts, aliases on,
    // errexit/nounset off (they would end the live shell on the next failure).
    script.push_str("set +m +e +u\nshopt -s expand_aliases\nPS1='' PS2='' PROMPT_COMMAND=''\ntrap - DEBUG RETURN ERR EXIT\n");
    // The protocol's own stdin and stdout, kept aside: a command runs with
    // stdin from /dev/null and may have redirected stdout where it stopped.
    script.push_str("exec {__cad_in}<&0 {__cad_out}>&1\n");
    script.push_str(DONE_FN);
    script.push_str(GO_FN);
    script.push_str(&abort_fn(s.snapshot_path));
    script.push_str(&format!(
        "builtin cd -- {} 2>/dev/null\n",
        shell_quote(s.cwd)
    ));
    script.push_str(&save_state(s.snapshot_path));
    script.push('\n');
    script.push_str(&format!(
        "builtin printf '\\036READY {} %s\\036\\n' \"$$\"\n",
        s.ready_token
    ));
    script
}

/// The last line of a complete state snapshot.
pub const SNAPSHOT_END: &str = "# caduceus-snapshot-end";

/// Saves variables, functions, aliases and options to `path`, ending with
/// [`SNAPSHOT_END`]. Builtins only (no process per save); a background
/// process reading the file while it is rewritten sees a truncated copy
/// without the end line, and reads it again.
pub fn save_state(path: &str) -> String {
    format!(
        "{{ builtin declare -p;builtin declare -f;builtin alias -p;builtin shopt -p;builtin set +o;builtin echo '{SNAPSHOT_END}'; }} >{} 2>/dev/null;",
        shell_quote(path)
    )
}

/// Defined once at start-up: ends a command. `$1` (optional) is where to
/// save the shell's state; the marker token is `__cad_go`'s. Keeping this out of every
/// frame matters: bash reads its input from a pipe one byte per `read(2)`, so
/// each byte of the frame costs a system call (about 20 µs per command saved).
/// `errexit`/`nounset` do not outlive the command that set them (hermes'
/// snapshot forces `set +e; set +u` the same way); a live shell that kept them
/// would exit on the next failing command.
const DONE_FN: &str = concat!(
    "__cad_done() { builtin local __cad_e=$?; builtin trap '' USR2; builtin set +e +u; ",
    "if [ -n \"${1:-}\" ]; then { builtin declare -p;builtin declare -f;builtin alias -p;builtin shopt -p;builtin set +o;",
    "builtin echo '# caduceus-snapshot-end'; } >\"$1\" 2>/dev/null; fi; ",
    "builtin printf '\\n\\036%s %d %s\\036\\n' \"$__cad_t\" \"$__cad_e\" \"$PWD\"; }\n"
);

/// Defined once at start-up: begins a command. `$1` is the marker token; the
/// abort trap is armed only while a command runs (`__cad_done` disarms it),
/// so a late abort signal can never hit the shell between commands. It then
/// acknowledges the start with [`start_ack`]: bash has read the whole command
/// and is about to run it. A shell that ends before the acknowledgement never
/// ran the command (an SSH channel whose master had gone swallowed it), so the
/// worker may run it once on a new shell; after it, only the command's own
/// `exit` can end the shell, and nothing is re-run.
const GO_FN: &str = "__cad_go() { __cad_t=$1; builtin trap __cad_abort USR2; builtin printf '\\036%s+\\036' \"$1\" >&$__cad_out; }\n";

/// What `__cad_go` prints once bash has read a command with this token.
pub fn start_ack(token: &str) -> Vec<u8> {
    format!("\x1e{token}+\x1e").into_bytes()
}

/// The exit code an aborted command's marker carries. bash's `$?` never
/// exceeds 255, so it cannot be a command's own code.
pub const ABORT_CODE: i32 = 256;

/// The SIGUSR2 trap that ends a whole command (hermes kills its `bash -c`;
/// killing the children of a live shell lets it run the rest of the line).
/// bash runs the trap as soon as the interrupted child is gone (or between
/// two builtins of a loop): it saves the state the command had reached to
/// the snapshot, prints the end marker with [`ABORT_CODE`] and `exec`s a
/// fresh bash on the protocol's pipes — same pid, nothing of the command
/// left to run. The worker then restores the snapshot into it. USR2 is reset
/// to its default before the `exec`: a signal ignored on entry could never
/// be trapped again by the new shell.
fn abort_fn(snapshot_path: &str) -> String {
    format!(
        "__cad_abort() {{ builtin trap '' USR2; builtin set +e +u; {save} \
         builtin printf '\\n\\036%s %d %s\\036\\n' \"$__cad_t\" {ABORT_CODE} \"$PWD\" >&$__cad_out; \
         builtin trap - USR2; \
         builtin exec \"$BASH\" --noprofile --norc 0<&$__cad_in 1>&$__cad_out 2>&1 {{__cad_in}}<&- {{__cad_out}}>&-; }}\n",
        save = save_state(snapshot_path)
    )
}

/// The line that makes bash read and run one command. `snapshot` is where to
/// save state afterwards, for commands that may change it. The read stays
/// inline (a builtin nothing can shadow): were it a function a command could
/// remove, the next frame would run the previous command again.
pub fn frame_for(token: &str, workdir: Option<&str>, snapshot: Option<&str>) -> String {
    let run = match workdir {
        Some(dir) => format!(
            "builtin cd -- {} && builtin eval \"$__cad_c\" </dev/null",
            quote_home_path(dir)
        ),
        None => "builtin eval \"$__cad_c\" </dev/null".to_owned(),
    };
    let save = snapshot
        .map(|path| format!(" {}", shell_quote(path)))
        .unwrap_or_default();
    format!("IFS= builtin read -r -d '' __cad_c;__cad_go {token};{run};__cad_done{save}\n")
}

/// Could this command change shell state beyond the cwd? Cheap and
/// conservative: a false positive costs one snapshot (~1 ms).
pub fn may_change_state(command: &str) -> bool {
    const WORDS: &[&str] = &[
        "export",
        "declare",
        "typeset",
        "readonly",
        "alias",
        "unalias",
        "unset",
        "set",
        "shopt",
        "source",
        "function",
        "local",
        "eval",
        "umask",
        "ulimit",
        "hash",
        "trap",
        "enable",
        "builtin",
        "pushd",
        "popd",
        "cd",
        "exec",
        "read",
        "mapfile",
        "readarray",
        "getopts",
        "let",
        "complete",
    ];
    if command.contains('=') || command.contains("()") || command.contains("printf -v") {
        return true;
    }
    command
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .any(|word| word == "." || WORDS.contains(&word))
}
