"""parse_action on the kinds of replies chat models actually write."""

from __future__ import annotations

import pytest

from antipersist_lib.core.actions import MAX_ACTION_CHARS, ParsedAction, clean_command, parse_action


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("Thought: x\nAction: go to garden", "go to garden"),
        ("**Action:** `take apple`", "take apple"),
        ("Action: go to desk 1.\nAction: open drawer", "go to desk 1"),
        ("> look", "look"),
        ("open drawer 1", "open drawer 1"),
        ("Action: go to desk 1", "go to desk 1"),
        ("action: open fridge 1", "open fridge 1"),
        ("ACTION : go to bed 1", "go to bed 1"),
        ("Action 1: look", "look"),
        ("1. Action: look", "look"),
        ("2) Action: inventory", "inventory"),
        ("- Action: examine shelf 2", "examine shelf 2"),
        ("* **Action**: take mug 1 from shelf 2", "take mug 1 from shelf 2"),
        ("__Action__: look", "look"),
        ("Action: > go to sinkbasin 1", "go to sinkbasin 1"),
        ("Action：look", "look"),  # full-width colon
        ('Action: "open drawer 1"', "open drawer 1"),
        ("Action: 'look'", "look"),
        ("Action: `put mug 1 in/on sink 1`", "put mug 1 in/on sink 1"),
        ("Action: ```go to cabinet 3```", "go to cabinet 3"),
        ("Action:    go   to    shelf   1   ", "go to shelf 1"),
        (
            "Thought: the apple is probably in the fridge.\n\nAction: go to fridge 1\nObservation: You arrive",
            "go to fridge 1",
        ),
        ("Thought: hmm\n\n```\ngo to bed 1\n```", "go to bed 1"),
        ("Plan: find a mug\nReasoning: mugs are on shelves\nlook", "look"),
        ("\n\n  examine desk 1  \n", "examine desk 1"),
        ("Action: search[blue shoes]", "search[blue shoes]"),
        ("Action: click[Buy Now]", "click[Buy Now]"),
    ],
)
def test_parse_action(reply, expected):
    got = parse_action(reply)
    assert isinstance(got, ParsedAction)
    assert got.action == expected
    assert got.is_think is False


@pytest.mark.parametrize(
    "reply",
    [
        "",
        None,
        "   ",
        "\n\n\t\n",
        "Thought: only thinking",
        "Thought: a\nThought: b",
        "Action:",  # an empty Action line with nothing after it gives no command
        "Action:   ",
        "Action: ...",
        "Action: `.`",
        "**Action:** ``",
        "```\n```",
    ],
)
def test_no_usable_command_is_none(reply):
    got = parse_action(reply)
    assert got.action is None
    assert got.is_think is False


def test_empty_action_line_takes_the_next_line():
    assert parse_action("Thought: go\nAction:\n\n  go to garden  \n").action == "go to garden"


def test_thought_is_kept_but_not_executed():
    got = parse_action("Thought: go check the fridge\nAction: go to fridge 1")
    assert got == ParsedAction("go to fridge 1", "Thought: go check the fridge", False)
    only = parse_action("Thought: only thinking")
    assert only.thought == "Thought: only thinking"


@pytest.mark.parametrize(
    "reply",
    [
        "think: I should find the apple first.",
        "Think: I should find the apple first.",
        "> think: I should find the apple first.",
        "Action: think: I should find the apple first.",
        "Thought: plan\nAction: think: I should find the apple first.",
    ],
)
def test_think_pseudo_action(reply):
    got = parse_action(reply)
    assert got.is_think is True
    assert got.action is not None
    assert got.action.lower().startswith("think:")
    assert "I should find the apple first" in got.action
    assert not got.action.endswith(".")


def test_think_word_inside_command_is_not_think():
    got = parse_action("Action: go to thinktank 1")
    assert got.action == "go to thinktank 1" and not got.is_think


def test_only_first_action_is_executed():
    got = parse_action("Action: open drawer 1\nObservation: The drawer is open.\nAction: take key 1 from drawer 1")
    assert got.action == "open drawer 1"


def test_trailing_period_removed_but_not_ellipsis():
    assert parse_action("Action: go to desk 1.").action == "go to desk 1"
    assert parse_action("Action: go to desk 1 .").action == "go to desk 1"
    assert parse_action("Action: put mug 1 in/on shelf 2...").action == "put mug 1 in/on shelf 2..."


def test_quoted_command_with_trailing_period():
    assert parse_action("Action: `take apple 1`.").action == "take apple 1"
    assert parse_action('Action: "open fridge 1".').action == "open fridge 1"
    assert parse_action("Action: 'go to garden'.").action == "go to garden"


def test_overlong_command_clipped():
    long_cmd = "x" * (MAX_ACTION_CHARS + 250)
    got = parse_action("Action: " + long_cmd)
    assert got.action == "x" * MAX_ACTION_CHARS
    assert len(got.action) == MAX_ACTION_CHARS == 300
    assert len(clean_command("y" * 1000)) == MAX_ACTION_CHARS


def test_windows_and_old_mac_line_endings():
    assert parse_action("Thought: x\r\nAction: go to garden\r\n").action == "go to garden"
    got = parse_action("Thought: x\r\nAction: go to garden\r\nAction: look\r\n")
    assert got.action == "go to garden"
    assert got.thought == "Thought: x"
    assert parse_action("Thought: x\rAction: look\r").action == "look"
    assert parse_action("Thought: x\r\n\r\nopen drawer 2\r\n").action == "open drawer 2"
    assert "\r" not in parse_action("Action: open drawer 1\r").action


def test_clean_command_directly():
    assert clean_command('  "`look`"  ') == "look"
    assert clean_command("> go to bed 1.") == "go to bed 1"
    assert clean_command("**take pen 1**") == "take pen 1"
    assert clean_command("go   to\tdesk 1") == "go to desk 1"
