//! `.docx`: the text of every paragraph (`w:p`) of `word/document.xml` in
//! document order, one line per paragraph, `w:tab` as a tab, `w:br`/`w:cr`
//! as a line break. As in hermes (ElementTree's `iter`), a paragraph nested
//! in another (a text box) counts in both.

use super::xml::{Flow, Node};
use super::{ExtractError, Package, PartError, finish_lines};

const W: &str = "http://schemas.openxmlformats.org/wordprocessingml/2006/main";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Paragraph,
    /// A `w:t` whose leading text is still being read.
    Text,
    Other,
}

pub(super) fn extract(data: &[u8]) -> Result<String, ExtractError> {
    let mut package = Package::open(data, "DOCX")?;
    // One slot per paragraph in the order they open; text goes to every open one.
    let mut paragraphs: Vec<String> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    let mut stack: Vec<Kind> = Vec::new();
    let append = |paragraphs: &mut Vec<String>, open: &[usize], text: &str| {
        for &index in open {
            paragraphs[index].push_str(text);
        }
    };
    let walked = package.walk("word/document.xml", |node| {
        match node {
            Node::Open(element) => {
                // ElementTree's `.text` of a `w:t` stops at its first child.
                if let Some(top @ Kind::Text) = stack.last_mut() {
                    *top = Kind::Other;
                }
                let kind = if element.is(W, "p") {
                    open.push(paragraphs.len());
                    paragraphs.push(String::new());
                    Kind::Paragraph
                } else if element.is(W, "t") {
                    Kind::Text
                } else {
                    if element.is(W, "tab") {
                        append(&mut paragraphs, &open, "\t");
                    } else if element.is(W, "br") || element.is(W, "cr") {
                        append(&mut paragraphs, &open, "\n");
                    }
                    Kind::Other
                };
                stack.push(kind);
            }
            Node::Close => {
                if stack.pop() == Some(Kind::Paragraph) {
                    open.pop();
                }
            }
            Node::Text(text) => {
                if stack.last() == Some(&Kind::Text) {
                    append(&mut paragraphs, &open, text);
                }
            }
        }
        Flow::Continue
    });
    match walked {
        Ok(()) => {}
        Err(PartError::Missing) => {
            return Err(ExtractError("Missing word/document.xml".to_owned()));
        }
        Err(PartError::Malformed(message)) => {
            return Err(ExtractError(format!(
                "Malformed XML in word/document.xml: {message}"
            )));
        }
        Err(PartError::Unreadable(message)) => return Err(ExtractError(message)),
    }
    let lines: Vec<&str> = paragraphs.iter().flat_map(|p| p.split('\n')).collect();
    if !lines.iter().any(|line| !line.trim().is_empty()) {
        return Err(ExtractError("DOCX contains no extractable text".to_owned()));
    }
    Ok(finish_lines(&lines))
}
