//! Text of structured documents for `read_file`: Jupyter notebooks, Word
//! documents and Excel workbooks, rendered exactly as hermes-agent 0.19.0's
//! `tools/read_extract.py` renders them (its tests compare byte for byte with
//! hermes' own output on fixtures made by python-docx, openpyxl and nbformat).
//!
//! Pure functions of the file's bytes: the backend fetches the bytes in one
//! round trip (`FileSystem::read_range`) and the worker extracts them. A
//! document that cannot be rendered is an [`ExtractError`]; read_file then
//! treats the file as it would any other (a `.ipynb` is read as JSON text, a
//! `.docx`/`.xlsx` is refused as binary), as hermes does.

mod docx;
mod notebook;
mod xlsx;
mod xml;

use std::io::{Cursor, Read};

use zip::ZipArchive;

use crate::paths;

/// Largest document fetched for extraction (hermes' `MAX_XLSX_BYTES`).
pub const MAX_DOCUMENT_BYTES: u64 = 50 * 1024 * 1024;

/// Largest XML part inflated out of a document (a zip bomb stops here).
const MAX_PART_BYTES: u64 = 64 * 1024 * 1024;

/// The document types read_file extracts, by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocumentKind {
    /// `.ipynb`
    Notebook,
    /// `.docx`
    Word,
    /// `.xlsx`
    Workbook,
}

impl DocumentKind {
    /// The kind of `path` by its extension (any case), if it is one.
    pub fn of(path: &str) -> Option<Self> {
        match paths::extension(path).as_str() {
            ".ipynb" => Some(DocumentKind::Notebook),
            ".docx" => Some(DocumentKind::Word),
            ".xlsx" => Some(DocumentKind::Workbook),
            _ => None,
        }
    }
}

/// Why a document could not be rendered (hermes' `ExtractionError` texts).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ExtractError(pub String);

/// The whole text of a document; ends in one `\n`.
pub fn extract(kind: DocumentKind, data: &[u8]) -> Result<String, ExtractError> {
    match kind {
        DocumentKind::Notebook => notebook::extract(data),
        DocumentKind::Word => docx::extract(data),
        DocumentKind::Workbook => xlsx::extract(data),
    }
}

/// Python's `str.splitlines()`: lines end at `\n`, `\r\n`, `\r`, `\v`, `\f`,
/// `\x1c`–`\x1e`, U+0085, U+2028 and U+2029; no empty line after a last
/// line ending.
pub fn py_splitlines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let end = match c {
            '\r' => {
                if let Some((_, '\n')) = chars.peek() {
                    chars.next();
                    at + 2
                } else {
                    at + 1
                }
            }
            '\n' | '\u{0b}' | '\u{0c}' | '\u{1c}' | '\u{1d}' | '\u{1e}' | '\u{85}' | '\u{2028}'
            | '\u{2029}' => at + c.len_utf8(),
            _ => continue,
        };
        lines.push(&text[start..at]);
        start = end;
    }
    if start < text.len() {
        lines.push(&text[start..]);
    }
    lines
}

/// `"\n".join(lines).rstrip("\n") + "\n"`, hermes' ending of every document.
fn finish_lines<S: AsRef<str>>(lines: &[S]) -> String {
    let mut out = String::with_capacity(lines.iter().map(|l| l.as_ref().len() + 1).sum());
    for (index, line) in lines.iter().enumerate() {
        if index > 0 {
            out.push('\n');
        }
        out.push_str(line.as_ref());
    }
    let kept = out.trim_end_matches('\n').len();
    out.truncate(kept);
    out.push('\n');
    out
}

/// A document's zip container.
struct Package<'a> {
    archive: ZipArchive<Cursor<&'a [u8]>>,
}

/// Failure to read one part of a package.
#[derive(Debug)]
enum PartError {
    /// Not in the package.
    Missing,
    /// The zip entry cannot be inflated (or is too large): the whole document fails.
    Unreadable(String),
    /// The part is not well-formed XML.
    Malformed(String),
}

impl<'a> Package<'a> {
    fn open(data: &'a [u8], what: &str) -> Result<Self, ExtractError> {
        ZipArchive::new(Cursor::new(data))
            .map(|archive| Package { archive })
            .map_err(|err| ExtractError(format!("Not a valid {what}: {err}")))
    }

    fn has(&self, name: &str) -> bool {
        self.archive.index_for_name(name).is_some()
    }

    /// Walks the XML of part `name`, feeding every node to `visit`.
    fn walk(
        &mut self,
        name: &str,
        visit: impl FnMut(xml::Node<'_>) -> xml::Flow,
    ) -> Result<(), PartError> {
        let file = match self.archive.by_name(name) {
            Ok(file) => file,
            Err(zip::result::ZipError::FileNotFound) => return Err(PartError::Missing),
            Err(err) => return Err(PartError::Unreadable(err.to_string())),
        };
        let capped = Capped {
            inner: file,
            left: MAX_PART_BYTES,
            name: name.to_owned(),
        };
        Ok(xml::walk(std::io::BufReader::new(capped), visit)?)
    }
}

impl From<xml::WalkError> for PartError {
    fn from(error: xml::WalkError) -> Self {
        match error {
            xml::WalkError::Io(message) => PartError::Unreadable(message),
            xml::WalkError::Malformed(message) => PartError::Malformed(message),
        }
    }
}

/// A reader that fails instead of passing more than `left` bytes.
struct Capped<R> {
    inner: R,
    left: u64,
    name: String,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.left = self.left.checked_sub(read as u64).ok_or_else(|| {
            std::io::Error::other(format!(
                "{} inflates to more than {MAX_PART_BYTES} bytes",
                self.name
            ))
        })?;
        Ok(read)
    }
}

#[cfg(test)]
#[path = "extract_tests.rs"]
mod tests;
