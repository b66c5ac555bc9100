//! The little of the tar format the engine's archive API needs: one regular
//! file in, the first regular file out (`GET`/`PUT /containers/{id}/archive`).
//! The engine writes PAX or GNU long-name records for long names; they are
//! skipped (the archive of one path holds one file).

#[cfg(test)]
#[path = "tar_tests.rs"]
mod tests;

const BLOCK: usize = 512;

/// One regular file read from an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TarFile {
    pub name: String,
    pub mode: u32,
    pub mtime: i64,
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

fn write_octal(field: &mut [u8], value: u64) {
    // width-1 octal digits, then NUL.
    let digits = field.len() - 1;
    let text = format!("{value:0digits$o}");
    let bytes = text.as_bytes();
    let start = bytes.len().saturating_sub(digits);
    field[..digits].copy_from_slice(&bytes[start..]);
    field[digits] = 0;
}

/// An archive holding one regular file `name` (a relative path, < 100 bytes).
pub fn single_file(name: &str, mode: u32, mtime: u64, data: &[u8]) -> Vec<u8> {
    let mut header = [0u8; BLOCK];
    let name_bytes = name.as_bytes();
    let take = name_bytes.len().min(99);
    header[..take].copy_from_slice(&name_bytes[..take]);
    write_octal(&mut header[100..108], u64::from(mode & 0o7777));
    write_octal(&mut header[108..116], 0);
    write_octal(&mut header[116..124], 0);
    write_octal(&mut header[124..136], data.len() as u64);
    write_octal(&mut header[136..148], mtime);
    header[156] = b'0';
    header[257..263].copy_from_slice(b"ustar\0");
    header[263..265].copy_from_slice(b"00");
    // The checksum is computed with its own field as spaces.
    header[148..156].copy_from_slice(b"        ");
    let sum: u64 = header.iter().map(|b| u64::from(*b)).sum();
    let text = format!("{sum:06o}\0 ");
    header[148..156].copy_from_slice(text.as_bytes());

    let padded = data.len().div_ceil(BLOCK) * BLOCK;
    let mut out = Vec::with_capacity(BLOCK + padded + 2 * BLOCK);
    out.extend_from_slice(&header);
    out.extend_from_slice(data);
    out.resize(BLOCK + padded, 0);
    out.resize(BLOCK + padded + 2 * BLOCK, 0);
    out
}

fn parse_octal(field: &[u8]) -> Option<u64> {
    // GNU base-256 for large values.
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        let mut value: u64 = u64::from(field[0] & 0x7f);
        for b in &field[1..] {
            value = value.checked_mul(256)?.checked_add(u64::from(*b))?;
        }
        return Some(value);
    }
    let text: String = field
        .iter()
        .take_while(|b| **b != 0)
        .map(|b| *b as char)
        .collect();
    let text = text.trim();
    if text.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(text, 8).ok()
}

/// The first entry that is not a PAX/long-name record.
pub fn first_entry(archive: &[u8]) -> Result<TarEntry, String> {
    let mut at = 0usize;
    let mut long_name: Option<String> = None;
    while at + BLOCK <= archive.len() {
        let header = &archive[at..at + BLOCK];
        if header.iter().all(|b| *b == 0) {
            break;
        }
        let size = parse_octal(&header[124..136]).ok_or("unreadable size in the archive")?;
        let size = usize::try_from(size).map_err(|_| "file too large")?;
        let data_start = at + BLOCK;
        let data_end = data_start
            .checked_add(size)
            .ok_or("archive size overflow")?;
        let kind = header[156];
        match kind {
            // PAX extended header (per file, global) and GNU long name/link.
            b'x' | b'g' | b'L' | b'K' => {
                if kind == b'L' {
                    let raw = archive
                        .get(data_start..data_end)
                        .ok_or("truncated archive")?;
                    long_name = Some(
                        String::from_utf8_lossy(raw)
                            .trim_end_matches('\0')
                            .to_owned(),
                    );
                }
                if kind == b'x'
                    && let Some(raw) = archive.get(data_start..data_end)
                {
                    long_name = pax_path(raw).or(long_name);
                }
                at = data_start + size.div_ceil(BLOCK) * BLOCK;
                continue;
            }
            b'0' | 0 | b'7' => {
                let data = archive
                    .get(data_start..data_end)
                    .ok_or("truncated archive")?
                    .to_vec();
                let name = long_name.take().unwrap_or_else(|| {
                    String::from_utf8_lossy(&header[..100])
                        .trim_end_matches('\0')
                        .to_owned()
                });
                let mode = parse_octal(&header[100..108]).unwrap_or(0o644) as u32;
                let mtime = parse_octal(&header[136..148]).unwrap_or(0) as i64;
                return Ok(TarEntry::File(TarFile {
                    name,
                    mode,
                    mtime,
                    data,
                }));
            }
            b'5' => return Ok(TarEntry::Dir),
            _ => return Ok(TarEntry::Other),
        }
    }
    Err("empty archive".to_owned())
}

/// `path=` from PAX records (`"<len> path=<value>\n"`).
fn pax_path(raw: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(raw);
    text.lines().find_map(|line| {
        line.split_once(' ')
            .and_then(|(_, kv)| kv.strip_prefix("path="))
            .map(str::to_owned)
    })
}
