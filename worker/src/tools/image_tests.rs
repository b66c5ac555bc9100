use super::*;

#[test]
fn images_are_recognised_by_their_bytes() {
    assert_eq!(sniff(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"), Some("image/png"));
    assert_eq!(
        sniff(&[0xff, 0xd8, 0xff, 0xe0, 0, 0x10]),
        Some("image/jpeg")
    );
    assert_eq!(sniff(b"GIF89a\x01\0\x01\0"), Some("image/gif"));
    assert_eq!(sniff(b"RIFF\x24\0\0\0WEBPVP8 "), Some("image/webp"));
    assert_eq!(sniff(b"<html><body>not an image"), None);
    assert_eq!(sniff(b""), None);
}

#[test]
fn the_image_document_carries_base64_type_and_size() {
    let mut extra = Map::new();
    extra.insert("screenshot_path".to_owned(), json!("/tmp/s.png"));
    let reply = image_document("image/png", b"\x89PNG", extra);
    let doc: Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(
        doc,
        json!({"success": true, "image": {"mime": "image/png", "data": "iVBORw==", "bytes": 4}, "screenshot_path": "/tmp/s.png"})
    );
}
