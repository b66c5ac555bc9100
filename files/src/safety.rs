//! Path rules of the file tools: devices that hang a read, binary extensions,
//! secret files that are not read, and places that are not written.
//!
//! These are hermes' lists (`tools/file_tools.py`, `agent/file_safety.py`,
//! `tools/binary_extensions.py`) with hermes' own state directory replaced by
//! the caduceus home (`~/.caduceus` unless configured). Like hermes' they are
//! defence in depth, not a boundary: the terminal tool can still reach these
//! files. Every check takes the candidate paths (the lexical canonical path
//! and, when the backend can tell, the symlink-resolved one) and fires when any
//! of them matches.

use crate::paths::{self, is_within};

/// Reading these never ends or blocks on input.
const BLOCKED_DEVICES: &[&str] = &[
    "/dev/zero",
    "/dev/random",
    "/dev/urandom",
    "/dev/full",
    "/dev/stdin",
    "/dev/tty",
    "/dev/console",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/fd/0",
    "/dev/fd/1",
    "/dev/fd/2",
];

/// `/proc/<pid>/…` entries that leak secrets or memory layout (hermes #4427).
const BLOCKED_PROC_SUFFIXES: &[&str] = &[
    "/fd/0",
    "/fd/1",
    "/fd/2",
    "/environ",
    "/cmdline",
    "/maps",
    "/smaps",
    "/smaps_rollup",
    "/numa_maps",
    "/mem",
    "/auxv",
    "/pagemap",
];

/// Extensions read_file refuses without looking at the bytes.
const BINARY_EXTENSIONS: &[&str] = &[
    // Images
    ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".ico", ".webp", ".tiff", ".tif",
    // Videos
    ".mp4", ".mov", ".avi", ".mkv", ".webm", ".wmv", ".flv", ".m4v", ".mpeg", ".mpg",
    // Audio
    ".mp3", ".wav", ".ogg", ".flac", ".aac", ".m4a", ".wma", ".aiff", ".opus",
    // Archives
    ".zip", ".tar", ".gz", ".bz2", ".7z", ".rar", ".xz", ".z", ".tgz", ".iso",
    // Executables and libraries
    ".exe", ".dll", ".so", ".dylib", ".bin", ".o", ".a", ".obj", ".lib", ".app", ".msi", ".deb",
    ".rpm", // Office documents (PDF stays readable)
    ".doc", ".docx", ".xls", ".xlsx", ".ppt", ".pptx", ".odt", ".ods", ".odp", // Fonts
    ".ttf", ".otf", ".woff", ".woff2", ".eot", // Bytecode and VM artefacts
    ".pyc", ".pyo", ".class", ".jar", ".war", ".ear", ".node", ".wasm", ".rlib",
    // Databases
    ".sqlite", ".sqlite3", ".db", ".mdb", ".idx", // Design and 3D
    ".psd", ".ai", ".eps", ".sketch", ".fig", ".xd", ".blend", ".3ds", ".max", // Flash
    ".swf", ".fla", // Lock files and profiling data
    ".lockb", ".dat", ".data",
];

/// Project-local environment files that usually hold credentials.
const SECRET_ENV_NAMES: &[&str] = &[
    ".env",
    ".env.local",
    ".env.development",
    ".env.production",
    ".env.test",
    ".env.staging",
    ".envrc",
];

/// Files under the caduceus home that hold credentials.
const HOME_CREDENTIAL_FILES: &[&str] = &[
    ".env",
    "auth.json",
    "auth.lock",
    "webhook_subscriptions.json",
];

const SENSITIVE_WRITE_PREFIXES: &[&str] = &[
    "/etc/",
    "/boot/",
    "/usr/lib/systemd/",
    "/private/etc/",
    "/private/var/",
];
const SENSITIVE_WRITE_EXACT: &[&str] = &["/var/run/docker.sock", "/run/docker.sock"];

