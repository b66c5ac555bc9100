//! Which environment variables may reach a sandbox.
//!
//! A command the model writes can print its environment, so the worker never
//! hands a sandbox the coordinator's or the host's credentials. The rules
//! combine hermes' terminal blocklist (`tools/environments/local.py`), its
//! dynamic internal secrets, and the name-based scrub of its `execute_code`
//! sandbox, which the terminal lacked:
//!
//! 1. Never passed, whatever the allowlist says: caduceus' own secrets
//!    (`CADUCEUS_TOKEN`, any `CADUCEUS_*` with a secret word),
//!    `SUDO_PASSWORD` (the terminal feeds it to sudo itself), and hermes'
//!    dynamic internal secrets (`AUXILIARY_*_API_KEY`, `AUXILIARY_*_BASE_URL`,
//!    `GATEWAY_RELAY_*_{SECRET,KEY,TOKEN}`).
//! 2. Passed when named in the explicit passthrough allowlist.
//! 3. Dropped when secret: hermes' fixed list of provider keys, base URLs and
//!    gateway settings, or a name containing KEY, TOKEN, SECRET, PASSWORD,
//!    PASSWD, CREDENTIAL, CREDS, AUTH, BEARER, DSN or WEBHOOK (any case) —
//!    except a few well-known harmless names such as `GIT_AUTHOR_NAME`.
//! 4. `VIRTUAL_ENV` and `CONDA_PREFIX` are always dropped: an inherited
//!    "active venv" marker makes tools in the sandbox write into the wrong
//!    environment (hermes #23473).
//! 5. Everything else passes.
//!
//! Unlike hermes' terminal, `CLAUDE_CODE_OAUTH_TOKEN` is not special-cased
//! (hermes keeps it for agent-spawned `claude` CLIs, #55878): it is a
//! credential like any other and passes only when allowlisted.

/// hermes' fixed provider/tool/gateway blocklist (`_build_provider_env_blocklist`,
/// `_ALWAYS_STRIP_KEYS`). Names without a secret word matter most here: base
/// URLs can point at private endpoints and the gateway settings name who may
/// talk to the agent.
const FIXED_BLOCKLIST: &[&str] = &[
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_API_BASE",
    "OPENAI_ORG_ID",
    "OPENAI_ORGANIZATION",
    "OPENROUTER_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_TOKEN",
    "LLM_MODEL",
    "GOOGLE_API_KEY",
    "VERTEX_CREDENTIALS_PATH",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "DEEPSEEK_API_KEY",
    "MISTRAL_API_KEY",
    "GROQ_API_KEY",
    "TOGETHER_API_KEY",
    "PERPLEXITY_API_KEY",
    "COHERE_API_KEY",
    "FIREWORKS_API_KEY",
    "XAI_API_KEY",
    "HELICONE_API_KEY",
    "PARALLEL_API_KEY",
    "FIRECRAWL_API_KEY",
    "FIRECRAWL_API_URL",
    "AWS_BEARER_TOKEN_BEDROCK",
    "TELEGRAM_BOT_TOKEN",
    "TELEGRAM_HOME_CHANNEL",
    "TELEGRAM_HOME_CHANNEL_NAME",
    "DISCORD_BOT_TOKEN",
    "DISCORD_HOME_CHANNEL",
    "DISCORD_HOME_CHANNEL_NAME",
    "DISCORD_REQUIRE_MENTION",
    "DISCORD_FREE_RESPONSE_CHANNELS",
    "DISCORD_AUTO_THREAD",
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_HOME_CHANNEL",
    "SLACK_HOME_CHANNEL_NAME",
    "SLACK_ALLOWED_USERS",
    "WHATSAPP_ENABLED",
    "WHATSAPP_MODE",
    "WHATSAPP_ALLOWED_USERS",
    "SIGNAL_HTTP_URL",
    "SIGNAL_ACCOUNT",
    "SIGNAL_ALLOWED_USERS",
    "SIGNAL_GROUP_ALLOWED_USERS",
    "SIGNAL_HOME_CHANNEL",
    "SIGNAL_HOME_CHANNEL_NAME",
    "SIGNAL_IGNORE_STORIES",
    "HASS_TOKEN",
    "HASS_URL",
    "EMAIL_ADDRESS",
    "EMAIL_PASSWORD",
    "EMAIL_IMAP_HOST",
    "EMAIL_SMTP_HOST",
    "EMAIL_HOME_ADDRESS",
    "EMAIL_HOME_ADDRESS_NAME",
    "HERMES_DASHBOARD_SESSION_TOKEN",
    "GATEWAY_ALLOWED_USERS",
    "GATEWAY_ALLOW_ALL_USERS",
    "GH_TOKEN",
    "GITHUB_TOKEN",
    "GITHUB_APP_ID",
    "GITHUB_APP_PRIVATE_KEY_PATH",
    "GITHUB_APP_INSTALLATION_ID",
    "MODAL_TOKEN_ID",
    "MODAL_TOKEN_SECRET",
    "DAYTONA_API_KEY",
    "GATEWAY_RELAY_ID",
    "GATEWAY_RELAY_SECRET",
    "GATEWAY_RELAY_DELIVERY_KEY",
    // caduceus' own settings that identify the coordinator and model.
    "CADUCEUS_COORDINATOR",
    "CADUCEUS_MODEL",
];

