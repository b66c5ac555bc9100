//! The skill tools (`skills_list`, `skill_view`, `skill_manage`): the
//! agent's procedural memory, kept on the coordinator under
//! `$CADUCEUS_HOME/skills/[category/]<name>/SKILL.md` (one truth for the
//! whole fleet), with hermes 0.19's front-matter rules, limits, result
//! shapes and error texts (`tools/skills_tool.py`,
//! `tools/skill_manager_tool.py`).
//!
//! A skill's files are copied into the environments that use it
//! (`sync.rs`): `skill_view` in a task copies the skill into the task's
//! environment and answers its `skill_dir` there.
//!
//! Not built: hermes' security scan, pinned skills, profiles, external skill
//! directories and the curator's archive.

pub mod sync;

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use crate::call::{CallContext, ToolReply};
use crate::registry::{Handler, LocalTool, ParallelClass, RegistryError, ToolEntry};

/// hermes' `MAX_NAME_LENGTH` (skill names and categories).
pub const MAX_NAME_LENGTH: usize = 64;
/// hermes' `MAX_DESCRIPTION_LENGTH`.
pub const MAX_DESCRIPTION_LENGTH: usize = 1024;
/// hermes' `MAX_SKILL_CONTENT_CHARS` (SKILL.md and text files an agent writes).
pub const MAX_SKILL_CONTENT_CHARS: usize = 100_000;
/// hermes' `MAX_SKILL_FILE_BYTES` (one supporting file).
pub const MAX_SKILL_FILE_BYTES: usize = 1_048_576;
/// The folders a supporting file may live in (hermes' `ALLOWED_SUBDIRS`).
const ALLOWED_SUBDIRS: [&str; 4] = ["assets", "references", "scripts", "templates"];

fn failure(error: impl Into<String>) -> Value {
    json!({"success": false, "error": error.into()})
}

/// hermes' `VALID_NAME_RE`: `^[a-z0-9][a-z0-9._-]*$`.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
}

fn validate_name(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("Skill name is required.".into());
    }
    if name.chars().count() > MAX_NAME_LENGTH {
        return Some(format!("Skill name exceeds {MAX_NAME_LENGTH} characters."));
    }
    if !valid_name(name) {
        return Some(format!(
            "Invalid skill name '{name}'. Use lowercase letters, numbers, hyphens, dots, and underscores. Must start with a letter or digit."
        ));
    }
    None
}

fn validate_category(category: &str) -> Option<String> {
    let invalid = || {
        format!(
            "Invalid category '{category}'. Use lowercase letters, numbers, hyphens, dots, and underscores. Categories must be a single directory name."
        )
    };
    if category.contains('/') || category.contains('\\') {
        return Some(invalid());
    }
    if category.chars().count() > MAX_NAME_LENGTH {
        return Some(format!("Category exceeds {MAX_NAME_LENGTH} characters."));
    }
    (!valid_name(category)).then(invalid)
}

/// Splits SKILL.md text into its front matter's YAML and the body after it,
/// as hermes does (`---` first, closed by a `\n---` line); `None`: no
/// closed front matter.
fn split_front_matter(content: &str) -> Option<(&str, &str)> {
    let content = content.strip_prefix('\u{feff}').unwrap_or(content);
    let rest = content.strip_prefix("---")?;
    let mut from = 0;
    while let Some(at) = rest[from..].find("\n---") {
        let start = from + at;
        let after = &rest[start + 4..];
        let trimmed = after.trim_start_matches([' ', '\t', '\r']);
        if let Some(body) = trimmed.strip_prefix('\n') {
            return Some((&rest[..start], body));
        }
        from = start + 4;
    }
    None
}

/// The front matter as a mapping; an unparsable or absent one is empty.
fn front_matter(content: &str) -> (Map<String, Value>, &str) {
    match split_front_matter(content) {
        Some((yaml, body)) => (
            serde_yaml::from_str::<Value>(yaml)
                .ok()
                .and_then(|v| v.as_object().cloned())
                .unwrap_or_default(),
            body,
        ),
        None => (Map::new(), content),
    }
}

