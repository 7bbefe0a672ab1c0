"""Replace secrets in free text with ``[REDACTED:<label>]`` before it is stored.

Invariants: deterministic denylist of secret shapes; never raises on any ``str``; linear time
(every regex is prefiltered and backtracking-safe); idempotent (a marker is never re-matched).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["MARKER_PREFIX", "Redaction", "redact"]

# --- labels ---------------------------------------------------------------------------------

ANTHROPIC_KEY = "anthropic-key"
AWS_ACCESS_KEY = "aws-access-key"
AWS_SECRET_KEY = "aws-secret-key"
AZURE_KEY = "azure-key"
BASIC_AUTH = "basic-auth"
BEARER_TOKEN = "bearer-token"
CREDENTIALED_URL = "credentialed-url"
DISCORD_WEBHOOK = "discord-webhook"
DOCKER_TOKEN = "docker-token"
GITHUB_TOKEN = "github-token"
GITLAB_TOKEN = "gitlab-token"
GOOGLE_API_KEY = "google-api-key"
GOOGLE_OAUTH = "google-oauth"
HUGGINGFACE_TOKEN = "huggingface-token"
JWT = "jwt"
NPM_TOKEN = "npm-token"
OPENAI_KEY = "openai-key"
PASSWORD = "password"
PRIVATE_KEY = "private-key"
PYPI_TOKEN = "pypi-token"
SENDGRID_KEY = "sendgrid-key"
SHOPIFY_TOKEN = "shopify-token"
SLACK_TOKEN = "slack-token"
SLACK_WEBHOOK = "slack-webhook"
STRIPE_KEY = "stripe-key"
TWILIO_KEY = "twilio-key"

MARKER_PREFIX = "[REDACTED:"
_MAX_PASSES = 8  # re-run until nothing changes (a bound, never reached in practice: <= 3)
_LONG_VALUE = 256  # values longer than this skip the look-like-a-reference heuristics

# --- result ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Redaction:
    """The redacted text and the sorted, distinct labels of what was removed."""

    text: str
    labels: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.labels)


# --- value heuristics (used by the key=value style rules) -----------------------------------

_Span = tuple[int, int]
_Pick = Callable[[re.Match[str], str], _Span | None]

_DIGIT = re.compile(r"[0-9]")
_SPACE = re.compile(r"\s")
_UPPER = re.compile(r"[A-Z]")
_LETTER = re.compile(r"[A-Za-z]")
_LOWER = re.compile(r"[a-z]")
_ALPHA_WORD = re.compile(r"[A-Za-z]+")
_PROSE_NEXT = re.compile(r"[ \t]+[A-Za-z]")
_PLACEHOLDER = re.compile(
    r"[*xX.#?_\u2022\u00b7-]+"  # ****, xxxx, ...., ••••
    r"|<[^<>]*>"  # <redacted>, <your-password>
    r"|\[[^\[\]]*\]"  # [hidden], [REDACTED:label]
    r"|\{\{.*\}\}",  # {{ secrets.DB_PASSWORD }}
    re.ASCII | re.DOTALL,
)
_PLACEHOLDER_START = frozenset("*xX.#?_-<[{\u2022\u00b7")
_REFERENCE = re.compile(
    r"\$\{[^}]*\}\Z"  # ${VAR} / ${VAR:-default}
    r"|\$[A-Za-z_][A-Za-z0-9_]*\Z"  # $VAR
    r"|\$\("  # $(command)
    r"|%[A-Za-z_][A-Za-z0-9_]*%\Z"  # %VAR%
    r"|(?:process\.env|os\.environ|os\.getenv)"
    r"|[A-Za-z_][A-Za-z0-9_.]*+[(\[]"  # input(…), SecretStr(…), Optional[str], env["X"]
    r"|[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+\Z"  # settings.DB_PASSWORD
    r"|[A-Z0-9_]*(?:PASS|PWD|SECRET|TOKEN|KEY)[A-Z0-9_]*\Z",  # YOUR_API_KEY, DB_PASSWORD
    re.ASCII,
)
_NOT_SECRET_WORDS = frozenset(
    {
        "true", "false", "null", "none", "nil", "undefined", "yes", "no", "on", "off",
        "required", "optional", "empty", "blank", "string", "str", "text", "hidden", "masked",
        "redacted", "removed", "omitted", "unset", "unknown", "n/a", "tbd", "todo", "example",
        "placeholder", "password", "passwd", "pass", "pwd", "secret", "token", "key", "apikey",
        "api_key", "value", "bytes", "int", "any", "secretstr", "secretbytes",
    }
)  # fmt: skip
_TRAILING_PUNCT = ".)]}"
_QUOTE_CLOSER_START = frozenset(" \t)]},;:+")
_KEY_PREFIX = re.compile(
    r"(?:api|access|private|client|master|encryption|signing|auth|app|license|subscription)"
    r"[_.-]?\Z",
    re.ASCII,
)
_AWS_PREFIX = re.compile(r"aws[_.-]?\Z", re.ASCII)


def _is_secret_value(value: str, *, weak: bool) -> bool:
    """Whether an assigned value looks like a real credential rather than a placeholder."""
    if len(value) < (8 if weak else 4) or MARKER_PREFIX in value:
        return False  # too short, or already (partly) redacted
    if value[0] in _PLACEHOLDER_START and _PLACEHOLDER.fullmatch(value):
        return False
    if len(value) <= _LONG_VALUE and (
        value.lower() in _NOT_SECRET_WORDS or _REFERENCE.match(value)
    ):
        return False
    if not weak:
        return True
    # token / api key: expect machine-made randomness, not a word or a number
    if _SPACE.search(value) or value.isdigit():
        return False
    if _DIGIT.search(value):
        return _LETTER.search(value) is not None
    return (
        len(value) >= 16 and _UPPER.search(value) is not None and _LOWER.search(value) is not None
    )


def _looks_like_prose(text: str, start: int, end: int) -> bool:
    """``Password: Required for admins`` is a sentence, not a credential."""
    return bool(_ALPHA_WORD.fullmatch(text, start, end)) and bool(_PROSE_NEXT.match(text, end))


def _assignment(
    *, weak: bool, short: bool = False, key_prefix: re.Pattern[str] | None = None
) -> _Pick:
    """Pick the value of ``<key> = value`` / ``"key": "value"`` when it looks like a secret.

    ``short``: the pattern has a ``short`` group, set for terse keys (``pass``, ``pwd``) that
    only count with ``=`` or a quoted key. ``key_prefix`` must match just before the match.
    """

    def pick(m: re.Match[str], text: str) -> _Span | None:
        if key_prefix is not None:
            at = m.start()
            if not key_prefix.search(m.string, max(0, at - 16), at):
                return None
        terse = short and m.group("short") is not None
        if terse and m.group("sep") != "=" and not m.group("kq"):
            return None  # bare `pass:` / `pwd:` is too often a heading or a test status
        kind = m.lastgroup or "bare"  # "dq", "sq" or "bare": the value groups close last
        start, raw_end = m.span(kind)
        end = raw_end
        if kind == "bare":
            if m.group("sep") == ":" and _looks_like_prose(text, start, end):
                return None
            while end > start + 1 and text[end - 1] in _TRAILING_PUNCT:
                end -= 1  # keep sentence punctuation: `password=hunter22.`
        elif text[start] in _QUOTE_CLOSER_START:
            return None  # `input("Password: ")`: that quote closed a string, it opened nothing
        value = text[start:end]
        if terse and value.startswith(("/", "~")):
            return None  # PWD=/home/alice is a directory
        # both forms must look secret: `${DB_PASSWORD}` and `password)` are references
        if _is_secret_value(value, weak=weak) and (
            end == raw_end or _is_secret_value(text[start:raw_end], weak=weak)
        ):
            return start, end
        return None

    return pick


def _whole(m: re.Match[str], text: str) -> _Span | None:
    return m.span()


def _whole_if(check: Callable[[str], bool]) -> _Pick:
    def pick(m: re.Match[str], text: str) -> _Span | None:
        return m.span() if check(m.group()) else None

    return pick


def _value_if(check: Callable[[str], bool]) -> _Pick:
    def pick(m: re.Match[str], text: str) -> _Span | None:
        start, end = m.span("value")
        return (start, end) if check(text[start:end]) else None

    return pick


def _aws_secret(m: re.Match[str], text: str) -> _Span | None:
    low, start = m.string, m.start()
    if m.group("access") is None and not _AWS_PREFIX.search(low, max(0, start - 4), start):
        return None  # plain `secret_key` is left to the password rule
    return m.span("value")


def _has_digit(s: str) -> bool:
    return _DIGIT.search(s) is not None


def _mixed_case(s: str) -> bool:
    return _UPPER.search(s) is not None and _LOWER.search(s) is not None


def _strong_value(s: str) -> bool:
    return _is_secret_value(s, weak=False)


def _header_value(s: str) -> bool:
    return len(s) >= 8 and s.lower() not in {"basic", "digest"} and _strong_value(s)


def _bearer_value(s: str) -> bool:
    return _has_digit(s) and _LETTER.search(s) is not None and _strong_value(s)


def _url_password(s: str) -> bool:
    if _PLACEHOLDER.fullmatch(s) or s.lower() in _NOT_SECRET_WORDS or MARKER_PREFIX in s:
        return False
    return not (len(s) <= _LONG_VALUE and _REFERENCE.match(s))


def _value(m: re.Match[str], text: str) -> _Span | None:
    return m.span("value")


# --- rules ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Rule:
    label: str
    pattern: re.Pattern[str]
    triggers: tuple[str, ...]  # the rule runs only when one of these occurs (cheap prefilter)
    on_lower: bool = False  # pattern and triggers are lower-case and see the case-folded text
    pick: _Pick = _whole  # the span to replace, or None to reject the match


def _re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.ASCII | re.VERBOSE)


# Patterns that run often start with a literal (so `re` skips ahead in C) and check the
# character *before* it with a fixed-width look-behind, so a token is never matched from the
# middle of a longer word. Bodies use possessive quantifiers or classes that cannot overlap
# what follows them: no catastrophic backtracking. The rule order is the priority order.

# `<key> = value`, `"key": "value"`, `key: 'value'`, `key => value`; applied to folded text.
_ASSIGN_TAIL = r"""
    (?![a-z0-9_.-])                     # the key name ends here (password_hash is not a match)
    (?P<kq>["']?)[ \t]*(?P<sep>:=|=>|[:=])[ \t]*
    (?:
        "(?P<dq>(?:[^"\\\n]|\\.){4,512}+)"
      | '(?P<sq>(?:[^'\\\n]|\\.){4,512}+)'
      | ["']?(?P<bare>[^\s"'`,;&<>\[\]:=(){}](?:[^\s"'`,;&<>]|[;&](?!\w[\w.-]*+=)){3,}+)
    )                                   # `;` / `&` end the value only before `next_key=`
"""
_PEM_LABEL = r"(?:[A-Z0-9]+[ ]){0,4}PRIVATE[ ]KEY(?:[ ]BLOCK)?-----"
_TOKEN_CHARS = r"[A-Za-z0-9._~+/-]"  # RFC 6750 b64token

_RULES: tuple[_Rule, ...] = (
    _Rule(
        PRIVATE_KEY,
        re.compile(
            rf"-----BEGIN[ ]{_PEM_LABEL}.*?(?:-----END[ ]{_PEM_LABEL}|\Z)",
            re.ASCII | re.VERBOSE | re.DOTALL,
        ),
        ("PRIVATE KEY",),
    ),
    _Rule(
        ANTHROPIC_KEY,
        _re(r"sk-ant-(?<![A-Za-z0-9_-]sk-ant-)[A-Za-z0-9_-]{32,}+"),
        ("sk-ant-",),
    ),
    _Rule(
        OPENAI_KEY,
        _re(r"sk-(?<![A-Za-z0-9_-]sk-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{32,}+"),
        ("sk-",),
        pick=_whole_if(_has_digit),
    ),
    _Rule(
        GITHUB_TOKEN,
        _re(
            r"g(?<![A-Za-z0-9_]g)"
            r"(?:h[pousr]_[A-Za-z0-9]{36,255}+|ithub_pat_[A-Za-z0-9_]{22,255}+)"
        ),
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    _Rule(
        GITLAB_TOKEN,
        _re(r"gl(?<![A-Za-z0-9_-]gl)(?:pat|dt|rt|ptt)-[A-Za-z0-9_-]{20,}+"),
        ("glpat-", "gldt-", "glrt-", "glptt-"),
    ),
    _Rule(
        SLACK_TOKEN,
        _re(r"xox(?<![A-Za-z0-9_-]xox)(?:[abprs]|e\.xox[bp])-[0-9][A-Za-z0-9-]{8,}+"),
        ("xox",),
    ),
    _Rule(
        SLACK_TOKEN,
        _re(r"xapp-(?<![A-Za-z0-9_-]xapp-)[0-9]-[A-Za-z0-9-]{10,}+"),
        ("xapp-",),
    ),
    _Rule(
        SLACK_WEBHOOK,
        _re(r"(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{8,}+"),
        ("hooks.slack.com",),
    ),
    _Rule(
        DISCORD_WEBHOOK,
        _re(
            r"(?:https?://)?(?:(?:canary|ptb)\.)?discord(?:app)?\.com/api/(?:v[0-9]+/)?"
            r"webhooks/[0-9]{5,20}/[A-Za-z0-9_-]{20,}+"
        ),
        ("discord",),
    ),
    _Rule(
        GOOGLE_API_KEY,
        _re(r"AIza(?<![A-Za-z0-9_-]AIza)[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])"),
        ("AIza",),
    ),
    _Rule(
        GOOGLE_OAUTH,
        _re(r"GOCSPX-(?<![A-Za-z0-9_-]GOCSPX-)[A-Za-z0-9_-]{24,}+"),
        ("GOCSPX-",),
    ),
    _Rule(
        GOOGLE_OAUTH,
        _re(r"ya29\.(?<![A-Za-z0-9_.-]ya29\.)[A-Za-z0-9_-]{20,}+"),
        ("ya29.",),
    ),
    _Rule(
        STRIPE_KEY,
        _re(r"[rs]k_(?<![A-Za-z0-9_][rs]k_)(?:live|test)_[A-Za-z0-9]{16,}+"),
        ("sk_live_", "sk_test_", "rk_live_", "rk_test_"),
    ),
    _Rule(
        STRIPE_KEY,
        _re(r"whsec_(?<![A-Za-z0-9_]whsec_)[A-Za-z0-9+/=]{24,}+"),
        ("whsec_",),
    ),
    _Rule(
        DOCKER_TOKEN,
        _re(r"dckr_(?<![A-Za-z0-9_]dckr_)(?:pat|oat)_[A-Za-z0-9_-]{20,}+"),
        ("dckr_pat_", "dckr_oat_"),
    ),
    _Rule(
        NPM_TOKEN,
        _re(r"npm_(?<![A-Za-z0-9_]npm_)[A-Za-z0-9]{36}(?![A-Za-z0-9])"),
        ("npm_",),
    ),
    _Rule(
        PYPI_TOKEN,
        _re(r"pypi-AgE(?<![A-Za-z0-9_-]pypi-AgE)[A-Za-z0-9_-]{50,}+"),
        ("pypi-AgE",),
    ),
    _Rule(
        HUGGINGFACE_TOKEN,
        _re(r"hf_(?<![A-Za-z0-9_]hf_)[A-Za-z0-9]{30,}+"),
        ("hf_",),
        pick=_whole_if(_mixed_case),
    ),
    _Rule(
        SENDGRID_KEY,
        _re(r"SG\.(?<![A-Za-z0-9_]SG\.)[A-Za-z0-9_-]{16,32}+\.[A-Za-z0-9_-]{16,64}+"),
        ("SG.",),
    ),
    _Rule(
        SHOPIFY_TOKEN,
        _re(r"shp(?<![A-Za-z0-9_]shp)(?:at|ss|ca|pa)_[A-Fa-f0-9]{32}(?![A-Za-z0-9])"),
        ("shpat_", "shpss_", "shpca_", "shppa_"),
    ),
    _Rule(
        TWILIO_KEY,
        _re(r"SK(?<![A-Za-z0-9]SK)[0-9a-fA-F]{32}(?![A-Za-z0-9])"),
        ("SK",),
    ),
    _Rule(
        AWS_ACCESS_KEY,
        _re(r"A(?<![A-Za-z0-9]A)(?:KIA|SIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        ("AKIA", "ASIA"),
    ),
    _Rule(
        AWS_SECRET_KEY,
        _re(
            r"secret(?P<access>[_.-]?access)?[_.-]?key(?![a-z0-9_.-])"
            r"""["']?[ \t]*(?::=|=>|[:=])[ \t]*["']?"""
            r"(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        ("secret",),
        on_lower=True,
        pick=_aws_secret,
    ),
    _Rule(
        AZURE_KEY,
        _re(
            r"key(?:(?<=accountkey)|(?<=sharedaccesskey))[ \t]*=[ \t]*"
            r"(?P<value>[A-Za-z0-9+/]{20,}+={0,2})"
        ),
        ("accountkey", "sharedaccesskey"),
        on_lower=True,
        pick=_value,
    ),
    _Rule(
        JWT,
        _re(
            r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{10,}+"
            r"\.[A-Za-z0-9_-]{10,}+\.[A-Za-z0-9_-]{10,}+"
        ),
        ("eyJ",),
    ),
    _Rule(
        BASIC_AUTH,
        _re(
            r"""authorization["']?[ \t]*[:=][ \t]*["']?basic[ \t]+"""
            r"(?P<value>[A-Za-z0-9+/]{6,}+={0,2})"
        ),
        ("authorization",),
        on_lower=True,
        pick=_value_if(_strong_value),
    ),
    _Rule(
        BEARER_TOKEN,
        _re(
            r"""authorization["']?[ \t]*[:=][ \t]*["']?"""
            r"(?:(?:bearer|token|bot|negotiate|ntlm)[ \t]+)?"
            rf"(?P<value>{_TOKEN_CHARS}++=*+)"
        ),
        ("authorization",),
        on_lower=True,
        pick=_value_if(_header_value),
    ),
    _Rule(
        BEARER_TOKEN,
        _re(rf"bearer(?<![a-z0-9_-]bearer)[ \t]+(?P<value>{_TOKEN_CHARS}{{16,}}+=*+)"),
        ("bearer",),
        on_lower=True,
        pick=_value_if(_bearer_value),
    ),
    _Rule(
        CREDENTIALED_URL,
        _re(
            r"://(?<=[A-Za-z0-9]://)(?P<user>[^\s:/?#@\[\]]*+)"
            r":(?P<value>[^\s/?#@\[][^\s/?#]*)@(?=[A-Za-z0-9\[])"
        ),
        ("://",),
        pick=_value_if(_url_password),
    ),
    _Rule(
        PASSWORD,
        _re(r"pass(?:word|wd|phrase|(?P<short>(?<![a-z]pass)))" + _ASSIGN_TAIL),
        ("pass",),
        on_lower=True,
        pick=_assignment(weak=False, short=True),
    ),
    _Rule(
        PASSWORD,
        _re(r"pwd(?P<short>(?<![a-z]pwd))" + _ASSIGN_TAIL),
        ("pwd",),
        on_lower=True,
        pick=_assignment(weak=False, short=True),
    ),
    _Rule(
        PASSWORD,
        _re(r"secret(?:[_.-]?(?:access[_.-]?)?key|[_.-]?token)?" + _ASSIGN_TAIL),
        ("secret",),
        on_lower=True,
        pick=_assignment(weak=False),
    ),
    _Rule(
        PASSWORD,
        _re(r"token" + _ASSIGN_TAIL),
        ("token",),
        on_lower=True,
        pick=_assignment(weak=True),
    ),
    _Rule(
        PASSWORD,
        _re(r"key" + _ASSIGN_TAIL),
        ("key",),
        on_lower=True,
        pick=_assignment(weak=True, key_prefix=_KEY_PREFIX),
    ),
    _Rule(  # CLI flags: `--password hunter22`, `--token ab12cd34` (value must look random)
        PASSWORD,
        _re(
            r"--(?:password|passwd|pass|token|api-key|apikey|secret|client-secret)"
            r"[ \t]+(?P<value>[^\s\-'\"`][^\s'\"`]{7,}+)"
        ),
        ("--",),
        on_lower=True,
        pick=_value_if(lambda v: _is_secret_value(v, weak=True)),
    ),
    _Rule(
        PASSWORD,
        _re(
            r"<(?P<tag>pass(?:word|wd|phrase)|(?:client_?)?secret|api_?key|(?:access_?)?token)>"
            r"(?P<value>[^<\s]{4,512}+)</(?P=tag)>"
        ),
        ("pass", "secret", "key", "token"),
        on_lower=True,
        pick=_value_if(_strong_value),
    ),
)

