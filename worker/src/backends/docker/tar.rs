//! The tar streams of the engine's archive API (`GET`/`PUT
//! /containers/{id}/archive`): one regular file in, the first entry out. The
//! `tar` crate does the format (ustar/GNU headers, PAX and GNU long-name
//! records, base-256 sizes); this module only fixes the shape we use.

use std::io::Read;

#[cfg(test)]
#[path = "tar_tests.rs"]
mod tests;

/// One regular file read from an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TarFile {
    pub name: String,
    pub mode: u32,
    pub mtime: u64,
    pub data: Vec<u8>,
}

/// What the first entry of an archive is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TarEntry {
    File(TarFile),
    Dir,
    /// Symlink, device, FIFO, …
    Other,
}

/// An archive holding one regular file `name` (a relative path; a long one
/// gets a GNU long-name record).
pub fn single_file(name: &str, mode: u32, mtime: u64, data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut header = ::tar::Header::new_gnu();
    header.set_entry_type(::tar::EntryType::Regular);
    header.set_mode(mode & 0o7777);
    header.set_mtime(mtime);
    header.set_size(data.len() as u64);
    let mut builder = ::tar::Builder::new(Vec::with_capacity(data.len() + 2048));
    builder.append_data(&mut header, name, data)?;
    builder.into_inner()
}

/// The first entry of an archive (PAX and long-name records are applied to
/// it, not returned).
pub fn first_entry(archive: &[u8]) -> Result<TarEntry, String> {
    let mut reader = ::tar::Archive::new(archive);
    let mut entries = reader
        .entries()
        .map_err(|err| format!("unreadable archive: {err}"))?;
    let mut entry = match entries.next() {
        Some(Ok(entry)) => entry,
        Some(Err(err)) => return Err(format!("unreadable archive: {err}")),
        None => return Err("empty archive".to_owned()),
    };
    let kind = entry.header().entry_type();
    if kind.is_dir() {
        return Ok(TarEntry::Dir);
    }
    if !(kind.is_file() || kind.is_contiguous()) {
        return Ok(TarEntry::Other);
    }
    let name = entry
        .path()
        .map_err(|err| format!("unreadable name in the archive: {err}"))?
        .to_string_lossy()
        .into_owned();
    let mode = entry.header().mode().unwrap_or(0o644);
    let mtime = entry.header().mtime().unwrap_or(0);
    let size = entry.size();
    let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0).min(1 << 20));
    entry
        .read_to_end(&mut data)
        .map_err(|err| format!("unreadable archive: {err}"))?;
    // The crate stops quietly where the bytes end; a short entry is a cut archive.
    if data.len() as u64 != size {
        return Err(format!(
            "truncated archive: {} of {size} bytes of {name}",
            data.len()
        ));
    }
    Ok(TarEntry::File(TarFile {
        name,
        mode,
        mtime,
        data,
    }))
}
