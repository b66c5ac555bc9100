//! How much of the context tool results may take (hermes
//! `tools/budget_config.py` and `enforce_turn_budget`): one result above its
//! threshold is persisted; when the results of one turn together exceed the
//! turn budget, the largest are persisted until the rest fits.

/// Per-result threshold when nothing else is configured.
pub const DEFAULT_RESULT_CHARS: usize = 100_000;
/// Budget for all tool results of one assistant turn.
pub const DEFAULT_TURN_BUDGET_CHARS: usize = 200_000;
/// Characters of preview kept inline for a persisted result.
pub const DEFAULT_PREVIEW_CHARS: usize = 1_500;

const CHARS_PER_TOKEN: u64 = 4;
const PER_RESULT_WINDOW_PERCENT: u64 = 15;
const PER_TURN_WINDOW_PERCENT: u64 = 30;
const MIN_RESULT_CHARS: usize = 8_000;
const MIN_TURN_BUDGET_CHARS: usize = 16_000;

/// The result-size limits in force for one agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultBudget {
    /// Threshold above which a single result is persisted.
    pub per_result: usize,
    /// Budget for the sum of one turn's results.
    pub per_turn: usize,
    /// Preview size of a persisted result.
    pub preview_chars: usize,
}

impl Default for ResultBudget {
    fn default() -> Self {
        Self {
            per_result: DEFAULT_RESULT_CHARS,
            per_turn: DEFAULT_TURN_BUDGET_CHARS,
            preview_chars: DEFAULT_PREVIEW_CHARS,
        }
    }
}

/// Scales the budget to a model's context window: with w = 4 · tokens
/// characters, a single result may take 15 % of w (8,000 ..= 100,000) and a
/// turn 30 % (16,000 ..= 200,000). Unknown or zero windows get the defaults.
///
/// ```
/// use caduceus_common::persist::budget_for_context_window;
/// let b = budget_for_context_window(Some(65_536));
/// assert_eq!((b.per_result, b.per_turn), (39_321, 78_643));
/// let big = budget_for_context_window(Some(1_000_000));
/// assert_eq!((big.per_result, big.per_turn), (100_000, 200_000));
/// ```
pub fn budget_for_context_window(context_tokens: Option<u64>) -> ResultBudget {
    let Some(tokens) = context_tokens.filter(|&t| t > 0) else {
        return ResultBudget::default();
    };
    let window_chars = tokens.saturating_mul(CHARS_PER_TOKEN);
    let share = |percent: u64| -> usize {
        let chars = window_chars / 100 * percent + window_chars % 100 * percent / 100;
        usize::try_from(chars).unwrap_or(usize::MAX)
    };
    ResultBudget {
        per_result: share(PER_RESULT_WINDOW_PERCENT).clamp(MIN_RESULT_CHARS, DEFAULT_RESULT_CHARS),
        per_turn: share(PER_TURN_WINDOW_PERCENT)
            .clamp(MIN_TURN_BUDGET_CHARS, DEFAULT_TURN_BUDGET_CHARS),
        preview_chars: DEFAULT_PREVIEW_CHARS,
    }
}

/// One tool result of a turn, as the turn budget sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultSize {
    /// Length of the result content in characters.
    pub chars: usize,
    /// Whether it is already a persisted-output replacement
    /// ([`is_persisted`](super::is_persisted)); those are never picked.
    pub persisted: bool,
}

/// The turn-budget walk of hermes' `enforce_turn_budget`, one step at a
/// time so the caller can persist asynchronously and report the real size
/// of each replacement:
///
/// ```
/// use caduceus_common::persist::{ResultSize, TurnBudget};
/// let sizes = [150_000, 30_000, 90_000].map(|chars| ResultSize { chars, persisted: false });
/// let mut plan = TurnBudget::new(&sizes, 200_000);
/// let mut persisted = Vec::new();
/// while let Some(index) = plan.next_to_persist() {
///     persisted.push(index);
///     plan.replaced(index, 1_800); // the preview that replaced it
/// }
/// assert_eq!(persisted, [0]);
/// ```
#[derive(Debug, Clone)]
pub struct TurnBudget {
    budget: usize,
    total: usize,
    sizes: Vec<usize>,
    /// Indices not yet persisted, largest first (ties in turn order).
    candidates: std::vec::IntoIter<usize>,
}

impl TurnBudget {
    /// Starts the walk over one turn's results.
    pub fn new(results: &[ResultSize], budget: usize) -> Self {
        let total = results.iter().map(|r| r.chars).sum();
        let mut candidates: Vec<usize> = (0..results.len())
            .filter(|&i| !results[i].persisted)
            .collect();
        // Stable sort: equal sizes keep their order, as in hermes.
        candidates.sort_by(|&a, &b| results[b].chars.cmp(&results[a].chars));
        Self {
            budget,
            total,
            sizes: results.iter().map(|r| r.chars).collect(),
            candidates: candidates.into_iter(),
        }
    }

    /// The next result to persist, or `None` once the turn fits (or nothing
    /// is left to persist).
    pub fn next_to_persist(&mut self) -> Option<usize> {
        if self.total <= self.budget {
            return None;
        }
        self.candidates.next()
    }

    /// Records that result `index` was replaced by a text of
    /// `replacement_chars` characters. Not calling it (the result could not
    /// be replaced) leaves the total unchanged, as in hermes.
    pub fn replaced(&mut self, index: usize, replacement_chars: usize) {
        if let Some(size) = self.sizes.get_mut(index) {
            self.total = self.total - *size + replacement_chars;
            *size = replacement_chars;
        }
    }

    /// The current sum of the turn's results.
    pub fn total_chars(&self) -> usize {
        self.total
    }
}

/// The whole walk at once, assuming each persisted result is replaced by a
/// text of `replacement_chars` characters (a persisted preview is about
/// `preview_chars + 300`): the indices to persist, in order.
///
/// ```
/// use caduceus_common::persist::{turn_budget, ResultSize};
/// let sizes = [120_000, 80_000, 60_000].map(|chars| ResultSize { chars, persisted: false });
/// assert_eq!(turn_budget(&sizes, 200_000, 1_800), vec![0]);
/// assert!(turn_budget(&sizes[1..], 200_000, 1_800).is_empty());
/// ```
pub fn turn_budget(results: &[ResultSize], budget: usize, replacement_chars: usize) -> Vec<usize> {
    let mut plan = TurnBudget::new(results, budget);
    let mut chosen = Vec::new();
    while let Some(index) = plan.next_to_persist() {
        plan.replaced(index, replacement_chars);
        chosen.push(index);
    }
    chosen
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
