"""Replace secrets in free text with ``[REDACTED:<label>]`` before it is stored.

Invariants: deterministic denylist of secret shapes; never raises on any ``str``; linear time
(every regex is prefiltered and backtracking-safe); idempotent (a marker is never re-matched).

Matching runs on a normalised copy of the text, and what matched is cut out of the original:
compatibility forms folded (NFKC: full-width and mathematical letters become ASCII), invisible
characters dropped (zero-width spaces and joiners, soft hyphens, combining marks), Cyrillic and
Greek letters that look Latin read as Latin, and a known token prefix broken across a line joined
back up — so `gh\u200bp_…`, `ｓｋ＿ｌｉｖｅ＿…` or `AКIA…` (a Cyrillic К) are found for what they
are.
A base64 or hex run whose decoded text holds a secret is redacted whole, under that secret's
label. Text with URL escapes is read a second time with them decoded (`password%3D…`). A
marker-looking suffix (`hunter2[REDACTED:x]`) does not shield the value before it.

Past 500 lines on purpose: the deny-list is one table of some 75 secret shapes (500 lines of
patterns) with the value heuristics its rules call and the normalisation they read through;
adding or auditing a shape means reading them together.
"""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["MARKER_PREFIX", "Redaction", "redact"]

# --- labels ---------------------------------------------------------------------------------

AGE_SECRET_KEY = "age-secret-key"
ANTHROPIC_KEY = "anthropic-key"
AWS_ACCESS_KEY = "aws-access-key"
AWS_SECRET_KEY = "aws-secret-key"
AZURE_KEY = "azure-key"
BASIC_AUTH = "basic-auth"
BEARER_TOKEN = "bearer-token"
CREDENTIALED_URL = "credentialed-url"
DIGITALOCEAN_TOKEN = "digitalocean-token"
DISCORD_BOT_TOKEN = "discord-bot-token"
DISCORD_WEBHOOK = "discord-webhook"
DOCKER_TOKEN = "docker-token"
FIGMA_TOKEN = "figma-token"
GCP_KEY_ID = "gcp-private-key-id"
GITHUB_TOKEN = "github-token"
GITLAB_TOKEN = "gitlab-token"
GOOGLE_API_KEY = "google-api-key"
GOOGLE_OAUTH = "google-oauth"
GRAFANA_TOKEN = "grafana-token"
GROQ_KEY = "groq-key"
HUGGINGFACE_TOKEN = "huggingface-token"
JWT = "jwt"
LINEAR_KEY = "linear-key"
MAILGUN_KEY = "mailgun-key"
NEWRELIC_KEY = "newrelic-key"
NOTION_TOKEN = "notion-token"
NPM_TOKEN = "npm-token"
OPENAI_KEY = "openai-key"
PASSWORD = "password"
PERPLEXITY_KEY = "perplexity-key"
POSTMAN_KEY = "postman-key"
PRIVATE_KEY = "private-key"
PYPI_TOKEN = "pypi-token"
REPLICATE_TOKEN = "replicate-token"
SENDGRID_KEY = "sendgrid-key"
SENTRY_DSN = "sentry-dsn"
SESSION_COOKIE = "session-cookie"
SHOPIFY_TOKEN = "shopify-token"
SIGNED_URL = "signed-url"
SLACK_TOKEN = "slack-token"
SLACK_WEBHOOK = "slack-webhook"
STRIPE_KEY = "stripe-key"
TELEGRAM_TOKEN = "telegram-bot-token"
TWILIO_AUTH_TOKEN = "twilio-auth-token"
TWILIO_KEY = "twilio-key"
VAULT_TOKEN = "vault-token"
XAI_KEY = "xai-key"

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
_Spans = Callable[[re.Match[str], str], list[_Span]]

_DIGIT = re.compile(r"[0-9]")
_SPACE = re.compile(r"\s")
_UPPER = re.compile(r"[A-Z]")
_LETTER = re.compile(r"[A-Za-z]")
_LOWER = re.compile(r"[a-z]")
# Any script's letters: `senha: Obrigatória para administradores` is a sentence too, and so
# is `password: minimum 12 characters` (a number, then a word).
_ALPHA_WORD = re.compile(r"[^\W\d_]+")
_PROSE_NEXT = re.compile(r"[ \t]+(?:[0-9]+[ \t]+)?[^\W\d_]")
_NEXT_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=[^=\s]")  # `USER=app` (not base64's `=`)
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
_AWS_PREFIX = re.compile(r"aws[_. \t-]?\Z", re.ASCII)


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
        raw_end = _before_marker(text, start, raw_end)
        end = raw_end
        if kind == "bare":
            if m.group("sep") == ":" and _looks_like_prose(text, start, end):
                return None
            if start > m.end("sep") and _NEXT_ASSIGNMENT.match(text, start):
                return None  # `PASSWORD= USER=app`: an empty value, then the next assignment
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


def _before_marker(text: str, start: int, end: int) -> int:
    """Where a value really ends: a marker-looking suffix (`hunter2[REDACTED:x]`, typed to make
    the value look handled) is not part of it and does not shield what comes before."""
    cut = text.find(MARKER_PREFIX, start, end)
    return end if cut < 0 else cut


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
    if not s or _PLACEHOLDER.fullmatch(s) or s.lower() in _NOT_SECRET_WORDS:
        return False
    return not (len(s) <= _LONG_VALUE and _REFERENCE.match(s))


def _value(m: re.Match[str], text: str) -> _Span | None:
    return m.span("value")


def _value_before_marker(check: Callable[[str], bool]) -> _Pick:
    """`_value_if`, with a marker-looking suffix cut off the value first."""

    def pick(m: re.Match[str], text: str) -> _Span | None:
        start, end = m.span("value")
        end = _before_marker(text, start, end)
        return (start, end) if end > start and check(text[start:end]) else None

    return pick


_FUNCTION_WORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "have", "in",
        "is", "it", "must", "not", "of", "on", "or", "see", "set", "should", "the", "this", "to",
        "was", "will", "with", "you", "your", "all", "each", "every", "any", "can", "only",
    }
)  # fmt: skip
_TRAILING = ".,;:!?)]}'\""


# A plain word after `the password is`: taken for the password (`correcthorsebattery`, a
# passphrase run together) only when it is this long, ends its clause and has none of the
# endings English adjectives and adverbs have. A shorter one is too often a state (`simple`,
# `expired`, `wrong`): `the wifi password is sunflower` stays (extraction drops a fact or rule
# stating a password, `harness.extractor`), as `the password is simple` must.
_PLAIN_SECRET_MIN = 10
_CLAUSE_END = re.compile(r"[ \t]*(?:$|[.,;:!?)\r\n]|(?:and|but|or|so|then)(?![a-z]))", re.I)
_STATE_ENDINGS = (
    "ed", "en", "ing", "able", "ible", "ful", "less", "ous", "ive", "ly", "al", "ent", "ant",
    "ic", "ary", "ory", "ure", "ct", "ion", "ment", "ness", "ity", "where", "ward", "wards",
    "ever", "out", "ish", "ile", "ise", "ize", "ate", "ete", "ine", "ar", "er", "ese", "neath",
    "s",  # a plural, a verb: `the password is characters long`, `… is what reconnects`
    # English's adjective-forming words run together (`cumbersome`, `bulletproof`,
    # `trustworthy`, `watertight`, `lightweight`, `nonstandard`) and compound nouns
    # (`commonplace`, `whitespace`): as much a state as `…able` is.
    "some", "proof", "worthy", "tight", "weight", "like", "wide", "ard", "place", "space",
    # Portuguese, written without its accents (`a senha é desnecessaria`)
    "ado", "ada", "ido", "ida", "ados", "adas", "vel", "veis", "oso", "osa", "ente", "ante",
    "ico", "ica", "ivo", "iva", "ario", "aria", "orio", "oria", "mente",
)  # fmt: skip


