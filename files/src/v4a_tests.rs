use super::*;

fn update(path: &str, hunks: Vec<Hunk>) -> PatchOp {
    PatchOp::Update {
        path: path.into(),
        move_to: None,
        hunks,
    }
}

#[test]
fn basic_update_with_hint() {
    let ops = parse(
        "*** Begin Patch\n*** Update File: src/main.py\n@@ def greet @@\n def greet():\n-    print(\"hello\")\n+    print(\"hi\")\n*** End Patch",
    )
    .unwrap();
    assert_eq!(
        ops,
        vec![update(
            "src/main.py",
            vec![Hunk {
                hint: Some("def greet".into()),
                lines: vec![
                    HunkLine::Context("def greet():".into()),
                    HunkLine::Remove("    print(\"hello\")".into()),
                    HunkLine::Add("    print(\"hi\")".into()),
                ],
            }]
        )]
    );
}

#[test]
fn several_operations_and_hunks() {
    let ops = parse(
        "*** Begin Patch\n*** Add File: a.py\n+content_a\n*** Delete File: b.py\n*** Update File: c.py\n@@ first @@\n a\n-b\n+c\n@@ second @@\n x\n-y\n+z\n*** Move File: old/p.py -> new/p.py\n*** End Patch",
    )
    .unwrap();
    assert_eq!(ops.len(), 4);
    assert_eq!(
        ops[0],
        PatchOp::Add {
            path: "a.py".into(),
            lines: vec!["content_a".into()]
        }
    );
    assert_eq!(
        ops[1],
        PatchOp::Delete {
            path: "b.py".into()
        }
    );
    match &ops[2] {
        PatchOp::Update { hunks, .. } => {
            assert_eq!(hunks.len(), 2);
            assert_eq!(hunks[1].hint.as_deref(), Some("second"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        ops[3],
        PatchOp::Move {
            from: "old/p.py".into(),
            to: "new/p.py".into()
        }
    );
}

#[test]
fn markers_inside_content_are_content() {
    let ops = parse(
        "*** Begin Patch\n*** Add File: notes.md\n+doc line one\n+*** End Patch\n+*** Begin Patch\n+after\n*** End Patch",
    )
    .unwrap();
    assert_eq!(
        ops,
        vec![PatchOp::Add {
            path: "notes.md".into(),
            lines: vec![
                "doc line one".into(),
                "*** End Patch".into(),
                "*** Begin Patch".into(),
                "after".into()
            ]
        }]
    );
}

#[test]
fn codex_move_to_end_of_file_and_crlf() {
    let ops = parse(
        "*** Begin Patch\r\n*** Update File: old.py\r\n*** Move to: new.py\r\n@@\r\n-x = 1\r\n+x = 2\r\n*** End of File\r\n*** End Patch\r\n",
    )
    .unwrap();
    assert_eq!(
        ops,
        vec![PatchOp::Update {
            path: "old.py".into(),
            move_to: Some("new.py".into()),
            hunks: vec![Hunk {
                hint: None,
                lines: vec![
                    HunkLine::Remove("x = 1".into()),
                    HunkLine::Add("x = 2".into())
                ]
            }]
        }]
    );
}

#[test]
fn hint_forms() {
    assert_eq!(hunk_hint("@@ def greet @@"), Some("def greet".into()));
    assert_eq!(hunk_hint("@@ class Foo"), Some("class Foo".into()));
    assert_eq!(hunk_hint("@@"), None);
    assert_eq!(hunk_hint("@@ @@"), None);
}

#[test]
fn lenient_markers_and_implicit_context() {
    let ops = parse("***Update  File:f.py\nplain context\n-old\n+new\n").unwrap();
    assert_eq!(
        ops,
        vec![update(
            "f.py",
            vec![Hunk {
                hint: None,
                lines: vec![
                    HunkLine::Context("plain context".into()),
                    HunkLine::Remove("old".into()),
                    HunkLine::Add("new".into())
                ]
            }]
        )]
    );
}

#[test]
fn parse_errors() {
    assert_eq!(parse("").unwrap(), vec![]);
    assert_eq!(
        parse("*** Begin Patch\n*** Update File: foo.py\n*** End Patch").unwrap_err(),
        "Parse error: UPDATE 'foo.py': no hunks found"
    );
    assert_eq!(
        parse("*** Begin Patch\n*** Move File: a.py ->\n*** End Patch").unwrap_err(),
        "Parse error: MOVE 'a.py': missing destination path (expected 'src -> dst')"
    );
}

#[test]
fn hunk_texts() {
    let hunk = Hunk {
        hint: None,
        lines: vec![
            HunkLine::Context("a".into()),
            HunkLine::Remove("b".into()),
            HunkLine::Add("c".into()),
        ],
    };
    assert_eq!(hunk.search_text().as_deref(), Some("a\nb"));
    assert_eq!(hunk.replacement_text(), "a\nc");
    assert!(!hunk.is_inert());
    let added_only = Hunk {
        hint: None,
        lines: vec![HunkLine::Add("x".into())],
    };
    assert_eq!(added_only.search_text(), None);
}
