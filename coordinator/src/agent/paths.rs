//! Lexical POSIX path handling for the batch planner.
//!
//! A stand-in with the API of `caduceus_files::paths` (`canonical_path`,
//! `paths_overlap`), which is being finished on another branch; swap the
//! imports once it is on main. Sandboxes are POSIX even when the coordinator
//! is not, so paths are `&str`, never `std::path::Path`.

/// The absolute, normalized path a call refers to: `~` expanded against
/// `home`, a relative path joined onto `cwd`, `.`/`..`/duplicate slashes
/// collapsed. Lexical: no symlinks are followed (the coordinator cannot see
/// the sandbox's file system).
pub fn canonical_path(cwd: &str, path: &str, home: Option<&str>) -> String {
    let expanded = match home {
        Some(home) if path == "~" => home.to_owned(),
        Some(home) if path.starts_with("~/") => join(home, &path[2..]),
        _ => path.to_owned(),
    };
    normalize(&join(cwd, &expanded))
}

/// Whether two canonical paths may touch the same subtree: both non-empty and
/// equal on their leading `min(len)` components (hermes' `_paths_overlap`).
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

fn join(base: &str, rel: &str) -> String {
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

fn normalize(path: &str) -> String {
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

/// Components as Python's `PurePosixPath.parts`: a leading `/` is its own
/// component; empty and `.` segments are dropped.
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

#[cfg(test)]
#[path = "paths_tests.rs"]
mod tests;
