use super::*;

#[test]
fn html_becomes_markdown_without_scripts_styles_or_head() {
    let (title, text) = html_to_markdown(
        "<html><head><title>A &amp; B</title><style>p{color:red}</style></head><body>\
         <h1>Heading</h1><p>Some <b>bold</b> text.</p><script>alert('x')</script>\
         <a href=\"https://example.org/x\">link</a></body></html>",
    );
    assert_eq!(title, "A & B");
    assert!(text.contains("# Heading"), "{text}");
    assert!(text.contains("**bold**"), "{text}");
    assert!(text.contains("[link](https://example.org/x)"), "{text}");
    assert!(!text.contains("alert"), "{text}");
    assert!(!text.contains("color:red"), "{text}");
}

#[test]
fn inline_base64_images_become_placeholders_and_real_links_stay() {
    let text = "a ![logo](data:image/png;base64,iVBORw0KGgo=) b ![](data:image/gif;base64,R0lG) \
                c (data:image/png;base64,AAAA) d data:image/jpeg;base64,/9j/ e ![pic](https://x.org/p.png)";
    assert_eq!(
        images_to_placeholders(text),
        "a [IMAGE: logo] b [IMAGE] c [IMAGE] d [IMAGE] e ![pic](https://x.org/p.png)"
    );
}

#[test]
fn only_text_types_are_read() {
    assert!(readable("text/plain", "hello").is_ok());
    assert!(readable("application/json", "{}").is_ok());
    let refused = readable("image/png", "\u{89}PNG").unwrap_err();
    assert!(refused.contains("image/png"), "{refused}");
    // A server that names no type but sends HTML is read as HTML.
    let (title, _) = readable("", "<!DOCTYPE html><title>T</title><p>x</p>").unwrap();
    assert_eq!(title, "T");
}

#[test]
fn thousands_are_grouped_as_python_does() {
    assert_eq!(thousands(0), "0");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(15_000), "15,000");
    assert_eq!(thousands(1_234_567), "1,234,567");
}

#[test]
fn urls_carrying_credentials_are_recognised_even_percent_encoded() {
    assert!(carries_secret(
        "https://example.org/?k=sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
    ));
    assert!(carries_secret(
        "https://example.org/?k=%73k-proj-abcdefghijklmnopqrstuvwxyz0123456789"
    ));
    assert!(!carries_secret("https://example.org/docs?page=2"));
}

#[test]
fn head_and_tail_windows_respect_character_boundaries() {
    assert_eq!(prefix_chars("héllo", 2), "hé");
    assert_eq!(suffix_chars("héllo", 4), "éllo");
    assert_eq!(suffix_chars("hé", 5), "hé");
}

#[test]
fn a_page_nested_past_any_real_document_comes_back_as_text_not_a_crash() {
    let hostile = format!(
        "<html><body>{}deep text{}</body></html>",
        "<div>".repeat(200_000),
        "</div>".repeat(200_000)
    );
    let (_, text) = html_to_markdown(&hostile);
    assert_eq!(text, "deep text");
    assert_eq!(nesting_depth("<div>a<br><img src=x/><b>b</b></div>"), 2);
    // Thousands of paragraphs and items never closed are siblings, not depth.
    let sloppy = format!(
        "<html><body><ul>{}</ul></body></html>",
        "<li><p>item ".repeat(5_000)
    );
    assert!(nesting_depth(&sloppy) <= 4, "{}", nesting_depth(&sloppy));
    let (_, list) = html_to_markdown(&sloppy);
    assert!(
        list.starts_with("*") || list.starts_with("-"),
        "{}",
        &list[..80]
    );
    let (_, normal) = html_to_markdown("<html><body><h1>Title</h1><p>para</p></body></html>");
    assert!(normal.contains("# Title"), "{normal}");
}

#[test]
fn a_page_is_decoded_by_its_declared_charset() {
    // "café" in Latin-1 and in Shift_JIS "日本".
    let latin1 = b"<p>caf\xe9</p>";
    assert_eq!(
        decode(Some("iso-8859-1"), "text/html", latin1),
        "<p>café</p>"
    );
    let meta = b"<html><head><meta charset=\"windows-1252\"></head><p>caf\xe9 \x93quoted\x94</p>";
    assert!(decode(None, "text/html", meta).contains("café “quoted”"));
    let equiv = b"<meta http-equiv=\"Content-Type\" content=\"text/html; charset=Shift_JIS\">\x93\xfa\x96\x7b";
    assert!(decode(None, "text/html", equiv).ends_with("日本"));
    // The header wins over the page; no declaration is UTF-8; a BOM wins over both.
    assert_eq!(decode(Some("utf-8"), "text/html", "é".as_bytes()), "é");
    assert_eq!(decode(None, "text/plain", "naïve".as_bytes()), "naïve");
    assert_eq!(
        decode(Some("iso-8859-1"), "text/html", b"\xef\xbb\xbf\xc3\xa9"),
        "é"
    );
    // An unknown label falls back to UTF-8 with replacement characters.
    assert_eq!(
        decode(Some("no-such-charset"), "text/html", b"a\xffb"),
        "a\u{fffd}b"
    );
}
