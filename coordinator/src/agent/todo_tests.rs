// Test helpers take `json!` literals by value.
#![allow(clippy::needless_pass_by_value)]

use serde_json::{Value, json};

use super::*;

fn call(store: &mut TodoStore, args: Value) -> Value {
    let args = args.as_object().cloned().unwrap();
    serde_json::from_str(&store.call(&args).body).unwrap()
}

#[test]
fn write_then_read_returns_the_list_and_a_summary() {
    let mut store = TodoStore::default();
    let written = call(
        &mut store,
        json!({"todos": [
            {"id": "1", "content": "Read the code", "status": "completed"},
            {"id": "2", "content": "Write tests", "status": "in_progress"},
            {"id": "3", "content": "Ship", "status": "bogus"}
        ]}),
    );
    assert_eq!(
        written["summary"],
        json!({"total": 3, "pending": 1, "in_progress": 1, "completed": 1, "cancelled": 0})
    );
    assert_eq!(
        written["todos"][2],
        json!({"id": "3", "content": "Ship", "status": "pending"})
    );
    let read = call(&mut store, json!({}));
    assert_eq!(read, written);
    // hermes' key order: todos, then summary; items id, content, status.
    let raw = store.call(&serde_json::Map::new()).body;
    assert!(
        raw.starts_with(
            "{\"todos\": [{\"id\": \"1\", \"content\": \"Read the code\", \"status\": \"completed\"}"
        ),
        "{raw}"
    );
}

#[test]
fn merge_updates_given_fields_by_id_and_appends_new_items() {
    let mut store = TodoStore::default();
    call(
        &mut store,
        json!({"todos": [{"id": "a", "content": "first", "status": "pending"}, {"id": "b", "content": "second", "status": "pending"}]}),
    );
    let merged = call(
        &mut store,
        json!({"merge": true, "todos": [{"id": "a", "status": "completed"}, {"id": "c", "content": "third", "status": "in_progress"}, {"content": "no id"}]}),
    );
    assert_eq!(
        merged["todos"],
        json!([
            {"id": "a", "content": "first", "status": "completed"},
            {"id": "b", "content": "second", "status": "pending"},
            {"id": "c", "content": "third", "status": "in_progress"}
        ])
    );
}

#[test]
fn replace_dedupes_ids_keeping_the_last_and_fills_defaults() {
    let mut store = TodoStore::default();
    let out = call(
        &mut store,
        json!({"todos": [{"id": "x", "content": "old"}, 7, {"id": "x", "content": "new"}, {"id": "", "content": ""}]}),
    );
    assert_eq!(
        out["todos"],
        json!([
            {"id": "?", "content": "(invalid item)", "status": "pending"},
            {"id": "x", "content": "new", "status": "pending"},
            {"id": "?", "content": "(no description)", "status": "pending"}
        ])
    );
}

#[test]
fn limits_cap_items_and_content() {
    let mut store = TodoStore::default();
    let many: Vec<Value> = (0..300)
        .map(|i| json!({"id": i.to_string(), "content": "x", "status": "pending"}))
        .collect();
    store.write(&many, false);
    assert_eq!(store.items().len(), MAX_TODO_ITEMS);
    assert_eq!(store.items()[0].id, "0");
    let long = "é".repeat(5000);
    store.write(&[json!({"id": "1", "content": long})], false);
    let content = &store.items()[0].content;
    assert_eq!(content.chars().count(), MAX_TODO_CONTENT_CHARS);
    assert!(content.ends_with("… [truncated]"));
}

#[test]
fn todos_as_a_json_string_are_accepted_and_bad_types_are_errors() {
    let mut store = TodoStore::default();
    let out = call(
        &mut store,
        json!({"todos": "[{\"id\":\"1\",\"content\":\"a\",\"status\":\"pending\"}]"}),
    );
    assert_eq!(out["summary"]["total"], 1);
    assert_eq!(
        call(&mut store, json!({"todos": "nope"})),
        json!({"error": "todos must be a list of objects, got unparseable string"})
    );
    assert_eq!(
        call(&mut store, json!({"todos": {"id": "1"}})),
        json!({"error": "todos must be a list, got dict"})
    );
}
