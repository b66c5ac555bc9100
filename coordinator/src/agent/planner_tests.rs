// Test helpers take `json!` literals by value.
#![allow(clippy::needless_pass_by_value)]

use serde_json::{Map, Value, json};

use super::*;

fn obj(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

fn plan(calls: &[(ParallelClass, Option<Value>)], cwd: Option<&str>) -> Vec<Segment> {
    let args: Vec<Option<Map<String, Value>>> =
        calls.iter().map(|(_, a)| a.clone().map(obj)).collect();
    let input: Vec<PlanCall<'_>> = calls
        .iter()
        .zip(&args)
        .map(|((class, _), args)| PlanCall {
            class: *class,
            args: args.as_ref(),
        })
        .collect();
    plan_batch(&input, cwd)
}

use ParallelClass::{Never, PathScoped, Safe, Sequential};
use Segment::{Parallel as P, Sequential as S};

#[test]
fn hermes_sample_reads_terminal_then_web() {
    // [read a, read b, terminal, web_search, web_extract] -> [par(2), seq, par(2)]
    let segments = plan(
        &[
            (PathScoped, Some(json!({"path": "a"}))),
            (PathScoped, Some(json!({"path": "b"}))),
            (Sequential, Some(json!({"command": "ls"}))),
            (Safe, Some(json!({"query": "x"}))),
            (Safe, Some(json!({"urls": ["u"]}))),
        ],
        Some("/repo"),
    );
    assert_eq!(segments, vec![P(vec![0, 1]), S(vec![2]), P(vec![3, 4])]);
}

#[test]
fn two_writes_to_one_path_stay_sequential() {
    let segments = plan(
        &[
            (PathScoped, Some(json!({"path": "x"}))),
            (PathScoped, Some(json!({"path": "./x"}))),
        ],
        Some("/repo"),
    );
    assert_eq!(segments, vec![S(vec![0, 1])]);
}

#[test]
fn an_overlap_closes_the_run_and_starts_a_new_one() {
    let segments = plan(
        &[
            (PathScoped, Some(json!({"path": "src"}))),
            (PathScoped, Some(json!({"path": "docs/a.md"}))),
            (PathScoped, Some(json!({"path": "/repo/src/main.rs"}))),
            (PathScoped, Some(json!({"path": "tests/t.rs"}))),
        ],
        Some("/repo"),
    );
    assert_eq!(segments, vec![P(vec![0, 1]), P(vec![2, 3])]);
}

#[test]
fn barriers_never_cross_and_adjacent_sequentials_merge() {
    let segments = plan(
        &[
            (Safe, Some(json!({}))),
            (Never, Some(json!({"question": "?"}))),
            (Safe, None),
            (PathScoped, Some(json!({"content": "no path"}))),
            (Safe, Some(json!({}))),
            (Safe, Some(json!({}))),
        ],
        Some("/repo"),
    );
    assert_eq!(segments, vec![S(vec![0, 1, 2, 3]), P(vec![4, 5])]);
}

#[test]
fn without_a_cwd_relative_and_absolute_paths_are_assumed_to_overlap() {
    let calls = [
        (PathScoped, Some(json!({"path": "a.txt"}))),
        (PathScoped, Some(json!({"path": "/srv/b.txt"}))),
    ];
    assert_eq!(plan(&calls, None), vec![S(vec![0, 1])]);
    assert_eq!(plan(&calls, Some("/repo")), vec![P(vec![0, 1])]);
    let relative = [
        (PathScoped, Some(json!({"path": "a.txt"}))),
        (PathScoped, Some(json!({"path": "b.txt"}))),
    ];
    assert_eq!(plan(&relative, None), vec![P(vec![0, 1])]);
}

#[test]
fn a_single_call_is_sequential() {
    assert_eq!(plan(&[(Safe, Some(json!({})))], None), vec![S(vec![0])]);
    assert!(plan(&[], None).is_empty());
}
