#!/usr/bin/env python3
"""Regenerates hermes_redact_cases.json: inputs run through hermes 0.19.0's
agent/redact.py, the oracle for caduceus-common's redact module.

Usage: python3 gen_redact_cases.py /path/to/hermes [COUNT SEED] > hermes_redact_cases.json

A larger run (e.g. COUNT=50000 with another SEED) written elsewhere can be
checked with `CADUCEUS_REDACT_CASES=/tmp/cases.json cargo test -p
caduceus-common -- --ignored redact`.
"""
import json
import random
import sys

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else "/work/ref/hermes")
from agent import redact as R  # noqa: E402

MODES = ["general", "code", "file_read", "terminal:env", "terminal:cat x"]


def run(text, mode):
    if mode == "general":
        return R.redact_sensitive_text(text, force=True)
    if mode == "code":
        return R.redact_sensitive_text(text, force=True, code_file=True)
    if mode == "file_read":
        return R.redact_sensitive_text(text, force=True, file_read=True)
    command = mode.split(":", 1)[1]
    return R.redact_terminal_output(text, command, force=True)


def form_body_whitespace_case(text):
    # caduceus keeps whitespace around a form body; hermes strips it.
    return ("\n" not in text and "&" in text and text != text.strip()
            and R._FORM_BODY_RE.match(text.strip()) is not None)


HAND = [
    # vendor prefixes and boundaries
    "key sk-proj-abcdefghijklmnopqrstuvwxyz0123 end",
    "sk-abc",
    "sk-abcdefghij",
    "xsk-abcdefghijklmnopqrstu",
    "sk-abcdefghijklmnopqrstu-",
    "sk_live_abcdefghijklmn_opq",
    "sk_live_abcdefghijklmn",
    "hsk-abcdefghijklmnop",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "ghp_abcdefghijklmnop-",
    "github_pat_11AAAAAAA0abcdefghijklmnopqrstuvwxyz",
    "xoxb-1234567890-abcdefghijklmn",
    "xapp-1-A012345-abcdefghijklmnop",
    "xapp-1-abcdefghijkl_x",
    "AIzaSyA-abcdefghijklmnopqrstuvwxyz01234",
    "AKIAIOSFODNN7EXAMPLE",
    "AKIAIOSFODNN7EXAMPLEX",
    "AKIAIOSFODNN7EXAMPL",
    "SG.abcdefghijkl.mnopqrstuvwxyz",
    "gAAAAABlabcdefghijklmnopqrstuvwxyz==",
    "gAAAAABlabcdefghijklmnopqrstuvwxyz==x-y",
    "hf_abcdefghijklmnop npm_abcdefghijklmnop pypi-AgEIcHlwaS5vcmc",
    "dop_v1_abcdefghijklmnop am_abcdefghijkl sk_abcdefghijkl_mn",
    "xai-abcdefghijklmnopqrstuvwxyz0123456 fw_abcdefghijklmnopqrstuvwxyz01234",
    "«sk-abcdefghijklmnop» é sk-ééé",
    "task-force-one sk-",
    # env assignments (#2852 lookups)
    "OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz",
    "MY_SERVICE_TOKEN=abc123randomstringvalue",
    "MY_SERVICE_TOKEN=short",
    "FOO_SECRET = bar",
    'DB_PASSWORD="hunter2hunter2hunter2"',
    "DB_PASSWORD='hunter2'",
    'DB_PASSWORD="unterminated',
    'DB_PASSWORD=""',
    'API_KEY="abc"def"',
    "API_KEY=os.getenv('API_KEY')",
    "TOKEN=process.env.TOKEN",
    "MAX_TOKENS=100",
    "abcMY_TOKEN=value123",
    "GITHUB_AUTH=\nnextline",
    "A" * 60 + "_TOKEN=value",
    # config keys (#16413)
    "spring.datasource.password=secret123",
    "app.api.key=xyz",
    "password=secret",
    "  export api_key=abc123def",
    "I have password=foo in prose",
    "see https://x.io/cb?token=abc and password=secret",
    "app.secret.value='quoted value'",
    "db.password='abc'",
    "db.password=a&b=c",
    # JSON fields
    '{"apiKey": "sk-live-value-1234567890", "name": "x"}',
    '{"token":"abc","access_token" : "defdefdefdefdefdefdef"}',
    '{"apiKey": "os.getenv(\'X\')"}',
    '{"password": ""}',
    # YAML
    "password: hunter2",
    "  api_key: abcdefghijklmnopqrstuvwxyz",
    'password: "quoted"',
    "note: secret meeting",
    "error: token expired",
    "author: someone",
    "auth_token: abc",
    "api_key: os.getenv('X')",
    "password:",
    # auth headers (#43083)
    "Authorization: Bearer abc.def.ghi",
    "authorization: Basic dXNlcjpwYXNzd29yZA==",
    "Proxy-Authorization: token ghp_abcdef",
    'curl -H "Authorization: Bearer sk-ant-abcdefghijklmnopqrstuvwxyz" x',
    "Authorization: rawcredentialvalue1234567890",
    "AUTHORIZATION: Digest abc",
    "Authorization: Bearer\nnext",
    "x-api-key: abcdefghijklmnopqrstuvwxyz",
    "X-Goog-Api-Key:short",
    "my-api-key: value",
    '"x-api-key": "abc"',
    # telegram
    "bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw",
    "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw more",
    # private keys
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----",
    "a -----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY----- b -----BEGIN PRIVATE KEY-----\ny\n-----END PRIVATE KEY-----",
    "-----BEGIN PUBLIC KEY-----\nabc\n-----END PUBLIC KEY-----",
    # DB connection strings (#33801)
    "postgres://user:s3cret@db.example.com:5432/app",
    "mongodb+srv://admin:pa55word@cluster0.mongodb.net",
    'url = f"postgresql://{user}:{password}@{host}/db"',
    "postgresql://{user}:{password}@host\n@decorator",
    "REDIS://default:abc@redis:6379",
    # URL userinfo (#6396, #34029)
    "git remote set-url origin https://ghp_tokenvalue123@github.com/o/r.git",
    "https://abcdefgh12345678@github.com/o/r",
    "https://git@github.com/o/r",
    "https://user:pass@example.com/x",
    "https://example.com/cb?code=abc123&state=xyz",
    "ftps://longtokenvalue@host",
    # JWT
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "eyJhbGciOiJIUzI1NiJ9",
    "eyJshort",
    # phones
    "call +14155552671 now",
    "+12345678",
    "+1234567890123456",
    "+12345678901a",
    "+123456789012345a",
    "id+1234567x",
    # form bodies
    "grant_type=password&username=u&password=p&client_secret=abc",
    "a=1&b=2",
    "token_count=5&session_id=3",
    "a=1&b=2\nc=3",
    # mixtures
    "export GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz012345\nexport PATH=/usr/bin",
    "HOME=/root\nAWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\nSHELL=/bin/bash",
    "\x1c password=abc\x1cdef",
    "key=\x1ctoken",
    "",
    "nothing to see here",
    # Unicode case folding (KELVIN SIGN ~ k, LONG S ~ s) in case-insensitive keys
    "api_\u212aey=secretvalue",
    "pa\u017f\u017fword: hunter2",
    '{"\u017fecret": "abcdefghijklmnopqrstuvwxyz"}',
    # keys far into long text, and across 4 KiB boundaries
    "x" * 5000 + "\npassword=abc",
    "y" * 4090 + '"token": "abcdefghijklmnopqrstuvwxyz"',
    "z" * 4093 + "\napi_key: abcdefghijklmnopqrstuvwxyz\n" + "w" * 100,
    "q" * 4094 + " MY_TOKEN=abcdefghijklmnopqrstuvwxyz",
]

