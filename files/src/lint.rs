//! Syntax checks of written files, in hermes' `lint` shape.
//!
//! JSON, YAML and TOML are checked in process, and those that do not parse
//! are refused before anything is written (hermes' fail-closed gate). Python
//! and JavaScript are checked inside the sandbox by its own `python3`
//! (`ast.parse`) and `node` (`node --check`), so the environment's language
//! version decides ([`FileSystem::check_syntax`]); a sandbox without them
//! reports the check as skipped. Every other extension is skipped. As in
//! hermes, when the new content has errors and the old had some too, only
//! the new error lines are reported.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};

use crate::fs::{CheckRun, FileSystem, SyntaxChecker};
use crate::paths;

/// How long one in-sandbox syntax check may take (hermes' linter timeout).
pub const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The checker run inside the sandbox for `extension`, if any.
pub fn sandbox_checker(extension: &str) -> Option<SyntaxChecker> {
    match extension {
        ".py" => Some(SyntaxChecker::Python),
        ".js" | ".mjs" | ".cjs" => Some(SyntaxChecker::Node),
        _ => None,
    }
}

/// Whether a write of `extension` reports a real check (so the old content is
/// worth reading for the new-errors-only comparison).
pub fn is_checked(extension: &str) -> bool {
    is_gated(extension) || sandbox_checker(extension).is_some()
}

impl SyntaxChecker {
    /// The program that must be installed in the sandbox.
    pub fn program(self) -> &'static str {
        match self {
            SyntaxChecker::Python => "python3",
            SyntaxChecker::Node => "node",
        }
    }

    /// The `bash` script that runs the check: `$1` is the file's path, the
    /// candidate content is on stdin. It prints `unavailable` when the
    /// program is missing, else `ran` and a newline, then the checker's
    /// output, and exits with the checker's status.
    pub fn script(self) -> &'static str {
        match self {
            SyntaxChecker::Python => PYTHON_SCRIPT,
            SyntaxChecker::Node => NODE_SCRIPT,
        }
    }

    /// Reads what [`SyntaxChecker::script`] printed and its exit status.
    pub fn outcome(self, stdout: &str, code: i32) -> Result<CheckRun, String> {
        if stdout.trim() == "unavailable" {
            return Ok(CheckRun::Unavailable);
        }
        let Some(output) = stdout.strip_prefix("ran\n") else {
            return Err(format!(
                "the {} check did not run (exit {code}): {}",
                self.program(),
                stdout.trim()
            ));
        };
        Ok(if code == 0 {
            CheckRun::Clean
        } else {
            CheckRun::Errors(output.trim().to_owned())
        })
    }
}

/// hermes' in-process message (`SyntaxError: invalid syntax (line 1,
/// column 5)`), from `ast.parse` of the sandbox's Python; written to run on
/// Python 2 as well, should `python` be all there is.
const PYTHON_SCRIPT: &str = r#"py=$(command -v python3 || command -v python) || { echo unavailable; exit 0; }
echo ran
exec "$py" -c '
import ast, sys
source = getattr(sys.stdin, "buffer", sys.stdin).read()
try:
    source = source.decode("utf-8")
except Exception:
    pass
try:
    ast.parse(source)
except SyntaxError as e:
    where = " (line %s, column %s)" % (e.lineno, e.offset) if e.lineno else ""
    sys.stdout.write("%s: %s%s" % (type(e).__name__, e.msg, where))
    sys.exit(1)
except Exception as e:
    sys.stdout.write("%s: %s" % (type(e).__name__, e))
    sys.exit(1)
'"#;

