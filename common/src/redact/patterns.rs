//! The compiled patterns of the redaction passes, each built once.
//!
//! They follow hermes' `agent/redact.py`, with two translation rules:
//! - Python's `\s` also matches the separators U+001C..U+001F, which Rust's
//!   does not; [`WS`] / [`NON_WS`] restore Python's set so both agree on where a
//!   value ends.
//! - The `regex` crate has no look-around and no back-references. Patterns
//!   that need them are written without, and the caller in `redact.rs`
//!   re-applies the boundary or quote rule on each match.

use std::sync::LazyLock;

use regex::Regex;

use super::words::CaseInsensitiveWords;

/// Python's `\s` for `str` patterns.
const WS: &str = r"[\s\x1C-\x1F]";
/// Python's `\S` for `str` patterns.
const NON_WS: &str = r"[^\s\x1C-\x1F]";

/// Stands in for a pattern that failed to compile. Every pattern here is a
/// literal of this file and a unit test checks that none fell back, so this
/// exists only to keep redaction free of panics.
pub(crate) const NEVER_MATCHES: &str = r"[^\s\S]";

fn compile(pattern: &str) -> Regex {
    Regex::new(pattern)
        .or_else(|_| Regex::new(NEVER_MATCHES))
        .unwrap_or_else(|_| compile(NEVER_MATCHES))
}

/// Vendor key prefixes: (literal every match starts with, the whole pattern).
/// Order matters twice, as in hermes: the first pattern that matches at a
/// position wins, and the first literal a token starts with is its label.
pub(crate) const PREFIX_PATTERNS: &[(&str, &str)] = &[
    ("sk-", r"sk-[A-Za-z0-9_-]{10,}"), // OpenAI / OpenRouter / Anthropic (sk-ant-*)
    ("ghp_", r"ghp_[A-Za-z0-9]{10,}"), // GitHub PAT (classic)
    ("github_pat_", r"github_pat_[A-Za-z0-9_]{10,}"), // GitHub PAT (fine-grained)
    ("gho_", r"gho_[A-Za-z0-9]{10,}"), // GitHub OAuth access token
    ("ghu_", r"ghu_[A-Za-z0-9]{10,}"), // GitHub user-to-server token
    ("ghs_", r"ghs_[A-Za-z0-9]{10,}"), // GitHub server-to-server token
    ("ghr_", r"ghr_[A-Za-z0-9]{10,}"), // GitHub refresh token
    ("xapp-", r"xapp-\d+-[A-Za-z0-9-]{10,}"), // Slack app-level token
    ("xox", r"xox[baprs]-[A-Za-z0-9-]{10,}"), // Slack bot/app/user tokens
    ("AIza", r"AIza[A-Za-z0-9_-]{30,}"), // Google API keys
    ("pplx-", r"pplx-[A-Za-z0-9]{10,}"), // Perplexity
    ("fal_", r"fal_[A-Za-z0-9_-]{10,}"), // Fal.ai
    ("fc-", r"fc-[A-Za-z0-9]{10,}"),   // Firecrawl
    ("bb_live_", r"bb_live_[A-Za-z0-9_-]{10,}"), // BrowserBase
    ("gAAAA", r"gAAAA[A-Za-z0-9_=-]{20,}"), // Codex encrypted tokens
    ("AKIA", r"AKIA[A-Z0-9]{16}"),     // AWS access key id
    ("sk_live_", r"sk_live_[A-Za-z0-9]{10,}"), // Stripe secret key (live)
    ("sk_test_", r"sk_test_[A-Za-z0-9]{10,}"), // Stripe secret key (test)
    ("rk_live_", r"rk_live_[A-Za-z0-9]{10,}"), // Stripe restricted key
    ("SG", r"SG\.[A-Za-z0-9_-]{10,}"), // SendGrid
    ("hf_", r"hf_[A-Za-z0-9]{10,}"),   // HuggingFace
    ("r8_", r"r8_[A-Za-z0-9]{10,}"),   // Replicate
    ("npm_", r"npm_[A-Za-z0-9]{10,}"), // npm
    ("pypi-", r"pypi-[A-Za-z0-9_-]{10,}"), // PyPI
    ("dop_v1_", r"dop_v1_[A-Za-z0-9]{10,}"), // DigitalOcean PAT
    ("doo_v1_", r"doo_v1_[A-Za-z0-9]{10,}"), // DigitalOcean OAuth
    ("am_", r"am_[A-Za-z0-9_-]{10,}"), // AgentMail
    ("sk_", r"sk_[A-Za-z0-9_]{10,}"),  // ElevenLabs
    ("tvly-", r"tvly-[A-Za-z0-9]{10,}"), // Tavily
    ("exa_", r"exa_[A-Za-z0-9]{10,}"), // Exa
    ("gsk_", r"gsk_[A-Za-z0-9]{10,}"), // Groq
    ("syt_", r"syt_[A-Za-z0-9]{10,}"), // Matrix
    ("retaindb_", r"retaindb_[A-Za-z0-9]{10,}"), // RetainDB
    ("hsk-", r"hsk-[A-Za-z0-9]{10,}"), // Hindsight
    ("mem0_", r"mem0_[A-Za-z0-9]{10,}"), // Mem0
    ("brv_", r"brv_[A-Za-z0-9]{10,}"), // ByteRover
    ("xai-", r"xai-[A-Za-z0-9]{30,}"), // xAI (Grok)
    ("ntn_", r"ntn_[A-Za-z0-9]{10,}"), // Notion integration
    ("fw-", r"fw-[A-Za-z0-9]{30,}"),   // Fireworks AI
    ("fw_", r"fw_[A-Za-z0-9]{30,}"),   // Fireworks AI
    ("fpk_", r"fpk_[A-Za-z0-9]{30,}"), // Fireworks AI project key
];

