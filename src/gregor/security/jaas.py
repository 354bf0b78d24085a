"""Kafka's ``sasl.jaas.config`` values: one JAAS login module entry,
``<class> <flag> key="value" ...;``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gregor.config import ConfigError

_TOKEN = re.compile(r'\s*(?:([A-Za-z0-9_.$-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))'
                    r'|([A-Za-z0-9_.$]+)|(;))')
_FLAGS = ("required", "requisite", "sufficient", "optional")


@dataclass(frozen=True)
class LoginModule:
    class_name: str
    options: dict[str, str]


def parse(text: str) -> LoginModule:
    """One login module entry; ConfigError with the reason if it is not one."""
    position, words, options = 0, [], {}
    ended = False
    while position < len(text.rstrip()):
        match = _TOKEN.match(text, position)
        if match is None or ended:
            raise ConfigError(f"sasl.jaas.config: cannot parse {text[position:][:40]!r}")
        key, quoted, bare, word, semicolon = match.groups()
        if key is not None:
            options[key] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        elif word is not None:
            if options:
                raise ConfigError(f"sasl.jaas.config: {word!r} among the options")
            words.append(word)
        elif semicolon:
            ended = True
        position = match.end()
    if len(words) != 2 or words[1] not in _FLAGS or not ended:
        raise ConfigError("sasl.jaas.config: expected '<LoginModule class> required "
                          "key=\"value\" ...;'")
    return LoginModule(words[0], options)