def _phrase_value(s: str, text: str, end: int) -> bool:
    """`the password is X`: X must look made up (a digit, a symbol or mixed case), not a word;
    or be one plain word no sentence puts there (`_PLAIN_SECRET_MIN`), `text[end:]` what
    follows it."""
    s = s.rstrip(_TRAILING)
    if len(s) < 6 or s[0] == "(" or not _is_secret_value(s, weak=False):
        return False  # too short, an aside (`is (empty)`), or a placeholder
    if s.isalpha() and (s.islower() or s.istitle()):  # "is expired", "is Required"
        return (
            len(s) >= _PLAIN_SECRET_MIN
            and s.isascii()
            and not s.lower().endswith(_STATE_ENDINGS)
            and _CLAUSE_END.match(text, end) is not None
        )
    return True


def _phrase(m: re.Match[str], text: str) -> _Span | None:
    kind = m.lastgroup or "bare"  # "dq", "sq", "bq" (markdown code) or "bare"
    if kind != "bare":
        start, end = m.span(kind)
        end = _before_marker(text, start, end)
        return (start, end) if end > start and _strong_value(text[start:end]) else None
    start, end = m.span("bare")
    end = _before_marker(text, start, end)
    while end > start and text[end - 1] in _TRAILING:
        end -= 1
    return (start, end) if _phrase_value(text[start:end], text, end) else None


def _credential_phrase(m: re.Match[str], text: str) -> _Span | None:
    """`the api key is X`, `o token é X`: X must look machine-made (letters and digits mixed, or
    mixed case) and be long enough to be a key (`my token is v2.0-beta` is a version)."""
    kind = m.lastgroup or "bare"
    start, end = m.span(kind)
    end = _before_marker(text, start, end)
    if kind == "bare":
        while end > start and text[end - 1] in _TRAILING:
            end -= 1
    value = text[start:end]
    return (start, end) if len(value) >= 12 and _is_secret_value(value, weak=True) else None


def _passphrase(m: re.Match[str], text: str) -> _Span | None:
    """`password: correct horse battery staple`: several lower-case words, none of them the
    little words prose is made of (`Password: required for all admins` is a sentence)."""
    start, end = m.span("value")
    words = text[start:end].split()
    if any(word in _FUNCTION_WORDS for word in words):
        return None
    return start, end


def _cli_secret(s: str) -> bool:
    s = s.strip("'\"")
    return len(s) >= 3 and not s.startswith(("$", "%")) and _url_password(s)


def _aws_bare(m: re.Match[str], text: str) -> _Span | None:
    """A 40-character AWS secret key in prose: every character class present, and AWS named
    within a sentence before it."""
    value = m.group()
    if not (_UPPER.search(value) and _LOWER.search(value) and _DIGIT.search(value)):
        return None
    before = text[max(0, m.start() - 120) : m.start()].lower()
    return m.span() if "aws" in before or "secret" in before else None


def _discord_bot(m: re.Match[str], text: str) -> _Span | None:
    """A bot token's first part is the bot's user id (digits) in base64url."""
    head = m.group("head")
    try:
        decoded = base64.urlsafe_b64decode(head + "=" * (-len(head) % 4))
    except (binascii.Error, ValueError):
        return None
    return m.span() if decoded.isdigit() and len(decoded) >= 15 else None


def _sentry_key(m: re.Match[str], text: str) -> _Span | None:
    return m.span("value")


_COOKIE_PAIR = re.compile(r"[ \t]*(?P<name>[^=;\s]++)=(?P<value>[^;\s]*+)", re.ASCII)
_COOKIE_ATTRIBUTES = frozenset(
    {"path", "domain", "expires", "max-age", "samesite", "priority", "partitioned", "version"}
)


def _cookie_values(m: re.Match[str], text: str) -> list[_Span]:
    """The values in a `Cookie:` / `Set-Cookie:` header (or curl's `--cookie`) that look like
    a session secret; names, attributes (`Path=/`) and plain settings (`theme=dark`) stay."""
    spans: list[_Span] = []
    start, end = m.span("pairs")
    for pair in _COOKIE_PAIR.finditer(text, start, end):
        value_start, value_end = pair.span("value")
        value_end = _before_marker(text, value_start, value_end)
        value = text[value_start:value_end]
        if pair.group("name").lower() not in _COOKIE_ATTRIBUTES and _cookie_secret(value):
            spans.append((value_start, value_end))
    return spans


def _cookie_secret(value: str) -> bool:
    """A session id is long and random: letters and digits mixed (`tz=America/Sao_Paulo` and
    Google Analytics' `_ga=GA1.2.1234567890.1600000000` are not)."""
    if len(value) < 16 or not _is_secret_value(value, weak=True):
        return False
    digits = sum(c.isdigit() for c in value)
    return digits >= 2 and sum(c.isalpha() for c in value) >= 4


_SECRET_WORDS = frozenset({"PASSWORD", "PASSWD", "PASS", "PWD", "SECRET", "TOKEN", "APIKEY"})
_KEY_WORDS = frozenset({"API", "ACCESS", "PRIVATE", "CLIENT", "MASTER", "SECRET", "SIGNING"})
# Words after the secret's word that make the setting *about* the secret, not the secret.
_SETTING_WORDS = frozenset(
    {
        "FILE", "FILES", "PATH", "PATHS", "DIR", "DIRECTORY", "FOLDER", "MOUNT", "HASH",
        "HASHED", "HASHER", "MIN", "MAX", "LENGTH", "LEN", "POLICY", "RESET", "EXPIRY",
        "EXPIRES", "EXPIRE", "EXPIRATION", "TTL", "AGE", "LIFETIME", "DURATION", "SECONDS",
        "MINUTES", "HOURS", "DAYS", "PERIOD", "INTERVAL", "TIMEOUT", "ENABLED", "DISABLED",
        "ENABLE", "DISABLE", "REQUIRED", "NAME", "NAMES", "ID", "IDS", "REF", "ARN", "URL",
        "URI", "ENDPOINT", "HOST", "ISSUER", "AUDIENCE", "SCOPE", "SCOPES", "VERSION",
        "ROTATION", "COMMAND", "CMD", "PROMPT", "FIELD", "PARAM", "HEADER", "HINT", "LABEL",
        "STRENGTH", "COMPLEXITY", "REGEX", "PATTERN", "RULES", "REUSE", "COST", "ROUNDS",
        "ALGORITHM", "ALGO", "ENCODER", "ENCODING", "METHOD", "HISTORY", "COUNT", "ATTEMPTS",
        "LIMIT", "TYPE", "KIND", "MODE", "FORMAT", "ENV", "VAR", "LOCATION", "PROVIDER",
        "SOURCE", "STORE", "BACKEND", "MANAGER", "SERVICE", "SIZE", "BYTES", "BITS", "USAGE",
        "PREFIX", "SUFFIX", "LOOKUP", "VALIDATION", "VALIDATOR", "REGION", "BUCKET", "TABLE",
    }
)  # fmt: skip