/// Finds every place a vendor prefix literal occurs; a cheap literal search
/// (the regex crate runs it as a multi-literal SIMD scan). SendGrid is
/// searched as `SG.`: a two-letter literal would stop the scan at every
/// `SG` in ordinary text and cost four times as much.
pub(crate) static PREFIX_LITERALS: LazyLock<Regex> = LazyLock::new(|| {
    let alternation: Vec<String> = PREFIX_PATTERNS
        .iter()
        .map(|(literal, _)| match *literal {
            "SG" => regex::escape("SG."),
            other => regex::escape(other),
        })
        .collect();
    compile(&alternation.join("|"))
});

/// Each vendor pattern anchored at the start of the haystack, in order.
pub(crate) static PREFIX_ANCHORED: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    PREFIX_PATTERNS
        .iter()
        .map(|(_, pattern)| compile(&format!("^(?:{pattern})")))
        .collect()
});

/// Cheap pre-check of [`ENV_ASSIGN`]: its secret words, as literals.
pub(crate) static ENV_WORDS: LazyLock<Regex> =
    LazyLock::new(|| compile(r"API_?KEY|TOKEN|SECRET|PASSW(?:OR)?D|CREDENTIAL|AUTH"));

/// Cheap pre-check of the config-key and YAML passes: their secret words,
/// in any case.
pub(crate) static CFG_WORDS: LazyLock<CaseInsensitiveWords> = LazyLock::new(|| {
    CaseInsensitiveWords::new(r"api[ _.\-]?key|token|secret|passw(?:or)?d|credential|auth")
});

/// Cheap pre-check of [`JSON_FIELD`]: its quoted key names, in any case.
pub(crate) static JSON_KEYS: LazyLock<CaseInsensitiveWords> =
    LazyLock::new(|| CaseInsensitiveWords::new(&format!(r#""{JSON_KEY_NAMES}""#)));

/// `NAME=value` where the upper-case NAME carries a secret word. The value is
/// the whole non-space run; the caller applies hermes' optional quotes.
pub(crate) static ENV_ASSIGN: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"([A-Z0-9_]{{0,50}}(?:API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)[A-Z0-9_]{{0,50}}){WS}*={WS}*({NON_WS}+)"
    ))
});

