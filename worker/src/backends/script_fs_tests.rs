//! `ScriptFs` must answer exactly like `LocalFs`: both run here on the same
//! temporary directory, the scripts through the host's `sh`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::PermissionsExt;

use async_trait::async_trait;
use caduceus_files::LocalFs;
use caduceus_files::fs::{FileStamp, FileSystem, FsError, LineRead};
use caduceus_files::lines::LineWindow;
use caduceus_files::search::{OutputMode, SearchQuery, SearchTarget};
use tokio::io::AsyncWriteExt;

use super::*;

struct HostShell;

#[async_trait]
impl ScriptRunner for HostShell {
    async fn run_script(
        &self,
        script: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<ScriptOutput, FsError> {
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .args(args)
            .env("LC_ALL", "C")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(data) = stdin {
            input.write_all(data).await.unwrap();
        }
        drop(input);
        let out = child.wait_with_output().await.unwrap();
        Ok(ScriptOutput {
            stdout: out.stdout,
            stderr: out.stderr,
            exit_code: out.status.code().unwrap_or(-1),
        })
    }
}

fn window(offset: usize, limit: usize) -> LineWindow {
    LineWindow {
        offset,
        limit,
        max_line_bytes: 2000,
        detect_binary: true,
        unless_unchanged: None,
    }
}

#[tokio::test]
async fn reads_match_the_local_file_system() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let files: &[(&str, &[u8])] = &[
        ("plain.txt", b"one\ntwo\nthree\n"),
        ("open.txt", b"a\nb\nlast without newline"),
        ("crlf.txt", b"\xEF\xBB\xBFbom line\r\nsecond\r\n"),
        ("empty.txt", b""),
        ("long.txt", &[b'x'; 5000]),
        ("binary.bin", b"\x00\x01\x02binary"),
    ];
    for (name, data) in files {
        std::fs::write(dir.path().join(name), data).unwrap();
    }
    std::os::unix::fs::symlink(dir.path().join("plain.txt"), dir.path().join("link.txt")).unwrap();
    let local = LocalFs::new();
    let script = ScriptFs::new(HostShell);
    for name in [
        "plain.txt",
        "open.txt",
        "crlf.txt",
        "empty.txt",
        "long.txt",
        "binary.bin",
        "link.txt",
        "missing.txt",
    ] {
        let path = format!("{root}/{name}");
        assert_eq!(
            script.stat(&path).await.unwrap(),
            local.stat(&path).await.unwrap(),
            "stat {name}"
        );
        for (offset, len) in [(0, None), (2, Some(3)), (100, None)] {
            assert_eq!(
                script.read_range(&path, offset, len).await.unwrap(),
                local.read_range(&path, offset, len).await.unwrap(),
                "read_range {name} {offset} {len:?}"
            );
        }
        for w in [
            window(1, 2000),
            window(2, 1),
            window(3, 5),
            window(10, 5),
            window(1, 0),
        ] {
            assert_eq!(
                script.read_lines(&path, &w).await.unwrap(),
                local.read_lines(&path, &w).await.unwrap(),
                "read_lines {name} {w:?}"
            );
        }
    }
    let cut = LineWindow {
        max_line_bytes: 10,
        ..window(1, 10)
    };
    let path = format!("{root}/long.txt");
    assert_eq!(
        script.read_lines(&path, &cut).await.unwrap(),
        local.read_lines(&path, &cut).await.unwrap()
    );

    // Unchanged answers without reading.
    let path = format!("{root}/plain.txt");
    let stamp: FileStamp = local.stat(&path).await.unwrap().unwrap().stamp().unwrap();
    let same = LineWindow {
        unless_unchanged: Some(stamp),
        ..window(1, 10)
    };
    assert!(matches!(
        script.read_lines(&path, &same).await.unwrap(),
        LineRead::Unchanged(_)
    ));

    // Directories and devices are refused the same way.
    assert!(matches!(
        script.read_range(&root, 0, None).await,
        Err(FsError::IsADirectory(_))
    ));
    assert!(matches!(
        script.read_lines("/dev/null", &window(1, 1)).await,
        Err(FsError::NotRegularFile(_))
    ));
    assert_eq!(
        script.list_dir(&root).await.unwrap(),
        local.list_dir(&root).await.unwrap()
    );
    assert_eq!(script.list_dir(&path).await.unwrap(), None);
    // Paths arrive normalized: the existing prefix is resolved, a missing tail kept.
    std::os::unix::fs::symlink(dir.path(), dir.path().join("dirlink")).unwrap();
    for path in [
        format!("{root}/link.txt"),
        format!("{root}/dirlink/missing/x"),
        format!("{root}/missing"),
    ] {
        assert_eq!(
            script.resolve_symlinks(&path).await.unwrap(),
            local.resolve_symlinks(&path).await.unwrap(),
            "{path}"
        );
    }
}

#[tokio::test]
async fn writes_removes_and_renames_behave_like_local() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let script = ScriptFs::new(HostShell);

    let fresh = format!("{root}/new/deeper/file.txt");
    let outcome = script.write_atomic(&fresh, b"hello\n").await.unwrap();
    assert!(outcome.created_dirs && outcome.created_file);
    assert_eq!(outcome.bytes_written, 6);
    assert_eq!(
        outcome.mtime_ns,
        LocalFs::new().stat(&fresh).await.unwrap().unwrap().mtime_ns
    );
    assert_eq!(std::fs::read(&fresh).unwrap(), b"hello\n");

    // Replacing keeps the permission bits; writing through a link keeps the link.
    std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o751)).unwrap();
    let link = format!("{root}/link");
    std::os::unix::fs::symlink(&fresh, &link).unwrap();
    let outcome = script.write_atomic(&link, b"again").await.unwrap();
    assert!(!outcome.created_dirs && !outcome.created_file);
    assert_eq!(std::fs::read(&fresh).unwrap(), b"again");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o7777,
        0o751
    );
    assert!(matches!(
        script.write_atomic(&root, b"x").await,
        Err(FsError::IsADirectory(_))
    ));

    let moved = format!("{root}/elsewhere/moved.txt");
    script.rename(&fresh, &moved).await.unwrap();
    assert_eq!(std::fs::read(&moved).unwrap(), b"again");
    assert!(matches!(
        script.rename(&fresh, &moved).await,
        Err(FsError::NotFound(_))
    ));
    script.remove(&moved).await.unwrap();
    assert!(matches!(
        script.remove(&moved).await,
        Err(FsError::NotFound(_))
    ));
    assert!(matches!(
        script.remove(&root).await,
        Err(FsError::IsADirectory(_))
    ));
}

#[tokio::test]
async fn search_runs_as_one_script() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    std::fs::write(dir.path().join("a.rs"), "fn main() {}\nlet needle = 1;\n").unwrap();
    std::fs::write(dir.path().join("b.txt"), "no match here\n").unwrap();
    let script = ScriptFs::new(HostShell);
    let query = SearchQuery {
        root: root.clone(),
        target: SearchTarget::Content {
            pattern: "needle".into(),
            file_glob: None,
            mode: OutputMode::Content,
            context: 0,
        },
        max_entries: 50,
    };
    let hits = script.search(&query).await.unwrap();
    let local = LocalFs::new().search(&query).await.unwrap();
    assert_eq!(format!("{hits:?}"), format!("{local:?}"));
    let missing = SearchQuery {
        root: format!("{root}/nope"),
        ..query
    };
    assert!(matches!(
        script.search(&missing).await.unwrap(),
        caduceus_files::SearchHits::RootNotFound
    ));
}
