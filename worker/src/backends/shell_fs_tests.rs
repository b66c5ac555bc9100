use std::sync::Arc;

use caduceus_files::fs::{FileKind, FsError};
use caduceus_files::search::{OutputMode, SearchTarget};
use caduceus_files::{FileSystem, LocalFs, SearchHits, SearchQuery};

use super::ShellFs;
use crate::backends::local::LocalSandbox;
use crate::sandbox::Sandbox;

fn setup() -> (Arc<dyn Sandbox>, ShellFs, tempfile::TempDir) {
    let sandbox: Arc<dyn Sandbox> = Arc::new(LocalSandbox::new("fs-test".into(), "/tmp".into()));
    let fs = ShellFs::new(Arc::downgrade(&sandbox));
    (sandbox, fs, tempfile::tempdir().unwrap())
}

#[tokio::test]
async fn primitives_agree_with_the_local_file_system() {
    let (_sandbox, fs, dir) = setup();
    let local = LocalFs::new();
    let path = dir.path().join("a/b/file.txt").display().to_string();

    assert!(fs.stat(&path).await.unwrap().is_none());
    assert!(fs.read_range(&path, 0, None).await.unwrap().is_none());
    let written = fs
        .write_atomic(&path, b"hello\nworld\n\x00binary")
        .await
        .unwrap();
    assert!(written.created_dirs && written.created_file);
    assert_eq!(written.bytes_written, 19);

    let ours = fs.stat(&path).await.unwrap().unwrap();
    let theirs = local.stat(&path).await.unwrap().unwrap();
    assert_eq!(ours.kind, FileKind::File);
    assert_eq!(ours.size, theirs.size);
    assert_eq!(ours.mode, theirs.mode);
    assert_eq!(
        ours.mtime_ns, theirs.mtime_ns,
        "nanosecond mtimes agree, so read dedup works remotely"
    );

    let bytes = fs.read_range(&path, 0, None).await.unwrap().unwrap();
    assert_eq!(bytes.data, b"hello\nworld\n\x00binary");
    let part = fs.read_range(&path, 6, Some(5)).await.unwrap().unwrap();
    assert_eq!(part.data, b"world");

    // Mode is kept across a rewrite.
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o750)).unwrap();
    let again = fs.write_atomic(&path, b"x").await.unwrap();
    assert!(!again.created_file);
    assert_eq!(local.stat(&path).await.unwrap().unwrap().mode, Some(0o750));

    let dir_path = dir.path().join("a").display().to_string();
    assert!(matches!(
        fs.read_range(&dir_path, 0, None).await,
        Err(FsError::IsADirectory(_))
    ));
    assert_eq!(
        fs.list_dir(&dir_path).await.unwrap(),
        Some(vec!["b".to_owned()])
    );
    assert_eq!(fs.list_dir(&path).await.unwrap(), None);

    let moved = dir.path().join("c/moved.txt").display().to_string();
    fs.rename(&path, &moved).await.unwrap();
    assert!(fs.stat(&path).await.unwrap().is_none());
    fs.remove(&moved).await.unwrap();
    assert!(matches!(fs.remove(&moved).await, Err(FsError::NotFound(_))));
    assert!(matches!(
        fs.read_range("/dev/null", 0, None).await,
        Err(FsError::NotRegularFile(_))
    ));
}

#[tokio::test]
async fn search_matches_the_in_process_search() {
    let (_sandbox, fs, dir) = setup();
    for i in 0..7 {
        std::fs::write(
            dir.path().join(format!("f{i}.txt")),
            format!("alpha\nneedle {i}\n"),
        )
        .unwrap();
    }
    let query = SearchQuery {
        root: dir.path().display().to_string(),
        target: SearchTarget::Content {
            pattern: "needle".into(),
            file_glob: None,
            mode: OutputMode::Content,
            context: 0,
        },
        max_entries: 100,
    };
    let remote = fs.search(&query).await.unwrap();
    let local = LocalFs::new().search(&query).await.unwrap();
    assert_eq!(format!("{remote:?}"), format!("{local:?}"));
    let missing = SearchQuery {
        root: dir.path().join("nope").display().to_string(),
        ..query
    };
    assert!(matches!(
        fs.search(&missing).await.unwrap(),
        SearchHits::RootNotFound
    ));
}

#[tokio::test]
async fn a_dropped_sandbox_is_a_clear_error() {
    let (sandbox, fs, _dir) = setup();
    drop(sandbox);
    assert!(matches!(fs.stat("/tmp").await, Err(FsError::Backend(_))));
}
