//! Test fixtures: a search tree shared by the local and the shell search
//! tests, and a canonical temporary directory.

use super::{OutputMode, SearchQuery, SearchTarget};

/// A small git checkout with everything rg skips: a `.gitignore`d directory
/// and extension, hidden directories, a binary file.
pub(crate) fn fixture() -> (tempfile::TempDir, String) {
    let (dir, root) = temp_root();
    let put = |rel: &str, content: &[u8]| {
        let path = format!("{root}/{rel}");
        std::fs::create_dir_all(std::path::Path::new(&path).parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    };
    put(
        ".git/HEAD",
        b"ref: refs/heads/main\nTODO in git internals\n",
    );
    put(".gitignore", b"ignored/\n*.log\n");
    put(
        "src/a.rs",
        b"fn a() {}\n// TODO first\nlet x = 1;\n// TODO second\n",
    );
    put("src/b.py", b"# TODO python\nprint('hi')\n");
    put("src/nested/c.rs", b"no match here\nTODO nested\n");
    put("ignored/x.rs", b"TODO ignored\n");
    put("app.log", b"TODO logged\n");
    put(".hidden/h.rs", b"TODO hidden\n");
    put("data.bin", b"TODO\x00\x01binary\n");
    (dir, root)
}

/// An empty temporary directory and its canonical path (searches report
/// canonical paths, so expectations are built from this one).
pub(crate) fn temp_root() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir
        .path()
        .canonicalize()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    (dir, root)
}

/// A content search of `root` for `pattern`, at most 100 entries.
pub(crate) fn content(
    root: &str,
    pattern: &str,
    mode: OutputMode,
    context: usize,
    glob: Option<&str>,
) -> SearchQuery {
    SearchQuery {
        root: root.to_owned(),
        target: SearchTarget::Content {
            pattern: pattern.to_owned(),
            file_glob: glob.map(str::to_owned),
            mode,
            context,
        },
        max_entries: 100,
    }
}
