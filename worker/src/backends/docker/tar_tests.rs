#![allow(clippy::unwrap_used)]

use super::*;

#[test]
fn a_written_file_reads_back() {
    let archive = single_file(".caduceus-lease", 0o600, 1_700_000_000, b"{\"a\":1}");
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

#[test]
fn the_checksum_is_what_tar_expects() {
    let archive = single_file("x", 0o644, 0, b"");
    let stored = u64::from_str_radix(std::str::from_utf8(&archive[148..154]).unwrap(), 8).unwrap();
    let mut header = archive[..512].to_vec();
    header[148..156].copy_from_slice(b"        ");
    assert_eq!(stored, header.iter().map(|b| u64::from(*b)).sum::<u64>());
}

#[test]
fn pax_and_long_names_are_followed() {
    // A PAX record naming the file, then the file under a truncated name.
    let long = "d/".repeat(80) + "file.txt";
    let record = format!("{} path={long}\n", long.len() + 11);
    let mut pax = single_file("PaxHeaders/x", 0o644, 0, record.as_bytes());
    pax[156] = b'x';
    // Fix the checksum after changing the type flag.
    pax[148..156].copy_from_slice(b"        ");
    let sum: u64 = pax[..512].iter().map(|b| u64::from(*b)).sum();
    pax[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    pax.truncate(512 + record.len().div_ceil(512) * 512);
    pax.extend(single_file("file.txt", 0o644, 5, b"body"));
    match first_entry(&pax).unwrap() {
        TarEntry::File(file) => {
            assert_eq!(file.name, long);
            assert_eq!(file.data, b"body");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn directories_and_garbage() {
    let mut dir = single_file("d", 0o755, 0, b"");
    dir[156] = b'5';
    assert_eq!(first_entry(&dir).unwrap(), TarEntry::Dir);
    assert!(first_entry(&[]).is_err());
    let mut truncated = single_file("f", 0o644, 0, &[7u8; 2000]);
    truncated.truncate(1024);
    assert!(first_entry(&truncated).is_err());
}
