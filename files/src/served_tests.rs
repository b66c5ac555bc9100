use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{DuplexStream, duplex};

use super::*;
use crate::local::LocalFs;
use crate::search::{OutputMode, SearchTarget};

/// The servers a test's dial started.
#[derive(Default)]
struct Servers {
    started: AtomicUsize,
    running: std::sync::Mutex<Vec<tokio::task::AbortHandle>>,
}

impl Servers {
    fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }

    /// What `kill -9 -1` by the sandbox user does to its file server.
    fn kill_all(&self) {
        for server in self.running.lock().unwrap().drain(..) {
            server.abort();
        }
    }
}

/// A dial that starts an in-process server over LocalFs on a duplex pipe.
/// `hang_after`: that many requests are answered, then the server stops
/// reading (a stopped process).
fn local_dial(servers: Arc<Servers>, hang_after: Option<usize>) -> Dial {
    Arc::new(move || {
        let servers = servers.clone();
        Box::pin(async move {
            servers.started.fetch_add(1, Ordering::SeqCst);
            let (client, server) = duplex(1 << 16);
            let task = tokio::spawn(run_server(server, hang_after));
            servers.running.lock().unwrap().push(task.abort_handle());
            let (reader, writer) = tokio::io::split(client);
            Ok(Connection {
                reader: Box::pin(reader),
                writer: Box::pin(writer),
                guard: Box::new(AbortOnDrop(task)),
            })
        })
    })
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn run_server(stream: DuplexStream, hang_after: Option<usize>) {
    let (reader, writer) = tokio::io::split(stream);
    match hang_after {
        None => {
            let _ = serve(&LocalFs::new(), reader, writer).await;
        }
        Some(n) => {
            let mut reader = reader;
            let mut writer = writer;
            for _ in 0..n {
                let Ok(Some((header, blob))) = read_frame(&mut reader).await else {
                    return;
                };
                let request: Request = serde_json::from_slice(&header).unwrap();
                let (reply, data) = answer(&LocalFs::new(), request, blob).await;
                let header = serde_json::to_vec(&reply).unwrap();
                write_frame(&mut writer, &header, &data).await.unwrap();
            }
            std::future::pending::<()>().await;
        }
    }
}

fn no_fallback() -> Arc<dyn FileSystem> {
    struct Refuses;
    #[async_trait]
    impl FileSystem for Refuses {
        async fn stat(&self, _: &str) -> Result<Option<FileStat>, FsError> {
            panic!("the fallback must not serve while a server runs")
        }
        async fn read_range(
            &self,
            _: &str,
            _: u64,
            _: Option<u64>,
        ) -> Result<Option<FileBytes>, FsError> {
            panic!("fallback")
        }
        async fn write_atomic(&self, _: &str, _: &[u8]) -> Result<WriteOutcome, FsError> {
            panic!("fallback")
        }
        async fn remove(&self, _: &str) -> Result<(), FsError> {
            panic!("fallback")
        }
        async fn rename(&self, _: &str, _: &str) -> Result<(), FsError> {
            panic!("fallback")
        }
        async fn list_dir(&self, _: &str) -> Result<Option<Vec<String>>, FsError> {
            panic!("fallback")
        }
        async fn search(&self, _: &SearchQuery) -> Result<SearchHits, FsError> {
            panic!("fallback")
        }
        async fn check_syntax(
            &self,
            _: SyntaxChecker,
            _: &str,
            _: &[u8],
        ) -> Result<CheckRun, FsError> {
            panic!("fallback")
        }
    }
    Arc::new(Refuses)
}

fn path(dir: &tempfile::TempDir, name: &str) -> String {
    dir.path().join(name).display().to_string()
}

#[tokio::test]
async fn every_primitive_answers_as_the_local_file_system_does() {
    let dir = tempfile::tempdir().unwrap();
    let servers = Arc::new(Servers::default());
    let served = ServedFs::new(local_dial(servers.clone(), None), no_fallback());
    let local = LocalFs::new();
    let file = path(&dir, "sub/a.txt");

    let written = served
        .write_atomic(&file, b"one\ntwo\nthree\n")
        .await
        .unwrap();
    assert!(written.created_dirs && written.created_file);
    assert_eq!(written.bytes_written, 14);
    assert_eq!(
        served.stat(&file).await.unwrap(),
        local.stat(&file).await.unwrap()
    );
    assert_eq!(served.stat(&path(&dir, "missing")).await.unwrap(), None);

    let bytes = served.read_range(&file, 4, Some(3)).await.unwrap().unwrap();
    assert_eq!(bytes.data, b"two");
    let window = LineWindow {
        offset: 2,
        limit: 1,
        max_line_bytes: 100,
        detect_binary: true,
        unless_unchanged: None,
    };
    assert_eq!(
        served.read_lines(&file, &window).await.unwrap(),
        local.read_lines(&file, &window).await.unwrap()
    );
    assert_eq!(
        served.list_dir(&path(&dir, "sub")).await.unwrap(),
        Some(vec!["a.txt".to_owned()])
    );
    let query = SearchQuery {
        root: dir.path().display().to_string(),
        target: SearchTarget::Content {
            pattern: "tw.".to_owned(),
            file_glob: None,
            mode: OutputMode::Content,
            context: 0,
        },
        max_entries: 10,
    };
    assert_eq!(
        served.search(&query).await.unwrap(),
        local.search(&query).await.unwrap()
    );
    let moved = path(&dir, "b.txt");
    served.rename(&file, &moved).await.unwrap();
    assert!(matches!(served.read_range(&file, 0, None).await, Ok(None)));
    assert!(matches!(
        served.read_range(&path(&dir, "sub"), 0, None).await,
        Err(FsError::IsADirectory(_))
    ));
    served.remove(&moved).await.unwrap();
    assert!(matches!(
        served.remove(&moved).await,
        Err(FsError::NotFound(_))
    ));
    assert_eq!(servers.started(), 1, "one server for all of it");
}

#[tokio::test]
async fn a_server_that_dies_is_replaced_and_a_repeatable_request_is_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let file = path(&dir, "f");
    std::fs::write(&file, "x").unwrap();
    let servers = Arc::new(Servers::default());
    let served = ServedFs::new(local_dial(servers.clone(), None), no_fallback());
    assert!(served.stat(&file).await.unwrap().is_some());
    servers.kill_all();
    tokio::task::yield_now().await;
    assert!(served.stat(&file).await.unwrap().is_some());
    assert_eq!(servers.started(), 2);
}