/// Credential files relative to the user's home that are never written.
const HOME_DENIED_FILES: &[&str] = &[
    ".ssh/authorized_keys",
    ".ssh/id_rsa",
    ".ssh/id_ed25519",
    ".ssh/config",
    ".netrc",
    ".pgpass",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
];
const SYSTEM_DENIED_FILES: &[&str] = &["/etc/sudoers", "/etc/passwd", "/etc/shadow"];
/// Credential directories relative to the user's home.
const HOME_DENIED_DIRS: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".kube",
    ".docker",
    ".azure",
    ".config/gh",
    ".config/gcloud",
];
const SYSTEM_DENIED_DIRS: &[&str] = &["/etc/sudoers.d", "/etc/systemd"];
/// caduceus' own state, relative to its home: rewriting it would falsify
/// history or tokens.
const CADUCEUS_DENIED_FILES: &[&str] = &["state.db"];
const CADUCEUS_DENIED_DIRS: &[&str] = &["sessions", "mcp-tokens", "pairing"];

/// Where the rules are anchored for one environment.
#[derive(Debug, Clone, Copy)]
pub struct SafetyAnchors<'a> {
    /// The environment user's home (`~`), if known.
    pub home: Option<&'a str>,
    /// The caduceus home whose config, credentials and state are protected.
    pub caduceus_home: Option<&'a str>,
}

/// hermes' device guard: the message when `candidates` name a device that
/// would hang or stream forever (checked on the path as given and resolved).
pub fn is_blocked_device(candidates: &[&str]) -> bool {
    candidates.iter().any(|path| {
        BLOCKED_DEVICES.contains(path)
            || (path.starts_with("/proc/")
                && BLOCKED_PROC_SUFFIXES
                    .iter()
                    .any(|suffix| path.ends_with(suffix)))
    })
}

pub fn device_error(display_path: &str) -> String {
    format!(
        "Cannot read '{display_path}': this is a device file that would block or produce infinite output."
    )
}

/// The extension (`.png`) when it marks a binary format.
pub fn binary_extension(path: &str) -> Option<String> {
    let extension = paths::extension(path);
    BINARY_EXTENSIONS
        .contains(&extension.as_str())
        .then_some(extension)
}

pub fn binary_extension_error(display_path: &str, extension: &str) -> String {
    format!(
        "Cannot read binary file '{display_path}' ({extension}). Use terminal to inspect binary files."
    )
}

const BYPASS_NOTE: &str =
    "(Defense-in-depth — not a security boundary; the terminal tool can still bypass.)";

/// Why reading (or searching) `path` is refused, if it is. `path` is the
/// resolved path shown in the message; `candidates` are all forms checked.
pub fn read_block_error(
    path: &str,
    candidates: &[&str],
    anchors: SafetyAnchors<'_>,
) -> Option<String> {
    if let Some(home) = anchors.caduceus_home {
        let hub = paths::join(home, "skills/.hub");
        if candidates
            .iter()
            .any(|candidate| is_within(candidate, &hub))
        {
            return Some(format!(
                "Access denied: {path} is an internal caduceus cache file and cannot be read directly to prevent prompt injection. Use the skills_list or skill_view tools instead."
            ));
        }
        let credential = HOME_CREDENTIAL_FILES
            .iter()
            .map(|name| paths::join(home, name))
            .any(|blocked| candidates.contains(&blocked.as_str()));
        if credential {
            return Some(format!(
                "Access denied: {path} is a caduceus credential store and cannot be read directly. Provider tools consume these credentials through internal channels. {BYPASS_NOTE}"
            ));
        }
        let tokens = paths::join(home, "mcp-tokens");
        if candidates.contains(&tokens.as_str()) {
            return Some(format!(
                "Access denied: {path} is the caduceus MCP token directory and cannot be read directly. {BYPASS_NOTE}"
            ));
        }
        if candidates
            .iter()
            .any(|candidate| is_within(candidate, &tokens))
        {
            return Some(format!(
                "Access denied: {path} is a caduceus MCP token file and cannot be read directly. {BYPASS_NOTE}"
            ));
        }
    }
    let secret_env = candidates.iter().any(|candidate| {
        let name = paths::file_name(candidate).to_lowercase();
        SECRET_ENV_NAMES.contains(&name.as_str())
    });
    if secret_env {
        return Some(format!(
            "Access denied: {path} is a secret-bearing environment file and cannot be read to prevent credential leakage. If you need to check the file structure, read .env.example instead. {BYPASS_NOTE}"
        ));
    }
    None
}

