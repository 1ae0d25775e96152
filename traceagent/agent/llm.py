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

from ..text import bounded, visible

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
    # each question reaches the model with the detectors' draft answer and the tool results behind
    # it: the model explains, and starts from the right figures instead of picking a field
    draft: bool = True

    @property
    def shown_url(self) -> str | None:
        """The server's address as it may be shown or saved: without credentials."""
        return redact_url(self.base_url) if self.base_url else None

    def describe(self) -> str:
        """For headers and logs: the model and where it runs, never the key."""
        return f"{self.model} at {self.shown_url}" if self.base_url else f"{self.model} (OpenAI)"

    @property
    def client_url(self) -> str | None:
        """The URL requests go to. With an API key, the key is what authenticates (Bearer): the
        URL's own `user:password` would replace it (httpx sends it as Basic auth), so it is left
        out; without one, the URL's credentials are used as given."""
        if not self.base_url or not self.api_key or self.api_key == LOCAL_KEY:
            return self.base_url
        return _USERINFO.sub("", self.base_url)

    @property
    def _secret_key(self) -> str:
        """The API key where it is a secret, else "": a key shorter than MIN_SECRET_CHARS is a local
        server's placeholder ("x", "EMPTY"); removed by value, it would cut every "x" out of the
        answers ("Fi[key]ing")."""
        key = self.api_key or ""
        return key if key != LOCAL_KEY and len(key) >= MIN_SECRET_CHARS else ""

    @property
    def longest_secret(self) -> int:
        """The length of the longest secret `redact` removes by value: a stream holds back this much
        of its text, so that a secret split across chunks never shows in part."""
        literal = [self._secret_key]
        literal += _userinfo_secrets(self.base_url) if self.base_url else []
        return max(len(s) for s in literal)

    def redact(self, text: str) -> str:
        """Remove the key, the credentials of the server's URL, in the clear and as the base64 a
        Basic-auth header carries (a server that echoes its request headers shows them), and
        anything shaped like an OpenAI key, an Authorization value or a URL with a password."""
        if key := self._secret_key:
            text = text.replace(key, "[key]")
        if self.base_url:
            text = text.replace(self.base_url, self.shown_url or "")
            for secret in _userinfo_secrets(self.base_url):
                text = text.replace(secret, "[credentials]")
        return redact_secrets(text)


MIN_SECRET_CHARS = 8
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")
_SECRET_QUERY = re.compile(r"([?&](?:api[_-]?key|key|token|access_token|secret|password)=)[^&#\s]*", re.IGNORECASE)


_AUTHORIZATION = re.compile(r"""((?:proxy-)?authorization["']?\s*[:=]\s*["']?(?:(?:basic|bearer|token|digest)\s+)?)"""
                            r"""[^\s"',;}]+""", re.IGNORECASE)
_BASIC = re.compile(r"\b(Basic\s+)[A-Za-z0-9+/_-]{6,}={0,2}")


def redact_secrets(text: str) -> str:
    """Keys, Authorization values (`Authorization: Bearer …`, `"authorization": "Basic …"`),
    Basic-auth tokens and URL credentials out of `text`, e.g. an error body shown to the user."""
    text = re.sub(r"sk-[A-Za-z0-9_\-*]{8,}", "[key]", text)
    text = _BASIC.sub(r"\1[credentials]", _AUTHORIZATION.sub(r"\1[credentials]", text))
    return redact_url(text)


def _userinfo_secrets(url: str) -> list[str]:
    """The URL's `user:password`, its password, and their base64 (standard and URL-safe): each
    form in which a server or a library may echo them."""
    from base64 import b64encode, urlsafe_b64encode
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(url)
    if not parts.password:
        return []
    pairs = {f"{parts.username or ''}:{parts.password}", f"{unquote(parts.username or '')}:{unquote(parts.password)}"}
    found = [p for pair in pairs for p in (b64encode(pair.encode()).decode(), urlsafe_b64encode(pair.encode()).decode())]
    found += [p.rstrip("=") for p in found]
    found += [parts.password, unquote(parts.password)] if len(parts.password) >= 4 else []
    return sorted(set(found), key=len, reverse=True)