LABELS: frozenset[str] = frozenset(rule.label for rule in _RULES)


def _trigger_index(on_lower: bool) -> dict[str, tuple[int, ...]]:
    """Trigger -> indexes (into _RULES) of the rules it wakes up, for one kind of haystack."""
    index: dict[str, list[int]] = {}
    for i, rule in enumerate(_RULES):
        if rule.on_lower == on_lower:
            for trigger in rule.triggers:
                index.setdefault(trigger, []).append(i)
    return {trigger: tuple(rules) for trigger, rules in index.items()}


_FOLDED_TRIGGERS = _trigger_index(on_lower=True)  # looked up in the case-folded text
_CASED_TRIGGERS = _trigger_index(on_lower=False)  # looked up in the text as given

# --- engine ---------------------------------------------------------------------------------


_ASCII_FOLD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _fold(text: str) -> str:
    """Lower-case without moving any character (``str.lower`` only grows on U+0130)."""
    low = text.lower()
    if len(low) == len(text):
        return low
    low = text.replace("\u0130", "\u0131").lower()
    if len(low) == len(text):
        return low
    return text.translate(_ASCII_FOLD)  # pragma: no cover - future Unicode versions only


def _find(text: str) -> list[list[tuple[int, int, str]]]:
    """Accepted hits per rule, in rule order; each list is sorted and free of overlaps."""
    low = _fold(text)
    # the prefilter: `filter` runs the substring tests in C, which keeps clean text cheap
    active: set[int] = set()
    for trigger in filter(low.__contains__, _FOLDED_TRIGGERS):
        active.update(_FOLDED_TRIGGERS[trigger])
    for trigger in filter(text.__contains__, _CASED_TRIGGERS):
        active.update(_CASED_TRIGGERS[trigger])
    found: list[list[tuple[int, int, str]]] = []
    for index in sorted(active):
        rule = _RULES[index]
        hits: list[tuple[int, int, str]] = []
        for m in rule.pattern.finditer(low if rule.on_lower else text):
            span = rule.pick(m, text)
            if span is not None and span[0] < span[1]:
                hits.append((span[0], span[1], rule.label))
        if hits:
            found.append(hits)
    return found


