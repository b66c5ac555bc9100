//! The iteration budget of one agent (hermes `agent/iteration_budget.py`).
//!
//! One model request consumes one iteration. A session's cap is
//! `max_iterations` (90 by default, 50 for delegated children); each child
//! has its own budget, so a tree of agents can make more requests in total
//! than the root's cap. A turn whose tool calls were all `execute_code` is
//! refunded. When the budget is spent the loop is granted one *grace call*:
//! the tool-less request that asks the model to summarise its work.

/// What the loop may do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permit {
    /// An ordinary request, counted against the budget.
    Counted,
    /// The one request granted past the cap.
    Grace,
    /// Nothing is left.
    Exhausted,
}

#[derive(Debug, Clone)]
pub struct IterationBudget {
    max_total: u32,
    used: u32,
    grace: bool,
}

impl IterationBudget {
    pub fn new(max_total: u32) -> Self {
        IterationBudget {
            max_total,
            used: 0,
            grace: false,
        }
    }

    /// Takes one iteration; `false` at the cap.
    pub fn consume(&mut self) -> bool {
        if self.used >= self.max_total {
            return false;
        }
        self.used += 1;
        true
    }

    /// Gives one iteration back (never below zero).
    pub fn refund(&mut self) {
        self.used = self.used.saturating_sub(1);
    }

    pub fn used(&self) -> u32 {
        self.used
    }

    pub fn remaining(&self) -> u32 {
        self.max_total.saturating_sub(self.used)
    }

    pub fn max_total(&self) -> u32 {
        self.max_total
    }

    /// Allows one more request after the budget is spent.
    pub fn grant_grace(&mut self) {
        self.grace = true;
    }

    /// hermes' loop condition: `(remaining > 0) or grace_call`; the grace
    /// flag is consumed by the request it allows.
    pub fn permit(&mut self) -> Permit {
        if self.grace {
            self.grace = false;
            return Permit::Grace;
        }
        if self.consume() {
            Permit::Counted
        } else {
            Permit::Exhausted
        }
    }
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