const SECRET_CFG_NAMES: &str = r"(?:api[ _.\-]?key|token|secret|passwd|password|credential|auth)";
const CFG_VALUE: &str = r"([^\s\x1C-\x1F&]+)";

/// Namespaced config keys: `spring.datasource.password=…` (issue #16413).
pub(crate) static CFG_DOTTED: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"(?i)((?:[A-Za-z0-9_\-]+\.)+[A-Za-z0-9_.\-]*{SECRET_CFG_NAMES}[A-Za-z0-9_.\-]*|[A-Za-z0-9_.\-]*{SECRET_CFG_NAMES}[A-Za-z0-9_.\-]*\.[A-Za-z0-9_.\-]+)={CFG_VALUE}"
    ))
});

/// A bare secret-word key at the start of a line: `password=…`,
/// `export api_key=…`.
pub(crate) static CFG_ANCHORED: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"(?im)(^[ \t]*(?:export[ \t]+)?[A-Za-z0-9_\-]*{SECRET_CFG_NAMES}[A-Za-z0-9_\-]*)={CFG_VALUE}"
    ))
});

/// Unquoted YAML / colon config at the start of a line: `password: hunter2`.
/// Bare `auth` is not a key word here, so `Authorization:` and `author:` are
/// left to the header pass. The caller rejects quoted values.
pub(crate) static YAML_ASSIGN: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?im)(^[ \t]*[A-Za-z0-9_.\-]*(?:api[ _.\-]?key|token|secret|passwd|password|credential)[A-Za-z0-9_.\-]*)(:[ \t]*)([^\s\x1C-\x1F&]+)",
    )
});

const JSON_KEY_NAMES: &str = "(?:api_?key|token|secret|password|access_token|refresh_token|auth_token|bearer|secret_value|raw_secret|secret_input|key_material)";

/// `"apiKey": "value"` and friends.
pub(crate) static JSON_FIELD: LazyLock<Regex> =
    LazyLock::new(|| compile(&format!(r#"(?i)("{JSON_KEY_NAMES}"){WS}*:{WS}*"([^"]+)""#)));

/// `[Proxy-]Authorization:` with any scheme, or none. The credential stops at
/// quotes so masking never eats a closing quote (#43083).
pub(crate) static AUTH_HEADER: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r#"(?i)((?:Proxy-)?Authorization:{WS}*)([A-Za-z][\w.+-]*{WS}+)?([^\s\x1C-\x1F"']+)"#
    ))
});

/// Pre-check of [`AUTH_HEADER`], in any case.
pub(crate) static AUTHORIZATION_WORD: LazyLock<CaseInsensitiveWords> =
    LazyLock::new(|| CaseInsensitiveWords::new("authorization:"));

/// Single-value API-key headers (`x-api-key: …`).
pub(crate) static SECRET_HEADER: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"(?i)((?:x-api-key|x-goog-api-key|api-key|apikey|x-api-token|x-auth-token|x-access-token){WS}*:{WS}*)({NON_WS}+)"
    ))
});

/// Telegram bot tokens: `[bot]<digits>:<30+ token chars>`.
pub(crate) static TELEGRAM: LazyLock<Regex> =
    LazyLock::new(|| compile(r"(bot)?(\d{8,}):([-A-Za-z0-9_]{30,})"));

/// PEM private key blocks, shortest span from BEGIN to END.
pub(crate) static PRIVATE_KEY: LazyLock<Regex> = LazyLock::new(|| {
    compile(r"-----BEGIN[A-Z ]*PRIVATE KEY-----(?s:.)*?-----END[A-Z ]*PRIVATE KEY-----")
});

/// The first line of a PEM private key whose `-----END` line is missing (a
/// `head` of the key file, a paged read): the body lines after it are masked.
pub(crate) static PRIVATE_KEY_BEGIN: LazyLock<Regex> =
    LazyLock::new(|| compile(r"-----BEGIN[A-Z ]*PRIVATE KEY-----"));

/// Pre-check of [`CREDENTIAL_ASSIGN`], in any case.
pub(crate) static CREDENTIAL_WORDS: LazyLock<CaseInsensitiveWords> = LazyLock::new(|| {
    CaseInsensitiveWords::new(
        r"passw(?:or)?d|passphrase|secret_access_key|secret_key|client_secret|session_token",
    )
});

