#![allow(clippy::unwrap_used, clippy::panic)]

use std::process::Command;

use super::*;

#[test]
fn a_written_file_reads_back() {
    let archive = single_file(".caduceus-lease", 0o600, 1_700_000_000, b"{\"a\":1}").unwrap();
    assert_eq!(archive.len() % 512, 0);
    assert_eq!(
        first_entry(&archive).unwrap(),
        TarEntry::File(TarFile {
            name: ".caduceus-lease".into(),
            mode: 0o600,
            mtime: 1_700_000_000,
            data: b"{\"a\":1}".to_vec()
        })
    );
}

/// The system's GNU tar is the reference both ways: it lists what we write,
/// and what it writes (PAX records for a long name) reads back here.
#[test]
fn gnu_tar_agrees_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let long = "d/".repeat(60) + "file.txt";
    let archive = single_file(&long, 0o640, 5, b"body").unwrap();
    let ours = dir.path().join("ours.tar");
    std::fs::write(&ours, &archive).unwrap();
    let listed = Command::new("tar")
        .args(["-tvf", ours.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(listed.status.success(), "{listed:?}");
    let listing = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listing.contains(&long) && listing.starts_with("-rw-r-----"),
        "{listing}"
    );

    let source = dir.path().join("src");
    std::fs::create_dir_all(source.join("d/".repeat(60))).unwrap();
    std::fs::write(source.join(&long), b"from gnu tar").unwrap();
    let theirs = dir.path().join("theirs.tar");
    let made = Command::new("tar")
        .args(["--format=pax", "-cf", theirs.to_str().unwrap(), "-C"])
        .arg(&source)
        .arg(&long)
        .status()
        .unwrap();
    assert!(made.success());
    match first_entry(&std::fs::read(&theirs).unwrap()).unwrap() {
        TarEntry::File(file) => {
            assert_eq!(file.name, long);
            assert_eq!(file.data, b"from gnu tar");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn directories_and_garbage() {
    let mut builder = ::tar::Builder::new(Vec::new());
    let mut header = ::tar::Header::new_gnu();
    header.set_entry_type(::tar::EntryType::Directory);
    header.set_mode(0o755);
    header.set_size(0);
    builder.append_data(&mut header, "d", &[][..]).unwrap();
    assert_eq!(
        first_entry(&builder.into_inner().unwrap()).unwrap(),
        TarEntry::Dir
    );
    assert!(first_entry(&[]).is_err());
    let mut truncated = single_file("f", 0o644, 0, &[7u8; 2000]).unwrap();
    truncated.truncate(1024);
    assert!(first_entry(&truncated).is_err());
    assert!(first_entry(&[0x41; 512]).is_err());
}
