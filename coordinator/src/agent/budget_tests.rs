use super::*;

#[test]
fn consumes_up_to_the_cap_then_refuses() {
    let mut budget = IterationBudget::new(2);
    assert!(budget.consume());
    assert!(budget.consume());
    assert!(!budget.consume());
    assert_eq!((budget.used(), budget.remaining()), (2, 0));
}

#[test]
fn refund_never_goes_below_zero() {
    let mut budget = IterationBudget::new(3);
    budget.refund();
    assert_eq!(budget.used(), 0);
    assert!(budget.consume());
    budget.refund();
    assert_eq!(budget.remaining(), 3);
}

#[test]
fn the_grace_call_is_one_request_past_the_cap() {
    let mut budget = IterationBudget::new(1);
    assert_eq!(budget.permit(), Permit::Counted);
    assert_eq!(budget.permit(), Permit::Exhausted);
    budget.grant_grace();
    assert_eq!(budget.permit(), Permit::Grace);
    assert_eq!(budget.permit(), Permit::Exhausted);
    assert_eq!(budget.used(), 1);
}