#[tokio::test]
async fn a_lost_rename_is_an_error_not_a_second_rename() {
    let dir = tempfile::tempdir().unwrap();
    let from = path(&dir, "from");
    std::fs::write(&from, "x").unwrap();
    let servers = Arc::new(Servers::default());
    // Answers one request, then stops reading.
    let served = ServedFs::new(local_dial(servers.clone(), Some(1)), no_fallback())
        .with_timeout(Duration::from_millis(300));
    assert!(served.stat(&from).await.unwrap().is_some());
    let err = served.rename(&from, &path(&dir, "to")).await.unwrap_err();
    assert!(err.to_string().contains("did not answer within"), "{err}");
    assert_eq!(servers.started(), 1, "not sent again");
}

#[tokio::test]
async fn a_hung_server_is_replaced_after_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let file = path(&dir, "f");
    std::fs::write(&file, "x").unwrap();
    let servers = Arc::new(Servers::default());
    let served = ServedFs::new(local_dial(servers.clone(), Some(1)), no_fallback())
        .with_timeout(Duration::from_millis(300));
    assert!(served.stat(&file).await.unwrap().is_some());
    // The first server hangs on the second request; the retry goes to a new
    // one, which answers its first.
    assert!(served.stat(&file).await.unwrap().is_some());
    assert_eq!(servers.started(), 2);
}

#[tokio::test]
async fn without_a_server_the_fallback_serves() {
    let dir = tempfile::tempdir().unwrap();
    let file = path(&dir, "f");
    std::fs::write(&file, "hello").unwrap();
    let dials = Arc::new(AtomicUsize::new(0));
    let counter = dials.clone();
    let dial: Dial = Arc::new(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Err("no such program".to_owned()) })
    });
    let served = ServedFs::new(dial, Arc::new(LocalFs::new()));
    let bytes = served.read_range(&file, 0, None).await.unwrap().unwrap();
    assert_eq!(bytes.data, b"hello");
    assert!(served.stat(&file).await.unwrap().is_some());
    assert_eq!(dials.load(Ordering::SeqCst), 1, "tried once, not per call");
}

#[tokio::test]
async fn the_server_answers_a_bad_request_and_refuses_a_huge_frame() {
    let (client, server) = duplex(1 << 16);
    let task = tokio::spawn(async move {
        let (reader, writer) = tokio::io::split(server);
        serve(&LocalFs::new(), reader, writer).await
    });
    let (mut reader, mut writer) = tokio::io::split(client);
    write_frame(&mut writer, b"{\"op\":\"format_disk\"}", b"")
        .await
        .unwrap();
    let (header, _) = read_frame(&mut reader).await.unwrap().unwrap();
    let reply: Reply = serde_json::from_slice(&header).unwrap();
    let err = reply.unwrap_err().to_string();
    assert!(err.contains("bad request"), "{err}");
    // A header length no client of ours sends: the server stops.
    writer.write_all(&[0xff; 8]).await.unwrap();
    let ended = task.await.unwrap();
    assert_eq!(ended.unwrap_err().kind(), io::ErrorKind::InvalidData);
}

#[tokio::test]
async fn a_page_of_lines_comes_back_as_the_local_file_system_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let served = ServedFs::new(
        local_dial(Arc::new(Servers::default()), None),
        no_fallback(),
    );
    let local = LocalFs::new();
    // Empty lines, multi-byte characters, quotes and control characters
    // JSON would escape, a CRLF line, and more than one write's worth of bytes.
    let mut text = String::from("\u{feff}first \"quoted\" \\ back\tslash\r\n\n");
    for n in 0..3000 {
        text.push_str(&format!("line {n}: ünïcödé ✓ {}\n", "x".repeat(n % 90)));
    }
    text.push_str("last line without newline");
    let file = path(&dir, "big.txt");
    std::fs::write(&file, &text).unwrap();
    for (offset, limit) in [(1, 5000), (1, 1), (2999, 10), (4000, 10)] {
        let window = LineWindow {
            offset,
            limit,
            max_line_bytes: 60,
            detect_binary: true,
            unless_unchanged: None,
        };
        assert_eq!(
            served.read_lines(&file, &window).await.unwrap(),
            local.read_lines(&file, &window).await.unwrap(),
            "offset {offset}, limit {limit}"
        );
    }
}

#[test]
fn a_page_whose_lengths_do_not_add_up_is_an_error() {
    assert_eq!(
        split_lines(b"abcdef", &[2, 4]).unwrap(),
        vec!["ab".to_owned(), "cdef".to_owned()]
    );
    for (data, lengths) in [
        (&b"abc"[..], &[2usize][..]),
        (b"abc", &[2, 2]),
        (b"\xff\xfe", &[2]),
    ] {
        assert!(
            matches!(split_lines(data, lengths), Err(FsError::Backend(_))),
            "{data:?} {lengths:?}"
        );
    }
}