def _env_suffixed(m: re.Match[str], text: str) -> _Span | None:
    """`DB_PASSWORD_PROD=…`, `SECRET_KEY_BASE=…`: an upper-case setting whose name holds a secret
    word before its last part (a name ending in the word is the assignment rules' case), unless
    a later part says the setting is about the secret (`PASSWORD_FILE`, `TOKEN_URL`)."""
    parts = m.group("key").split("_")
    for i in range(len(parts) - 2, -1, -1):
        word = parts[i]
        if word in _SECRET_WORDS or (word == "KEY" and i > 0 and parts[i - 1] in _KEY_WORDS):
            break
    else:
        return None
    if any(part in _SETTING_WORDS for part in parts[i + 1 :]):
        return None
    kind = m.lastgroup or "bare"
    start, end = m.span(kind)
    end = _before_marker(text, start, end)
    value = text[start:end]
    if value.startswith(("/", "~", ".")) or "://" in value:
        return None  # a path or an address
    return (start, end) if _is_secret_value(value, weak=True) else None


def _basic_credentials(value: str) -> bool:
    """`Basic <base64>` outside a header: the base64 must decode to `user:password`."""
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode()
    except (binascii.Error, ValueError):
        return False
    user, colon, password = decoded.partition(":")
    return bool(colon and user and password and decoded.isprintable())


def _sshpass(m: re.Match[str], text: str) -> _Span | None:
    kind = m.lastgroup or "value"
    start, end = m.span(kind)
    end = _before_marker(text, start, end)
    return (start, end) if end > start and _cli_secret(text[start:end]) else None


def _client_flag(m: re.Match[str], text: str) -> _Span | None:
    """`docker login -p X`, `mongosh -p X`, `redis-cli -a X`: as `_sshpass`, but a lower-case
    word is prose (`mongo -p and then type it`: the flag alone prompts)."""
    span = _sshpass(m, text)
    if span is None:
        return None
    value = text[span[0] : span[1]]
    return None if value.isalpha() and value.islower() else span


# --- rules ----------------------------------------------------------------------------------


class _Pattern:
    """A rule's pattern, compiled when it first runs: the prefilter wakes few rules, and compiling
    all of them took ~9 ms of every process's first save (a one-shot CLI call pays it each time)."""

    __slots__ = ("_compiled", "_flags", "_source")

    def __init__(self, source: str, flags: int) -> None:
        self._source, self._flags = source, flags
        self._compiled: re.Pattern[str] | None = None

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self._source, self._flags)
        return compiled.finditer(text)


@dataclass(frozen=True, slots=True)
class _Rule:
    label: str
    pattern: _Pattern
    triggers: tuple[str, ...]  # the rule runs only when one of these occurs (cheap prefilter)
    on_lower: bool = False  # pattern and triggers are lower-case and see the case-folded text
    pick: _Pick = _whole  # the span to replace, or None to reject the match
    spans: _Spans | None = None  # instead of `pick`: every span to replace in one match
    min_word: int = 0  # skipped unless the text has a word (whitespace-free run) this long


def _re(pattern: str, flags: int = 0) -> _Pattern:
    return _Pattern(pattern, re.ASCII | re.VERBOSE | flags)


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
      | `(?P<bq>[^`\s]{4,512}+)`        # markdown code (no space: shell's `cmd` runs one)
      | [|>][+-]?[ \t]*\r?\n[ \t]+(?P<block>\S(?:[^\n]{0,510}\S)?)  # YAML `|` / `>-` block
      | ["']?(?P<bare>[^\s"'`,;&<>\[\]:=(){}](?:[^\s"'`,;&<>]|[;&](?!\w[\w.-]*+=)){3,}+)
    )                                   # `;` / `&` end the value only before `next_key=`
"""
# What a spoken phrase gives a password as: quoted, in markdown code, or a bare word.
_PHRASE_VALUE = (
    r"""(?:"(?P<dq>[^"\n]{4,200}+)"|'(?P<sq>[^'\n]{4,200}+)'|`(?P<bq>[^`\n]{4,200}+)`"""
    r"""|(?P<bare>[^\s"'`]{4,200}+))"""
)
# A password given to a command-line flag: quoted, or bare (not another flag, a `$VAR`, or an
# aside such as `(prompted)`).
_FLAG_VALUE = (
    r"""(?:'(?P<sq>[^'\n]{3,200}+)'"""
    r"""|"(?P<dq>[^"\n]{3,200}+)"|(?P<value>[^\s\-'"(<\[{$][^\s'"]{2,200}+))"""
)
_PEM_LABEL = r"(?:[A-Z0-9]+[ ]){0,4}PRIVATE[ ]KEY(?:[ ]BLOCK)?-----"
_TOKEN_CHARS = r"[A-Za-z0-9._~+/-]"  # RFC 6750 b64token

