#![allow(clippy::unwrap_used, clippy::panic)]

use std::io::Write;

use super::*;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/documents");

fn fixture(name: &str) -> (Vec<u8>, String) {
    let data = std::fs::read(format!("{FIXTURES}/{name}")).unwrap();
    let expected = std::fs::read_to_string(format!("{FIXTURES}/{name}.expected")).unwrap();
    (data, expected)
}

/// Each fixture's text is what hermes-agent 0.19.0 extracts from it
/// (`fixtures/documents/make.py` wrote both), byte for byte — or the same
/// ExtractionError message.
#[test]
fn every_fixture_extracts_as_hermes_does() {
    let names = [
        "notebook.ipynb",
        "notebook_v3.ipynb",
        "empty.ipynb",
        "report.docx",
        "no_document_xml.docx",
        "book.xlsx",
        "handmade.xlsx",
    ];
    for name in names {
        let (data, expected) = fixture(name);
        let kind = DocumentKind::of(name).unwrap();
        let got = match extract(kind, &data) {
            Ok(text) => text,
            Err(error) => format!("ExtractionError: {error}\n"),
        };
        assert_eq!(got, expected, "{name}");
    }
}

#[test]
fn kinds_go_by_extension_in_any_case() {
    assert_eq!(DocumentKind::of("/w/A.IPYNB"), Some(DocumentKind::Notebook));
    assert_eq!(DocumentKind::of("/w/r.Docx"), Some(DocumentKind::Word));
    assert_eq!(DocumentKind::of("/w/b.xlsx"), Some(DocumentKind::Workbook));
    assert_eq!(DocumentKind::of("/w/b.xls"), None);
    assert_eq!(DocumentKind::of("/w/docx"), None);
}

#[test]
fn splitlines_is_pythons() {
    assert_eq!(
        py_splitlines("a\nb\r\nc\rd\u{2028}e\u{0c}f\n"),
        ["a", "b", "c", "d", "e", "f"]
    );
    assert_eq!(py_splitlines("a\n\nb"), ["a", "", "b"]);
    assert!(py_splitlines("").is_empty());
    assert_eq!(py_splitlines("\n"), [""]);
}

#[test]
fn not_documents_are_errors() {
    let error = extract(DocumentKind::Word, b"plain text").unwrap_err();
    assert!(error.0.starts_with("Not a valid DOCX: "), "{error}");
    let error = extract(DocumentKind::Workbook, b"PK\x03\x04garbage").unwrap_err();
    assert!(error.0.starts_with("Not a valid XLSX: "), "{error}");
    let error = extract(DocumentKind::Notebook, b"[1, 2]").unwrap_err();
    assert_eq!(error.0, "Notebook root is not an object");
    let error = extract(
        DocumentKind::Notebook,
        b"{\"cells\": [{\"cell_type\": \"x\"}]}",
    )
    .unwrap_err();
    assert_eq!(error.0, "Notebook contains no readable cells");
}

fn zip_of(parts: &[(&str, &[u8])]) -> Vec<u8> {
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in parts {
        writer.start_file(*name, options).unwrap();
        writer.write_all(data).unwrap();
    }
    writer.finish().unwrap().into_inner()
}

const W_NS: &str = r#"xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main""#;

#[test]
fn docx_text_boxes_entities_and_malformed_xml() {
    let document = format!(
        r#"<?xml version="1.0"?><w:document {W_NS}><w:body>
        <w:p><w:r><w:t>outer &amp; &#x263A;</w:t></w:r><w:r><w:pict><w:txbxContent><w:p><w:r><w:t>inner</w:t></w:r></w:p></w:txbxContent></w:pict></w:r><w:r><w:t><![CDATA[<cdata>]]></w:t></w:r></w:p>
        </w:body></w:document>"#
    );
    let text = extract(
        DocumentKind::Word,
        &zip_of(&[("word/document.xml", document.as_bytes())]),
    )
    .unwrap();
    // The outer paragraph holds the text box's text too (ElementTree's iter), then the box's own.
    assert_eq!(text, "outer & ☺inner<cdata>\ninner\n");

    let cut = &document.as_bytes()[..document.len() - 30];
    let error = extract(DocumentKind::Word, &zip_of(&[("word/document.xml", cut)])).unwrap_err();
    assert!(
        error.0.starts_with("Malformed XML in word/document.xml: "),
        "{error}"
    );
    let blank = format!(
        r#"<w:document {W_NS}><w:body><w:p><w:r><w:t>  </w:t></w:r></w:p></w:body></w:document>"#
    );
    let error = extract(
        DocumentKind::Word,
        &zip_of(&[("word/document.xml", blank.as_bytes())]),
    )
    .unwrap_err();
    assert_eq!(error.0, "DOCX contains no extractable text");
}

/// A small file that inflates past the part limit is refused, not inflated
/// into memory.
#[test]
fn a_zip_bomb_stops_at_the_part_limit() {
    let mut document = format!(r#"<w:document {W_NS}><w:body><w:p><w:r><w:t>"#).into_bytes();
    document.resize(document.len() + (MAX_PART_BYTES as usize) + 1024, b'a');
    document.extend_from_slice(b"</w:t></w:r></w:p></w:body></w:document>");
    let bomb = zip_of(&[("word/document.xml", &document)]);
    drop(document);
    assert!(bomb.len() < 1024 * 1024, "{}", bomb.len());
    let error = extract(DocumentKind::Word, &bomb).unwrap_err();
    assert!(error.0.contains("inflates to more than"), "{error}");
}

#[test]
fn sheets_stop_at_5000_rows_and_256_columns() {
    let mut sheet = String::from(
        r#"<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>"#,
    );
    for row in 1..=6000 {
        sheet.push_str(&format!(
            r#"<row r="{row}"><c r="A{row}"><v>{row}</v></c><c r="IW{row}"><v>x</v></c></row>"#
        ));
    }
    sheet.push_str("</sheetData></worksheet>");
    let workbook = r#"<workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets><sheet name="Big" r:id="rId1"/></sheets></workbook>"#;
    let rels = r#"<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Target="worksheets/big.xml"/></Relationships>"#;
    let data = zip_of(&[
        ("xl/workbook.xml", workbook.as_bytes()),
        ("xl/_rels/workbook.xml.rels", rels.as_bytes()),
        ("xl/worksheets/big.xml", sheet.as_bytes()),
    ]);
    let text = extract(DocumentKind::Workbook, &data).unwrap();
    let lines = py_splitlines(&text);
    assert_eq!(lines[0], "# ── Sheet: Big ──");
    assert_eq!(lines.len(), 1 + 5000);
    assert_eq!(lines[5000], "5000");
}

#[test]
fn sheet_parts_and_columns_as_hermes_computes_them() {
    use super::xlsx::{column_index, sheet_part};
    assert_eq!(
        sheet_part("worksheets/sheet1.xml"),
        "xl/worksheets/sheet1.xml"
    );
    assert_eq!(
        sheet_part("/xl/worksheets/../worksheets/s.xml"),
        "xl/worksheets/s.xml"
    );
    assert_eq!(sheet_part(""), "xl");
    assert_eq!(sheet_part("../../a.xml"), "../a.xml");
    assert_eq!(column_index("A1"), 0);
    assert_eq!(column_index("z9"), 25);
    assert_eq!(column_index("AA4"), 26);
    assert_eq!(column_index("1"), 0);
}
