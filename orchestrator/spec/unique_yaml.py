"""YAML for specs: PyYAML's safe loader, except that a key given twice in one mapping is an error.

PyYAML keeps the last of two equal keys without a word, so a second `node:` silently replaced the first
and the sweep ran another tensor-parallel size than the one the user read at the top of the file.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping names the same key twice."""


class UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class reports it
                continue
            if first is not None:
                raise DuplicateKeyError(
                    None,
                    None,
                    f"key {key!r} appears twice (lines {first} and {line}): the second would silently "
                    "replace the first; keep one",
                    key_node.start_mark,
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader subclass: nothing is executed


def yaml_error_text(err: yaml.YAMLError) -> str:
    """A YAML error placed in the file: "at line L, column C: <problem>" and the line with a caret under
    the place. PyYAML's own text says `in "<unicode string>"`, its name for the string it was handed,
    where the caller has named the file already."""
    if not isinstance(err, yaml.MarkedYAMLError) or err.problem_mark is None:
        return str(err)
    mark = err.problem_mark
    snippet = mark.get_snippet(indent=4)
    opened = err.context_mark
    if (not snippet or not snippet.strip(" ^\n")) and opened is not None:
        # The file ended inside something left open (a list, a quote): the place is past the last line,
        # and the line worth showing is where that began.
        text = f"at the end of the file: {err.problem}"
        if err.context:
            text += f" ({err.context} that starts at line {opened.line + 1}, column {opened.column + 1})"
        snippet = opened.get_snippet(indent=4)
    else:
        text = f"at line {mark.line + 1}, column {mark.column + 1}: {err.problem}"
        if err.context:
            text += f" ({err.context})"
    return f"{text}\n{snippet}" if snippet else text
