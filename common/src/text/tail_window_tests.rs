use super::*;

#[test]
fn the_window_keeps_the_last_characters_in_bounded_memory() {
    let mut tail = TailWindow::new(1000);
    for i in 0..100_000 {
        tail.push(&format!("line {i}\n"));
    }
    let text = tail.text();
    assert_eq!(text.chars().count(), 1000);
    assert!(text.ends_with("line 99999\n"));
    assert!(tail.retained_bytes() < 4 * 1000 + 64);
    assert_eq!(tail.last(11), "line 99999\n");

    let mut big = TailWindow::new(10);
    big.push(&"é".repeat(50));
    assert_eq!(big.text(), "é".repeat(10));
    assert_eq!(big.total_chars(), 50);
    assert!(!big.is_empty());
    assert!(TailWindow::new(5).is_empty());
}
