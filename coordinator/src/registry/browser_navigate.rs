//! `browser_navigate`'s description names other tools (`web_search`,
//! `web_extract`, `terminal`, `browser_snapshot`) as better choices; a
//! model told to prefer a tool it does not have calls it anyway. hermes
//! strips the web sentence when neither web tool is offered; this override
//! rewrites every such reference to the tools the request offers.

use serde_json::{Map, Value};

use super::DefinitionContext;

pub const NAME: &str = "browser_navigate";

const WEB_HINT: &str =
    " For simple information retrieval, prefer web_search or web_extract (faster, cheaper).";
const PLAIN_TEXT_HINT_START: &str = " For plain-text endpoints";
const PLAIN_TEXT_HINT_END: &str = "much slower for these.";
const PLAIN_TEXT_CHOICE: &str = "prefer curl via the terminal tool or web_extract;";
const SNAPSHOT_NOTE: &str = " — no need to call browser_snapshot separately after navigating";

/// The description for a request offering the tools of `context`
/// (`description` is the static one, from `schemas/browser_navigate.json`).
pub fn description(description: &str, context: &DefinitionContext<'_>) -> String {
    let mut text = description.to_owned();
    let web: Vec<&str> = ["web_search", "web_extract"]
        .into_iter()
        .filter(|t| context.offers(t))
        .collect();
    let web_hint = match web.as_slice() {
        [] => String::new(),
        [one] => format!(" For simple information retrieval, prefer {one} (faster, cheaper)."),
        _ => WEB_HINT.to_owned(),
    };
    text = text.replace(WEB_HINT, &web_hint);
    let choice = match (context.offers("terminal"), context.offers("web_extract")) {
        (true, true) => Some(PLAIN_TEXT_CHOICE),
        (true, false) => Some("prefer curl via the terminal tool;"),
        (false, true) => Some("prefer web_extract;"),
        (false, false) => None,
    };
    match choice {
        Some(choice) => text = text.replace(PLAIN_TEXT_CHOICE, choice),
        None => {
            if let Some(start) = text.find(PLAIN_TEXT_HINT_START)
                && let Some(len) = text[start..].find(PLAIN_TEXT_HINT_END)
            {
                text.replace_range(start..start + len + PLAIN_TEXT_HINT_END.len(), "");
            }
        }
    }
    if !context.offers("browser_snapshot") {
        text = text.replace(SNAPSHOT_NOTE, "");
    }
    text
}

/// The override of `browser_navigate`'s entry whose static description is
/// `static_description`.
pub fn overrides(
    static_description: &str,
    context: &DefinitionContext<'_>,
) -> Option<Map<String, Value>> {
    let text = description(static_description, context);
    (text != static_description).then(|| {
        let mut fields = Map::new();
        fields.insert("description".to_owned(), Value::String(text));
        fields
    })
}
