"""Which model to talk to: read once from the environment and an optional config file.

Any OpenAI-compatible server works (OpenAI, vLLM, Ollama, llama.cpp, LM Studio). A local server
needs no real key. With neither a key nor a server address, there is no model and the offline
analyst answers. The key is never printed, logged or put in a transcript.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_MODEL = "gpt-4o-mini"
LOCAL_KEY = "not-needed"  # OpenAI-compatible local servers accept any key


@dataclass(frozen=True)
class LLMConfig:
    model: str = DEFAULT_MODEL
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    temperature: float = 0.0
    timeout_s: float = 60.0  # the longest wait for the server's next chunk
    max_retries: int = 2
    max_tokens: int = 2048  # per model reply: a looping model stops here
    deadline_s: float = 300.0  # per answer, tool rounds included
    context_tokens: int = 32768  # the model's context: history is trimmed to fit

    @property
    def shown_url(self) -> str | None:
        """The server's address as it may be shown or saved: without credentials."""
        return redact_url(self.base_url) if self.base_url else None

    def describe(self) -> str:
        """For headers and logs: the model and where it runs, never the key."""
        return f"{self.model} at {self.shown_url}" if self.base_url else f"{self.model} (OpenAI)"

    def redact(self, text: str) -> str:
        """Remove the key, the credentials of the server's URL (and anything shaped like an OpenAI
        key or a URL with a password) from a message."""
        if self.api_key and self.api_key != LOCAL_KEY:
            text = text.replace(self.api_key, "[key]")
        if self.base_url:
            text = text.replace(self.base_url, self.shown_url or "")
        return redact_url(re.sub(r"sk-[A-Za-z0-9_\-*]{8,}", "[key]", text))


_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")
_SECRET_QUERY = re.compile(r"([?&](?:api[_-]?key|key|token|access_token|secret|password)=)[^&#\s]*", re.IGNORECASE)


def redact_url(text: str) -> str:
    """Credentials out of every URL in `text`: `http://user:key@host/v1?api_key=x` becomes
    `http://[credentials]@host/v1?api_key=[key]`."""
    return _SECRET_QUERY.sub(r"\1[key]", _USERINFO.sub("[credentials]@", text))


def config_path() -> Path:
    if env := os.environ.get("TRACEAGENT_CONFIG"):
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "traceagent" / "config.toml"


def load_config(env: dict[str, str] | None = None) -> LLMConfig | None:
    """The model configuration, or None when none is set up (then the offline analyst answers).

    Environment wins over the file: OPENAI_API_KEY, OPENAI_BASE_URL, TRACEAGENT_MODEL,
    TRACEAGENT_TEMPERATURE, TRACEAGENT_TIMEOUT, TRACEAGENT_MAX_RETRIES, TRACEAGENT_MAX_TOKENS,
    TRACEAGENT_DEADLINE, TRACEAGENT_CONTEXT_TOKENS. The file (~/.config/traceagent/config.toml, or
    $TRACEAGENT_CONFIG) holds the same keys in lower case without prefixes under [llm]: model,
    base_url, api_key, temperature, timeout, max_retries, max_tokens, deadline, context_tokens.
    """
    env = dict(os.environ if env is None else env)
    file: dict = {}
    path = config_path() if "TRACEAGENT_CONFIG" not in env else Path(env["TRACEAGENT_CONFIG"])
    if path.is_file():
        try:
            file = tomllib.loads(path.read_text()).get("llm", {})
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read the config file ({exc})") from None

    def pick(env_key: str, file_key: str):
        value = env.get(env_key)
        return value if value not in (None, "") else file.get(file_key)

    key, base_url = pick("OPENAI_API_KEY", "api_key"), pick("OPENAI_BASE_URL", "base_url")
    if not key and not base_url:
        return None
    retries = pick("TRACEAGENT_MAX_RETRIES", "max_retries")
    try:
        return LLMConfig(
            model=str(pick("TRACEAGENT_MODEL", "model") or DEFAULT_MODEL),
            base_url=str(base_url) if base_url else None,
            api_key=str(key) if key else LOCAL_KEY,
            temperature=float(pick("TRACEAGENT_TEMPERATURE", "temperature") or 0.0),
            timeout_s=float(pick("TRACEAGENT_TIMEOUT", "timeout") or 60.0),
            max_retries=int(retries) if retries is not None else 2,
            max_tokens=int(pick("TRACEAGENT_MAX_TOKENS", "max_tokens") or 2048),
            deadline_s=float(pick("TRACEAGENT_DEADLINE", "deadline") or 300.0),
            context_tokens=int(pick("TRACEAGENT_CONTEXT_TOKENS", "context_tokens") or 32768),
        )
    except ValueError as exc:
        raise ConfigError(f"a model setting is not a number ({exc})") from None


class ConfigError(ValueError):
    """The model configuration cannot be used; the message says which setting."""


def make_chat_model(config: LLMConfig):
    """A streaming ChatOpenAI client for the configured server. The reply's token limit is sent as
    `max_completion_tokens` (OpenAI) and, to other servers, also as `max_tokens`, the name
    llama.cpp, Ollama and older vLLM read."""
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=config.model, base_url=config.base_url, api_key=config.api_key,
                      temperature=config.temperature, timeout=config.timeout_s, max_retries=config.max_retries,
                      max_tokens=config.max_tokens, streaming=True,
                      extra_body={"max_tokens": config.max_tokens} if config.base_url else None)
