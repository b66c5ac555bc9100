//! `.xlsx`: every visible sheet under `# ── Sheet: Name ──`, one line per row
//! with cells joined by tabs (the first 5,000 rows and 256 columns), `(empty)`
//! for a sheet without rows. Values are what the file stores: shared and
//! inline strings, `TRUE`/`FALSE`, error codes, numbers as written (dates stay
//! serial numbers, formulas show their cached value).

use std::collections::HashMap;

use super::xml::{Flow, Node};
use super::{ExtractError, Package, PartError, finish_lines};

const S: &str = "http://schemas.openxmlformats.org/spreadsheetml/2006/main";
const REL: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";
const PKG_REL: &str = "http://schemas.openxmlformats.org/package/2006/relationships";
const MAX_ROWS_PER_SHEET: usize = 5000;
const MAX_COLUMNS: usize = 256;

struct Sheet {
    name: String,
    state: String,
    relationship: String,
}

pub(super) fn extract(data: &[u8]) -> Result<String, ExtractError> {
    let mut package = Package::open(data, "XLSX")?;
    let shared = shared_strings(&mut package)?;
    let sheets = workbook_sheets(&mut package)?;
    let relationships = workbook_relationships(&mut package)?;
    let mut out: Vec<String> = Vec::new();
    for sheet in sheets {
        if sheet.state == "hidden" || sheet.state == "veryHidden" {
            continue;
        }
        let target = relationships
            .get(&sheet.relationship)
            .map_or("", String::as_str);
        let part = sheet_part(target);
        if !package.has(&part) {
            continue;
        }
        let rows = match sheet_rows(&mut package, &part, &shared) {
            Ok(rows) => rows,
            Err(PartError::Unreadable(message)) => return Err(ExtractError(message)),
            Err(PartError::Missing | PartError::Malformed(_)) => continue,
        };
        out.push(format!("# ── Sheet: {} ──", sheet.name));
        if rows.is_empty() {
            out.push("(empty)".to_owned());
        }
        out.extend(rows.iter().map(|row| row.join("\t")));
        out.push(String::new());
    }
    if out.is_empty() {
        return Err(ExtractError(
            "XLSX has no visible sheets with content".to_owned(),
        ));
    }
    Ok(finish_lines(&out))
}

/// Collects the leading text (ElementTree's `.text`) of every element
/// matching `is_text` below the element being read.
#[derive(Default)]
struct TextOf {
    /// Depths of the open elements that are text elements still before their first child.
    stack: Vec<bool>,
}

impl TextOf {
    fn open(&mut self, is_text: bool) {
        if let Some(top) = self.stack.last_mut() {
            *top = false;
        }
        self.stack.push(is_text);
    }

    fn close(&mut self) {
        self.stack.pop();
    }

    fn takes_text(&self) -> bool {
        self.stack.last() == Some(&true)
    }
}

fn shared_strings(package: &mut Package<'_>) -> Result<Vec<String>, ExtractError> {
    let mut strings: Vec<String> = Vec::new();
    // Depth inside the current `si`, if any.
    let mut inside: Option<usize> = None;
    let mut text = TextOf::default();
    let walked = package.walk("xl/sharedStrings.xml", |node| {
        match node {
            Node::Open(element) => {
                match inside.as_mut() {
                    Some(depth) => *depth += 1,
                    None if element.is(S, "si") => {
                        strings.push(String::new());
                        inside = Some(0);
                    }
                    None => {}
                }
                text.open(inside.is_some() && element.is(S, "t"));
            }
            Node::Close => {
                text.close();
                inside = match inside {
                    Some(0) | None => None,
                    Some(depth) => Some(depth - 1),
                };
            }
            Node::Text(chunk) => {
                if text.takes_text()
                    && let Some(last) = strings.last_mut()
                {
                    last.push_str(chunk);
                }
            }
        }
        Flow::Continue
    });
    match walked {
        Ok(()) => Ok(strings),
        Err(PartError::Unreadable(message)) => Err(ExtractError(message)),
        // hermes: a missing or unparsable table means no shared strings.
        Err(PartError::Missing | PartError::Malformed(_)) => Ok(Vec::new()),
    }
}

