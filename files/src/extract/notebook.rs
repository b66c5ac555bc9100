//! `.ipynb`: every markdown, code and raw cell under a `# ── Code cell 2 ──`
//! header (raw cells unnumbered), outputs left out; nbformat 4 `cells` or
//! nbformat 3 `worksheets[].cells`.

use serde_json::Value;

use super::{ExtractError, finish_lines};

pub(super) fn extract(data: &[u8]) -> Result<String, ExtractError> {
    let text = String::from_utf8_lossy(data);
    let notebook: Value = serde_json::from_str(&text)
        .map_err(|err| ExtractError(format!("Not a valid notebook: {err}")))?;
    let Value::Object(notebook) = notebook else {
        return Err(ExtractError("Notebook root is not an object".to_owned()));
    };
    let cells: Vec<&Value> = match notebook.get("cells") {
        Some(Value::Array(cells)) => cells.iter().collect(),
        _ => match notebook.get("worksheets") {
            Some(Value::Array(sheets)) => sheets
                .iter()
                .filter_map(|sheet| match sheet.get("cells") {
                    Some(Value::Array(cells)) => Some(cells.iter()),
                    _ => None,
                })
                .flatten()
                .collect(),
            _ => Vec::new(),
        },
    };
    if cells.is_empty() {
        return Err(ExtractError("Notebook contains no cells".to_owned()));
    }

    let (mut markdown, mut code) = (0, 0);
    let mut out: Vec<String> = Vec::new();
    for cell in cells {
        let header = match cell.get("cell_type").and_then(Value::as_str) {
            Some("markdown") => {
                markdown += 1;
                format!("# ── Markdown cell {markdown} ──")
            }
            Some("code") => {
                code += 1;
                format!("# ── Code cell {code} ──")
            }
            Some("raw") => "# ── Raw cell ──".to_owned(),
            _ => continue,
        };
        out.push(header);
        out.push(
            source_text(cell.get("source"))
                .trim_end_matches('\n')
                .to_owned(),
        );
        out.push(String::new());
    }
    if out.is_empty() {
        return Err(ExtractError(
            "Notebook contains no readable cells".to_owned(),
        ));
    }
    Ok(finish_lines(&out))
}

/// A cell's `source`: a string, or a list whose strings are concatenated.
fn source_text(source: Option<&Value>) -> String {
    match source {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts.iter().filter_map(Value::as_str).collect(),
        _ => String::new(),
    }
}
