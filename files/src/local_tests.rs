use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::lines::page_from_bytes;
use crate::search::test_fixture::temp_root;

fn window(offset: usize, limit: usize) -> LineWindow {
    LineWindow {
        offset,
        limit,
        max_line_bytes: 100,
        detect_binary: true,
        unless_unchanged: None,
    }
}

#[tokio::test]
async fn stat_and_ranges() {
    let (_dir, root) = temp_root();
    let fs = LocalFs::new();
    let file = format!("{root}/a.txt");
    std::fs::write(&file, "0123456789").unwrap();
    let stat = fs.stat(&file).await.unwrap().unwrap();
    assert_eq!((stat.kind, stat.size), (FileKind::File, 10));
    assert!(stat.mtime_ns.is_some());
    assert_eq!(fs.stat(&root).await.unwrap().unwrap().kind, FileKind::Dir);
    assert_eq!(fs.stat(&format!("{root}/missing")).await.unwrap(), None);
    assert_eq!(fs.stat(&format!("{file}/below")).await.unwrap(), None);

    let range = fs.read_range(&file, 3, Some(4)).await.unwrap().unwrap();
    assert_eq!(range.data, b"3456");
    assert_eq!(
        fs.read_range(&file, 0, None).await.unwrap().unwrap().data,
        b"0123456789"
    );
    assert!(
        fs.read_range(&format!("{root}/none"), 0, None)
            .await
            .unwrap()
            .is_none()
    );
    assert!(matches!(
        fs.read_range(&root, 0, None).await,
        Err(FsError::IsADirectory(_))
    ));
    assert!(matches!(
        fs.read_range("/dev/null", 0, None).await,
        Err(FsError::NotRegularFile(_))
    ));
}

#[tokio::test]
async fn streamed_lines_match_the_whole_buffer_answer() {
    let (_dir, root) = temp_root();
    let file = format!("{root}/big.txt");
    let mut text = String::new();
    for n in 0..20_000 {
        text.push_str(&format!("row {n} {}\n", "z".repeat(n % 50)));
    }
    text.push_str("tail without newline");
    std::fs::write(&file, &text).unwrap();
    for fs in [LocalFs::new(), LocalFs::with_inline_limit(0)] {
        for (offset, limit) in [(1, 10), (5000, 3), (19_999, 5), (30_000, 5)] {
            let streamed = fs.read_lines(&file, &window(offset, limit)).await.unwrap();
            let LineRead::Page(streamed) = streamed else {
                panic!("{streamed:?}");
            };
            let LineRead::Page(whole) =
                page_from_bytes(streamed.stat, text.as_bytes(), &window(offset, limit))
            else {
                panic!("whole buffer read failed");
            };
            assert_eq!(streamed, whole, "offset {offset}");
            assert_eq!(streamed.total_lines, 20_001);
        }
    }
    let LineRead::Page(last) = LocalFs::new()
        .read_lines(&file, &window(20_001, 5))
        .await
        .unwrap()
    else {
        panic!("no page");
    };
    assert_eq!(last.lines, ["tail without newline"]);
}

#[tokio::test]
async fn read_lines_answers_unchanged_and_binary_without_reading() {
    let (_dir, root) = temp_root();
    let fs = LocalFs::new();
    let file = format!("{root}/f.txt");
    std::fs::write(&file, "x\n").unwrap();
    let stamp = fs.stat(&file).await.unwrap().unwrap().stamp();
    let mut unchanged = window(1, 5);
    unchanged.unless_unchanged = stamp;
    assert!(matches!(
        fs.read_lines(&file, &unchanged).await.unwrap(),
        LineRead::Unchanged(_)
    ));
    let binary = format!("{root}/b.bin2");
    std::fs::write(&binary, b"\x00\x01\x02").unwrap();
    assert!(matches!(
        fs.read_lines(&binary, &window(1, 5)).await.unwrap(),
        LineRead::Binary(_)
    ));
    assert_eq!(
        fs.read_lines(&format!("{root}/no"), &window(1, 5))
            .await
            .unwrap(),
        LineRead::NotFound
    );
}

#[tokio::test]
async fn atomic_write_creates_parents_keeps_mode_and_leaves_no_temp() {
    let (_dir, root) = temp_root();
    let fs = LocalFs::new();
    let file = format!("{root}/deep/er/run.sh");
    let first = fs.write_atomic(&file, b"echo 1\n").await.unwrap();
    assert!(first.created_dirs && first.created_file);
    assert_eq!(first.bytes_written, 7);
    assert!(first.mtime_ns.is_some());
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o750)).unwrap();

    let second = fs.write_atomic(&file, b"echo 2\n").await.unwrap();
    assert!(!second.created_dirs && !second.created_file);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "echo 2\n");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o750);
    let names: Vec<_> = std::fs::read_dir(format!("{root}/deep/er"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["run.sh"]);
    assert!(matches!(
        fs.write_atomic(&root, b"x").await,
        Err(FsError::IsADirectory(_))
    ));

    // Large writes go through the blocking pool with the same result.
    let big = vec![b'a'; 3 << 20];
    LocalFs::new()
        .write_atomic(&format!("{root}/big.bin"), &big)
        .await
        .unwrap();
    assert_eq!(
        std::fs::metadata(format!("{root}/big.bin")).unwrap().len(),
        3 << 20
    );
}

#[tokio::test]
async fn writing_through_a_symlink_keeps_the_link() {
    let (_dir, root) = temp_root();
    let fs = LocalFs::new();
    let target = format!("{root}/real.txt");
    let link = format!("{root}/link.txt");
    std::fs::write(&target, "old").unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    fs.write_atomic(&link, b"new").await.unwrap();
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
    assert_eq!(fs.resolve_symlinks(&link).await.unwrap(), target);
    assert_eq!(
        fs.resolve_symlinks(&format!("{root}/link.txt.d/not/yet"))
            .await
            .unwrap(),
        format!("{root}/link.txt.d/not/yet")
    );
}

#[tokio::test]
async fn remove_rename_and_list() {
    let (_dir, root) = temp_root();
    let fs = LocalFs::new();
    std::fs::write(format!("{root}/b"), "b").unwrap();
    std::fs::write(format!("{root}/a"), "a").unwrap();
    assert_eq!(fs.list_dir(&root).await.unwrap().unwrap(), ["a", "b"]);
    assert_eq!(fs.list_dir(&format!("{root}/a")).await.unwrap(), None);
    fs.rename(&format!("{root}/a"), &format!("{root}/sub/a2"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(format!("{root}/sub/a2")).unwrap(),
        "a"
    );
    fs.remove(&format!("{root}/b")).await.unwrap();
    assert!(matches!(
        fs.remove(&format!("{root}/b")).await,
        Err(FsError::NotFound(_))
    ));
    assert!(matches!(
        fs.remove(&format!("{root}/sub")).await,
        Err(FsError::IsADirectory(_))
    ));
}

#[tokio::test]
async fn usable_as_a_shared_trait_object() {
    let (_dir, root) = temp_root();
    let fs: std::sync::Arc<dyn FileSystem> = std::sync::Arc::new(LocalFs::new());
    let file = format!("{root}/t.txt");
    fs.write_atomic(&file, b"a\nb\n").await.unwrap();
    let LineRead::Page(page) = fs.read_lines(&file, &window(2, 1)).await.unwrap() else {
        panic!("no page");
    };
    assert_eq!((page.lines, page.total_lines), (vec!["b".to_owned()], 2));
}