/// Substrings (upper case) that make a name secret (also the scrub the
/// worker's `execute_code` bootstrap applies to the sandbox's own variables).
pub const SECRET_WORDS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "CREDS",
    "AUTH",
    "BEARER",
    "DSN",
    "WEBHOOK",
];

/// Names that contain a secret word but hold no secret, and that tools in the
/// sandbox need (git commit identity, the ssh agent socket path, the
/// tokenizers thread switch).
pub const HARMLESS_NAMES: &[&str] = &[
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
    "SSH_AUTH_SOCK",
    "TOKENIZERS_PARALLELISM",
];

/// Markers of an active Python environment on the host.
const ACTIVE_VENV_MARKERS: &[&str] = &["VIRTUAL_ENV", "CONDA_PREFIX"];

/// Secrets the terminal consumes itself and never exposes.
const TERMINAL_OWNED_SECRETS: &[&str] = &["SUDO_PASSWORD"];

/// Whether `name` holds a secret that must not reach a sandbox unless the
/// user lets it through by name.
///
/// ```
/// use caduceus_common::env_hygiene::is_secret_env_name;
/// assert!(is_secret_env_name("OPENAI_API_KEY"));
/// assert!(is_secret_env_name("OPENAI_BASE_URL"));
/// assert!(is_secret_env_name("my_service_token"));
/// assert!(is_secret_env_name("CADUCEUS_TOKEN"));
/// assert!(!is_secret_env_name("PATH"));
/// assert!(!is_secret_env_name("GIT_AUTHOR_NAME"));
/// ```
pub fn is_secret_env_name(name: &str) -> bool {
    if is_never_passed(name) {
        return true;
    }
    if FIXED_BLOCKLIST.contains(&name) {
        return true;
    }
    if HARMLESS_NAMES.contains(&name) {
        return false;
    }
    has_secret_word(name)
}

/// Whether `name` is withheld even when the passthrough allowlist names it.
pub fn is_never_passed(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if TERMINAL_OWNED_SECRETS.contains(&upper.as_str()) {
        return true;
    }
    if upper.starts_with("CADUCEUS_") && has_secret_word(&upper) {
        return true;
    }
    is_dynamic_internal_secret(&upper)
}

/// hermes' `_is_hermes_internal_secret`: per-task side-model credentials and
/// gateway relay secrets injected under names no fixed list can know.
fn is_dynamic_internal_secret(upper: &str) -> bool {
    if upper.starts_with("AUXILIARY_")
        && (upper.ends_with("_API_KEY") || upper.ends_with("_BASE_URL"))
    {
        return true;
    }
    upper.starts_with("GATEWAY_RELAY_")
        && (upper.ends_with("_SECRET") || upper.ends_with("_KEY") || upper.ends_with("_TOKEN"))
}

fn has_secret_word(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_WORDS.iter().any(|word| upper.contains(word))
}

/// The environment a sandbox gets from `vars` (typically the worker's own
/// environment merged with the task's settings), in input order. Names in
/// `passthrough` pass even when secret-named, except the never-passed ones.
///
/// ```
/// use caduceus_common::env_hygiene::sanitized_env;
/// let host = [
///     ("PATH", "/usr/bin"),
///     ("OPENAI_API_KEY", "sk-x"),
///     ("NOTION_TOKEN", "ntn_x"),
///     ("CADUCEUS_TOKEN", "t"),
///     ("VIRTUAL_ENV", "/venv"),
/// ]
/// .map(|(k, v)| (k.to_owned(), v.to_owned()));
/// let env = sanitized_env(host.into_iter(), &["NOTION_TOKEN".to_owned(), "CADUCEUS_TOKEN".to_owned()]);
/// let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
/// assert_eq!(names, ["PATH", "NOTION_TOKEN"]);
/// ```
pub fn sanitized_env(
    vars: impl Iterator<Item = (String, String)>,
    passthrough: &[String],
) -> Vec<(String, String)> {
    vars.filter(|(name, _)| may_pass(name, passthrough))
        .collect()
}

/// Whether one variable may reach the sandbox (see the module rules).
pub fn may_pass(name: &str, passthrough: &[String]) -> bool {
    if ACTIVE_VENV_MARKERS.contains(&name) || is_never_passed(name) {
        return false;
    }
    if passthrough.iter().any(|allowed| allowed == name) {
        return true;
    }
    !is_secret_env_name(name)
}

#[cfg(test)]
#[path = "env_hygiene_tests.rs"]
mod tests;
