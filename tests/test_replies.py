"""The one home of reply parsing (``antipersist_lib/replies.py``): JSON out of prose and fences, fenced blocks,
code, and the one parse error. Each test pins a case a naive parser gets wrong."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from antipersist_lib import replies
from antipersist_lib.errors import ReplyParseError
from antipersist_lib.replies import (
    FENCE_STYLES,
    decode_json_at,
    excerpt,
    extract_code,
    extract_json,
    fenced_blocks,
    json_value,
    json_values,
    snippet,
)

# -- the building blocks ------------------------------------------------------------------------------------


def test_decode_json_at_reads_one_value_and_where_it_ends():
    text = 'x {"a": {"b": [1, 2]}} tail'
    value, end = decode_json_at(text, 2)
    assert value == {"a": {"b": [1, 2]}} and text[end:] == " tail"
    assert decode_json_at(text, 0) is None  # not at a value
    assert decode_json_at(" [1]", 0) is None  # leading whitespace is not skipped
    assert decode_json_at("[" * 100_000, 0) is None  # too deep: no value, not a RecursionError
    assert decode_json_at("[1" + "0" * 5_000 + "]", 0) is None  # an integer too long to convert


def test_json_values_walks_nested_values_or_only_the_top_level():
    text = 'a [1, [2, 3]] b {"k": [4]} c'
    assert [v for v, _, _ in json_values(text)] == [[1, [2, 3]], [2, 3], {"k": [4]}, [4]]
    assert [v for v, _, _ in json_values(text, nested=False)] == [[1, [2, 3]], {"k": [4]}]
    assert [v for v, _, _ in json_values(text, "{")] == [{"k": [4]}]
    spans = [(s, e) for _, s, e in json_values(text, "[", nested=False)]
    assert [text[s:e] for s, e in spans] == ["[1, [2, 3]]", "[4]"]  # the object around [4] is not an opener
    assert list(json_values("", "{[")) == [] and list(json_values("[1]", "")) == []


def test_json_value_is_none_for_anything_but_one_document():
    assert json_value(' \n{"a": 1}\t') == {"a": 1}
    assert json_value('{"a": 1} trailing') is None
    assert json_value("[" * 100_000) is None
    assert json_value("null") is None


def test_fenced_blocks_with_and_without_a_language_tag():
    reply = 'Intro\n```json\n{"a": 1}\n```\nthen\n```\n[2]\n```\nand\n```python extra words\nx = 1\n```\n'
    assert list(fenced_blocks(reply, "line")) == [("json", '{"a": 1}\n'), ("", "[2]\n"), ("python", "x = 1\n")]
    # the consolidators' reading: json-tagged or bare blocks only, bodies stripped
    assert [b for _, b in fenced_blocks('```json\n{"a": 1}\n```\n```\n[2]\n```', "json")] == ['{"a": 1}', "[2]"]
    assert list(fenced_blocks("```python\nx = 1\n", "json")) == []
    # the evolver's reading: a block on one line counts
    assert list(fenced_blocks('say ```json[{"content": "c"}]``` ok', "inline")) == [("json", '[{"content": "c"}]')]
    with pytest.raises(ValueError, match="fence style"):
        list(fenced_blocks("x", "markdown"))
    # AppWorld's code reading keeps + and . in a tag, where "line" cuts the tag at them
    assert list(fenced_blocks("```python3.11\nx\n```", "code")) == [("python3.11", "x\n")]
    assert list(fenced_blocks("```python3.11\nx\n```", "line")) == [("python3", "x\n")]
    assert set(FENCE_STYLES) == {"json", "line", "inline", "code"}


# -- extract_json -------------------------------------------------------------------------------------------


def test_nested_braces_give_the_outer_object():
    reply = 'Here: {"op": "add", "args": {"deep": {"deeper": [1, {"x": 2}]}}} done'
    assert extract_json(reply, dict) == {"op": "add", "args": {"deep": {"deeper": [1, {"x": 2}]}}}


def test_braces_and_fences_inside_strings_are_text():
    reply = 'Answer: {"text": "a } and a { and ``` and ] inside", "n": 1}'
    assert extract_json(reply, dict) == {"text": "a } and a { and ``` and ] inside", "n": 1}
    assert extract_json('[{"s": "]"}, {"s": "["}]', list) == [{"s": "]"}, {"s": "["}]


def test_several_objects_the_first_of_the_wanted_type_wins():
    reply = 'note [see 1] then {"first": 1} and {"second": 2} and [{"op": "x"}]'
    assert extract_json(reply, dict) == {"first": 1}
    assert extract_json(reply, list) == [{"op": "x"}]  # "[see 1]" is not JSON
    assert extract_json(reply) == {"first": 1}  # either type: the first in the text


def test_fenced_answers_with_and_without_a_tag_beat_earlier_inline_json():
    tagged = 'Not this {"a": 0}.\n```json\n{"a": 1}\n```'
    bare = 'Not this {"a": 0}.\n```\n{"a": 2}\n```'
    assert extract_json(tagged, dict) == {"a": 1} and extract_json(bare, dict) == {"a": 2}
    # another language's block is not an answer block under the consolidators' reading ...
    other = 'First {"a": 0}.\n```python\n{"a": 3}\n```'
    assert extract_json(other, dict) == {"a": 0}
    # ... but is under the ARC reading (fenced blocks of any language first, no whole-reply stage)
    arc = {"whole": False, "fences": "line", "empty_error": False, "quote_reply": True}
    assert extract_json(other, dict, **arc) == {"a": 3}


def test_the_whole_reply_is_tried_first_only_when_asked():
    reply = '{"outer": "```[1, 2]```"}'  # a fence inside a string of a reply that is all JSON
    assert extract_json(reply) == {"outer": "```[1, 2]```"}
    assert extract_json(reply, whole=False, fences="inline") == [1, 2]


def test_invalid_and_too_deep_json_is_skipped_not_raised():
    reply = '{"broken": [1, 2} then ' + "[" * 50_000 + ' then {"ok": true}'
    assert extract_json(reply, dict) == {"ok": True}


def test_no_json_is_the_one_parse_error_with_a_clear_message():
    with pytest.raises(ReplyParseError, match=r"^no JSON dict in the reply$"):
        extract_json("I think the answer is yes.", dict)
    with pytest.raises(ReplyParseError, match=r"^no JSON dict or list in the reply$"):
        extract_json("nothing here")
    with pytest.raises(ReplyParseError, match=r"^no JSON list in the reply$"):
        extract_json('{"a": 1}', list)  # an object is not the array asked for
    with pytest.raises(ReplyParseError, match=r"^empty reply$"):
        extract_json(" \n ", dict)
    with pytest.raises(ReplyParseError, match=r"^empty reply$"):
        extract_json(None, dict)  # type: ignore[arg-type]
    long = "word   " * 100
    with pytest.raises(ReplyParseError) as caught:
        extract_json(long, list, whole=False, fences="line", empty_error=False, quote_reply=True)
    message = str(caught.value)
    assert message.startswith("no JSON array found in the reply: 'word word ") and message.endswith("...'")
    assert len(message) == len("no JSON array found in the reply: ''") + 120
    with pytest.raises(TypeError, match="reply must be a str"):
        extract_json(b"{}", dict, empty_error=False)  # type: ignore[arg-type]
    assert issubclass(ReplyParseError, ValueError)  # callers that caught ValueError still do
    with pytest.raises(ValueError, match="want must be"):
        extract_json("{}", str)


# -- code ---------------------------------------------------------------------------------------------------


def test_extract_code_takes_the_first_closed_python_block():
    reply = "Plan:\n```text\n```python\nNOT = 1\n```\n```python\nYES = 1\n```\n"
    assert extract_code(reply) == "YES = 1\n"  # the fence inside the text block is not code
    assert extract_code("````python\nA = '```'\n````") == "A = '```'\n"  # a longer fence holds a shorter one
    assert extract_code("```\n```") == ""
    assert extract_code("```python\nunclosed = 1\n") is None
    assert extract_code("no fence") is None
    with pytest.raises(TypeError):
        extract_code(None)  # type: ignore[arg-type]


# -- excerpts and the module's place ------------------------------------------------------------------------


def test_excerpt_and_snippet():
    assert excerpt("abc", 5) == "abc" and excerpt("abcdef", 3) == "abc..." and excerpt(None) == ""  # type: ignore[arg-type]
    assert snippet("a\n\n b   c") == "a b c" and snippet("x" * 10, 8) == "xxxxx..."


def test_the_module_imports_nothing_of_the_kit_but_errors():
    tree = ast.parse(Path(replies.__file__).read_text(encoding="utf-8"))
    kit = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("antipersist_lib"):
            kit.add(node.module)
        elif isinstance(node, ast.Import):
            kit |= {a.name for a in node.names if a.name.startswith("antipersist_lib")}
    assert kit == {"antipersist_lib.errors"}


def test_no_other_module_decodes_json_out_of_a_longer_text():
    lib = Path(replies.__file__).parent
    users = sorted(str(p.relative_to(lib)) for p in lib.rglob("*.py") if "raw_decode(" in p.read_text("utf-8"))
    assert users == ["replies.py"]
