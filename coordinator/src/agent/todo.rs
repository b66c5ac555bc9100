//! `todo`: the session's task list (hermes `tools/todo_tool.py`).
//!
//! One list per session, in memory. `todos` writes (replace, or merge by id
//! with `merge: true`); no `todos` reads. Every call returns the whole list
//! and a summary. Limits: 256 items (the head is kept; list order is
//! priority) and 4,000 characters per item (longer content is cut and marked
//! `… [truncated]`).

use std::collections::HashMap;

use serde::Serialize;
use serde_json::{Map, Value};

use caduceus_common::result::{ToolReply, python_type};

pub const MAX_TODO_ITEMS: usize = 256;
pub const MAX_TODO_CONTENT_CHARS: usize = 4000;
const TRUNCATION_MARKER: &str = "… [truncated]";
const VALID_STATUSES: &[&str] = &["pending", "in_progress", "completed", "cancelled"];

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TodoItem {
    pub id: String,
    pub content: String,
    pub status: String,
}

#[derive(Debug, Default, Clone)]
pub struct TodoStore {
    items: Vec<TodoItem>,
}

#[derive(Serialize)]
struct Summary {
    total: usize,
    pending: usize,
    in_progress: usize,
    completed: usize,
    cancelled: usize,
}

#[derive(Serialize)]
struct Reply<'a> {
    todos: &'a [TodoItem],
    summary: Summary,
}

impl TodoStore {
    pub fn items(&self) -> &[TodoItem] {
        &self.items
    }

    /// Writes `todos` and returns the list after the write.
    pub fn write(&mut self, todos: &[Value], merge: bool) -> &[TodoItem] {
        let todos = dedupe_by_id(todos);
        if !merge {
            self.items = todos.iter().map(|t| validate(t)).collect();
        } else {
            for todo in todos {
                let id = todo
                    .as_object()
                    .and_then(|o| o.get("id"))
                    .map(python_str)
                    .unwrap_or_default();
                let id = id.trim();
                if id.is_empty() {
                    // Nothing to merge on.
                    continue;
                }
                match self.items.iter_mut().find(|item| item.id == id) {
                    Some(existing) => {
                        // Only the fields the model actually provided change.
                        if let Some(content) = todo.get("content").filter(|c| truthy(c)) {
                            existing.content = cap_content(python_str(content).trim());
                        }
                        if let Some(status) = todo.get("status").filter(|s| truthy(s)) {
                            let status = python_str(status).trim().to_lowercase();
                            if VALID_STATUSES.contains(&status.as_str()) {
                                existing.status = status;
                            }
                        }
                    }
                    None => self.items.push(validate(todo)),
                }
            }
        }
        self.items.truncate(MAX_TODO_ITEMS);
        &self.items
    }

    /// The tool: reads or writes depending on `todos`, returns the list as JSON.
    pub fn call(&mut self, args: &Map<String, Value>) -> ToolReply {
        let merge = args.get("merge").is_some_and(truthy);
        match args.get("todos") {
            None | Some(Value::Null) => {}
            Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
                Ok(Value::Array(list)) => {
                    self.write(&list, merge);
                }
                Ok(other) => {
                    return ToolReply::error(format!(
                        "todos must be a list, got {}",
                        python_type(&other)
                    ));
                }
                Err(_) => {
                    return ToolReply::error(
                        "todos must be a list of objects, got unparseable string",
                    );
                }
            },
            Some(Value::Array(list)) => {
                self.write(list, merge);
            }
            Some(other) => {
                return ToolReply::error(format!(
                    "todos must be a list, got {}",
                    python_type(other)
                ));
            }
        }
        self.reply()
    }

    fn reply(&self) -> ToolReply {
        let count = |status: &str| self.items.iter().filter(|i| i.status == status).count();
        let reply = Reply {
            todos: &self.items,
            summary: Summary {
                total: self.items.len(),
                pending: count("pending"),
                in_progress: count("in_progress"),
                completed: count("completed"),
                cancelled: count("cancelled"),
            },
        };
        ToolReply::json(&reply)
    }
}

/// Collapses duplicate ids, keeping the last occurrence at its position.
fn dedupe_by_id(todos: &[Value]) -> Vec<&Value> {
    let mut last: HashMap<String, usize> = HashMap::new();
    for (index, item) in todos.iter().enumerate() {
        let key = match item.as_object() {
            Some(object) => {
                let id = object.get("id").map(python_str).unwrap_or_default();
                let id = id.trim();
                if id.is_empty() {
                    "?".to_owned()
                } else {
                    id.to_owned()
                }
            }
            None => format!("__invalid_{index}"),
        };
        last.insert(key, index);
    }
    let mut keep: Vec<usize> = last.into_values().collect();
    keep.sort_unstable();
    keep.into_iter().map(|i| &todos[i]).collect()
}

fn validate(item: &Value) -> TodoItem {
    let Some(object) = item.as_object() else {
        return TodoItem {
            id: "?".to_owned(),
            content: "(invalid item)".to_owned(),
            status: "pending".to_owned(),
        };
    };
    let id = object
        .get("id")
        .map(python_str)
        .unwrap_or_default()
        .trim()
        .to_owned();
    let content = object
        .get("content")
        .map(python_str)
        .unwrap_or_default()
        .trim()
        .to_owned();
    let status = object
        .get("status")
        .map(python_str)
        .unwrap_or_else(|| "pending".to_owned())
        .trim()
        .to_lowercase();
    TodoItem {
        id: if id.is_empty() { "?".to_owned() } else { id },
        content: if content.is_empty() {
            "(no description)".to_owned()
        } else {
            cap_content(&content)
        },
        status: if VALID_STATUSES.contains(&status.as_str()) {
            status
        } else {
            "pending".to_owned()
        },
    }
}

fn cap_content(content: &str) -> String {
    if content.chars().count() <= MAX_TODO_CONTENT_CHARS {
        return content.to_owned();
    }
    let keep = MAX_TODO_CONTENT_CHARS - TRUNCATION_MARKER.chars().count();
    let mut out: String = content.chars().take(keep).collect();
    out.push_str(TRUNCATION_MARKER);
    out
}

/// `str(value)` as Python would print the JSON value.
fn python_str(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        other => other.to_string(),
    }
}

fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

#[cfg(test)]
#[path = "todo_tests.rs"]
mod tests;
