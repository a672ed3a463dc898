"""The Compose deployment's secrets: generated into ``.env``, and refused while one is empty or an example value.

    make secrets                                   .env from .env.example, every empty secret generated
    python -m aigc.devtools.env_secrets check      (the ``secrets-check`` service) exit 1 naming every secret that
                                                   is unset, too short or a published example value

``.env.example`` ships every secret empty, so ``docker compose config`` with it fails (each ``${NAME:?…}`` in the
compose file), and ``secrets-check``, which every other service waits for, refuses the values older examples
published (``change-me-…``, the example Fernet key): anyone can forge an admin token from a JWT secret in a public
file. Standard library only: ``make secrets`` runs before any virtual environment exists.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
import sys
from pathlib import Path

SECRETS = ("POSTGRES_PASSWORD", "MINIO_ROOT_PASSWORD", "AIGC_S3_SECRET_KEY", "AIGC_VIEW_S3_SECRET_KEY",
           "AIRFLOW_FERNET_KEY", "AIRFLOW_JWT_SECRET", "AIRFLOW_API_SECRET_KEY", "AIRFLOW_ADMIN_PASSWORD",
           "AIGC_RDZV_SECRET")
"""Every secret the compose file reads from .env; each must be set, and none to a value anyone has seen."""
MIN_CHARS = 16
PUBLISHED = {"FFwyBfiFbXIvV0SM5WyJuu7w56sajAZooTka4VVRuAE="}
"""Example values earlier versions of .env.example shipped (besides every ``change-me…``)."""


def generate(name: str) -> str:
    """A fresh value for ``name``: a Fernet key for the Fernet secret, else 48 URL-safe random bytes (letters,
    digits, '-' and '_': the values are pasted into URLs and JSON; the JWT secret is over 64 bytes for HS512)."""
    if name == "AIRFLOW_FERNET_KEY":
        return base64.urlsafe_b64encode(os.urandom(32)).decode()
    return secrets.token_urlsafe(48)


def problems(env: dict[str, str]) -> list[str]:
    """What is wrong with each secret in ``env``, one line per secret; empty when every one may be used."""
    found = [p for name in SECRETS if (p := problem(name, env.get(name, "")))]
    if env.get("AIGC_S3_ACCESS_KEY") and env.get("AIGC_S3_ACCESS_KEY") == env.get("AIGC_VIEW_S3_ACCESS_KEY"):
        found.append("AIGC_VIEW_S3_ACCESS_KEY is the pipeline's own key: the view's must be a user of its own "
                     "(minio-init would give the pipeline's user the view's password and read-only policy)")
    return found


def problem(name: str, value: str) -> str | None:
    if not value:
        return f"{name} is not set"
    if value.lower().startswith("change-me") or value in PUBLISHED:
        return f"{name} still has a published example value"
    if name == "AIRFLOW_FERNET_KEY" and not _is_fernet_key(value):
        return f"{name} is not a Fernet key (32 url-safe base64-encoded bytes)"
    if len(value) < MIN_CHARS:
        return f"{name} is shorter than {MIN_CHARS} characters"
    return None


def _is_fernet_key(value: str) -> bool:
    try:
        return len(base64.urlsafe_b64decode(value.encode())) == 32
    except (binascii.Error, ValueError):
        return False


def fill(example: str, current: str | None = None) -> tuple[str, list[str]]:
    """``example``'s lines, with each secret that ``current`` (an existing .env) does not set well generated, and the
    other values ``current`` sets kept; (the new text, the names generated)."""
    kept = _values(current or "")
    out, made, named = [], [], set()
    for line in example.splitlines():
        name, eq, value = line.partition("=")
        if eq and not line.lstrip().startswith("#"):
            named.add(name)
            value = kept.get(name, value)
            if name in SECRETS and problem(name, value):
                value = generate(name)
                made.append(name)
            line = f"{name}={value}"
        out.append(line)
    extra = [f"{k}={v}" for k, v in kept.items() if k not in named]  # the user's own settings stay
    if extra:
        out += ["", "# --- Kept from the existing .env (not in .env.example) ---", *extra]
    return "\n".join(out) + "\n", made


def _values(text: str) -> dict[str, str]:
    lines = (ln.strip() for ln in text.splitlines())
    return dict(ln.split("=", 1) for ln in lines if "=" in ln and not ln.startswith("#"))


def main(argv: list[str]) -> int:
    if argv[:1] == ["check"]:
        bad = problems(dict(os.environ))
        if bad:
            print("secrets-check: the deployment will not start until every secret is set to a fresh value:\n  "
                  + "\n  ".join(bad) + "\n`make secrets` fills .env (see .env.example), then `docker compose up`.",
                  file=sys.stderr)
            return 1
        print("secrets-check: every secret is set")
        return 0
    example, target = (Path(a) for a in (argv + [".env.example", ".env"][len(argv):])[:2])
    text, made = fill(example.read_text(), target.read_text() if target.exists() else None)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # never readable by others, not even briefly
    os.fchmod(fd, 0o600)  # an existing .env that was
    with os.fdopen(fd, "w") as f:
        f.write(text)
    print(f"{target}: generated {', '.join(made) or 'nothing (every secret was set)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