_TRACING_FLAGS = ("LANGSMITH_TRACING", "LANGSMITH_TRACING_V2", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING")


def tracing_notice(env: dict[str, str]) -> str | None:
    """A line to say where LangChain's tracing sends what traceagent gives a model, when it is on:
    every tool result, with the trace's kernel names, frames and paths in it."""
    flag = next((k for k in _TRACING_FLAGS if env.get(k, "").strip().lower() in ("1", "true", "yes", "on")), None)
    if flag is None:
        return None
    where = env.get("LANGSMITH_ENDPOINT") or env.get("LANGCHAIN_ENDPOINT") or "LangSmith (smith.langchain.com)"
    return (f"{flag} is set: LangChain sends every model request and tool result, with this trace's kernel names, "
            f"frames and file paths, to {redact_url(where)}; unset it to keep them on this machine")


def redact_url(text: str) -> str:
    """Credentials out of every URL in `text`: `http://user:key@host/v1?api_key=x` becomes
    `http://[credentials]@host/v1?api_key=[key]`."""
    return _SECRET_QUERY.sub(r"\1[key]", _USERINFO.sub("[credentials]@", text))


def _flag(value, default: bool) -> bool:
    """A yes/no setting from the environment (text) or the file (a TOML boolean)."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if str(value).strip().lower() in ("1", "true", "yes", "on"):
        return True
    if str(value).strip().lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected yes or no, not {value!r}")


def config_path() -> Path:
    if env := os.environ.get("TRACEAGENT_CONFIG"):
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "traceagent" / "config.toml"


def load_config(env: dict[str, str] | None = None) -> LLMConfig | None:
    """The model configuration, or None when none is set up (then the offline analyst answers).

    Environment wins over the file: OPENAI_API_KEY, OPENAI_BASE_URL, TRACEAGENT_MODEL,
    TRACEAGENT_TEMPERATURE, TRACEAGENT_TIMEOUT, TRACEAGENT_MAX_RETRIES, TRACEAGENT_MAX_TOKENS,
    TRACEAGENT_DEADLINE, TRACEAGENT_CONTEXT_TOKENS, TRACEAGENT_DRAFT (0: no draft answer). The file
    (~/.config/traceagent/config.toml, or $TRACEAGENT_CONFIG) holds the same keys in lower case
    without prefixes under [llm]: model, base_url, api_key, temperature, timeout, max_retries,
    max_tokens, deadline, context_tokens, draft.
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
    model = pick("TRACEAGENT_MODEL", "model")
    if not model and base_url:  # a local server serves its own model: name it, not an OpenAI model
        server = LLMConfig(base_url=str(base_url), api_key=str(key) if key else LOCAL_KEY)
        served = served_model(server.client_url or str(base_url), server.api_key or LOCAL_KEY)
        # the server's words: a hostile one can echo the request's credentials as its model's name
        model = visible(bounded(server.redact(served), 200)) if served else None
    try:
        return LLMConfig(
            model=str(model or DEFAULT_MODEL),
            base_url=str(base_url) if base_url else None,
            api_key=str(key) if key else LOCAL_KEY,
            temperature=float(pick("TRACEAGENT_TEMPERATURE", "temperature") or 0.0),
            timeout_s=float(pick("TRACEAGENT_TIMEOUT", "timeout") or 60.0),
            max_retries=int(retries) if retries is not None else 2,
            max_tokens=int(pick("TRACEAGENT_MAX_TOKENS", "max_tokens") or 2048),
            deadline_s=float(pick("TRACEAGENT_DEADLINE", "deadline") or 300.0),
            context_tokens=int(pick("TRACEAGENT_CONTEXT_TOKENS", "context_tokens") or 32768),
            draft=_flag(pick("TRACEAGENT_DRAFT", "draft"), default=True),
        )
    except ValueError as exc:
        raise ConfigError(f"a model setting has the wrong type ({exc})") from None


def served_model(base_url: str, key: str) -> str | None:
    """The first model a server lists at /v1/models (llama.cpp, vLLM, Ollama, LM Studio), or None
    when it lists none or cannot be reached (then the chat request says what is wrong)."""
    import openai

    try:
        models = openai.OpenAI(base_url=base_url, api_key=key, timeout=5, max_retries=0).models.list().data
        return str(models[0].id) if models and models[0].id else None
    except (openai.OpenAIError, ValueError, AttributeError, TypeError):
        return None


class ConfigError(ValueError):
    """The model configuration cannot be used; the message says which setting."""


def make_chat_model(config: LLMConfig):
    """A streaming ChatOpenAI client for the configured server. The reply's token limit is sent as
    `max_completion_tokens` (OpenAI) and, to other servers, also as `max_tokens`, the name
    llama.cpp, Ollama and older vLLM read."""
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    return ChatOpenAI(model=config.model, base_url=config.client_url,
                      api_key=SecretStr(config.api_key) if config.api_key else None,
                      temperature=config.temperature, timeout=config.timeout_s, max_retries=config.max_retries,
                      max_tokens=config.max_tokens,  # type: ignore[call-arg]  # a field whose alias is max_completion_tokens
                      streaming=True,
                      # our deadline is the one timer (a keep-alive-only stream included): not a second one here
                      stream_chunk_timeout=None,
                      extra_body={"max_tokens": config.max_tokens} if config.base_url else None)