_RULES: tuple[_Rule, ...] = (
    _Rule(
        PRIVATE_KEY,
        _re(rf"-----BEGIN[ ]{_PEM_LABEL}.*?(?:-----END[ ]{_PEM_LABEL}|\Z)", re.DOTALL),
        ("PRIVATE KEY",),
    ),
    _Rule(  # PuTTY's `.ppk`: the whole file, through its MAC (or the end of a cut paste)
        PRIVATE_KEY,
        _re(r"PuTTY-User-Key-File-[0-9]+:.*?(?:Private-MAC:[ \t]*[0-9a-fA-F]++|\Z)", re.DOTALL),
        ("PuTTY-User-Key-File-",),
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
    _Rule(  # GitLab runner registration token
        GITLAB_TOKEN,
        _re(r"GR1348941(?<![A-Za-z0-9_-]GR1348941)[A-Za-z0-9_-]{20,}+"),
        ("GR1348941",),
    ),
    _Rule(  # HashiCorp Vault service, batch and recovery tokens
        VAULT_TOKEN,
        _re(r"hv[sbr]\.(?<![A-Za-z0-9_.-]hv[sbr]\.)[A-Za-z0-9_-]{24,}+"),
        ("hvs.", "hvb.", "hvr."),
        pick=_whole_if(_has_digit),
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
    _Rule(XAI_KEY, _re(r"xai-(?<![A-Za-z0-9_-]xai-)[A-Za-z0-9]{70,}+"), ("xai-",)),
    _Rule(GROQ_KEY, _re(r"gsk_(?<![A-Za-z0-9_]gsk_)[A-Za-z0-9]{48,}+"), ("gsk_",)),
    _Rule(
        MAILGUN_KEY,
        _re(r"key-(?<![A-Za-z0-9_-]key-)[0-9a-f]{32}(?![A-Za-z0-9])"),
        ("key-",),
    ),
    _Rule(
        DIGITALOCEAN_TOKEN,
        _re(r"do[poa](?<![A-Za-z0-9_]do[poa])_v1_[a-f0-9]{64}(?![A-Za-z0-9])"),
        ("dop_v1_", "doo_v1_", "doa_v1_"),
    ),
    _Rule(
        LINEAR_KEY,
        _re(r"lin_(?<![A-Za-z0-9_]lin_)(?:api|oauth)_[A-Za-z0-9]{40}(?![A-Za-z0-9])"),
        ("lin_api_", "lin_oauth_"),
    ),
    _Rule(
        REPLICATE_TOKEN,
        _re(r"r8_(?<![A-Za-z0-9_]r8_)[A-Za-z0-9]{37}(?![A-Za-z0-9])"),
        ("r8_",),
        pick=_whole_if(_has_digit),
    ),
    _Rule(
        PERPLEXITY_KEY,
        _re(r"pplx-(?<![A-Za-z0-9_-]pplx-)[A-Za-z0-9]{48}(?![A-Za-z0-9])"),
        ("pplx-",),
    ),
    _Rule(
        NOTION_TOKEN,
        _re(
            r"(?:ntn_(?<![A-Za-z0-9_]ntn_)[A-Za-z0-9]{46}"
            r"|secret_(?<![A-Za-z0-9_]secret_)[A-Za-z0-9]{43})(?![A-Za-z0-9])"
        ),
        ("ntn_", "secret_"),
        pick=_whole_if(lambda v: _has_digit(v) and _mixed_case(v)),
    ),
    _Rule(
        POSTMAN_KEY,
        _re(r"PMAK-(?<![A-Za-z0-9_-]PMAK-)[a-f0-9]{24}-[a-f0-9]{34}(?![A-Za-z0-9])"),
        ("PMAK-",),
    ),
    _Rule(
        AGE_SECRET_KEY,
        _re(r"AGE-SECRET-KEY-1[0-9A-Z]{58}(?![A-Za-z0-9])"),
        ("AGE-SECRET-KEY-1",),
    ),
    _Rule(
        GRAFANA_TOKEN,
        _re(r"gl(?<![A-Za-z0-9_]gl)(?:sa|c)_[A-Za-z0-9_=+/]{32,}+"),
        ("glsa_", "glc_"),
        pick=_whole_if(_has_digit),
    ),
    _Rule(
        NEWRELIC_KEY,
        _re(r"NR(?<![A-Za-z0-9_-]NR)(?:AK|II|JS)-[A-Z0-9]{27}(?![A-Za-z0-9])"),
        ("NRAK-", "NRII-", "NRJS-"),
    ),
    _Rule(
        FIGMA_TOKEN,
        _re(r"fig(?<![A-Za-z0-9_]fig)[dou]_[A-Za-z0-9_-]{40,}+"),
        ("figd_", "figo_", "figu_"),
    ),
    _Rule(
        SENTRY_DSN,
        _re(
            r"https?://(?P<value>[0-9a-f]{32}(?::[0-9a-f]{32})?)"
            r"@[A-Za-z0-9.-]*(?:sentry|ingest)[A-Za-z0-9.-]*(?::[0-9]+)?/[0-9]+"
        ),
        ("sentry", "ingest"),
        pick=_sentry_key,
    ),
    _Rule(
        TELEGRAM_TOKEN,
        _re(r"(?<![0-9])[0-9]{8,10}:AA[A-Za-z0-9_-]{33}(?![A-Za-z0-9_-])"),
        (":AA",),
    ),
    _Rule(
        DISCORD_BOT_TOKEN,
        _re(
            r"(?P<head>[MNO](?<![A-Za-z0-9_.-][MNO])[A-Za-z0-9_-]{23,27})"
            r"\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40}(?![A-Za-z0-9_-])"
        ),
        (".",),
        pick=_discord_bot,
        min_word=59,
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
            r"secret(?P<access>[_. \t-]?access)?[_. \t-]?key(?![a-z0-9_.-])"
            r"""["']?[ \t]*(?::=|=>|[:=]|[ \t]is)[ \t]*["']?"""
            r"(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        ("secret",),
        on_lower=True,
        pick=_aws_secret,
    ),
    _Rule(  # bare in prose: "my AWS secret is wJalr…" (see `_aws_bare` for the context)
        AWS_SECRET_KEY,
        _re(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"),
        ("aws", "AWS", "Aws"),
        pick=_aws_bare,
        min_word=40,
    ),
    _Rule(
        TWILIO_AUTH_TOKEN,
        _re(
            r"(?:auth[_.\ -]?token|twilio[_.\ -]?(?:auth|secret|token))"
            r"""["']?[ \t]*(?::=|=>|[:=]|[ \t]is)?[ \t]*["']?"""
            r"(?P<value>[0-9a-f]{32})(?![0-9a-z])"
        ),
        ("auth", "twilio"),
        on_lower=True,
        pick=_value,
    ),
    _Rule(
        GCP_KEY_ID,
        _re(r"""private_key_id["']?[ \t]*[:=][ \t]*["']?(?P<value>[0-9a-f]{40})(?![0-9a-z])"""),
        ("private_key_id",),
        on_lower=True,
        pick=_value,
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
    _Rule(  # docker's config.json `"auth": "<base64 of user:password>"`, .npmrc's `_auth=`
        BASIC_AUTH,
        _re(
            r"""(?<![a-z0-9-])_?auth["']?[ \t]*[:=][ \t]*["']?(?P<value>[A-Za-z0-9+/]{8,}+={0,2})"""
        ),
        ("auth",),
        on_lower=True,
        pick=_value_if(_basic_credentials),
    ),
    _Rule(  # `Basic <base64 of user:password>` written outside an Authorization header
        BASIC_AUTH,
        _re(r"basic(?<![a-z0-9_-]basic)[ \t]+(?P<value>[A-Za-z0-9+/]{8,}+={0,2})"),
        ("basic",),
        on_lower=True,
        pick=_value_if(_basic_credentials),
    ),
    _Rule(  # pre-signed URLs: Azure SAS `sig=`, S3 `X-Amz-Signature=`, GCS `X-Goog-Signature=`
        SIGNED_URL,
        _re(
            r"[?&;](?:sig|signature|x-amz-signature|x-goog-signature)="
            r"(?P<value>[a-z0-9%+/=_.-]{16,}+)"
        ),
        ("sig=", "signature="),
        on_lower=True,
        pick=_value_before_marker(lambda v: _is_secret_value(v, weak=True)),
    ),
    _Rule(  # `Cookie: session=…; theme=dark`, `Set-Cookie: sid=…; Path=/`, curl --cookie 'sid=…'
        SESSION_COOKIE,
        _re(
            r"""(?:(?<![a-z0-9_-])(?:set-)?cookie["']?[ \t]*:|--cookie[ \t=]+)[ \t]*["']?"""
            r"""(?P<pairs>[^\n\r"'`]{1,4096}+)"""
        ),
        ("cookie",),
        on_lower=True,
        spans=_cookie_values,
    ),
    _Rule(  # the session cookies of the common web frameworks, wherever they are written
        SESSION_COOKIE,
        _re(
            r"(?<![a-z0-9_.-])(?:phpsessid|jsessionid|connect\.sid|asp\.net_sessionid"
            r"|laravel_session)=(?P<value>[^;\s\"'`&,]++)"
        ),
        ("sessid", "sessionid", "connect.sid", "laravel_session"),
        on_lower=True,
        pick=_value_before_marker(_cookie_secret),
    ),
    _Rule(
        CREDENTIALED_URL,
        _re(
            r"://(?<=[A-Za-z0-9]://)(?P<user>[^\s:/?#@\[\]]*+)"
            r":(?P<value>[^\s/?#@\[][^\s/?#]*)@(?=[A-Za-z0-9\[])"
        ),
        ("://",),
        pick=_value_before_marker(_url_password),
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
    _Rule(  # DB_PASSWORD_PROD=…, SECRET_KEY_BASE=… (see `_env_suffixed`)
        PASSWORD,
        _re(
            r"(?<![A-Za-z0-9_])(?P<key>[A-Z0-9]++(?:_[A-Z0-9]++)++)[ \t]*[=:][ \t]*"
            r"""(?:"(?P<dq>[^"\n]{4,512}+)"|'(?P<sq>[^'\n]{4,512}+)'"""
            r"""|(?P<bare>[^\s"'`,;&<>]{4,512}+))"""
        ),
        ("PASS", "PWD", "SECRET", "TOKEN", "KEY"),
        pick=_env_suffixed,
    ),
    _Rule(
        PASSWORD,
        _re(r"rediscli_auth" + _ASSIGN_TAIL),
        ("rediscli_auth",),
        on_lower=True,
        pick=_assignment(weak=False),
    ),
    _Rule(  # CLI flags: `--password hunter22`, `--token ab12cd34` (value must look random)
        PASSWORD,
        _re(
            # `--db-password X`, `--api-token X`: a flag ending in the word counts too, and so
            # does a one-dash long flag (PowerShell's `-Password X`, keytool's `-storepass X`)
            r"(?<![a-z0-9_-])--?(?:[a-z0-9]+-)*"
            r"(?:password|passwd|pass|token|api-key|apikey|secret|client-secret|storepass|keypass)"
            r"[ \t]+(?P<value>[^\s\-'\"`][^\s'\"`]{7,}+)"
        ),
        ("-",),
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
    _Rule(  # "the password is X", "my passphrase was 'X'", "the wifi password is X"
        PASSWORD,
        _re(
            r"pass(?:word|phrase|code|wd)s?(?![a-z0-9_-])"
            r"(?:[ \t]+(?:for|to|of|on)[ \t]+[a-z0-9_.@-]{1,40}(?:[ \t]+[a-z0-9_.@-]{1,40})?)?"
            r"[ \t]+(?:is|was|will[ \t]+be|would[ \t]+be|should[ \t]+be|=):?[ \t]+" + _PHRASE_VALUE
        ),
        ("pass",),
        on_lower=True,
        pick=_phrase,
    ),
    _Rule(  # "the api key is X", "API key: X", "my token was 'X'", "a chave da API é X"
        PASSWORD,
        _re(
            r"(?<![a-z0-9_-])(?:(?:api|access|secret|private)[ \t_-]?key|client[ \t_-]?secret"
            r"|secret|(?:access|auth|api|bot|bearer|refresh)?[ \t_-]?token"
            r"|chave(?:[ \t]+d[ae][ \t]+(?:api|acesso))?|segredo)s?(?![a-z0-9_-])"
            r"(?:[ \t]+(?:for|to|of|on|d[oa]s?|de|para|pra|n[oa]s?)"
            r"(?:[ \t]+[^\s:=\"'`]{1,40}){1,2})?"
            r"(?:[ \t]+(?:is|was|\u00e9|e|era|foi|=):?|[ \t]*:)[ \t]+" + _PHRASE_VALUE
        ),
        ("key", "secret", "token", "chave", "segredo"),
        on_lower=True,
        pick=_credential_phrase,
    ),
    _Rule(  # "I changed the DB password to X", "set the wifi password to 'X'"
        PASSWORD,
        _re(
            r"(?<![a-z])(?:chang|set|reset|updat|rotat|switch)[a-z]{0,4}[ \t]+"
            r"(?:[a-z0-9_.@-]{1,40}[ \t]+){0,3}?pass(?:word|phrase|code|wd)[ \t]+to[ \t]+"
            + _PHRASE_VALUE
        ),
        ("pass",),
        on_lower=True,
        pick=_phrase,
    ),
    _Rule(  # "troquei a senha para X", "mudei a senha do banco pra X" (Portuguese)
        PASSWORD,
        _re(
            r"(?<![a-z])(?:troc|troq|mud|alter|defin|redefin|coloc|coloq|atualiz|configur)[a-z]{0,5}"
            r"[ \t]+(?:[^\s:=\"'`]{1,20}[ \t]+){0,2}?senhas?(?:[ \t]+[^\s:=\"'`]{1,40}){0,3}?"
            r"[ \t]+(?:para|pra|por)[ \t]+" + _PHRASE_VALUE
        ),
        ("senha",),
        on_lower=True,
        pick=_phrase,
    ),
    _Rule(  # `senha=X`, `"senha": "X"` (Portuguese)
        PASSWORD,
        _re(r"senha" + _ASSIGN_TAIL),
        ("senha",),
        on_lower=True,
        pick=_assignment(weak=False),
    ),
    _Rule(  # "a senha é X", "a senha do banco era 'X'", "minha senha do wifi: X" (Portuguese)
        PASSWORD,
        _re(
            r"senhas?(?![a-z0-9_-])"
            # an adjective follows the noun in Portuguese: `a senha nova é X`
            r"(?:[ \t]+(?:nov[ao]|atual|antiga|velha|provis\u00f3ria|provisoria|tempor\u00e1ria"
            r"|temporaria|padr\u00e3o|padrao|inicial|correta|certa|mestra|agora))?"
            r"(?:[ \t]+(?:d[oa]s?|de|para|pra|pro|n[oa]s?)(?:[ \t]+[^\s:=\"'`]{1,40}){1,2})?"
            r"(?:[ \t]+(?:\u00e9|e|eh|era|foi|ser\u00e1|sera|=):?|[ \t]*:)[ \t]+" + _PHRASE_VALUE
        ),
        ("senha",),
        on_lower=True,
        pick=_phrase,
    ),
    _Rule(  # "password: correct horse battery staple" (a passphrase, not a sentence)
        PASSWORD,
        _Pattern(
            r"(?i:pass(?:word|phrase))[ \t]*:[ \t]*"
            r"(?P<value>[a-z]{3,20}(?:[ ][a-z]{3,20}){2,7})(?=[ \t]*(?:$|[\n.,;)]))",
            re.ASCII | re.MULTILINE,
        ),
        ("assword", "ASSWORD", "assphrase", "ASSPHRASE"),
        pick=_passphrase,
    ),
    _Rule(  # ~/.netrc: machine HOST [login USER] password X (one line or several)
        PASSWORD,
        _re(
            # the host has a dot: `machine learning password reset` is prose
            r"(?<![a-z0-9_-])machine\s++[a-z0-9-]++(?:\.[a-z0-9-]++)++\s++"
            r"(?:login\s++\S{1,253}+\s++)?"
            r"password\s++(?P<value>\S{4,512}+)"
        ),
        ("machine",),
        on_lower=True,
        pick=_value_before_marker(_strong_value),
    ),
    _Rule(  # curl -u user:pass, curl --user user:pass, wget --http-user … (the password only)
        PASSWORD,
        _re(
            r"""(?:[ \t]-u[ \t]*|--user[= \t]+)["']?(?P<user>[^\s:"'@]{1,100}+)"""
            r""":(?P<value>[^\s"'@]{3,200}+)"""
        ),
        (" -u", "\t-u", "--user"),
        pick=_value_before_marker(_cli_secret),
    ),
    _Rule(  # mysql -pX (no space: the password is glued to the flag)
        PASSWORD,
        _re(
            r"(?<![a-z0-9_-])(?:mysql|mysqldump|mysqladmin|mysqlimport|mariadb)(?![a-z0-9_-])"
            r"[^\n]{0,200}?[ \t]-p"
            r"""(?:'(?P<sq>[^'\n]{3,200}+)'|"(?P<dq>[^"\n]{3,200}+)"|(?P<value>[^\s\-'"][^\s'"]{2,200}+))"""
        ),
        ("mysql", "mariadb"),
        on_lower=True,
        pick=_sshpass,  # -p'X', -p"X" or -pX
    ),
    _Rule(  # docker login -u me -p X (and the registry clients that copy it), mongosh -p X
        PASSWORD,
        _re(
            r"(?<![a-z0-9_-])(?:(?:docker|podman|buildah|skopeo|nerdctl|oras|az)[ \t]+login"
            r"|mongo(?:sh|dump|restore|export|import)?)(?![a-z0-9_-])"
            r"[^\n]{0,200}?[ \t]-p[ \t]+" + _FLAG_VALUE
        ),
        ("login", "mongo"),
        on_lower=True,
        pick=_client_flag,
    ),
    _Rule(  # redis-cli -a X
        PASSWORD,
        _re(r"(?<![a-z0-9_-])redis-cli(?![a-z0-9_-])[^\n]{0,200}?[ \t]-a[ \t]+" + _FLAG_VALUE),
        ("redis-cli",),
        on_lower=True,
        pick=_client_flag,
    ),
    # Tools whose password flag is a letter, read with its case (`sqlcmd -P` is the password,
    # `-p` is not): ssh-keygen -N/-P, zip -P, sqlcmd -P, ldapsearch -w
    *(
        _Rule(
            PASSWORD,
            _re(
                rf"(?<![a-z0-9_-])(?:{commands})(?![a-z0-9_-])[^\n]{{0,200}}?[ \t]-[{flags}][ \t]+"
                + _FLAG_VALUE
            ),
            triggers,
            pick=_client_flag,
        )
        for commands, flags, triggers in (
            ("ssh-keygen", "NP", ("ssh-keygen",)),
            ("zip|unzip", "P", ("zip",)),
            ("sqlcmd|bcp", "P", ("sqlcmd", "bcp")),
            (r"ldap[a-z]{3,10}", "w", ("ldap",)),
        )
    ),
    _Rule(  # openssl … -passin pass:X / -passout pass:X / -pass pass:X
        PASSWORD,
        _re(r"(?<![a-z0-9_-])-pass(?:in|out|word)?[ \t]+pass:(?P<value>[^\s'\"]{3,200}+)"),
        ("pass:",),
        on_lower=True,
        pick=_value_before_marker(_cli_secret),
    ),
    _Rule(  # PowerShell: ConvertTo-SecureString "X" -AsPlainText
        PASSWORD,
        _re(r"convertto-securestring[ \t]+(?:-string[ \t]+)?" + _FLAG_VALUE),
        ("convertto-securestring",),
        on_lower=True,
        pick=_sshpass,
    ),
    _Rule(  # sshpass -p X
        PASSWORD,
        _re(
            r"sshpass(?![a-z0-9_-])[^\n]{0,100}?[ \t]-p[ \t]*"
            r"""(?:"(?P<dq>[^"\n]{3,200}+)"|'(?P<sq>[^'\n]{3,200}+)'|(?P<value>[^\s"'\-][^\s"']{2,200}+))"""
        ),
        ("sshpass",),
        on_lower=True,
        pick=_sshpass,
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
_MARKS = "_-.:/"  # most token prefixes hold one of these, and prose seldom does


def _grouped(index: dict[str, tuple[int, ...]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Triggers grouped by the first of `_MARKS` they hold ("" for none): a group is searched
    only when its mark occurs, so plain prose pays a handful of substring searches."""
    groups: dict[str, list[str]] = {}
    for trigger in index:
        mark = next((c for c in trigger if c in _MARKS), "")
        groups.setdefault(mark, []).append(trigger)
    return tuple((mark, tuple(triggers)) for mark, triggers in sorted(groups.items()))


_FOLDED_GROUPS = _grouped(_FOLDED_TRIGGERS)
_CASED_GROUPS = _grouped(_CASED_TRIGGERS)


def _any_present(text: str, groups: tuple[tuple[str, tuple[str, ...]], ...]) -> bool:
    return any(
        (not mark or mark in text) and any(map(text.__contains__, strings))
        for mark, strings in groups
    )


def _active(text: str, low: str) -> set[int]:
    """Indexes of the rules whose trigger occurs (the prefilter: substring searches in C)."""
    active: set[int] = set()
    for haystack, groups, index in (
        (low, _FOLDED_GROUPS, _FOLDED_TRIGGERS),
        (text, _CASED_GROUPS, _CASED_TRIGGERS),
    ):
        for mark, triggers in groups:
            if mark and mark not in haystack:
                continue
            for trigger in filter(haystack.__contains__, triggers):
                active.update(index[trigger])
    return active


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


def _longest_word(text: str) -> int:
    return max(map(len, text.split()), default=0)


def _find(text: str, longest: int | None = None) -> list[list[tuple[int, int, str]]]:
    """Accepted hits per rule, in rule order; each list is sorted and free of overlaps.
    `longest`: the length of the text's longest word, when the caller measured it."""
    low = _fold(text)
    active = _active(text, low)
    found: list[list[tuple[int, int, str]]] = []
    for index in sorted(active):
        rule = _RULES[index]
        if rule.min_word:
            if longest is None:
                longest = _longest_word(text)
            if longest < rule.min_word:
                continue
        hits: list[tuple[int, int, str]] = []
        for m in rule.pattern.finditer(low if rule.on_lower else text):
            spans = rule.spans(m, text) if rule.spans is not None else [rule.pick(m, text)]
            for span in spans:
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


# --- normalisation: what the rules see ---------------------------------------------------------

# Letters of other scripts drawn like Latin ones (the confusables an attacker reaches for first).
_LOOKALIKES = str.maketrans(
    {
        # Cyrillic capitals and small letters
        "\u0410": "A", "\u0412": "B", "\u0415": "E", "\u0405": "S", "\u0406": "I",
        "\u0408": "J", "\u041a": "K", "\u041c": "M", "\u041d": "H", "\u041e": "O",
        "\u0420": "P", "\u0421": "C", "\u0422": "T", "\u0425": "X", "\u0423": "Y",
        "\u0430": "a", "\u0435": "e", "\u0456": "i", "\u0458": "j", "\u043e": "o",
        "\u0455": "s", "\u0440": "p", "\u0441": "c", "\u0445": "x", "\u0443": "y",
        "\u0501": "d", "\u04bb": "h", "\u04cf": "l", "\u051b": "q", "\u051d": "w",
        "\u043a": "k",
        # Greek capitals and small letters
        "\u0391": "A", "\u0392": "B", "\u0395": "E", "\u0396": "Z", "\u0397": "H",
        "\u0399": "I", "\u039a": "K", "\u039c": "M", "\u039d": "N", "\u039f": "O",
        "\u03a1": "P", "\u03a4": "T", "\u03a5": "Y", "\u03a7": "X", "\u03bf": "o",
        "\u03b9": "i", "\u03ba": "k", "\u03bd": "v", "\u03c1": "p", "\u03c4": "t",
        "\u03c5": "u", "\u03c7": "x",
    }
)  # fmt: skip
_FOLD_CACHE: dict[str, str] = {}
_DROPPED_CATEGORIES = frozenset({"Cf", "Mn", "Me"})  # zero-width, soft hyphen, joiners, marks
# A known token prefix whose run is cut by a line break (a paste wrapped at the terminal's width),
# with the shortest body its token has: only a run still shorter than that is joined with the run
# of token characters that starts the next line, so two complete lines never merge.
_SPLIT_MIN_BODY = {
    **{f"gh{kind}_": 36 for kind in "pousr"},
    "github_pat_": 22,
    "glpat-": 20,
    "sk-ant-": 32,
    "sk-": 32,
    **{f"{kind}k_{mode}_": 16 for kind in "rs" for mode in ("live", "test")},
    # xoxb-<team>-<user>-<24 characters>: the secret part is last, so a run cut before it must
    # join (a real token's body is 45 characters and more)
    **{f"xox{kind}-": 40 for kind in "abprs"},
    "xapp-": 12,
    "AKIA": 16,
    "ASIA": 16,
    "AIza": 35,
    "GOCSPX-": 24,
    "ya29.": 20,
    "hf_": 30,
    "npm_": 36,
    "pypi-": 50,
    "dckr_pat_": 20,
    "xai-": 70,
    "gsk_": 48,
    "shpat_": 32,
    "eyJ": 70,  # a JWT: header, payload and a signature of 43 and more (its run has dots)
}
_SPLIT_GROUPS = _grouped(dict.fromkeys(_SPLIT_MIN_BODY, ()))
_SPLIT_PREFIX = re.compile(
    r"(?<![A-Za-z0-9_.-])(?:"
    + "|".join(re.escape(p) for p in sorted(_SPLIT_MIN_BODY, key=len, reverse=True))
    + ")",
    re.ASCII,
)
_RUN = re.compile(r"[A-Za-z0-9_-]*", re.ASCII)
_DOTTED_RUN = re.compile(r"[A-Za-z0-9_.-]*", re.ASCII)
# The break: a shell continuation (`\`), then the next line, past a quote or comment mark
# (`> ` in a quoted reply, `# ` or `// ` in a commented-out line).
_BREAK = r"\\?[ \t]*\r?\n[ \t]*(?:(?:>|\#|//)[ \t]*)?"
_CONTINUATION = re.compile(_BREAK + r"(?P<word>[A-Za-z0-9_-]++)", re.ASCII)
_DOTTED_CONTINUATION = re.compile(_BREAK + r"(?P<word>[A-Za-z0-9_.-]++)", re.ASCII)


def _fold_char(ch: str) -> str:
    """`ch` as the rules read it: NFKC, look-alikes as Latin, invisible characters dropped."""
    folded = _FOLD_CACHE.get(ch)
    if folded is None:
        if unicodedata.category(ch) in _DROPPED_CATEGORIES:
            folded = ""
        else:
            folded = "".join(
                c
                for c in unicodedata.normalize("NFKC", ch).translate(_LOOKALIKES)
                if unicodedata.category(c) not in _DROPPED_CATEGORIES
            )
        if len(_FOLD_CACHE) < 65_536:
            _FOLD_CACHE[ch] = folded
    return folded


# The characters `_fold_char` may change: compatibility forms of ASCII (full-width, mathematical,
# enclosed, letterlike, ligatures, super- and subscripts), invisible ones (zero-width, joiners,
# soft hyphen, bidi controls, variation selectors, tags, combining marks) and the Greek and
# Cyrillic blocks the look-alikes live in. Everything else (CJK, accented Latin, emoji) is left
# as it is without being looked at one by one.
_FOLDABLE = re.compile(
    "["
    "\u00a0\u00ad\u00b2\u00b3\u00b9\u00bc-\u00be"
    "\u0300-\u036f\u0370-\u03ff\u0400-\u052f\u061c\u115f\u1160\u17b4\u17b5"
    "\u180b-\u180f\u1ab0-\u1aff\u1dc0-\u1dff\u2000-\u206f\u2070-\u209f\u20d0-\u20ff"
    "\u2100-\u218f\u2460-\u24ff\u3164\ufb00-\ufb06\ufe00-\ufe0f\ufe20-\ufe2f\ufeff"
    # full-width letters, digits and the marks tokens and URLs use (- . / = @ _), not the
    # punctuation CJK prose is full of (，：！？), which would only slow it down
    "\uff0d-\uff0f\uff10-\uff19\uff1d\uff20-\uff3a\uff3f\uff41-\uff5a\uffa0"
    "\U0001d400-\U0001d7ff\U000e0000-\U000e007f"
    "]+"
)


def _fold_script(text: str) -> tuple[str, list[int] | None]:
    """Text with every foldable character folded (`_fold_char`), and for each character of the
    result the index of the character it came from (None: nothing changed)."""
    if text.isascii() or _FOLDABLE.search(text) is None:
        return text, None
    out: list[str] = []
    origin: list[int] = []
    pos = 0
    changed = False
    for m in _FOLDABLE.finditer(text):
        out.append(text[pos : m.start()])
        origin.extend(range(pos, m.start()))
        for index in range(m.start(), m.end()):
            ch = text[index]
            folded = _fold_char(ch)
            changed = changed or folded != ch
            out.append(folded)
            origin.extend([index] * len(folded))
        pos = m.end()
    if not changed:
        return text, None
    out.append(text[pos:])
    origin.extend(range(pos, len(text)))
    return "".join(out), origin


def _join_splits(text: str) -> tuple[str, list[int] | None]:
    """Text with the line breaks inside a known token's run removed (None: there were none)."""
    if "\n" not in text or not _any_present(text, _SPLIT_GROUPS):
        return text, None  # the common case, decided by substring searches in C
    gaps: list[tuple[int, int]] = []
    reach = 0  # the end of the last token's joined run: a prefix inside it is part of it
    for m in _SPLIT_PREFIX.finditer(text):
        if m.start() < reach:
            continue  # (and skipping it keeps `eyJ\neyJ\n…` linear)
        need = _SPLIT_MIN_BODY[m.group()]
        dotted = m.group() == "eyJ"
        at = (_DOTTED_RUN if dotted else _RUN).match(text, m.end()).end()  # type: ignore[union-attr]
        body = at - m.end()
        while body < need:
            more = (_DOTTED_CONTINUATION if dotted else _CONTINUATION).match(text, at)
            if more is None:
                break
            gaps.append((at, more.start("word")))
            body += more.end() - more.start("word")
            at = more.end()
        reach = at
    if not gaps:
        return text, None
    out: list[str] = []
    origin: list[int] = []
    pos = 0
    for start, end in gaps:
        if start < pos:
            continue  # the same break, reached from two prefixes
        out.append(text[pos:start])
        origin.extend(range(pos, start))
        pos = end
    out.append(text[pos:])
    origin.extend(range(pos, len(text)))
    return "".join(out), origin


# The URL escapes of the marks a secret's shape is told by (`password%3Dx`, `%22token%22%3A`,
# `https%3A%2F%2Fuser%3Apass%40host`), read as the marks in a second view of the text (see
# `_redact_once`); other escapes stay as written.
_ESCAPES = {
    "%20": " ", "%22": '"', "%26": "&", "%27": "'", "%2C": ",", "%2F": "/", "%3A": ":",
    "%3B": ";", "%3D": "=", "%3F": "?", "%40": "@", "%7B": "{", "%7D": "}",
}  # fmt: skip
_ESCAPE = re.compile("|".join(_ESCAPES), re.IGNORECASE)


def _unescape(text: str) -> tuple[str, list[int] | None]:
    """Text with `_ESCAPES` decoded (None: there were none); a decoded mark comes from its `%`."""
    if "%" not in text or _ESCAPE.search(text) is None:
        return text, None
    out: list[str] = []
    origin: list[int] = []
    pos = 0
    for m in _ESCAPE.finditer(text):
        out += (text[pos : m.start()], _ESCAPES[m.group().upper()])
        origin.extend(range(pos, m.start() + 1))
        pos = m.end()
    out.append(text[pos:])
    origin.extend(range(pos, len(text)))
    return "".join(out), origin


def _normalized(text: str) -> tuple[str, list[int] | None]:
    """What the rules read, and where each of its characters came from in `text`."""
    result, origin = text, None
    for stage in (_fold_script, _join_splits):
        result, step = stage(result)
        if step is not None:
            origin = step if origin is None else [origin[i] for i in step]
    return result, origin


def _to_original(
    hits: list[tuple[int, int, str]], origin: list[int], text: str, *, escapes: bool = False
) -> list[tuple[int, int, str]]:
    out: list[tuple[int, int, str]] = []
    floor = 0
    size = len(text)
    for start, end, label in hits:
        begin = max(origin[start] if start < len(origin) else size, floor)
        stop = origin[end - 1] + 1 if end - 1 < len(origin) else size
        if escapes and text[stop - 1] == "%" and _ESCAPE.match(text, stop - 1):
            stop += 2  # the hit ends on a decoded escape (`p%40ss%40`): cut all three
        if stop > begin:
            out.append((begin, stop, label))
            floor = stop
    return out


# --- encoded secrets ---------------------------------------------------------------------------

_MIN_ENCODED = 20  # 15 bytes of text: shorter than any secret shape
_ENCODED = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{20,}+={0,2}(?![A-Za-z0-9+/=_-])")
_HEX = re.compile(r"(?:[0-9a-fA-F]{2})+", re.ASCII)
_MAX_ENCODED = 4096  # longer runs are data (an image, a key file), not an encoded credential


def _decoded(run: str) -> str | None:
    """The text a base64 or hex run encodes, when it is text (None: binary, or not an encoding)."""
    body = run.rstrip("=")
    try:
        if len(run) >= 32 and _HEX.fullmatch(run):
            raw = bytes.fromhex(run)
        elif "-" in body or "_" in body:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        else:
            raw = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
        decoded = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    printable = sum(1 for c in decoded if c.isprintable() or c in "\n\r\t")
    return decoded if len(decoded) >= 12 and printable >= 0.95 * len(decoded) else None


def _encoded_hits(text: str, longest: int) -> list[tuple[int, int, str]]:
    """Base64 or hex runs whose decoded text holds a secret, labelled as that secret."""
    hits: list[tuple[int, int, str]] = []
    if longest < _MIN_ENCODED:
        return hits  # prose: no word is long enough to be an encoded secret
    for m in _ENCODED.finditer(text):
        if m.end() - m.start() > _MAX_ENCODED:
            continue
        decoded = _decoded(m.group())
        if decoded is None:
            continue
        inner = _rule_hits(_normalized(decoded)[0])
        if inner:
            hits.append((m.start(), m.end(), inner[0][2]))
    return hits


def _rule_hits(text: str, longest: int | None = None) -> list[tuple[int, int, str]]:
    # Rules are ordered most specific first; a hit overlapping an earlier rule's hit is dropped,
    # so `x-access-token:ghs_…@github.com` keeps the github-token label and the visible host.
    kept: list[tuple[int, int, str]] = []
    for hits in _find(text, longest):
        kept = _merge(kept, hits) if kept else hits
    return kept


def _hits(text: str) -> list[tuple[int, int, str]]:
    """Every secret in `text` (as its spans in `text`), read through `_normalized`."""
    norm, origin = _normalized(text)
    longest = _longest_word(norm)
    kept = _rule_hits(norm, longest)
    encoded = _encoded_hits(norm, longest)
    if encoded:
        kept = _merge(kept, encoded) if kept else encoded
    if kept and origin is not None:
        kept = _to_original(kept, origin, text)
    return kept


def _redact_once(text: str) -> tuple[str, set[str]]:
    kept = _hits(text)
    # URL-escaped text is read a second time with its escapes decoded: a second view, not a
    # replacement, since a URL's own escapes (`https://jo%40x.com:a%20b@host`) read as written.
    unescaped, origin = _unescape(text)
    if origin is not None:
        found = _to_original(_hits(unescaped), origin, text, escapes=True)
        kept = _merge(kept, found) if kept else found
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