/// hermes' `_validate_frontmatter`: the texts of its refusals.
fn validate_front_matter(content: &str) -> Option<String> {
    if content.trim().is_empty() {
        return Some("Content cannot be empty.".into());
    }
    let stripped = content.strip_prefix('\u{feff}').unwrap_or(content);
    if !stripped.starts_with("---") {
        return Some(
            "SKILL.md must start with YAML frontmatter (---). See existing skills for format."
                .into(),
        );
    }
    let Some((yaml, body)) = split_front_matter(stripped) else {
        return Some(
            "SKILL.md frontmatter is not closed. Ensure you have a closing '---' line.".into(),
        );
    };
    let parsed: Value = match serde_yaml::from_str(yaml) {
        Ok(v) => v,
        Err(err) => return Some(format!("YAML frontmatter parse error: {err}")),
    };
    let Some(map) = parsed.as_object() else {
        return Some("Frontmatter must be a YAML mapping (key: value pairs).".into());
    };
    if !map.contains_key("name") {
        return Some("Frontmatter must include 'name' field.".into());
    }
    let Some(description) = map.get("description") else {
        return Some("Frontmatter must include 'description' field.".into());
    };
    if plain(description).chars().count() > MAX_DESCRIPTION_LENGTH {
        return Some(format!(
            "Description exceeds {MAX_DESCRIPTION_LENGTH} characters."
        ));
    }
    if body.trim().is_empty() {
        return Some(
            "SKILL.md must have content after the frontmatter (instructions, procedures, etc.)."
                .into(),
        );
    }
    None
}

/// A YAML scalar as Python's `str()` would print it (strings unquoted).
fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn validate_content_size(content: &str, label: &str) -> Option<String> {
    let chars = content.chars().count();
    (chars > MAX_SKILL_CONTENT_CHARS).then(|| {
        format!(
            "{label} content is {} characters (limit: {}). Consider splitting into a smaller SKILL.md with supporting files in references/ or templates/.",
            caduceus_common::text::group_thousands(chars as u64),
            caduceus_common::text::group_thousands(MAX_SKILL_CONTENT_CHARS as u64),
        )
    })
}

fn has_traversal(path: &str) -> bool {
    Path::new(path).components().any(|c| {
        matches!(
            c,
            Component::ParentDir | Component::RootDir | Component::Prefix(_)
        )
    })
}

/// hermes' `_validate_file_path` (write_file, remove_file, patch's file).
fn validate_file_path(file_path: &str) -> Option<String> {
    if file_path.is_empty() {
        return Some("file_path is required.".into());
    }
    if has_traversal(file_path) {
        return Some("Path traversal ('..') is not allowed.".into());
    }
    let parts: Vec<&str> = file_path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if parts.last() == Some(&"SKILL.md") && parts.len() <= 2 {
        return None;
    }
    if parts.is_empty() || !ALLOWED_SUBDIRS.contains(&parts[0]) {
        return Some(format!(
            "File must be under one of: {}. Got: '{file_path}'",
            ALLOWED_SUBDIRS.join(", ")
        ));
    }
    if parts.len() < 2 {
        return Some(format!(
            "Provide a file path, not just a directory. Example: '{}/myfile.md'",
            parts[0]
        ));
    }
    None
}

/// Writes through a temporary file and a rename, so a reader never sees a
/// half-written skill.
fn write_atomic(path: &Path, content: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".skill_{}.tmp",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    ));
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(content)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A skill found on disk.
#[derive(Debug, Clone)]
struct Found {
    dir: PathBuf,
    name: String,
    category: Option<String>,
}

/// The skills under one directory (`$CADUCEUS_HOME/skills`).
pub struct SkillStore {
    root: PathBuf,
    /// Bumped by every change `skill_manage` makes: environments holding
    /// copies compare it before a call instead of reading the files.
    generation: std::sync::atomic::AtomicU64,
}

