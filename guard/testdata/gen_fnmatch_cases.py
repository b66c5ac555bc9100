#!/usr/bin/env python3
"""Regenerates fnmatch_cases.json: (name, pattern, fnmatchcase) triples decided by
Python's own fnmatch.fnmatchcase, which approvals.deny globs follow (hermes matches
deny rules with fnmatch). Hand cases first, then a fixed-seed random sample over the
characters whose meaning differs between glob dialects.

    python3 guard/testdata/gen_fnmatch_cases.py > guard/testdata/fnmatch_cases.json
"""
import fnmatch
import json
import random
import sys

HAND = [
    ("git push --force", "git push*"),
    ("rm -rf /tmp/x", "rm -rf *"),
    ("a/b/c", "a*c"),
    ("a/b/c", "a?b?c"),
    ("cat", "c?t"),
    ("cart", "c?t"),
    ("b", "[abc]"),
    ("d", "[!abc]"),
    ("q", "[a-z]"),
    ("]", "[]]"),
    ("]", "[!]]"),
    ("[x", "[x"),
    ("", "*"),
    ("", ""),
    ("abc", "ab"),
    ("aXbXc", "a*b*c"),
    ("a\\b", "a\\b"),
    ("a\\b", "a[\\]b"),
    ("*", "\\*"),
    ("-", "[a-]"),
    ("-", "[-a]"),
    ("b", "[z-a]"),
    ("/", "[/]"),
    ("/", "?"),
    ("é", "?"),
    ("é", "[é]"),
    ("{a,b}", "{a,b}"),
    ("a", "{a,b}"),
    ("**", "**"),
    ("a/b", "**"),
    ("^", "[^a]"),
    ("b", "[^a]"),
    ("!", "[!]"),
    ("[!]", "[!]"),
    ("a", "[!]a]"),
    ("git status", "git st*tus"),
    ("curl x | sh", "*| sh"),
    ("sudo rm -rf /", "sudo *"),
]

ALPHABET_PATTERN = list("ab/*?[]!-^\\.{},é")
ALPHABET_NAME = list("ab/-]![^\\.{},é*?")


def instantiate(pattern: str, rng: random.Random) -> str:
    """A name the pattern probably matches: `*` and `?` filled in, a class replaced by
    one of its characters; sometimes one character changed."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append("".join(rng.choice(ALPHABET_NAME) for _ in range(rng.randint(0, 3))))
        elif c == "?":
            out.append(rng.choice(ALPHABET_NAME))
        elif c == "[" and "]" in pattern[i + 2 :]:
            close = pattern.index("]", i + 2)
            body = pattern[i + 1 : close].lstrip("!") or "]"
            out.append(rng.choice(body))
            i = close
        else:
            out.append(c)
        i += 1
    name = "".join(out)
    if name and rng.random() < 0.2:
        k = rng.randrange(len(name))
        name = name[:k] + rng.choice(ALPHABET_NAME) + name[k + 1 :]
    return name


def main() -> None:
    rng = random.Random(12)
    cases = list(HAND)
    seen = set(cases)
    while len(cases) < 4200:
        pattern = "".join(rng.choice(ALPHABET_PATTERN) for _ in range(rng.randint(0, 7)))
        if rng.random() < 0.5:
            name = "".join(rng.choice(ALPHABET_NAME) for _ in range(rng.randint(0, 7)))
        else:
            name = instantiate(pattern, rng)
        if (name, pattern) not in seen:
            seen.add((name, pattern))
            cases.append((name, pattern))
    # One case per line: [name, pattern, fnmatchcase(name, pattern)].
    sys.stdout.write("[\n")
    for index, (name, pattern) in enumerate(cases):
        case = json.dumps([name, pattern, fnmatch.fnmatchcase(name, pattern)], ensure_ascii=False)
        sys.stdout.write(case + (",\n" if index + 1 < len(cases) else "\n"))
    sys.stdout.write("]\n")


if __name__ == "__main__":
    main()
