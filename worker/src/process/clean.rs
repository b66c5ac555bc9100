//! What every piece of command output goes through before a model sees it:
//! ANSI escapes stripped, secrets redacted (hermes' `redact_terminal_output`),
//! and literal secrets of this worker (the sudo password) masked.

use caduceus_common::redact::{RedactMode, redact, redact_terminal_output};
use caduceus_common::text::strip_ansi;

/// Secrets shorter than this are not masked literally: masking every `ab`
/// would wreck output and hide nothing.
const MIN_LITERAL_SECRET: usize = 6;

#[derive(Clone, Default)]
pub struct OutputCleaner {
    literals: Vec<String>,
}

impl std::fmt::Debug for OutputCleaner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputCleaner")
            .field("literals", &self.literals.len())
            .finish()
    }
}

impl OutputCleaner {
    /// A cleaner that also masks these exact strings.
    pub fn with_literals(literals: impl IntoIterator<Item = String>) -> Self {
        OutputCleaner {
            literals: literals
                .into_iter()
                .filter(|s| s.chars().count() >= MIN_LITERAL_SECRET)
                .collect(),
        }
    }

    /// Output of `command`: ANSI stripped, redacted, literal secrets masked.
    pub fn output(&self, text: &str, command: &str) -> String {
        let text = strip_ansi(text);
        let text = redact_terminal_output(&text, Some(command)).into_owned();
        self.mask_literals(text)
    }

    /// A command line shown back (hermes redacts it as code).
    pub fn command(&self, command: &str) -> String {
        let text = redact(command, RedactMode::CodeOutput).into_owned();
        self.mask_literals(text)
    }

    fn mask_literals(&self, mut text: String) -> String {
        for secret in &self.literals {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), "***");
            }
        }
        text
    }
}