fn workbook_sheets(package: &mut Package<'_>) -> Result<Vec<Sheet>, ExtractError> {
    let mut sheets = Vec::new();
    let walked = package.walk("xl/workbook.xml", |node| {
        if let Node::Open(element) = node
            && element.is(S, "sheet")
        {
            sheets.push(Sheet {
                name: element.attribute("name").unwrap_or("Sheet").to_owned(),
                state: element.attribute("state").unwrap_or("visible").to_owned(),
                relationship: element
                    .attribute_in(Some(REL), "id")
                    .unwrap_or("")
                    .to_owned(),
            });
        }
        Flow::Continue
    });
    match walked {
        Ok(()) => Ok(sheets),
        Err(PartError::Missing) => Err(ExtractError("Missing xl/workbook.xml".to_owned())),
        Err(PartError::Malformed(message)) => Err(ExtractError(format!(
            "Malformed XML in xl/workbook.xml: {message}"
        ))),
        Err(PartError::Unreadable(message)) => Err(ExtractError(message)),
    }
}

fn workbook_relationships(
    package: &mut Package<'_>,
) -> Result<HashMap<String, String>, ExtractError> {
    let mut relationships = HashMap::new();
    let walked = package.walk("xl/_rels/workbook.xml.rels", |node| {
        if let Node::Open(element) = node
            && element.is(PKG_REL, "Relationship")
            && let Some(id) = element.attribute("Id").filter(|id| !id.is_empty())
        {
            relationships.insert(
                id.to_owned(),
                element.attribute("Target").unwrap_or("").to_owned(),
            );
        }
        Flow::Continue
    });
    match walked {
        Ok(()) => Ok(relationships),
        Err(PartError::Unreadable(message)) => Err(ExtractError(message)),
        Err(PartError::Missing | PartError::Malformed(_)) => Ok(HashMap::new()),
    }
}

/// The zip name of a sheet from its relationship target (hermes'
/// `posixpath.normpath` of `xl/<target>`).
pub(super) fn sheet_part(target: &str) -> String {
    let target = target.trim_start_matches('/');
    let joined = if target.starts_with("xl/") {
        target.to_owned()
    } else {
        format!("xl/{target}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|last| *last != "..") {
                    parts.pop();
                } else {
                    parts.push("..");
                }
            }
            part => parts.push(part),
        }
    }
    if parts.is_empty() {
        ".".to_owned()
    } else {
        parts.join("/")
    }
}

/// Zero-based column of a cell reference (`B7` → 1), as hermes computes it.
pub(super) fn column_index(reference: &str) -> usize {
    let mut index: i64 = 0;
    for c in reference.chars() {
        if !c.is_alphabetic() {
            break;
        }
        let upper = c.to_uppercase().next().unwrap_or(c);
        index = index
            .saturating_mul(26)
            .saturating_add(i64::from(u32::from(upper)) - i64::from(u32::from('A')) + 1);
    }
    usize::try_from(index - 1).unwrap_or(0)
}

/// The row being read.
struct Row {
    depth: usize,
    cells: HashMap<usize, String>,
    max_column: Option<usize>,
}

/// The cell being read.
#[derive(Default)]
struct Cell {
    depth: usize,
    column: usize,
    kind: String,
    /// The first direct `v` child's leading text, once it has opened.
    value: Option<String>,
    /// Inside that `v`, before any child of it.
    value_open: bool,
    /// The `t` texts of the first direct `is` child, once it has opened.
    inline: Option<String>,
    /// Depth of that `is` while it is open.
    inline_depth: Option<usize>,
}

