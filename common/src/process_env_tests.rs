use std::ffi::OsString;

use super::*;

fn os(pairs: &[(&str, &str)]) -> impl Iterator<Item = (OsString, OsString)> {
    pairs
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect::<Vec<_>>()
        .into_iter()
}

#[test]
fn secret_named_variables_are_withheld_and_others_stay() {
    let (withheld, names) = Withheld::from_vars(os(&[
        ("PATH", "/usr/bin"),
        ("CADUCEUS_TOKEN", "fleet-token"),
        ("AWS_SECRET_ACCESS_KEY", "aws-secret"),
        ("GIT_AUTHOR_NAME", "Ann"),
        ("OPENAI_BASE_URL", "http://private:8000"),
    ]));
    assert_eq!(
        names,
        ["CADUCEUS_TOKEN", "AWS_SECRET_ACCESS_KEY", "OPENAI_BASE_URL"].map(OsString::from)
    );
    assert_eq!(withheld.get("CADUCEUS_TOKEN"), Some("fleet-token"));
    assert_eq!(withheld.get("PATH"), None);
    assert_eq!(
        withheld.values().collect::<Vec<_>>(),
        ["fleet-token", "aws-secret", "http://private:8000"]
    );
}

#[test]
fn merged_puts_withheld_variables_after_the_current_ones_without_duplicates() {
    let (withheld, _) = Withheld::from_vars(os(&[("GITHUB_TOKEN", "ghp"), ("PATH", "/bin")]));
    let current =
        [("PATH", "/bin"), ("GITHUB_TOKEN", "newer")].map(|(k, v)| (k.to_owned(), v.to_owned()));
    assert_eq!(
        withheld.merged(current.clone().into_iter()),
        current.to_vec(),
        "a variable still (or again) in the environment wins"
    );
    let merged = withheld.merged(std::iter::once(("PATH".to_owned(), "/bin".to_owned())));
    assert_eq!(
        merged,
        [("PATH", "/bin"), ("GITHUB_TOKEN", "ghp")].map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
}
