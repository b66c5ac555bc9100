use super::*;

fn sizes(chars: &[usize]) -> Vec<ResultSize> {
    chars
        .iter()
        .map(|&chars| ResultSize {
            chars,
            persisted: false,
        })
        .collect()
}

#[test]
fn context_window_scaling_matches_hermes() {
    // (tokens, per_result, per_turn) from hermes' budget_for_context_window.
    for (tokens, per_result, per_turn) in [
        (4_096, 8_000, 16_000),
        (8_192, 8_000, 16_000),
        (32_768, 19_660, 39_321),
        (65_536, 39_321, 78_643),
        (128_000, 76_800, 153_600),
        (200_000, 100_000, 200_000),
        (1_000_000, 100_000, 200_000),
    ] {
        let budget = budget_for_context_window(Some(tokens));
        assert_eq!(
            (budget.per_result, budget.per_turn),
            (per_result, per_turn),
            "{tokens}"
        );
        assert_eq!(budget.preview_chars, 1_500);
    }
    assert_eq!(budget_for_context_window(None), ResultBudget::default());
    assert_eq!(budget_for_context_window(Some(0)), ResultBudget::default());
    assert_eq!(budget_for_context_window(Some(u64::MAX)).per_turn, 200_000);
}

#[test]
fn largest_results_are_persisted_first_until_the_turn_fits() {
    // 90k + 80k + 70k + 10k = 250k: persisting 90k leaves 162k.
    assert_eq!(
        turn_budget(&sizes(&[70_000, 90_000, 10_000, 80_000]), 200_000, 2_000),
        vec![1]
    );
    // Under budget: nothing.
    assert!(turn_budget(&sizes(&[100_000, 100_000]), 200_000, 2_000).is_empty());
    // Several needed; equal sizes go in turn order.
    assert_eq!(
        turn_budget(
            &sizes(&[60_000, 60_000, 60_000, 60_000, 60_000]),
            100_000,
            2_000
        ),
        vec![0, 1, 2, 3]
    );
}

#[test]
fn already_persisted_results_count_but_are_never_picked() {
    let mut results = sizes(&[150_000, 5_000, 60_000]);
    results[0].persisted = true;
    // 215k > 200k; the persisted 150k one is skipped, the 60k one goes.
    assert_eq!(turn_budget(&results, 200_000, 2_000), vec![2]);
    // Nothing left to pick: the walk ends even though the turn is over.
    results[1].persisted = true;
    results[2].persisted = true;
    assert!(turn_budget(&results, 200_000, 2_000).is_empty());
}

#[test]
fn failed_replacement_keeps_the_total() {
    let mut plan = TurnBudget::new(&sizes(&[150_000, 100_000]), 200_000);
    assert_eq!(plan.next_to_persist(), Some(0));
    // Persisting 0 failed (not recorded), so the next one is tried.
    assert_eq!(plan.next_to_persist(), Some(1));
    plan.replaced(1, 1_700);
    assert_eq!(plan.total_chars(), 151_700);
    assert_eq!(plan.next_to_persist(), None);
}