fn sheet_rows(
    package: &mut Package<'_>,
    part: &str,
    shared: &[String],
) -> Result<Vec<Vec<String>>, PartError> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut depth = 0usize;
    let mut row: Option<Row> = None;
    let mut cell: Option<Cell> = None;
    let mut text = TextOf::default();
    package.walk(part, |node| {
        match node {
            Node::Open(element) => {
                depth += 1;
                if let Some(current) = cell.as_mut() {
                    current.value_open = false;
                    if depth == current.depth + 1 {
                        if element.is(S, "v") && current.value.is_none() {
                            current.value = Some(String::new());
                            current.value_open = true;
                        } else if element.is(S, "is") && current.inline.is_none() {
                            current.inline = Some(String::new());
                            current.inline_depth = Some(depth);
                        }
                    }
                    text.open(current.inline_depth.is_some() && element.is(S, "t"));
                    return Flow::Continue;
                }
                text.open(false);
                if row.is_none() && element.is(S, "row") {
                    if rows.len() >= MAX_ROWS_PER_SHEET {
                        return Flow::Stop;
                    }
                    row = Some(Row {
                        depth,
                        cells: HashMap::new(),
                        max_column: None,
                    });
                } else if let Some(current_row) = row.as_ref()
                    && element.is(S, "c")
                {
                    let column = match element.attribute("r").filter(|r| !r.is_empty()) {
                        Some(reference) => column_index(reference),
                        None => current_row.max_column.map_or(0, |max| max + 1),
                    };
                    cell = Some(Cell {
                        depth,
                        column,
                        kind: element.attribute("t").unwrap_or("").to_owned(),
                        ..Cell::default()
                    });
                }
            }
            Node::Close => {
                text.close();
                if let Some(current) = cell.as_mut() {
                    if depth == current.depth {
                        if let (Some(done), Some(current_row)) = (cell.take(), row.as_mut())
                            && done.column < MAX_COLUMNS
                        {
                            current_row
                                .cells
                                .insert(done.column, cell_value(&done, shared));
                            current_row.max_column = Some(
                                current_row
                                    .max_column
                                    .map_or(done.column, |max| max.max(done.column)),
                            );
                        }
                    } else {
                        current.value_open = false;
                        if current.inline_depth == Some(depth) {
                            current.inline_depth = None;
                        }
                    }
                } else if let Some(current_row) = row.as_mut()
                    && depth == current_row.depth
                {
                    let values = match current_row.max_column {
                        Some(max) => (0..=max)
                            .map(|i| current_row.cells.remove(&i).unwrap_or_default())
                            .collect(),
                        None => Vec::new(),
                    };
                    rows.push(values);
                    row = None;
                }
                depth = depth.saturating_sub(1);
            }
            Node::Text(chunk) => {
                if let Some(current) = cell.as_mut() {
                    if current.value_open {
                        if let Some(value) = current.value.as_mut() {
                            value.push_str(chunk);
                        }
                    } else if text.takes_text()
                        && let Some(inline) = current.inline.as_mut()
                    {
                        inline.push_str(chunk);
                    }
                }
            }
        }
        Flow::Continue
    })?;
    while rows
        .last()
        .is_some_and(|last| last.iter().all(|value| value.trim().is_empty()))
    {
        rows.pop();
    }
    Ok(rows)
}

/// hermes' `_cell_value`.
fn cell_value(cell: &Cell, shared: &[String]) -> String {
    let value = cell.value.as_deref().unwrap_or("");
    match cell.kind.as_str() {
        "s" => shared_index(value, shared.len())
            .and_then(|index| shared.get(index))
            .cloned()
            .unwrap_or_default(),
        "inlineStr" => cell.inline.clone().unwrap_or_default(),
        "b" => {
            if matches!(value.trim(), "1" | "true" | "TRUE") {
                "TRUE".to_owned()
            } else {
                "FALSE".to_owned()
            }
        }
        "e" if value.is_empty() => "#ERROR".to_owned(),
        _ => value.to_owned(),
    }
}

/// Python's `shared[int(value)]` index: surrounding whitespace allowed, a
/// negative index counts from the end.
fn shared_index(value: &str, len: usize) -> Option<usize> {
    let number: i64 = value.trim().parse().ok()?;
    if number >= 0 {
        usize::try_from(number).ok()
    } else {
        let from_end = usize::try_from(number.unsigned_abs()).ok()?;
        len.checked_sub(from_end)
    }
}
