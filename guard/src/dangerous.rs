//! hermes' DANGEROUS_PATTERNS, matched over every de-obfuscated text variant.
//!
//! The rules keep hermes' order and description texts. Unlike hermes, the text is not
//! lower-cased: program names, paths and SQL keywords match case-insensitively (`(?i:…)`),
//! while options whose case carries meaning (`git branch -D` vs `-d`, `chown -R`,
//! `perl -i` vs `-I`, `killall -r`, `xxd -r`) match exactly. Several rules are also bounded
//! to one command segment (`[^;&|\n]`) where hermes' `.*` ran into the next command.

use std::sync::LazyLock;

use crate::hardline;
use crate::pattern::Pattern;
use crate::rm;

/// One rule of the table.
pub(crate) enum Rule {
    /// A regular expression and its description.
    Regex(Pattern, &'static str),
    /// A check that needs more than one regex; returns the description when it fires.
    Check(fn(&str) -> Option<&'static str>),
}

// ----- path fragments -------------------------------------------------------------------

/// System configuration: `/etc/` and its macOS mirror under `/private/`.
const SYSTEM_CONFIG: &str = r"(?i:/etc/|/private/(?:etc|var|tmp|home)/)";
/// The home directory spelled `~`, `$HOME` or `${HOME}`, possibly closing a quote.
const HOME: &str = r#"(?:~|\$HOME\b|\$\{HOME\})["']?"#;
/// Where the shell word for a write target ends.
const WRITE_BOUNDARY: &str = r#"(?:[\s;&|<>"']|$)"#;
/// Redirections that may follow the destination of `cp`/`mv`/`install`.
const TRAILING_REDIRECTS: &str = r"(?:\s+\d*>[>&|]?\s*\S+)*";
/// The end of a command segment.
const SEGMENT_END: &str = r"\s*(?:$|[;&|\n])";
/// A shell program reading a script (`sh`, `bash`, `zsh`, `dash`, `ksh`, `fish`), possibly
/// behind `sudo`.
const SHELL_SINK: &str = r"(?:sudo\s+(?:-\S+\s+)*)?\b(?i:(?:ba|z|da|k|fi)?sh)\b";
/// `git` with global options before the subcommand (`git -C repo`, `git -c k=v`).
const GIT: &str =
    r"(?i:\bgit)(?:\s+(?:-[Cc]\s+\S+|--(?:git-dir|work-tree|namespace)(?:=|\s+)\S+|-\S+))*\s+";
/// Octal or symbolic modes that give others write permission.
const WORLD_WRITABLE_MODE: &str =
    r"(?:[^\s,]*,)*(?:[0-7]?[0-7]{2}[2367](?:[\s,;&|]|$)|[ugoa]*[oa][ugoa]*[+=][rwxXst]*w)";

fn ssh_path() -> String {
    format!(r#"{HOME}/(?i:\.ssh)(?:/|$|[\s"'])"#)
}

/// The agent's own home: `~/.hermes/`, `~/.caduceus/`, `$HERMES_HOME/`, `$CADUCEUS_HOME/`.
fn agent_home() -> String {
    format!(
        r#"(?:{HOME}/(?i:\.(?:hermes|caduceus))/|\$\{{?(?:HERMES_HOME|CADUCEUS_HOME)\}}?["']?/)"#
    )
}

fn agent_env() -> String {
    format!(r"{}(?i:\.env)\b", agent_home())
}

fn agent_config() -> String {
    format!(r"{}(?i:config\.yaml)\b", agent_home())
}

fn shell_rc() -> String {
    format!(r"{HOME}/(?i:\.(?:bashrc|zshrc|profile|bash_profile|zprofile))\b")
}

fn credential_files() -> String {
    format!(r"{HOME}/(?i:\.(?:netrc|pgpass|npmrc|pypirc))\b")
}

fn sensitive_write_target() -> String {
    format!(
        r"(?:{SYSTEM_CONFIG}|(?i:/dev/sd)|{}|{}|{}|{}|{})",
        ssh_path(),
        agent_env(),
        agent_config(),
        shell_rc(),
        credential_files()
    )
}

fn user_sensitive_write_target() -> String {
    format!(r"(?:{}|{}|{})", ssh_path(), shell_rc(), credential_files())
}

fn project_sensitive_write_target() -> String {
    let env = r#"(?:(?:/|\.{1,2}/)?(?:[^\s/"'`]+/)*(?i:\.env)(?:\.[^/\s"'`]+)*)"#;
    let config = r#"(?:(?:/|\.{1,2}/)?(?:[^\s/"'`]+/)*(?i:config\.yaml))"#;
    format!("(?:{env}|{config})")
}

// ----- the table ------------------------------------------------------------------------

pub(crate) static RULES: LazyLock<Vec<Rule>> = LazyLock::new(build_rules);

fn regex(pattern: &str, description: &'static str) -> Rule {
    Rule::Regex(Pattern::new(pattern), description)
}

fn build_rules() -> Vec<Rule> {
    let sensitive = sensitive_write_target();
    let user_sensitive = user_sensitive_write_target();
    let project = project_sensitive_write_target();
    let agent_files = format!("(?:{}|{})", agent_config(), agent_env());
    // A short-option bundle containing sed's in-place flag, and its long form.
    let sed_in_place = r"(?i:\bsed)\b[^;&|\n]*\s-[a-zA-Z]*[iI]";
    let sed_in_place_long = r"(?i:\bsed)\b[^;&|\n]*\s--in(?:-[a-z]*)?\b";
    // perl/ruby `-i` (in place) in a bundle, skipping letters that take a value (`-I`, `-M`).
    let perl_in_place = r"(?i:\b(?:perl|ruby))\b[^;&|\n]*\s-[a-zA-Z&&[^IMmxFCEKrdDV]]*i";
    let cp_like = r"(?i:\b(?:cp|mv|install)\b)[^;&|\n]*\s";

    vec![
        Rule::Check(rm::scan_text),
        regex(
            r"(?i)\bcmd(?:\.exe)?\s+/[ck]\s+[^\n]*\b(?:del|erase|rd|rmdir)\b",
            "Windows cmd destructive delete",
        ),
        regex(
            r#"(?i)\b(?:powershell|pwsh)(?:\.exe)?\b(?:\s+-\S+)*\s+(?:-(?:command|c)\s+)?["']?(?:remove-item|rmdir|erase|del|rd|ri|rm)\b"#,
            "Windows PowerShell destructive delete",
        ),
        regex(
            r"(?i)\b(?:powershell|pwsh)(?:\.exe)?\b[^\n]*\s-(?:e|ec|en[a-z]*)\b",
            "PowerShell encoded command execution",
        ),
        // Checked before the generic chmod rule so `chmod --recursive 777` gets the
        // more specific description (hermes' order made this rule unreachable).
        regex(
            &format!(r"(?i:\bchmod)\s+[^;&|\n]*?--rec[a-z]*\b[^;&|\n]*?\s{WORLD_WRITABLE_MODE}"),
            "recursive world/other-writable (long flag)",
        ),
        regex(
            &format!(r"(?i:\bchmod)\s+(?:-\S*\s+)*{WORLD_WRITABLE_MODE}"),
            "world/other-writable permissions",
        ),
        regex(
            r"(?i:\bchown)\s+(?:-\S+\s+)*-[a-zA-Z]*R[a-zA-Z]*\s+(?:-\S+\s+)*(?:root|0)(?:[:.\s]|$)",
            "recursive chown to root",
        ),
        regex(
            r"(?i:\bchown)\s+[^;&|\n]*?--rec[a-z]*\b[^;&|\n]*?\s(?:root|0)(?:[:.\s]|$)",
            "recursive chown to root (long flag)",
        ),
        regex(r"(?i)\bmkfs\b", "format filesystem"),
        regex(r"(?i:\bdd)\s+[^;&|\n]*\bif=", "disk copy"),
        regex(
            r#">\s*["']?(?i:/dev/(?:sd|nvme|hd|mmcblk|vd|xvd|r?disk[0-9]))"#,
            "write to block device",
        ),
        regex(r"(?i)\bDROP\s+(?:TABLE|DATABASE|SCHEMA)\b", "SQL DROP"),
        Rule::Check(sql_delete_without_where),
        regex(r"(?i)\bTRUNCATE\s+(?:TABLE)?\s*\w", "SQL TRUNCATE"),
        regex(
            &format!(r#">\s*["']?{SYSTEM_CONFIG}"#),
            "overwrite system config",
        ),
        regex(
            r"(?i)\bsystemctl\s+(?:-\S+\s+)*(?:stop|restart|try-restart|reload-or-restart|try-reload-or-restart|disable|mask|kill)\b|(?i)\bservice\s+\S+\s+(?:stop|restart)\b",
            "stop/restart system service",
        ),
        regex(
            r"(?i)\bkill\s+-(?:9|KILL|SIGKILL)\s+-1\b",
            "kill all processes",
        ),
        regex(
            r"(?i)\bpkill\s+(?:-\S+\s+)*?(?:-(?:9|KILL|SIGKILL)|--signal(?:\s+|=)(?:9|KILL|SIGKILL))\b",
            "force kill processes",
        ),
        regex(
            r"(?i)\bkillall\s+(?:-\S*\s+)*-(?:9|KILL|SIGKILL)\b",
            "force kill processes (killall -KILL)",
        ),
        regex(
            r"(?i)\bkillall\s+(?:-\S*\s+)*(?:-s|--signal)(?:\s+|=)(?:KILL|SIGKILL|9)\b",
            "force kill processes (killall -s KILL)",
        ),
        regex(
            r"(?i:\bkillall)\s+(?:-\S*\s+)*(?:-r|--regexp)\b",
            "kill processes by regex (killall -r)",
        ),
        Rule::Check(fork_bomb),
        regex(
            r"(?i)\b(?:curl|wget)\b[^\n]*\|\s*(?:sudo\s+(?:-\S+\s+)*)?(?:env\s+(?:\w+=\S*\s+)*)?(?:\S*/)?(?:ba|z|da|k|fi)?sh(?:\s|$)",
            "pipe remote content to shell",
        ),
        regex(
            r"(?i)(?:\b(?:ba|z|da|k)?sh|\bsource|(?:^|[\s;&|(])\.)\s+<\s*<?\s*\(\s*(?:curl|wget)\b",
            "execute remote script via process substitution",
        ),
        regex(
            r"(?i)(?:\beval\b|\bsource\b|\.)\s*(?:\$\(\s*|`\s*)(?:curl|wget)\b",
            "execute remote content via command substitution",
        ),
        regex(
            &format!(
                r"(?i:\bbase(?:64|32|16))\b[^|\n]*\s(?:-[a-zA-Z]*[dD][a-zA-Z]*|--decode)\b[^\n]*\|\s*{SHELL_SINK}"
            ),
            "pipe decoded content to shell (possible command obfuscation)",
        ),
        regex(
            r"(?i)\b(?:eval|source)\b[^\n]*\$\([^)]*\bbase(?:64|32|16)\b[^)]*\s(?:-[a-z]*d[a-z]*|--decode)\b",
            "pipe decoded content to shell (possible command obfuscation)",
        ),
        regex(
            &format!(r"(?i:\bxxd)\s+(?:-\S+\s+)*?-r[a-z]*\b[^\n]*\|\s*{SHELL_SINK}"),
            "pipe xxd-decoded content to shell (possible command obfuscation)",
        ),
        regex(
            &format!(r"(?i:\b(?:echo|printf))\b[^|\n]*\|\s*(?i:\btr)\b[^|\n]*\|\s*{SHELL_SINK}"),
            "pipe tr-transformed output to shell (possible command obfuscation)",
        ),
        regex(
            &format!(
                r"(?i:\bopenssl)\b[^\n]*\b(?i:base64|enc)\b[^|\n]*\s-[dD]\b[^|\n]*\|\s*{SHELL_SINK}"
            ),
            "pipe openssl-decoded content to shell (possible command obfuscation)",
        ),
        regex(
            &format!(r#"(?i:\btee)\b[^;&|\n]*\s["']?{sensitive}"#),
            "overwrite system file via tee",
        ),
        regex(
            &format!(r#">[>|]?\s*["']?{sensitive}"#),
            "overwrite system file via redirection",
        ),
        regex(
            &format!(r#"(?i:\btee)\b[^;&|\n]*\s["']?{project}["']?{WRITE_BOUNDARY}"#),
            "overwrite project env/config via tee",
        ),
        regex(
            &format!(r#">[>|]?\s*["']?{project}["']?{WRITE_BOUNDARY}"#),
            "overwrite project env/config via redirection",
        ),
        regex(
            r"(?i:\bxargs)(?:\s+(?:-[adEILnPs]\s*\S+|-\S+))*\s+(?:sudo\s+(?:-\S+\s+)*)?(?:\S*/)?(?i:rm)\b",
            "xargs with rm",
        ),
        regex(
            r"(?i:\bfind)\b[^;&|\n]*\s-(?:exec|execdir|ok|okdir)\s+(?:sudo\s+(?:-\S+\s+)*)?(?:\S*/)?(?i:rm)\b",
            "find -exec/-execdir rm",
        ),
        regex(r"(?i:\bfind)\b[^;&|\n]*\s-delete\b", "find -delete"),
        regex(
            r"(?i)\bhermes\s+(?:-{1,2}\S+(?:\s+\S+)?\s+)*gateway\s+(?:stop|restart)\b",
            "stop/restart hermes gateway (kills running agents)",
        ),
        regex(
            r"(?i)\bhermes\s+update\b",
            "hermes update (restarts gateway, kills running agents)",
        ),
        regex(
            r"(?i)\bdocker(?:\s+compose|-compose)(?:\s+(?:-f|--file|-p|--project-name|--profile|--env-file|--project-directory|--ansi|--parallel|--progress)(?:\s+|=)\S+|\s+-\S+)*\s+(?:restart|stop|kill|down)\b",
            "docker compose restart/stop/kill/down (container lifecycle)",
        ),
        regex(
            r"(?i)\bdocker(?:\s+(?:-H|--host|-c|--context|--config|-l|--log-level)(?:\s+|=)\S+|\s+-\S+)*\s+(?:container\s+)?(?:restart|stop|kill)\b",
            "docker restart/stop/kill (container lifecycle)",
        ),
        regex(
            r"(?im)\bgateway\s+run\b[^\n]*(?:&\s*$|&\s*;|\bdisown\b|\bsetsid\b)",
            "start gateway outside systemd (use 'systemctl --user restart hermes-gateway')",
        ),
        regex(
            r"(?i)\bnohup\b[^\n]*\bgateway\s+run\b",
            "start gateway outside systemd (use 'systemctl --user restart hermes-gateway')",
        ),
        regex(
            r"(?i)\b(?:pkill|killall)\b[^;&|\n]*\b(?:hermes|gateway|cli\.py|caduceus)\b",
            "kill hermes/gateway process (self-termination)",
        ),
        regex(
            r"(?i)\bkill\b[^;&|\n]*\$\(\s*(?:pgrep|pidof)\b",
            "kill process via pgrep/pidof expansion (self-termination)",
        ),
        regex(
            r"(?i)\bkill\b[^;&|\n]*`\s*(?:pgrep|pidof)\b",
            "kill process via backtick pgrep/pidof expansion (self-termination)",
        ),
        regex(
            r"(?i)\blaunchctl\s+(?:stop|kickstart|bootout|unload|kill|disable|remove)\b[^;&|\n]*\b(?:hermes|ai\.hermes|caduceus)\b",
            "stop/restart hermes launchd service (kills running agents)",
        ),
        regex(
            &format!(
                r#"{cp_like}(?:(?:-t\s*|--target-directory(?:=|\s+))["']?{SYSTEM_CONFIG}|["']?{SYSTEM_CONFIG}[^\s;&|"']*["']?{TRAILING_REDIRECTS}{SEGMENT_END})"#
            ),
            "copy/move file into system config path",
        ),
        regex(
            &format!(
                r#"{cp_like}["']?{sensitive}[^\s"';&|]*["']?{TRAILING_REDIRECTS}{SEGMENT_END}"#
            ),
            "copy/move file into sensitive credential/SSH/shell-rc path",
        ),
        // After the sensitive-file rule (hermes has them the other way round) so that
        // `cp x ~/.hermes/config.yaml` is described as the sensitive write it is.
        regex(
            &format!(r#"{cp_like}["']?{project}["']?{TRAILING_REDIRECTS}{SEGMENT_END}"#),
            "overwrite project env/config file",
        ),
        regex(
            &format!(r"{sed_in_place}[^;&|\n]*{user_sensitive}"),
            "in-place edit of sensitive credential/SSH/shell-rc path",
        ),
        regex(
            &format!(r"{sed_in_place_long}[^;&|\n]*{user_sensitive}"),
            "in-place edit of sensitive credential/SSH/shell-rc path (long flag)",
        ),
        regex(
            &format!(r"{perl_in_place}[^;&|\n]*{user_sensitive}"),
            "in-place edit of sensitive credential/SSH/shell-rc path (perl/ruby)",
        ),
        regex(
            &format!(r#"{sed_in_place}[^;&|\n]*\s["']?{SYSTEM_CONFIG}"#),
            "in-place edit of system config",
        ),
        regex(
            &format!(r#"{sed_in_place_long}[^;&|\n]*\s["']?{SYSTEM_CONFIG}"#),
            "in-place edit of system config (long flag)",
        ),
        regex(
            &format!(r"{sed_in_place}[^;&|\n]*{agent_files}"),
            "in-place edit of Hermes config/env",
        ),
        regex(
            &format!(r"{sed_in_place_long}[^;&|\n]*{agent_files}"),
            "in-place edit of Hermes config/env (long flag)",
        ),
        regex(
            &format!(r"{perl_in_place}[^;&|\n]*{agent_files}"),
            "in-place edit of Hermes config/env (perl/ruby)",
        ),
        regex(
            r"(?i)\b(?:ba|z|da|k|fi)?sh\s*<<",
            "shell execution via heredoc",
        ),
        regex(
            &format!(r"{GIT}reset\b[^;&|\n]*\s--h(?:a(?:r(?:d)?)?)?\b"),
            "git reset --hard (destroys uncommitted changes)",
        ),
        regex(
            &format!(r"{GIT}push\b[^;&|\n]*\s(?:--forc[a-z-]*\b|\+[^\s+])"),
            "git force push (rewrites remote history)",
        ),
        regex(
            &format!(r"{GIT}push\b[^;&|\n]*\s-[a-zA-Z]*f[a-zA-Z]*\b"),
            "git force push short flag (rewrites remote history)",
        ),
        regex(
            &format!(r"{GIT}clean\b[^;&|\n]*\s(?:-[a-zA-Z]*f|--force\b)"),
            "git clean with force (deletes untracked files)",
        ),
        // `-D` (or a `-d`+`-f` bundle) force-deletes; `-d` alone refuses unmerged branches.
        regex(
            &format!(r"{GIT}branch\b[^;&|\n]*\s-[a-zA-Z]*(?:D|d[a-zA-Z]*f|f[a-zA-Z]*d)"),
            "git branch force delete",
        ),
        regex(
            &format!(r"{GIT}branch\b[^;&|\n]*?\s(?:-d|--delete)\b[^;&|\n]*?\s(?:-f|--force)\b"),
            "git branch force delete (long flags)",
        ),
        regex(
            &format!(r"{GIT}branch\b[^;&|\n]*?\s(?:-f|--force)\b[^;&|\n]*?\s(?:-d|--delete)\b"),
            "git branch force delete (long flags, force-first)",
        ),
        regex(
            r"(?i:\bchmod)\s+(?:-\S+\s+)*[ugoa]*\+[rwxXst]*x\b(?s:.*?)[;&|\n]+\s*\./",
            "chmod +x followed by immediate execution",
        ),
    ]
}

/// The first rule matching `text`, in table order.
pub(crate) fn first_match(text: &str) -> Option<&'static str> {
    RULES.iter().find_map(|rule| match rule {
        Rule::Regex(pattern, description) => pattern.is_match(text).then_some(*description),
        Rule::Check(check) => check(text),
    })
}

static DELETE_FROM: LazyLock<Pattern> = LazyLock::new(|| Pattern::new(r"(?i)\bDELETE\s+FROM\b"));
static WHERE: LazyLock<Pattern> = LazyLock::new(|| Pattern::new(r"(?i)\bWHERE\b"));

/// `DELETE FROM` with no `WHERE` later in the same statement. The statement ends at a
/// newline (as in hermes: a `WHERE` on the next line may belong to another statement), a
/// `;`, or a quote (`psql -c 'DELETE FROM t' -c '… WHERE …'` is two statements).
fn sql_delete_without_where(text: &str) -> Option<&'static str> {
    const DESCRIPTION: &str = "SQL DELETE without WHERE";
    let (Some(delete), Some(where_)) = (DELETE_FROM.regex(), WHERE.regex()) else {
        return Some(DESCRIPTION);
    };
    // Both cursors only move forward, so the scan stays linear.
    let mut statement_end = 0;
    let mut next_where: Option<Option<usize>> = None;
    for found in delete.find_iter(text) {
        let from = found.end();
        if statement_end < from {
            statement_end = text[from..]
                .find(['\n', ';', '\'', '"'])
                .map_or(text.len(), |offset| from + offset);
        }
        let stale = match next_where {
            None => true,
            Some(Some(at)) => at < from,
            Some(None) => false,
        };
        if stale {
            next_where = Some(where_.find_at(text, from).map(|m| m.start()));
        }
        if next_where.flatten().is_none_or(|at| at >= statement_end) {
            return Some(DESCRIPTION);
        }
    }
    None
}

fn fork_bomb(text: &str) -> Option<&'static str> {
    hardline::is_fork_bomb(text).then_some(hardline::FORK_BOMB)
}

#[cfg(test)]
pub(crate) fn all_patterns_compile() -> Vec<&'static str> {
    let mut broken: Vec<&'static str> = RULES
        .iter()
        .filter_map(|rule| match rule {
            Rule::Regex(pattern, description) => (!pattern.compiled()).then_some(*description),
            Rule::Check(_) => None,
        })
        .collect();
    if !DELETE_FROM.compiled() || !WHERE.compiled() {
        broken.push("SQL DELETE without WHERE");
    }
    broken
}