impl SkillStore {
    pub fn new(root: PathBuf) -> Self {
        SkillStore {
            root,
            generation: std::sync::atomic::AtomicU64::new(1),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Changes with every successful `skill_manage` action.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The files of the skill in `rel_dir` (relative to the root, e.g.
    /// `basics/greet`), as paths relative to the root with their bytes.
    /// Hidden files (a write in progress) and symlinks are left out; `None`
    /// when the skill is gone.
    pub(crate) fn skill_files(&self, rel_dir: &str) -> Option<Vec<(String, Vec<u8>)>> {
        if rel_dir.is_empty() || has_traversal(rel_dir) {
            return None;
        }
        let dir = self.root.join(rel_dir);
        if !dir.join("SKILL.md").is_file() {
            return None;
        }
        let mut files = Vec::new();
        walk_files(&dir, &mut |path| {
            let Ok(rel) = path.strip_prefix(&self.root) else {
                return;
            };
            let hidden = rel
                .components()
                .any(|c| c.as_os_str().to_string_lossy().starts_with('.'));
            if hidden {
                return;
            }
            if let (Some(rel), Ok(bytes)) = (rel.to_str(), std::fs::read(path)) {
                files.push((rel.to_owned(), bytes));
            }
        });
        Some(files)
    }

    /// Every skill: `<root>/<name>/SKILL.md` and
    /// `<root>/<category>/<name>/SKILL.md`, sorted by category then name.
    fn all(&self) -> Vec<(Found, Map<String, Value>, String)> {
        let mut out = Vec::new();
        let mut visit = |dir: PathBuf, category: Option<String>| {
            let Ok(text) = std::fs::read_to_string(dir.join("SKILL.md")) else {
                return;
            };
            let (fm, body) = front_matter(&text);
            let name = fm
                .get("name")
                .map(plain)
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| dir.file_name().unwrap_or_default().to_string_lossy().into());
            let body = body.to_owned();
            out.push((
                Found {
                    dir,
                    name: name.chars().take(MAX_NAME_LENGTH).collect(),
                    category,
                },
                fm,
                body,
            ));
        };
        for entry in read_dirs(&self.root) {
            let dir_name = entry
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            if dir_name.starts_with('.') {
                continue;
            }
            if entry.join("SKILL.md").is_file() {
                visit(entry, None);
            } else {
                for inner in read_dirs(&entry) {
                    if inner.join("SKILL.md").is_file() {
                        visit(inner, Some(dir_name.clone()));
                    }
                }
            }
        }
        out.sort_by(|a, b| {
            (a.0.category.as_deref().unwrap_or(""), &a.0.name)
                .cmp(&(b.0.category.as_deref().unwrap_or(""), &b.0.name))
        });
        out
    }

    /// The skill `name` (a bare name, a front-matter name or
    /// `category/name`); an error when several match.
    fn find(&self, name: &str) -> Result<Option<Found>, Value> {
        let all = self.all();
        let matches: Vec<&Found> = all
            .iter()
            .map(|(found, _, _)| found)
            .filter(|f| {
                f.name == name
                    || f.dir.file_name().is_some_and(|d| d == name)
                    || f.dir
                        .strip_prefix(&self.root)
                        .is_ok_and(|rel| rel == Path::new(name))
            })
            .collect();
        if matches.len() > 1 {
            let paths: Vec<String> = matches
                .iter()
                .map(|f| f.dir.join("SKILL.md").display().to_string())
                .collect();
            return Err(json!({
                "success": false,
                "error": format!("Ambiguous skill name '{name}': {} skills match. Refusing to guess — load one explicitly by its categorized path.", matches.len()),
                "matches": paths,
                "hint": "Pass the full relative path instead of the bare name (e.g., 'category/skill-name'), or rename one of the colliding skills so each name is unique.",
            }));
        }
        Ok(matches.first().map(|f| (*f).clone()))
    }

    fn not_found(name: &str, suffix: &str) -> String {
        format!("Skill '{name}' not found. Use skills_list() to see available skills.{suffix}")
    }

    /// `skills_list(category)`.
    pub fn list(&self, category: Option<&str>) -> Value {
        if !self.root.is_dir() {
            if let Err(err) = std::fs::create_dir_all(&self.root) {
                return failure(format!("Failed to create skills directory: {err}"));
            }
            return json!({
                "success": true, "skills": [], "categories": [],
                "message": format!("No skills found. Skills directory created at {}/", self.root.display()),
            });
        }
        let mut skills: Vec<Value> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (found, fm, body) in self.all() {
            if !matches_platform(&fm) || !seen.insert(found.name.clone()) {
                continue;
            }
            let mut description = fm.get("description").map(plain).unwrap_or_default();
            if description.is_empty() {
                description = body
                    .lines()
                    .map(str::trim)
                    .find(|l| !l.is_empty() && !l.starts_with('#'))
                    .unwrap_or("")
                    .to_owned();
            }
            if description.chars().count() > MAX_DESCRIPTION_LENGTH {
                description = description
                    .chars()
                    .take(MAX_DESCRIPTION_LENGTH - 3)
                    .collect::<String>()
                    + "...";
            }
            skills.push(
                json!({"name": found.name, "description": description, "category": found.category}),
            );
        }
        if skills.is_empty() {
            return json!({"success": true, "skills": [], "categories": [], "message": "No skills found in skills/ directory."});
        }
        if let Some(category) = category.filter(|c| !c.is_empty()) {
            skills.retain(|s| s["category"].as_str() == Some(category));
        }
        let mut categories: Vec<String> = skills
            .iter()
            .filter_map(|s| s["category"].as_str().map(str::to_owned))
            .collect();
        categories.sort();
        categories.dedup();
        json!({
            "success": true,
            "count": skills.len(),
            "skills": skills,
            "categories": categories,
            "hint": "Use skill_view(name) to see full content, tags, and linked files",
        })
    }

    /// `skill_view(name, file_path)`.
    pub fn view(&self, name: &str, file_path: Option<&str>) -> Value {
        if name.is_empty() {
            return failure("name is required.");
        }
        if has_traversal(name) {
            return json!({"success": false, "error": "Path traversal ('..') is not allowed in skill names.", "hint": "Use a skill name or relative path within the skills directory."});
        }
        if !self.root.is_dir() {
            return failure(
                "Skills directory does not exist yet. It will be created on first install.",
            );
        }
        let found = match self.find(name) {
            Ok(Some(found)) => found,
            Ok(None) => {
                let available: Vec<String> = self
                    .all()
                    .into_iter()
                    .take(20)
                    .map(|(f, _, _)| f.name)
                    .collect();
                return json!({
                    "success": false,
                    "error": format!("Skill '{name}' not found."),
                    "available_skills": available,
                    "hint": "Use skills_list to see all available skills",
                });
            }
            Err(err) => return err,
        };
        let skill_md = found.dir.join("SKILL.md");
        let content = match std::fs::read_to_string(&skill_md) {
            Ok(c) => c,
            Err(err) => return failure(format!("Failed to read skill '{name}': {err}")),
        };
        let (fm, _) = front_matter(&content);
        if !matches_platform(&fm) {
            return failure(format!("Skill '{name}' is not supported on this platform."));
        }
        if let Some(file_path) = file_path.filter(|p| !p.is_empty()) {
            return self.view_file(&found, name, file_path);
        }
        let linked = linked_files(&found.dir);
        let list = |key: &str| match fm.get(key) {
            Some(Value::Array(items)) => Value::Array(items.clone()),
            Some(Value::String(s)) => json!(
                s.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
            ),
            _ => {
                // hermes reads tags and related_skills under metadata.hermes too.
                fm.get("metadata")
                    .and_then(|m| m.get("hermes"))
                    .and_then(|h| h.get(key))
                    .cloned()
                    .filter(Value::is_array)
                    .unwrap_or_else(|| json!([]))
            }
        };
        let (env_vars, commands) = prerequisites(&fm);
        let missing_env: Vec<&String> = env_vars
            .iter()
            .filter(|v| std::env::var_os(v.as_str()).is_none())
            .collect();
        let rel = found
            .dir
            .strip_prefix(&self.root)
            .map(|p| p.join("SKILL.md").display().to_string())
            .unwrap_or_default();
        let mut result = json!({
            "success": true,
            "name": found.name,
            "description": fm.get("description").map(plain).unwrap_or_default(),
            "tags": list("tags"),
            "related_skills": list("related_skills"),
            "content": content,
            "path": rel,
            "skill_dir": found.dir.display().to_string(),
            "linked_files": if linked.is_empty() { Value::Null } else { Value::Object(linked.clone()) },
            "usage_hint": if linked.is_empty() { Value::Null } else { json!("To view linked files, call skill_view(name, file_path) where file_path is e.g. 'references/api.md' or 'assets/config.yaml'") },
            "required_environment_variables": env_vars.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
            "required_commands": commands,
            "missing_required_environment_variables": missing_env,
            "missing_credential_files": [],
            "missing_required_commands": [],
            "setup_needed": !missing_env.is_empty(),
            "setup_skipped": false,
            "readiness_status": if missing_env.is_empty() { "available" } else { "setup_needed" },
        });
        if let Some(version) = fm.get("version") {
            result["version"] = json!(plain(version));
        }
        if let Some(compat) = fm.get("compatibility") {
            result["compatibility"] = compat.clone();
        }
        if let Some(meta) = fm.get("metadata").filter(|m| m.is_object()) {
            result["metadata"] = meta.clone();
        }
        result
    }

    fn view_file(&self, found: &Found, name: &str, file_path: &str) -> Value {
        let hint = "Use a relative path within the skill directory";
        if has_traversal(file_path) {
            return json!({"success": false, "error": "Path traversal ('..') is not allowed.", "hint": hint});
        }
        let target = found.dir.join(file_path);
        if !within(&target, &found.dir) {
            return json!({"success": false, "error": format!("Path escapes the skill directory: {file_path}"), "hint": hint});
        }
        if !target.is_file() {
            return json!({
                "success": false,
                "error": format!("File '{file_path}' not found in skill '{name}'."),
                "available_files": available_files(&found.dir),
                "hint": "Use one of the available file paths listed above",
            });
        }
        let bytes = match std::fs::read(&target) {
            Ok(b) => b,
            Err(err) => return failure(format!("Failed to read file '{file_path}': {err}")),
        };
        match String::from_utf8(bytes) {
            Ok(content) => json!({
                "success": true, "name": name, "file": file_path, "content": content,
                "file_type": target.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default(),
            }),
            Err(err) => json!({
                "success": true, "name": name, "file": file_path,
                "content": format!("[Binary file: {}, size: {} bytes]", target.file_name().unwrap_or_default().to_string_lossy(), err.as_bytes().len()),
                "is_binary": true,
            }),
        }
    }

    /// `skill_manage(action, …)`.
    pub fn manage(&self, args: &Map<String, Value>) -> Value {
        let result = self.manage_inner(args);
        if result["success"] == true {
            self.generation
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        result
    }

    fn manage_inner(&self, args: &Map<String, Value>) -> Value {
        let text = |key: &str| args.get(key).and_then(Value::as_str);
        let name = text("name").unwrap_or("");
        match text("action").unwrap_or("") {
            "create" => {
                let Some(content) = text("content") else {
                    return failure(
                        "content is required for 'create'. Provide the full SKILL.md text (frontmatter + body).",
                    );
                };
                self.create(
                    name,
                    content,
                    text("category").map(str::trim).filter(|c| !c.is_empty()),
                )
            }
            "edit" => {
                let Some(content) = text("content") else {
                    return failure(
                        "content is required for 'edit'. Provide the full updated SKILL.md text.",
                    );
                };
                self.edit(name, content)
            }
            "patch" => {
                let Some(old) = text("old_string").filter(|s| !s.is_empty()) else {
                    return failure("old_string is required for 'patch'.");
                };
                let Some(new) = text("new_string") else {
                    return failure(
                        "new_string is required for 'patch'. Use an empty string to delete matched text.",
                    );
                };
                let replace_all = args
                    .get("replace_all")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                self.patch(
                    name,
                    old,
                    new,
                    text("file_path").filter(|p| !p.is_empty()),
                    replace_all,
                )
            }
            "delete" => self.delete(name),
            "write_file" => {
                let Some(file_path) = text("file_path").filter(|p| !p.is_empty()) else {
                    return failure(
                        "file_path is required for 'write_file'. Example: 'references/api-guide.md'",
                    );
                };
                let Some(content) = text("file_content") else {
                    return failure("file_content is required for 'write_file'.");
                };
                self.write_file(name, file_path, content)
            }
            "remove_file" => {
                let Some(file_path) = text("file_path").filter(|p| !p.is_empty()) else {
                    return failure("file_path is required for 'remove_file'.");
                };
                self.remove_file(name, file_path)
            }
            other => failure(format!(
                "Unknown action '{other}'. Use: create, edit, patch, delete, write_file, remove_file"
            )),
        }
    }

    /// An existing skill and the path of `file_path` inside it (refused when
    /// the path leads out of the skill).
    fn file_of(
        &self,
        name: &str,
        file_path: &str,
        suffix: &str,
    ) -> Result<(Found, PathBuf), Value> {
        let found = self.existing(name, suffix)?;
        let target = found.dir.join(file_path);
        if !within(&target, &found.dir) {
            return Err(failure(format!(
                "Path escapes the skill directory: {file_path}"
            )));
        }
        Ok((found, target))
    }

    fn existing(&self, name: &str, suffix: &str) -> Result<Found, Value> {
        match self.find(name)? {
            Some(found) => Ok(found),
            None => Err(failure(Self::not_found(name, suffix))),
        }
    }

    fn create(&self, name: &str, content: &str, category: Option<&str>) -> Value {
        if let Some(err) = validate_name(name)
            .or_else(|| category.and_then(validate_category))
            .or_else(|| validate_front_matter(content))
            .or_else(|| validate_content_size(content, "SKILL.md"))
        {
            return failure(err);
        }
        match self.find(name) {
            Ok(Some(existing)) => {
                return failure(format!(
                    "A skill named '{name}' already exists at {}.",
                    existing.dir.display()
                ));
            }
            Ok(None) => {}
            Err(err) => return err,
        }
        let dir = match category {
            Some(c) => self.root.join(c).join(name),
            None => self.root.join(name),
        };
        let skill_md = dir.join("SKILL.md");
        if let Err(err) = write_atomic(&skill_md, content.as_bytes()) {
            return failure(format!("Failed to write {}: {err}", skill_md.display()));
        }
        let mut result = json!({
            "success": true,
            "message": format!("Skill '{name}' created."),
            "path": dir.strip_prefix(&self.root).unwrap_or(&dir).display().to_string(),
            "skill_md": skill_md.display().to_string(),
        });
        if let Some(c) = category {
            result["category"] = json!(c);
        }
        result["hint"] = json!(format!(
            "To add reference files, templates, or scripts, use skill_manage(action='write_file', name='{name}', file_path='references/example.md', file_content='...')"
        ));
        result
    }

    fn edit(&self, name: &str, content: &str) -> Value {
        if let Some(err) =
            validate_front_matter(content).or_else(|| validate_content_size(content, "SKILL.md"))
        {
            return failure(err);
        }
        let found = match self.existing(name, "") {
            Ok(f) => f,
            Err(err) => return err,
        };
        if let Err(err) = write_atomic(&found.dir.join("SKILL.md"), content.as_bytes()) {
            return failure(format!("Failed to write SKILL.md: {err}"));
        }
        json!({
            "success": true,
            "message": format!("Skill '{name}' updated (full rewrite)."),
            "path": found.dir.display().to_string(),
        })
    }

    fn patch(
        &self,
        name: &str,
        old: &str,
        new: &str,
        file_path: Option<&str>,
        replace_all: bool,
    ) -> Value {
        let found = match self.existing(name, "") {
            Ok(f) => f,
            Err(err) => return err,
        };
        let target = match file_path {
            Some(p) => {
                if let Some(err) = validate_file_path(p) {
                    return failure(err);
                }
                found.dir.join(p)
            }
            None => found.dir.join("SKILL.md"),
        };
        let label = file_path.unwrap_or("SKILL.md");
        let Ok(content) = std::fs::read_to_string(&target) else {
            return failure(format!("File not found: {label}"));
        };
        let replaced = match caduceus_files::fuzzy::fuzzy_find_and_replace(
            &content,
            old,
            new,
            replace_all,
        ) {
            Ok(r) => r,
            Err(err) => {
                let mut message = err.to_string();
                if err == caduceus_files::fuzzy::MatchError::NotFound {
                    message.push_str(&caduceus_files::fuzzy::no_match_hint(old, &content));
                }
                let preview: String = content.chars().take(500).collect();
                let more = if content.chars().count() > 500 {
                    "..."
                } else {
                    ""
                };
                return json!({"success": false, "error": message, "file_preview": format!("{preview}{more}")});
            }
        };
        if let Some(err) = validate_content_size(&replaced.content, label) {
            return failure(err);
        }
        let is_skill_md = Path::new(label)
            .file_name()
            .is_some_and(|f| f == "SKILL.md");
        if is_skill_md && let Some(err) = validate_front_matter(&replaced.content) {
            return failure(format!("Patch would break SKILL.md structure: {err}"));
        }
        if let Err(err) = write_atomic(&target, replaced.content.as_bytes()) {
            return failure(format!("Failed to write {label}: {err}"));
        }
        let count = replaced.count;
        json!({
            "success": true,
            "message": format!("Patched {label} in skill '{name}' ({count} replacement{}).", if count > 1 { "s" } else { "" }),
        })
    }

    fn delete(&self, name: &str) -> Value {
        let found = match self.existing(name, "") {
            Ok(f) => f,
            Err(err) => return err,
        };
        if !within(&found.dir, &self.root) || found.dir == self.root {
            return failure(format!(
                "Refusing to delete '{}': not a skill directory under {}.",
                found.dir.display(),
                self.root.display()
            ));
        }
        if let Err(err) = std::fs::remove_dir_all(&found.dir) {
            return failure(format!("Failed to delete skill '{name}': {err}"));
        }
        if let Some(parent) = found.dir.parent()
            && parent != self.root
        {
            // An emptied category folder goes too, as in hermes; a folder
            // with other skills is left (remove_dir fails on it).
            let _ = std::fs::remove_dir(parent);
        }
        json!({"success": true, "message": format!("Skill '{name}' deleted.")})
    }

    fn write_file(&self, name: &str, file_path: &str, content: &str) -> Value {
        if let Some(err) = validate_file_path(file_path) {
            return failure(err);
        }
        if content.len() > MAX_SKILL_FILE_BYTES {
            return failure(format!(
                "File content is {} bytes (limit: {} bytes / 1 MiB). Consider splitting into smaller files.",
                caduceus_common::text::group_thousands(content.len() as u64),
                caduceus_common::text::group_thousands(MAX_SKILL_FILE_BYTES as u64),
            ));
        }
        if let Some(err) = validate_content_size(content, file_path) {
            return failure(err);
        }
        let (_, target) =
            match self.file_of(name, file_path, " Create it first with action='create'.") {
                Ok(f) => f,
                Err(err) => return err,
            };
        if let Err(err) = write_atomic(&target, content.as_bytes()) {
            return failure(format!("Failed to write '{file_path}': {err}"));
        }
        json!({
            "success": true,
            "message": format!("File '{file_path}' written to skill '{name}'."),
            "path": target.display().to_string(),
        })
    }

    fn remove_file(&self, name: &str, file_path: &str) -> Value {
        if let Some(err) = validate_file_path(file_path) {
            return failure(err);
        }
        let (found, target) = match self.file_of(name, file_path, "") {
            Ok(f) => f,
            Err(err) => return err,
        };
        if !target.is_file() {
            let mut available = Vec::new();
            for sub in ALLOWED_SUBDIRS {
                walk_files(&found.dir.join(sub), &mut |p| {
                    if let Ok(rel) = p.strip_prefix(&found.dir) {
                        available.push(rel.display().to_string());
                    }
                });
            }
            return json!({
                "success": false,
                "error": format!("File '{file_path}' not found in skill '{name}'."),
                "available_files": if available.is_empty() { Value::Null } else { json!(available) },
            });
        }
        if let Err(err) = std::fs::remove_file(&target) {
            return failure(format!("Failed to remove '{file_path}': {err}"));
        }
        if let Some(parent) = target.parent()
            && parent != found.dir
        {
            let _ = std::fs::remove_dir(parent);
        }
        json!({"success": true, "message": format!("File '{file_path}' removed from skill '{name}'.")})
    }
}

/// `platforms:` in the front matter: a skill runs in a worker's
/// environment, which is Linux for every backend caduceus has.
fn matches_platform(fm: &Map<String, Value>) -> bool {
    let platforms: Vec<String> = match fm.get("platforms") {
        None | Some(Value::Null) => return true,
        Some(Value::Array(items)) if items.is_empty() => return true,
        Some(Value::Array(items)) => items.iter().map(plain).collect(),
        Some(Value::String(s)) if s.is_empty() => return true,
        Some(other) => vec![plain(other)],
    };
    platforms.iter().any(|p| {
        matches!(
            p.trim().to_lowercase().as_str(),
            "linux" | "termux" | "android"
        )
    })
}

/// `prerequisites: {env_vars: […], commands: […]}`.
fn prerequisites(fm: &Map<String, Value>) -> (Vec<String>, Vec<String>) {
    let Some(Value::Object(pre)) = fm.get("prerequisites") else {
        return (Vec::new(), Vec::new());
    };
    let values = |key: &str| -> Vec<String> {
        match pre.get(key) {
            Some(Value::String(s)) if !s.trim().is_empty() => vec![s.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .map(plain)
                .filter(|s| !s.trim().is_empty())
                .collect(),
            _ => Vec::new(),
        }
    };
    (values("env_vars"), values("commands"))
}

fn read_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    dirs.sort();
    dirs
}

fn walk_files(dir: &Path, f: &mut dyn FnMut(&Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        // Symlinks are not followed: a link out of the skill is not its file.
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => walk_files(&path, f),
            Ok(m) if m.is_file() => f(&path),
            _ => {}
        }
    }
}

/// Whether `path`, with its links resolved as far as it exists, stays
/// under `dir`.
fn within(path: &Path, dir: &Path) -> bool {
    let Ok(base) = dir.canonicalize() else {
        return false;
    };
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_owned());
                existing = parent.to_path_buf();
            }
            _ => return false,
        }
    }
    let Ok(mut resolved) = existing.canonicalize() else {
        return false;
    };
    for name in rest.into_iter().rev() {
        resolved.push(name);
    }
    resolved.starts_with(&base)
}