FRAGMENTS = [
    "sk-proj-abcdefghij1234567890", "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "xoxb-1234567890-abcdefghij", "AKIAIOSFODNN7EXAMPLE", "sk_live_abcdefghij1234",
    "sk_", "SG.abcdefghij.klmnopqrstu", "hf_abcdefghijklmnop", "gAAAAABabcdefghijklmnopqrstuvwxyz==",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig_nature", "bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw",
    "+14155552671", "+1234", "postgres://user:pass@host/db", "https://", "http://", "://",
    "tokenvalue123@github.com", "user:pass@", "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----",
    "Authorization: ", "Bearer ", "x-api-key: ", "API_KEY", "MY_TOKEN", "SECRET", "password",
    "export ", "app.secret", "auth_token", '"apiKey"', '"token"', "os.getenv('X')", "process.env.X",
    "{user}", "{pw}", "value", "abcdefghijklmnopqrstuvwxyz", "12345678", "é", "日本",
    " ", " ", "\n", "\n", "=", "=", ":", ": ", '"', "'", "&", "-", "_", ".", "/", "@", "+", "x", "\t",
    "\x1c", "?", "#", "a=1", "&b=2", "code=", "api-key", "AUTH", "password:", "  ",
]


def main():
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 2500
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 20261129)
    cases = []
    for text in HAND:
        for mode in MODES:
            cases.append((text, mode))
    for _ in range(count):
        n = rng.randint(1, 9)
        text = "".join(rng.choice(FRAGMENTS) for _ in range(n))
        cases.append((text, rng.choice(MODES)))
    out = []
    seen = set()
    for text, mode in cases:
        if (text, mode) in seen or form_body_whitespace_case(text):
            continue
        seen.add((text, mode))
        out.append({"input": text, "mode": mode, "expected": run(text, mode)})
    json.dump(out, sys.stdout, ensure_ascii=False, indent=0)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
