"""Fabricated secrets (the right shape, never real keys) and non-secret look-alikes.

Token values are assembled at import time from a seeded generator, so this file holds no literal
that a secret scanner would flag, and every run sees the same values.
"""

from __future__ import annotations

import base64
import random
import string

_UPPER = string.ascii_uppercase
_LOWER = string.ascii_lowercase
_DIGITS = string.digits
_HEX = "0123456789abcdef"
_B64 = string.ascii_letters + string.digits + "+/"


def _mixed(n: int, seed: str, extra: str = "") -> str:
    """``n`` characters cycling upper / lower / digit (plus ``extra``), so every class occurs."""
    rng = random.Random(seed)
    pools = (_UPPER, _LOWER, _DIGITS, *([extra] if extra else []))
    return "".join(rng.choice(pools[i % len(pools)]) for i in range(n))


def _pick(n: int, seed: str, alphabet: str) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


# --- fabricated values -------------------------------------------------------------------------

OPENAI_PROJECT = "sk-" + "proj-" + _mixed(120, "openai-proj", "_-")
OPENAI_LEGACY = "sk-" + _mixed(48, "openai-legacy")
OPENAI_SERVICE = "sk-" + "svcacct-" + _mixed(90, "openai-svc", "_")
ANTHROPIC_1 = "sk-" + "ant-api03-" + _mixed(93, "anthropic-1", "_-") + "AA"
ANTHROPIC_2 = "sk-" + "ant-admin01-" + _mixed(80, "anthropic-2")
AWS_ACCESS = "AK" + "IA" + _pick(16, "aws-akia", "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
AWS_SESSION = "AS" + "IA" + _pick(16, "aws-asia", "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
AWS_SECRET_1 = _mixed(40, "aws-secret-1", "/+")
AWS_SECRET_2 = _mixed(40, "aws-secret-2", "+")
GITHUB_CLASSIC = "gh" + "p_" + _mixed(36, "gh-classic")
GITHUB_FINE = "github" + "_pat_" + _mixed(22, "gh-fine-a") + "_" + _mixed(59, "gh-fine-b")
GITHUB_APP = "gh" + "s_" + _mixed(36, "gh-app")
GITLAB = "gl" + "pat-" + _mixed(20, "gitlab", "_-")
SLACK_BOT = "xo" + "xb-" + _pick(12, "slack-b1", _DIGITS) + "-" + _pick(13, "slack-b2", _DIGITS)
SLACK_BOT += "-" + _mixed(24, "slack-b3")
SLACK_USER = "xo" + "xp-" + _pick(11, "slack-u1", _DIGITS) + "-" + _pick(12, "slack-u2", _DIGITS)
SLACK_USER += "-" + _pick(13, "slack-u3", _DIGITS) + "-" + _pick(32, "slack-u4", _HEX)
SLACK_HOOK_PATH = "T" + _mixed(8, "sh-t") + "/B" + _mixed(10, "sh-b") + "/" + _mixed(24, "sh-x")
SLACK_HOOK = "https://hooks.slack" + ".com/services/" + SLACK_HOOK_PATH
DISCORD_HOOK = (
    "https://discord" + ".com/api/webhooks/" + _pick(18, "dc-id", _DIGITS) + "/"
    + _mixed(68, "dc-token", "_-")
)  # fmt: skip
GOOGLE_KEY = "AI" + "za" + _mixed(35, "google-key", "_-")
GOOGLE_CLIENT_SECRET = "GOC" + "SPX-" + _mixed(28, "google-oauth", "_-")
GOOGLE_ACCESS_TOKEN = "ya" + "29." + _mixed(150, "google-at", "_-")
STRIPE_LIVE = "sk" + "_live_" + _mixed(99, "stripe-live")
STRIPE_RESTRICTED = "rk" + "_test_" + _mixed(24, "stripe-rk")
STRIPE_WEBHOOK = "wh" + "sec_" + _mixed(32, "stripe-wh")
NPM = "np" + "m_" + _mixed(36, "npm")
DOCKER = "dckr" + "_pat_" + _mixed(27, "docker", "_-")
PYPI = "py" + "pi-AgEIcHlwaS5vcmc" + _mixed(120, "pypi", "_-")
HUGGINGFACE = "h" + "f_" + _pick(34, "hf", string.ascii_letters).replace("a", "A", 1) + "zQ"
SENDGRID = "S" + "G." + _mixed(22, "sg-1", "_-") + "." + _mixed(43, "sg-2", "_-")
SHOPIFY = "shp" + "at_" + _pick(32, "shopify", _HEX)
TWILIO = "S" + "K" + _pick(32, "twilio", _HEX)
AZURE_ACCOUNT_KEY = _pick(86, "azure", _B64) + "=="
JWT_TOKEN = (
    _b64url(b'{"alg":"HS256","typ":"JWT"}')
    + "."
    + _b64url(b'{"sub":"1234567890","name":"Ada","iat":1516239022}')
    + "."
    + _mixed(43, "jwt-sig", "_-")
)
BASIC_CREDENTIALS = base64.b64encode(b"deploy:" + _mixed(14, "basic").encode()).decode()
BEARER_OPAQUE_1 = _mixed(40, "bearer-1", "._-")
BEARER_OPAQUE_2 = _pick(48, "bearer-2", _HEX)
PEM_LINES = [_pick(64, f"pem-{i}", _B64) for i in range(6)]
OPENSSH_LINES = [_pick(70, f"openssh-{i}", _B64) for i in range(4)]
PGP_LINES = [_pick(64, f"pgp-{i}", _B64) for i in range(4)]
EC_LINES = [_pick(64, f"ec-{i}", _B64) for i in range(3)]
URL_PASSWORD_1 = _mixed(16, "url-pw-1")
URL_PASSWORD_2 = _mixed(20, "url-pw-2", "!*")
URL_PASSWORD_3 = "s3cr3t-" + _mixed(8, "url-pw-3")
# Provider shapes added with issue 11.
XAI = "xa" + "i-" + _mixed(80, "xai")
GROQ = "gs" + "k_" + _mixed(52, "groq")
MAILGUN = "ke" + "y-" + _pick(32, "mailgun", _HEX)
SENTRY_KEY = _pick(32, "sentry", _HEX)
SENTRY = f"https://{SENTRY_KEY}@o4504.ingest.sentry" + ".io/4505123"
TELEGRAM = _pick(10, "tg-id", _DIGITS).replace("0", "7", 1) + ":AA" + _mixed(33, "tg", "_-")
DISCORD_BOT = (
    base64.urlsafe_b64encode(b"123456789012345678").rstrip(b"=").decode()
    + "." + _mixed(6, "dc-bot-2", "_") + "." + _mixed(38, "dc-bot-3", "_-")
)  # fmt: skip
TWILIO_AUTH = _pick(32, "twilio-auth", _HEX)
GCP_KEY_ID = _pick(40, "gcp-key-id", _HEX)
DIGITALOCEAN = "do" + "p_v1_" + _pick(64, "do", _HEX)
LINEAR = "lin" + "_api_" + _mixed(40, "linear")
REPLICATE = "r" + "8_" + _mixed(37, "replicate")
PERPLEXITY = "pp" + "lx-" + _mixed(48, "pplx")
NOTION = "nt" + "n_" + _mixed(46, "notion")
POSTMAN = "PM" + "AK-" + _pick(24, "pm-1", _HEX) + "-" + _pick(34, "pm-2", _HEX)
AGE = "AGE-" + "SECRET-KEY-1" + _pick(58, "age", _UPPER + _DIGITS)
GRAFANA = "gl" + "sa_" + _mixed(32, "grafana") + "_" + _pick(8, "grafana-2", _HEX)
NEWRELIC = "NR" + "AK-" + _pick(27, "newrelic", _UPPER + _DIGITS)
FIGMA = "fi" + "gd_" + _mixed(40, "figma", "_-")
AWS_SECRET_3 = _mixed(40, "aws-secret-3", "/")
AWS_SECRET_4 = _mixed(40, "aws-secret-4", "+")
# Obfuscated forms of known shapes: what a person (or a model) pastes, or an attacker types.
ZWSP, ZWJ, SHY = "\u200b", "\u200d", "\u00ad"
_FULL_WIDTH = str.maketrans({c: chr(ord(c) + 0xFEE0) for c in string.ascii_letters + "_-"})
GITHUB_ZWSP = GITHUB_CLASSIC[:2] + ZWSP + GITHUB_CLASSIC[2:]
STRIPE_SHY = STRIPE_LIVE[:2] + SHY + STRIPE_LIVE[2:]
ANTHROPIC_ZWJ = ANTHROPIC_2[:6] + ZWJ + ANTHROPIC_2[6:]
AWS_ZWSP = AWS_ACCESS[:2] + ZWSP + AWS_ACCESS[2:]
GITHUB_FULL_WIDTH = GITHUB_APP[:4].translate(_FULL_WIDTH) + GITHUB_APP[4:]
STRIPE_FULL_WIDTH = STRIPE_RESTRICTED.translate(_FULL_WIDTH)
AWS_CYRILLIC = "\u0410" + "\u041a" + AWS_SESSION[2:].replace("A", "A")  # А and К
GITHUB_CYRILLIC = "gh\u0440_" + _mixed(36, "gh-cyr")  # a Cyrillic р
OPENAI_GREEK = "sk-" + _mixed(40, "openai-greek").replace("o", "\u03bf")  # Greek omicron
GITHUB_SPLIT = GITHUB_FINE[:30] + "\n" + GITHUB_FINE[30:]
ANTHROPIC_SPLIT = ANTHROPIC_1[:20] + "\n   " + ANTHROPIC_1[20:]
FAKE_MARKED = "Hunter2xyzQ"
FAKE_MARKED_URL = _mixed(14, "fake-marked-url")
# Encoded secrets: base64 or hex of a known shape.
B64_GITHUB = base64.b64encode(GITHUB_CLASSIC.encode()).decode()
B64_PASSWORD = base64.b64encode(b"db_password=Plumb3r-Cr4ck-91").decode()
B64URL_SLACK = base64.urlsafe_b64encode(SLACK_BOT.encode()).decode().rstrip("=")
HEX_STRIPE = STRIPE_LIVE.encode().hex()
HEX_AWS = (AWS_ACCESS + " " + AWS_SECRET_1).encode().hex()

_RSA_BLOCK = "\n".join(
    ["-----BEGIN RSA PRIVATE KEY-----", *PEM_LINES, "-----END RSA PRIVATE KEY-----"]
)
_OPENSSH_BLOCK = "\n".join(
    ["-----BEGIN OPENSSH PRIVATE KEY-----", *OPENSSH_LINES, "-----END OPENSSH PRIVATE KEY-----"]
)
_PGP_BLOCK = "\n".join(
    ["-----BEGIN PGP PRIVATE KEY BLOCK-----", "", *PGP_LINES, "-----END PGP PRIVATE KEY BLOCK-----"]
)
_EC_TRUNCATED = "\n".join(["-----BEGIN EC PRIVATE KEY-----", *EC_LINES])

VAULT = "hvs." + _mixed(90, "vault", "_-")
SAS_SIG = _mixed(43, "sas", "+/") + "%3D"
S3_SIG = _pick(64, "s3-sig", _HEX)
RAILS_SECRET = _pick(128, "rails", _HEX)
GITLAB_RUNNER = "GR1348941" + _mixed(20, "gitlab-runner", "_-")
SESSION_1 = _mixed(32, "session-1")
SESSION_2 = _mixed(26, "session-2", "-_")

# (label, sentence containing the secret, the secret value)
SECRETS: list[tuple[str, str, str]] = [
    (
        "openai-key",
        f"Set OPENAI_API_KEY={OPENAI_PROJECT} before running the evals.",
        OPENAI_PROJECT,
    ),
    ("openai-key", f"The old key {OPENAI_LEGACY} was rotated last week.", OPENAI_LEGACY),
    ("openai-key", f"Batch jobs authenticate with {OPENAI_SERVICE}", OPENAI_SERVICE),
    ("anthropic-key", f"export ANTHROPIC_API_KEY={ANTHROPIC_1}", ANTHROPIC_1),
    ("anthropic-key", f"curl -H 'x-api-key: {ANTHROPIC_2}' https://api.example.com", ANTHROPIC_2),
    ("aws-access-key", f"The CI user signs requests with {AWS_ACCESS}.", AWS_ACCESS),
    ("aws-access-key", f"STS returned AccessKeyId {AWS_SESSION} for the session", AWS_SESSION),
    ("aws-secret-key", f"[default]\naws_secret_access_key = {AWS_SECRET_1}\n", AWS_SECRET_1),
    ("aws-secret-key", f'{{"SecretAccessKey": "{AWS_SECRET_2}", "Expiration": 1}}', AWS_SECRET_2),
    ("github-token", f"Push with the PAT {GITHUB_CLASSIC} from the vault.", GITHUB_CLASSIC),
    ("github-token", f"GH_TOKEN={GITHUB_FINE}", GITHUB_FINE),
    (
        "github-token",
        f"git clone https://x-access-token:{GITHUB_APP}@github.com/acme/api.git",
        GITHUB_APP,
    ),
    ("gitlab-token", f"The runner uses {GITLAB} to pull images.", GITLAB),
    ("slack-token", f"SLACK_BOT_TOKEN={SLACK_BOT}", SLACK_BOT),
    ("slack-token", f"Old user token was {SLACK_USER} (revoked?)", SLACK_USER),
    ("slack-webhook", f"Alerts go to {SLACK_HOOK} every hour.", SLACK_HOOK_PATH),
    ("discord-webhook", f"Post release notes to {DISCORD_HOOK}", DISCORD_HOOK),
    ("google-api-key", f"Maps key: {GOOGLE_KEY}", GOOGLE_KEY),
    (
        "google-oauth",
        f"client secret {GOOGLE_CLIENT_SECRET} belongs to the web app",
        GOOGLE_CLIENT_SECRET,
    ),
    (
        "google-oauth",
        f"Got access token {GOOGLE_ACCESS_TOKEN} from the metadata server.",
        GOOGLE_ACCESS_TOKEN,
    ),
    ("stripe-key", f"Production uses {STRIPE_LIVE}; never log it.", STRIPE_LIVE),
    ("stripe-key", f"Restricted test key: {STRIPE_RESTRICTED}", STRIPE_RESTRICTED),
    ("stripe-key", f"STRIPE_WEBHOOK_SECRET={STRIPE_WEBHOOK}", STRIPE_WEBHOOK),
    ("npm-token", f"//registry.npmjs.org/:_authToken={NPM}", NPM),
    ("docker-token", f"docker login -u ci-bot -p {DOCKER} registry.example.com", DOCKER),
    ("pypi-token", f"twine upload -u __token__ -p {PYPI} dist/*", PYPI),
    ("huggingface-token", f"huggingface-cli login --token {HUGGINGFACE}", HUGGINGFACE),
    ("sendgrid-key", f"Mail is sent with SENDGRID key {SENDGRID}.", SENDGRID),
    ("shopify-token", f"Shopify admin token {SHOPIFY} for the staging store", SHOPIFY),
    ("twilio-key", f"Twilio API key SID {TWILIO} is used by the SMS worker", TWILIO),
    (
        "azure-key",
        "DefaultEndpointsProtocol=https;AccountName=acmeprod;"
        f"AccountKey={AZURE_ACCOUNT_KEY};EndpointSuffix=core.windows.net",
        AZURE_ACCOUNT_KEY,
    ),
    ("jwt", f"The session cookie was {JWT_TOKEN} when it failed.", JWT_TOKEN),
    ("basic-auth", f"Authorization: Basic {BASIC_CREDENTIALS}", BASIC_CREDENTIALS),
    ("bearer-token", f"Authorization: Bearer {BEARER_OPAQUE_1}", BEARER_OPAQUE_1),
    ("bearer-token", f"Call the API with Bearer {BEARER_OPAQUE_2} in the header.", BEARER_OPAQUE_2),
    ("private-key", f"Deploy key:\n{_RSA_BLOCK}\nInstall it on the bastion.", PEM_LINES[2]),
    ("private-key", f"id_ed25519 contents:\n{_OPENSSH_BLOCK}", OPENSSH_LINES[1]),
    ("private-key", f"Signing key:\n{_PGP_BLOCK}\n", PGP_LINES[3]),
    ("private-key", f"Truncated paste:\n{_EC_TRUNCATED}", EC_LINES[2]),
    (
        "credentialed-url",
        f"DATABASE_URL=postgres://app:{URL_PASSWORD_1}@db.example.com:5432/app",
        URL_PASSWORD_1,
    ),
    (
        "credentialed-url",
        f"Cache lives at redis://:{URL_PASSWORD_2}@cache.internal:6379/0",
        URL_PASSWORD_2,
    ),
    (
        "credentialed-url",
        f"mongodb+srv://reporting:{URL_PASSWORD_3}@cluster0.example.net/?retryWrites=true",
        URL_PASSWORD_3,
    ),
    ("password", "DB_PASSWORD=Tr0ub4dor&3x", "Tr0ub4dor&3x"),
    ("password", "mysql password=hunter2hunter2 on the replica", "hunter2hunter2"),
    (
        "password",
        'config.json has {"password": "correct horse battery staple"}',
        "correct horse battery staple",
    ),
    ("password", "database:\n  user: app\n  password: Winter2024!\n", "Winter2024!"),
    ("password", "PGPASSWORD=pg_s3cret psql -h db -U app", "pg_s3cret"),
    ("password", "The admin password: changeme", "changeme"),
    ("password", "passwd = 'qwerty123'", "qwerty123"),
    ("password", "login with user=ops pwd=Zx81!spectrum", "Zx81!spectrum"),
    (
        "password",
        "Django SECRET_KEY=django-insecure-8f#k2@l!x9q0z&v3b",
        "django-insecure-8f#k2@l!x9q0z&v3b",
    ),
    ("password", "client_secret: 9bE4kQ7tX2mW", "9bE4kQ7tX2mW"),
    ("password", "api_key=5f1e2d3c4b5a69788796a5b4c3d2e1f0", "5f1e2d3c4b5a69788796a5b4c3d2e1f0"),
    ("password", '{"apiKey": "AbCd1234EfGh5678IjKl"}', "AbCd1234EfGh5678IjKl"),
    (
        "password",
        "refresh with access_token=ya-not-google-8x7Yq2Lm9Pz",
        "ya-not-google-8x7Yq2Lm9Pz",
    ),
    ("password", "X-Auth-Token: 0a9b8c7d6e5f4a3b2c1d", "0a9b8c7d6e5f4a3b2c1d"),
    ("password", "https://api.example.com/login?user=bob&password=s3cr3tP4ss&next=/", "s3cr3tP4ss"),
    ("password", "<settings><password>m4v3nR3po!</password></settings>", "m4v3nR3po!"),
    ("password", "The webhook secret = whk_7Hq2Lx9Rt4Vb", "whk_7Hq2Lx9Rt4Vb"),
    ("password", "mysql -u root --password S3cretRoot9 -h db", "S3cretRoot9"),
    # --- provider shapes (issue 11)
    ("xai-key", f"XAI_API_KEY={XAI}", XAI),
    ("groq-key", f"The Groq client reads {GROQ} from the env.", GROQ),
    ("mailgun-key", f"Mailgun: api:{MAILGUN} for mg.example.com", MAILGUN),
    ("sentry-dsn", f"SENTRY_DSN={SENTRY}", SENTRY_KEY),
    ("telegram-bot-token", f"The bot token is {TELEGRAM} (from BotFather).", TELEGRAM),
    ("discord-bot-token", f"client.login('{DISCORD_BOT}')", DISCORD_BOT),
    ("twilio-auth-token", f"TWILIO_AUTH_TOKEN={TWILIO_AUTH}", TWILIO_AUTH),
    ("twilio-auth-token", f"Twilio auth token: {TWILIO_AUTH}", TWILIO_AUTH),
    (
        "gcp-private-key-id",
        f'{{"type": "service_account", "private_key_id": "{GCP_KEY_ID}"}}',
        GCP_KEY_ID,
    ),
    ("digitalocean-token", f"doctl auth init -t {DIGITALOCEAN}", DIGITALOCEAN),
    ("linear-key", f"LINEAR_API_KEY={LINEAR}", LINEAR),
    ("replicate-token", f"export REPLICATE_API_TOKEN={REPLICATE}", REPLICATE),
    ("perplexity-key", f"Perplexity key {PERPLEXITY} for the research agent", PERPLEXITY),
    ("notion-token", f"The Notion integration uses {NOTION}.", NOTION),
    ("postman-key", f"Postman API key: {POSTMAN}", POSTMAN),
    ("age-secret-key", f"# created: 2024-01-01\n{AGE}\n", AGE),
    ("grafana-token", f"Grafana service account token {GRAFANA}", GRAFANA),
    ("newrelic-key", f"NEW_RELIC_API_KEY={NEWRELIC}", NEWRELIC),
    ("figma-token", f"Figma personal token {FIGMA} for the design sync", FIGMA),
    # --- AWS secret keys written with spaces, or bare in prose
    ("aws-secret-key", f"AWS Secret Access Key: {AWS_SECRET_3}", AWS_SECRET_3),
    ("aws-secret-key", f"my aws secret key is {AWS_SECRET_4}", AWS_SECRET_4),
    ("aws-secret-key", f"The AWS keys are {AWS_ACCESS} and {AWS_SECRET_3} for CI.", AWS_SECRET_3),
    # --- obfuscated known shapes
    ("github-token", f"Push with {GITHUB_ZWSP} please", GITHUB_CLASSIC[3:]),
    ("stripe-key", f"Live key: {STRIPE_SHY}", STRIPE_LIVE[3:]),
    ("anthropic-key", f"Use {ANTHROPIC_ZWJ} for Claude", ANTHROPIC_2[7:]),
    ("aws-access-key", f"Key id {AWS_ZWSP} in the vault", AWS_ACCESS[3:]),
    ("github-token", f"Token: {GITHUB_FULL_WIDTH}", GITHUB_APP[4:]),
    ("stripe-key", f"Restricted key {STRIPE_FULL_WIDTH}", STRIPE_FULL_WIDTH[8:]),
    ("aws-access-key", f"AccessKeyId {AWS_CYRILLIC}", AWS_CYRILLIC[2:]),
    ("github-token", f"A token with a Cyrillic letter: {GITHUB_CYRILLIC}", GITHUB_CYRILLIC[4:]),
    ("openai-key", f"OpenAI key with Greek omicrons {OPENAI_GREEK}", OPENAI_GREEK[3:]),
    ("github-token", f"GITHUB_TOKEN={GITHUB_SPLIT}", GITHUB_FINE[30:]),
    ("anthropic-key", f"key: {ANTHROPIC_SPLIT}\nthanks", ANTHROPIC_1[20:]),
    ("password", f"password={FAKE_MARKED}[REDACTED:x]", FAKE_MARKED),
    (
        "credentialed-url",
        f"postgres://app:{FAKE_MARKED_URL}[REDACTED:x]@db.example.com/app",
        FAKE_MARKED_URL,
    ),
    # --- phrasings
    ("password", "the password is Tr0ub4dor&3", "Tr0ub4dor&3"),
    ("password", "My password was 'letmein-2024' until Friday.", "letmein-2024"),
    ("password", "The wifi password is Kp9-Lm2-Qx7!", "Kp9-Lm2-Qx7!"),
    ("password", "password: correct horse battery staple", "correct horse battery staple"),
    # (Its own words around the secret: once redacted, two sentences alike are one memory.)
    ("password", "the router password is correcthorsebattery", "correcthorsebattery"),
    ("password", "curl -u admin:S3cr3t-Pa55 https://api.example.com/v1", "S3cr3t-Pa55"),
    ("password", "curl --user deploy:Jk8-Wq3-Zr9 https://ci.example.com", "Jk8-Wq3-Zr9"),
    ("password", "mysql -h db -u root -pS3cretRoot! appdb", "S3cretRoot!"),
    ("password", "mysqldump -uroot -pDumpP4ss-77 --all-databases", "DumpP4ss-77"),
    ("password", "sshpass -p 'Gr33n-Tea-42' ssh ops@bastion", "Gr33n-Tea-42"),
    ("password", "sshpass -p Bl4ckC0ffee ssh ops@bastion", "Bl4ckC0ffee"),
    # --- encoded
    ("github-token", f"The secret is base64 encoded: {B64_GITHUB}", B64_GITHUB),
    ("password", f"config blob {B64_PASSWORD}", B64_PASSWORD),
    ("slack-token", f"SLACK_B64={B64URL_SLACK}", B64URL_SLACK),
    ("stripe-key", f"hex dump: {HEX_STRIPE}", HEX_STRIPE),
    ("aws-access-key", f"creds={HEX_AWS}", HEX_AWS),
    # --- session cookies, Portuguese, markdown code, command lines (review Z)
    ("session-cookie", f"Cookie: theme=dark; sessionid={SESSION_1}", SESSION_1),
    ("session-cookie", f"Set-Cookie: sid={SESSION_2}; Path=/; HttpOnly; Secure", SESSION_2),
    ("session-cookie", f"the logs show PHPSESSID={SESSION_1} for that user", SESSION_1),
    ("password", "a senha do banco é Tr0ub4dor&3", "Tr0ub4dor&3"),
    ("password", "ADMIN_SENHA=S3nh4-Forte-99", "S3nh4-Forte-99"),
    ("password", "the password is `Kp9-Lm2-Qx7`", "Kp9-Lm2-Qx7"),
    ("password", "mysql -u root -p'Dump-P4ss-88' appdb", "Dump-P4ss-88"),
    ("password", "docker login -u ci -p Regi5try-Pass registry.example.com", "Regi5try-Pass"),
    ("password", "deploy --db-password Zq8-Vw2-Lx5 --yes", "Zq8-Vw2-Lx5"),
    ("vault-token", f"export VAULT_TOKEN={VAULT}", VAULT),
    (
        "signed-url",
        f"https://acme.blob.core.windows.net/logs/a.txt?sv=2022-11-02&sp=r&sig={SAS_SIG}",
        SAS_SIG,
    ),
    ("signed-url", f"s3 link ...&X-Amz-Signature={S3_SIG}&X-Amz-Expires=300", S3_SIG),
    ("password", f"SECRET_KEY_BASE={RAILS_SECRET}", RAILS_SECRET),
    ("password", "DB_PASSWORD_PRIMARY=Tr0ub4dor-33", "Tr0ub4dor-33"),
    ("gitlab-token", f"gitlab-runner register --registration-token {GITLAB_RUNNER}", GITLAB_RUNNER),
    ("password", "machine api.example.com login ci password Zx81-spectrum", "Zx81-spectrum"),
]

# Text that mentions secrets, or has a similar shape, but holds none.
LOOKALIKES: list[str] = [
    "the password is stored in the vault",
    "the password is on the sticky note",
    "the password is straightforward.",
    # A state in an adjective-forming word (-some, -proof, -worthy, -tight, -weight, -like,
    # -wide, -ard) or a compound noun: prose, not a passphrase run together.
    "my password is cumbersome.",
    "the password is bulletproof.",
    "the new password is trustworthy, the old one was not.",
    "the password is watertight and lightweight",
    "the password is nonstandard.",
    "the password is commonplace.",
    "the password is whitespace.",
    "I forgot my password again, so I reset it.",
    "password: ****",
    "password=",
    "PASSWORD=\nUSER=app",
    "password: <redacted>",
    "password = <your password here>",
    "password: xxx",
    "password=${DB_PASSWORD}",
    "password: {{ secrets.DB_PASSWORD }}",
    "Password: Required for all admin accounts",
    "connect(user=user, password=password)",
    "password=settings.DB_PASSWORD",
    "Passwords must be rotated every 90 days; see the password-reset flow.",
    "Use --password-stdin so the password never lands in shell history.",
    "password_min_length=16",
    "PWD=/home/alice/projects/memory-worker",
    "bypass=enabled for the health check",
    "secretary: Jane Doe",
    "The secret sauce is aggressive caching.",
    "max_tokens=4096 and token_count=1234",
    "Token: each subword piece is a token in the vocabulary",
    "api_key=YOUR_API_KEY",
    "api_key=os.environ['OPENAI_API_KEY']",
    "Authorization: Bearer <token>",
    "Authorization: Bearer xxx",
    "Authorization: Bearer $TOKEN",
    "He was the bearer of bad news.",
    "Bearer token authentication is described in RFC 6750.",
    "sk-learn is what some people call scikit-learn",
    "Stripe test mode uses sk_test_ prefixed keys.",
    "AKIA is the prefix of long-term AWS access keys.",
    "Our region is ap-southeast-1 in ASIA PACIFIC.",
    "Fixed in commit 9fceb02d0ae598e95dc970b74767f19372d61af8 on main.",
    "Request id 550e8400-e29b-41d4-a716-446655440000 timed out.",
    "SHA-256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "Logo: data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "YPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    "pneumonoultramicroscopicsilicovolcanoconiosis and antidisestablishmentarianism",
    "Config lives in /home/alice/.config/memory-worker/settings.yaml and ~/.aws/credentials",
    r"C:\Users\alice\AppData\Roaming\memory-worker\keys.txt",
    "Docs: https://docs.python.org/3/library/re.html#re.ASCII",
    "Proxy at https://proxy.example.com:8443/path?next=/home&q=1",
    "Clone with ssh: git@github.com:acme/memory-worker.git",
    "Email alice.smith+alerts@example.co.uk or bob@example.com",
    "Pinned pydantic==2.14.4 and structlog 26.1.0 (v3.11.7 runtime)",
    "Deadline 2024-05-01T12:34:56Z, budget 1234567.89, port 8080",
    "redis://localhost:6379/0 and postgres://db.example.com/app",
    "https://user@example.com/repo.git has a user but no password",
    "Example DSN: https://user:password@host.example.com",
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYI\n-----END PUBLIC KEY-----",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice@laptop",
    "sort_key=created_at, primary_key: id, key=value pairs",
    "Set secret_name=prod-db-creds in the chart values.",
    "SKU-12345 shipped; ASK-42 is open.",
    "The hf_hub_download helper caches files under self.hf_cache_dir",
    "eyJ is how base64-encoded JSON objects start.",
    "The ghp_ prefix marks a classic GitHub token.",
    "PASS: tests/test_redact.py::test_lookalikes_are_unchanged",
    "class Settings: api_key: Optional[str] = None; password: SecretStr",
    'password = input("Password: ") and token = os.getenv("API_TOKEN")',
    "password = getpass.getpass()",
    "Pass the --token flag, or --password-stdin, never --password on the command line.",
    # --- next to the shapes issue 11 added: a look-alike for each
    "The xai- prefix marks xAI keys; the model is grok-2.",
    "gsk_ is the prefix of Groq keys (see their docs).",
    "Redis is a key-value store; see key-value-pairs.md.",
    "The DSN format is https://<key>@<org>.ingest.sentry.io/<project>.",
    "Sentry docs: https://docs.sentry.io/platforms/python/",
    "Call 0123456789:30 minutes past the hour, ticket 123456789:ABC.",
    "Release M.1.2 shipped on 2024.05.01 with build N.3.4.",
    "The Twilio account SID starts with AC and is not a secret.",
    '"private_key_id": "YOUR_PRIVATE_KEY_ID"',
    "Set TWILIO_AUTH_TOKEN in the environment, never in code.",
    "DigitalOcean tokens start with dop_v1_; rotate them yearly.",
    "Linear keys look like lin_api_ followed by 40 characters.",
    "r8_ is Replicate's token prefix.",
    "pplx-api is the name of the Perplexity client.",
    "Notion integration tokens begin with ntn_ or secret_.",
    "Postman keys start with PMAK- and a hex id.",
    "age keys: AGE-SECRET-KEY-1... (never commit them).",
    "Grafana tokens begin with glsa_ (service accounts).",
    "New Relic user keys start with NRAK-.",
    "Figma tokens begin with figd_; see the developer settings.",
    "The AWS region is us-east-1 and the account is 123456789012.",
    "aws secret access key: see 1Password, entry 'ci-deploy'",
    "My AWS notes: S3 bucket names are at most 63 characters long.",
    "Git commit 3f786850e387550fdab836ed7e6dc881de23001b touched aws.py",
    "zero\u200bwidth spaces and soft\u00adhyphens in ordinary words",
    "ｆｕｌｌ－ｗｉｄｔｈ ｔｅｘｔ ｆｒｏｍ ａ ｊａｐａｎｅｓｅ ｋｅｙｂｏａｒｄ",
    "Привет! Встреча в среду, в кабинете 4.",
    "Καλημέρα, η συνάντηση είναι την Τρίτη.",
    "The ghp\u200b_ prefix, typed with a zero-width space, is still just a prefix.",
    "Use the sk-\nlearn library for the baseline.",
    "AKIA\nis where long-term AWS key ids begin.",
    "password=[REDACTED:password] was already handled",
    "[REDACTED:github-token] was rotated on Monday.",
    "the password is stored in 1Password",
    "The password is required.",
    "the password was reset yesterday",
    "the password is too short, try again",
    "The password for the demo account is in the vault.",
    "password: see the vault entry",
    "password: at least twelve characters",
    "Password: must contain a number and a symbol.",
    "curl -u $USER:$TOKEN https://api.example.com",
    "curl -u alice https://api.example.com (it prompts for the password)",
    'curl -u "${API_USER}:${API_PASS}" https://api.example.com',
    "mysql -u root -p appdb (it prompts for the password)",
    "mysql -p -h db.example.com",
    "sshpass -f ~/.ssh/pass.txt ssh ops@bastion",
    "sshpass -e ssh ops@bastion reads SSHPASS",
    "Base64 of hello: aGVsbG8gd29ybGQsIHRoaXMgaXMgYSBub3JtYWwgc2VudGVuY2Uu",
    "hex 48656c6c6f2c207468697320697320706c61696e20746578742e",
    "UUID 123e4567-e89b-12d3-a456-426614174000 and sha1 da39a3ee5e6b4b0d3255bfef95601890afd80709",
    "The build id is 1f8ac10f23c5b5bc1167bda84b833e5c057a77d2 (a sha1).",
    "Cookie: theme=dark; lang=pt-BR",
    "Set-Cookie: consent=yes; Path=/; Max-Age=31536000; SameSite=Lax",
    "a senha é obrigatória para todos",
    "esqueci minha senha de novo",
    "senha: Obrigatória para administradores",
    "a senha do banco está no cofre",
    "docker login -u ci registry.example.com (it prompts for the password)",
    "docker run -p 8080:80 nginx",
    "llm --max-tokens 4096 --password-stdin",
    "The hvs. prefix marks Vault service tokens; hvb. marks batch ones.",
    "the machine learning password reset flow is in the wiki",
    "PASSWORD_FILE=/run/secrets/db_password and TOKEN_URL=https://auth.example.com/token",
    "SECRET_NAME=prod-db-creds-2024, PASSWORD_MIN_LENGTH=16, TOKEN_TTL_SECONDS=3600",
    "Basic authentication is turned off; see https://cdn.example.com/a.png?w=200&sig=short",
]