/// skill_view's `linked_files`: the supporting files by kind.
fn linked_files(dir: &Path) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, sub) in [
        ("references", "references"),
        ("templates", "templates"),
        ("assets", "assets"),
        ("scripts", "scripts"),
    ] {
        let mut files = Vec::new();
        walk_files(&dir.join(sub), &mut |p| {
            if let Ok(rel) = p.strip_prefix(dir) {
                files.push(json!(rel.display().to_string()));
            }
        });
        if !files.is_empty() {
            out.insert(key.into(), Value::Array(files));
        }
    }
    out
}

/// The not-found answer's `available_files`: by kind, other text files last.
fn available_files(dir: &Path) -> Value {
    let mut out = linked_files(dir);
    let mut other = Vec::new();
    walk_files(dir, &mut |p| {
        let Ok(rel) = p.strip_prefix(dir) else { return };
        let first = rel
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned());
        let in_sub = first.is_some_and(|f| ALLOWED_SUBDIRS.contains(&f.as_str()));
        let text_kind = p.extension().is_some_and(|e| {
            ["md", "py", "yaml", "yml", "json", "tex", "sh"].contains(&e.to_string_lossy().as_ref())
        });
        if !in_sub && rel != Path::new("SKILL.md") && text_kind {
            other.push(json!(rel.display().to_string()));
        }
    });
    if !other.is_empty() {
        out.insert("other".into(), Value::Array(other));
    }
    Value::Object(out)
}