/// `node --check` needs a file, and decides CommonJS or ES module by the
/// extension and the nearest `package.json`: the content goes to a hidden
/// file beside the target (else the temp directory), which is removed, and
/// its name is replaced by the target's in the output.
const NODE_SCRIPT: &str = r#"command -v node >/dev/null 2>&1 || { echo unavailable; exit 0; }
echo ran
name=${1##*/}
t="${1%/*}/.${name}.caduceus-check-$$.${name##*.}"
trap 'rm -f -- "$t"' EXIT
if ! { cat > "$t"; } 2>/dev/null; then
  t="${TMPDIR:-/tmp}/.${name}.caduceus-check-$$.${name##*.}"
  cat > "$t" || exit 1
fi
out=$(node --check "$t" 2>&1)
rc=$?
printf '%s' "${out//"$t"/"$1"}"
exit $rc"#;

/// The `lint` object of a write or patch of `path`: `after` is the new
/// content, `before` the old one when there was a file.
pub async fn report(fs: &dyn FileSystem, path: &str, before: Option<&str>, after: &str) -> Value {
    let post_output = match lint_content(fs, path, after).await {
        Lint::Errors(output) => output,
        other => return other.to_json(),
    };
    let Some(before) = before else {
        return Lint::Errors(post_output).to_json();
    };
    let pre_output = match lint_content(fs, path, before).await {
        Lint::Errors(output) if !output.is_empty() => output,
        _ => return Lint::Errors(post_output).to_json(),
    };
    let known: std::collections::HashSet<&str> = pre_output
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    let new: Vec<&str> = post_output
        .lines()
        .filter(|line| !line.trim().is_empty() && !known.contains(line.trim()))
        .collect();
    if new.is_empty() {
        return json!({
            "status": "error",
            "output": post_output,
            "message": "Pre-existing lint errors — this edit didn't introduce new ones but the file is still broken.",
        });
    }
    json!({
        "status": "error",
        "output": format!(
            "New lint errors introduced by this edit (pre-existing errors filtered out):\n{}",
            new.join("\n")
        ),
    })
}

/// One check's verdict.
enum Lint {
    Clean,
    Errors(String),
    Skipped(String),
}

impl Lint {
    fn to_json(&self) -> Value {
        match self {
            Lint::Clean => json!({"status": "ok", "output": ""}),
            Lint::Errors(output) => json!({"status": "error", "output": output}),
            Lint::Skipped(message) => json!({"status": "skipped", "message": message}),
        }
    }
}

async fn lint_content(fs: &dyn FileSystem, path: &str, content: &str) -> Lint {
    let extension = paths::extension(path);
    if is_gated(&extension) {
        return match check(&extension, content) {
            Ok(()) => Lint::Clean,
            Err(message) => Lint::Errors(message),
        };
    }
    let Some(checker) = sandbox_checker(&extension) else {
        return Lint::Skipped(format!("No linter for {extension} files"));
    };
    match fs.check_syntax(checker, path, content.as_bytes()).await {
        Ok(CheckRun::Clean) => Lint::Clean,
        Ok(CheckRun::Errors(output)) => Lint::Errors(output),
        Ok(CheckRun::Unavailable) => Lint::Skipped(format!("{} not available", checker.program())),
        Err(error) => Lint::Skipped(format!("{} check failed: {error}", checker.program())),
    }
}

/// Extensions whose content must parse before it is written.
pub fn is_gated(extension: &str) -> bool {
    matches!(extension, ".json" | ".yaml" | ".yml" | ".toml")
}

/// `Err(message)` when `content` is not valid for `extension` (hermes'
/// message shapes: `JSONDecodeError: …`, `YAMLError: …`, `TOMLDecodeError: …`).
/// Unknown extensions pass.
pub fn check(extension: &str, content: &str) -> Result<(), String> {
    match extension {
        ".json" => check_json(content),
        ".yaml" | ".yml" => check_yaml(content),
        ".toml" => check_toml(content),
        _ => Ok(()),
    }
}

/// hermes' refusal text for content that fails the gate.
pub fn refusal(path: &str, extension: &str, message: &str) -> String {
    format!(
        "Refusing to write '{path}': candidate content fails {extension} syntax validation ({message}). The file was NOT created or modified. Fix the content and retry."
    )
}

fn check_json(content: &str) -> Result<(), String> {
    serde_json::from_str::<IgnoredAny>(content)
        .map(drop)
        .map_err(|error| {
            let location = format!(" at line {} column {}", error.line(), error.column());
            let text = error.to_string();
            let message = text.strip_suffix(&location).unwrap_or(&text);
            format!(
                "JSONDecodeError: {message} (line {}, column {})",
                error.line(),
                error.column()
            )
        })
}

/// Syntax only, every document of a stream: multi-document files and custom
/// tags (`!Ref`, `!vault`) are valid YAML even if no single loader takes them.
fn check_yaml(content: &str) -> Result<(), String> {
    for document in serde_yaml::Deserializer::from_str(content) {
        IgnoredAny::deserialize(document).map_err(|error| format!("YAMLError: {error}"))?;
    }
    Ok(())
}

fn check_toml(content: &str) -> Result<(), String> {
    toml::from_str::<toml::Table>(content)
        .map(drop)
        .map_err(|error| {
            let message = error.message().trim_end();
            match error.span() {
                Some(span) => {
                    let (line, column) = line_column(content, span.start);
                    format!("TOMLDecodeError: {message} (at line {line}, column {column})")
                }
                None => format!("TOMLDecodeError: {message}"),
            }
        })
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..crate::text::floor_boundary(text, offset)];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .map_or(0, |last| last.chars().count())
        + 1;
    (line, column)
}

#[cfg(test)]
#[path = "lint_tests.rs"]
mod tests;