/// A credential set at the start of a line in every mode — `password=…`,
/// `aws_secret_access_key = …`, `DB_PASSWORD: …`, `"password": "…"`: the key
/// ends in a name nothing but a credential is called, so unlike the other
/// key passes it also runs on code and file contents (a read_file line
/// number `12|` may precede the key). Group 1 is everything
/// up to the value, group 2 the value's first non-space run (the caller
/// applies quotes and rejects code expressions).
pub(crate) static CREDENTIAL_ASSIGN: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r#"(?im)(^[ \t]*(?:[0-9]+\|[ \t]*)?(?:export[ \t]+)?["']?[A-Za-z0-9_.\-]*(?:password|passwd|passphrase|secret_access_key|secret_key|client_secret|session_token)["']?[ \t]*[=:][ \t]*)([^\s\x1C-\x1F]+(?:[ \t]+[^\s\x1C-\x1F]+)*)"#,
    )
});

/// `scheme://user:PASSWORD@` for database and broker schemes. No group may
/// contain whitespace, so a match never spans lines (#33801).
pub(crate) static DB_CONNSTR: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)((?:postgres(?:ql)?|mysql|mongodb(?:\+srv)?|redis|amqp)://[^:\s\x1C-\x1F]+:)([^@\s\x1C-\x1F]+)(@)",
    )
});

/// `scheme://TOKEN@host` — a bare credential as userinfo (#6396). The colon
/// form `user:pass@` passes through on purpose (#34029).
pub(crate) static URL_BARE_TOKEN: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"(?i)((?:https?|wss?|git|ssh|ftp|ftps|sftp)://)([^\s\x1C-\x1F:@/]{{8,}})(@{NON_WS}+)"
    ))
});

/// JWTs: header, optionally payload and signature.
pub(crate) static JWT: LazyLock<Regex> =
    LazyLock::new(|| compile(r"eyJ[A-Za-z0-9_-]{10,}(?:\.[A-Za-z0-9_=-]{4,}){0,2}"));

/// E.164 phone numbers; the caller applies the "not followed by [A-Za-z0-9]"
/// rule.
pub(crate) static PHONE: LazyLock<Regex> = LazyLock::new(|| compile(r"\+[1-9]\d{6,14}"));

/// A whole text that is exactly a form-urlencoded body `k=v&k=v…`.
pub(crate) static FORM_BODY: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"\A[A-Za-z_][A-Za-z0-9_.-]*=[^&\s\x1C-\x1F]*(?:&[A-Za-z_][A-Za-z0-9_.-]*=[^&\s\x1C-\x1F]*)+\z",
    )
});

/// Form / query parameter names whose values are credentials (exact,
/// case-insensitive: `token_count` and `session_id` do not match).
pub(crate) const SENSITIVE_QUERY_PARAMS: &[&str] = &[
    "access_token",
    "refresh_token",
    "id_token",
    "token",
    "api_key",
    "apikey",
    "client_secret",
    "password",
    "auth",
    "jwt",
    "session",
    "secret",
    "key",
    "code",
    "signature",
    "x-amz-signature",
];

/// Every pattern, for the test that proves they all compile.
#[cfg(test)]
pub(crate) fn all_patterns() -> Vec<&'static Regex> {
    let mut all: Vec<&'static Regex> = vec![
        &PREFIX_LITERALS,
        &ENV_WORDS,
        &ENV_ASSIGN,
        &CFG_DOTTED,
        &CFG_ANCHORED,
        &YAML_ASSIGN,
        &JSON_FIELD,
        &AUTH_HEADER,
        &SECRET_HEADER,
        &TELEGRAM,
        &PRIVATE_KEY,
        &PRIVATE_KEY_BEGIN,
        &CREDENTIAL_ASSIGN,
        &DB_CONNSTR,
        &URL_BARE_TOKEN,
        &JWT,
        &PHONE,
        &FORM_BODY,
    ];
    all.extend(PREFIX_ANCHORED.iter());
    all
}