/// hermes' first write guard (`_check_sensitive_path`): system locations and
/// the caduceus config. `display_path` is the path as the model gave it.
pub fn sensitive_write_error(
    display_path: &str,
    candidates: &[&str],
    anchors: SafetyAnchors<'_>,
) -> Option<String> {
    let system = candidates.iter().any(|candidate| {
        SENSITIVE_WRITE_PREFIXES
            .iter()
            .any(|prefix| candidate.starts_with(prefix))
            || SENSITIVE_WRITE_EXACT.contains(candidate)
    });
    if system {
        return Some(format!(
            "Refusing to write to sensitive system path: {display_path}\nUse the terminal tool with sudo if you need to modify system files."
        ));
    }
    if let Some(home) = anchors.caduceus_home {
        let config = paths::join(home, "config.yaml");
        if candidates.contains(&config.as_str()) {
            return Some(format!(
                "Refusing to write to caduceus config file: {display_path}\nAgent cannot modify security-sensitive configuration. Edit ~/.caduceus/config.yaml directly instead."
            ));
        }
    }
    None
}

/// hermes' second write guard (`get_write_denied_error`): credential files
/// and directories, caduceus state, and the write safe root. `verb` is
/// `Write`, `Delete` or `Move`; `safe_roots` are already resolved.
pub fn write_denied_error(
    path: &str,
    candidates: &[&str],
    anchors: SafetyAnchors<'_>,
    safe_roots: &[String],
    verb: &str,
) -> Option<String> {
    let mut denied_files: Vec<String> = SYSTEM_DENIED_FILES
        .iter()
        .map(|p| (*p).to_owned())
        .collect();
    let mut denied_dirs: Vec<String> = SYSTEM_DENIED_DIRS.iter().map(|p| (*p).to_owned()).collect();
    if let Some(home) = anchors.home {
        denied_files.extend(HOME_DENIED_FILES.iter().map(|rel| paths::join(home, rel)));
        denied_dirs.extend(HOME_DENIED_DIRS.iter().map(|rel| paths::join(home, rel)));
    }
    if let Some(home) = anchors.caduceus_home {
        denied_files.push(paths::join(home, ".env"));
        denied_files.extend(
            CADUCEUS_DENIED_FILES
                .iter()
                .map(|rel| paths::join(home, rel)),
        );
        denied_dirs.extend(
            CADUCEUS_DENIED_DIRS
                .iter()
                .map(|rel| paths::join(home, rel)),
        );
    }
    let credential = candidates.iter().any(|candidate| {
        denied_files.iter().any(|file| file == candidate)
            || denied_dirs.iter().any(|dir| is_within(candidate, dir))
    });
    if credential {
        return Some(format!(
            "{verb} denied: '{path}' is a protected system/credential file."
        ));
    }
    if !safe_roots.is_empty() {
        let inside = candidates
            .iter()
            .all(|candidate| safe_roots.iter().any(|root| is_within(candidate, root)));
        if !inside {
            let mut roots = safe_roots.to_vec();
            roots.sort();
            return Some(format!(
                "{verb} denied: '{path}' is outside the write safe root ({}). Unset CADUCEUS_WRITE_SAFE_ROOT or add this path's directory prefix.",
                roots.join(":")
            ));
        }
    }
    None
}

#[cfg(test)]
#[path = "safety_tests.rs"]
mod tests;