/// Which of the three tools a handler answers.
#[derive(Clone, Copy)]
enum Which {
    List,
    View,
    Manage,
}

/// The registry's handler of the skill tools: file work off the async threads.
struct SkillTool {
    store: Arc<SkillStore>,
    which: Which,
}

#[async_trait]
impl LocalTool for SkillTool {
    async fn call(&self, _ctx: &CallContext, args: Map<String, Value>) -> ToolReply {
        let store = self.store.clone();
        let which = self.which;
        tokio::task::spawn_blocking(move || {
            let text = |key: &str| args.get(key).and_then(Value::as_str).map(str::to_owned);
            let value = match which {
                Which::List => store.list(text("category").as_deref()),
                Which::View => store.view(
                    &text("name").unwrap_or_default(),
                    text("file_path").as_deref(),
                ),
                Which::Manage => store.manage(&args),
            };
            ToolReply::success_document(&value)
        })
        .await
        .unwrap_or_else(|err| ToolReply::error(format!("skill tool failed: {err}")))
    }
}

/// The registry entries of `skills_list`, `skill_view` and `skill_manage`.
pub fn registry_entries(store: &Arc<SkillStore>) -> Result<Vec<ToolEntry>, RegistryError> {
    let entry = |name: &str, schema: &str, which: Which, parallel: ParallelClass| {
        let schema: Value =
            serde_json::from_str(schema).map_err(|err| RegistryError::InvalidSchema {
                name: name.to_owned(),
                reason: err.to_string(),
            })?;
        Ok::<_, RegistryError>(
            ToolEntry::new(
                name,
                "skills",
                schema,
                Handler::Local(Arc::new(SkillTool {
                    store: store.clone(),
                    which,
                })),
            )
            .with_parallel(parallel)
            .with_emoji("📚"),
        )
    };
    Ok(vec![
        entry(
            "skills_list",
            include_str!("../../schemas/skills_list.json"),
            Which::List,
            ParallelClass::Safe,
        )?,
        entry(
            "skill_view",
            include_str!("../../schemas/skill_view.json"),
            Which::View,
            ParallelClass::Safe,
        )?,
        entry(
            "skill_manage",
            include_str!("../../schemas/skill_manage.json"),
            Which::Manage,
            ParallelClass::Sequential,
        )?,
    ])
}

#[cfg(test)]
#[path = "skills_tests.rs"]
mod tests;
