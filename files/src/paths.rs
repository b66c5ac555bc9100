//! Lexical path handling shared by the tools and the agent loop's batch planner.
//!
//! Everything here is pure string work on POSIX paths: no I/O, no symlink
//! resolution. Sandboxes are POSIX even when the coordinator is not, so paths are
//! `&str`, never `std::path::Path` (which would apply the host's rules).

/// Expands a leading `~` (alone or followed by `/`) against `home`.
///
/// `~user` forms and paths without a leading tilde are returned unchanged, as is
/// everything when `home` is unknown.
pub fn expand_tilde(path: &str, home: Option<&str>) -> String {
    match home {
        Some(home) if path == "~" => home.to_owned(),
        Some(home) if path.starts_with("~/") => join(home, &path[2..]),
        _ => path.to_owned(),
    }
}

/// Joins `rel` onto `base` with exactly one `/` between them. An absolute `rel`
/// wins, as in `os.path.join`.
pub fn join(base: &str, rel: &str) -> String {
    if rel.starts_with('/') || base.is_empty() {
        return rel.to_owned();
    }
    if rel.is_empty() {
        return base.to_owned();
    }
    if base.ends_with('/') {
        format!("{base}{rel}")
    } else {
        format!("{base}/{rel}")
    }
}

/// Collapses `.`, `..`, repeated and trailing slashes. `..` never climbs above
/// the root of an absolute path; in a relative path leading `..` are kept.
pub fn normalize(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => match parts.last() {
                Some(&last) if last != ".." => {
                    parts.pop();
                }
                _ if absolute => {}
                _ => parts.push(".."),
            },
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

/// The absolute, normalized path a tool call refers to: `~` expanded against
/// `home`, a relative path joined onto `cwd`, then [`normalize`]d.
///
/// This is what the batch planner compares and what every file tool operates
/// on. It is lexical: `a/../b` is `b` even when `a` is a symlink.
pub fn canonical_path(cwd: &str, path: &str, home: Option<&str>) -> String {
    let expanded = expand_tilde(path, home);
    normalize(&join(cwd, &expanded))
}

/// Whether two canonical paths may touch the same subtree: both non-empty and
/// equal on their leading `min(len)` components (hermes' `_paths_overlap`).
///
/// `src` and `src/sub/a.py` overlap; `/repo/x` and `/repo/xy` do not.
pub fn paths_overlap(a: &str, b: &str) -> bool {
    let left = components(a);
    let right = components(b);
    if left.is_empty() || right.is_empty() {
        return false;
    }
    let common = left.len().min(right.len());
    left[..common] == right[..common]
}

/// Path components the way Python's `PurePosixPath.parts` lists them: a leading
/// `/` is its own component, empty and `.` segments are dropped.
fn components(path: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    if path.starts_with('/') {
        parts.push("/");
    }
    parts.extend(
        path.split('/')
            .filter(|part| !part.is_empty() && *part != "."),
    );
    parts
}

/// Parent directory of an absolute normalized path (`/` for `/x`, `/` for `/`).
pub fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) => "/",
        Some(index) => &path[..index],
        None => ".",
    }
}

/// Last component of a path (`x.py` for `/a/x.py`).
pub fn file_name(path: &str) -> &str {
    let trimmed = path.trim_end_matches('/');
    match trimmed.rfind('/') {
        Some(index) => &trimmed[index + 1..],
        None => trimmed,
    }
}

/// Lower-cased extension including the dot (`.py`), or `""`; a leading dot of
/// a hidden file is not an extension (`.bashrc` has none), as in `os.path.splitext`.
pub fn extension(path: &str) -> String {
    let name = file_name(path);
    let stem_start = name.len() - name.trim_start_matches('.').len();
    match name[stem_start..].rfind('.') {
        Some(index) => name[stem_start + index..].to_lowercase(),
        None => String::new(),
    }
}

/// `path` is `root` or lies below it (component-wise, `/a/bc` is not below `/a/b`).
pub fn is_within(path: &str, root: &str) -> bool {
    if root == "/" {
        return path.starts_with('/');
    }
    let root = root.trim_end_matches('/');
    path == root || (path.starts_with(root) && path.as_bytes().get(root.len()) == Some(&b'/'))
}

/// Whether a path contains a `..` component (checked before any resolution).
pub fn has_traversal_component(path: &str) -> bool {
    path.split('/').any(|part| part == "..")
}

#[cfg(test)]
#[path = "paths_tests.rs"]
mod tests;
