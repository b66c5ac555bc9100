//! TEMP shim
pub struct Verdict;
impl Verdict {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"verdict":"allow","description":null})
    }
}
pub fn check_command(_c: &str) -> Verdict {
    Verdict
}