def _merge(
    kept: list[tuple[int, int, str]], new: list[tuple[int, int, str]]
) -> list[tuple[int, int, str]]:
    """Add the hits of a less specific rule to ``kept``, dropping any that overlap a kept hit."""
    out: list[tuple[int, int, str]] = []
    i = 0
    for hit in new:
        while i < len(kept) and kept[i][1] <= hit[0]:
            out.append(kept[i])
            i += 1
        if i == len(kept) or kept[i][0] >= hit[1]:
            out.append(hit)
    out.extend(kept[i:])
    return out


def _redact_once(text: str) -> tuple[str, set[str]]:
    # Rules are ordered most specific first; a hit overlapping an earlier rule's hit is dropped,
    # so `x-access-token:ghs_…@github.com` keeps the github-token label and the visible host.
    kept: list[tuple[int, int, str]] = []
    for hits in _find(text):
        kept = _merge(kept, hits) if kept else hits
    if not kept:
        return text, set()
    out: list[str] = []
    pos = 0
    for start, end, label in kept:
        out += (text[pos:start], MARKER_PREFIX, label, "]")
        pos = end
    out.append(text[pos:])
    return "".join(out), {label for _, _, label in kept}


def redact(text: str) -> Redaction:
    """Replace every secret in ``text`` with ``[REDACTED:<label>]``."""
    labels: set[str] = set()
    for _ in range(_MAX_PASSES):
        text, found = _redact_once(text)
        if not found:
            break
        labels |= found
    return Redaction(text, tuple(sorted(labels)))
