"""Every prompt the memory builders send, registered so manifests and banks hash them.

The paper names the roles (ACE's generator, reflector and curator; AWM's workflow induction;
Dynamic Cheatsheet's cumulative rewrite; CLIN's bounded bank with delete / replace / add /
retain; the LLM-curated keep/delete of the trajectory logs) but does not print these prompts for
ALFWorld, ScienceWorld or WebShop; the wording below is the kit's own. Each role has its own
system message so that a test (or a log reader) can tell the calls apart.
"""

from __future__ import annotations

from antipersist_lib.core.prompts import prompt_hashes

# -- ACE -----------------------------------------------------------------------------------------

ACE_GENERATOR_SYSTEM = "You are the generator of an agent's playbook: you decide which lessons a task calls for."
ACE_GENERATOR = """\
Playbook:
{playbook}

Tasks:
{tasks}

For each task, name the playbook bullets an agent should rely on while solving it (none is a
valid answer). Answer with one JSON object that maps each task number to a list of bullet ids,
for example {{"1": ["b3", "b7"], "2": []}}, and nothing else."""

ACE_REFLECTOR_SYSTEM = "You are the reflector of an agent's playbook: you judge episodes and draw lessons from them."
ACE_REFLECTOR = """\
Playbook:
{playbook}

Episodes:
{episodes}

{label_note}

1. For each episode, judge the bullets listed as used for it: "helpful" if the bullet points
   toward what worked, "harmful" if it points toward a mistake, "neutral" otherwise.
2. Write the lessons an agent should take from these episodes for similar tasks: concrete
   actions, the observations that confirm them, and the condition under which each applies.
   Leave out names and numbers that belonged to one episode only. {section_rule}
Answer with one JSON object and nothing else:
{{"bullet_tags": [{{"episode": 1, "id": "b3", "tag": "helpful"}}],
 "lessons": [{{"section": "<section>", "text": "<the lesson>", "episodes": [1]}}]}}"""

ACE_LABELS_SHOWN = "Each episode's outcome above is the ground-truth success label of the environment."
ACE_LABELS_HIDDEN = "No success label is available: judge from the observations whether each episode achieved its task."
ACE_LABELS_SHOWN_ATTEMPTS = (
    "Each attempt's outcome is the environment's ground-truth success label, and each reference run is a "
    "known solution of the same task: compare the attempt with it to find where the agent went wrong or right."
)
#: plain ACE with rollouts: the attempt's own outcome is shown (the original's environment feedback), the target is not
ACE_LABELS_ATTEMPT_OUTCOME = (
    "Each attempt's outcome is what the environment reported for that attempt. No known solution of the task is "
    "given: find from the attempt itself which steps moved it toward its goal and which did not."
)
#: added to the curator's section rule when the playbook has a token cap (``playbook_token_cap``)
ACE_TOKEN_BUDGET = (
    "The playbook may hold about {cap} tokens and now holds about {now}; past the cap the bullets with the "
    "worst helpful-minus-harmful record are dropped, so prefer UPDATE to ADD."
)
ACE_SECTIONS_FIXED = (
    "File each lesson and each added bullet under one of these playbook sections, spelled as given: {sections}."
)
ACE_SECTIONS_FREE = "Give each lesson and each added bullet a short section name (a topic)."
#: one episode of the reflector's input when the generator ran the task with the playbook
ACE_ATTEMPT = "The agent's attempt at this task, with the whole playbook in its context:\n{attempt}"
ACE_REFERENCE = "Reference run of the same task (a known solution):\n{reference}"

ACE_CURATOR_SYSTEM = "You are the curator of an agent's playbook: you decide how new lessons change it."
ACE_CURATOR = """\
Current playbook:
{playbook}

Candidate lessons from the reflector:
{lessons}

Decide how the playbook changes. ADD a bullet for a lesson the playbook lacks; UPDATE an
existing bullet when a lesson corrects or sharpens it; leave out lessons the playbook already
covers. {section_rule} Answer with a JSON list of operations and nothing else ([] when nothing
changes):
[{{"op": "ADD", "section": "<section>", "text": "<bullet>", "lessons": [1]}},
 {{"op": "UPDATE", "id": "b2", "text": "<rewritten bullet>"}}]"""

# -- AWM -----------------------------------------------------------------------------------------

AWM_SYSTEM = "You induce reusable workflows from an agent's successful episodes."
AWM_INDUCE = """\
Workflows already in memory:
{workflows}

Successful episodes:
{episodes}

Find the routines these episodes share and write each as a workflow an agent can follow on new
tasks of the same kind. {placeholder_rule} Give each step as a command and the observation that
shows it worked. Do not repeat a workflow already in memory. Write every workflow in this form:
## Workflow: <short title>
When to use: <the kind of task>
Steps:
1. <command> (expect: <observation>)
If these episodes teach no new workflow, answer NONE."""

#: the placeholder sentence of the AWM prompts: generic, or naming the benchmark's words (``placeholders``)
AWM_PLACEHOLDERS_GENERIC = (
    "Where an episode names a particular thing, place or value, write a placeholder in braces that says what "
    "kind of thing goes there."
)
AWM_PLACEHOLDERS_NAMED = (
    "Where an episode names a particular thing, place or value, write a placeholder in braces that says what "
    "kind of thing goes there, such as {examples}."
)
#: AWM's re-induction (``mode: revise``): the stored workflows may be rewritten or removed, not only added to
AWM_REVISE = """\
Workflows in memory, each with its id:
{workflows}

New successful episodes:
{episodes}

Induce the workflow memory again from the stored workflows and these episodes. Keep a stored workflow
as it is by not mentioning it; rewrite one that the episodes correct, sharpen or generalize; remove
one that duplicates another or that the episodes show to be wrong; add a workflow for a routine the
memory lacks. {placeholder_rule} Give each step as a command and the observation that shows it worked.
Write every rewritten or new workflow in this form (a rewritten one keeps its id after "Workflow"):
## Workflow w3: <short title>
When to use: <the kind of task>
Steps:
1. <command> (expect: <observation>)
and a new one as "## Workflow: <short title>" followed by the same lines. Remove a workflow with a line
"## Remove: w5". If the memory needs no change, answer NONE."""

# -- Dynamic Cheatsheet --------------------------------------------------------------------------

DC_SYSTEM = "You keep an agent's cheatsheet: one document, rewritten after each batch of episodes."
DC_REWRITE = """\
Current cheatsheet:
{cheatsheet}

New episodes:
{episodes}

Rewrite the cheatsheet so it serves an agent on future tasks: keep what is still useful, correct
or drop what these episodes contradict, and add what they teach (strategies, command templates,
pitfalls). Write each insight as
<memory_item>
<description>what to do and when</description>
<example>a short command sequence or situation</example>
Count: <how many episodes support it so far>
</memory_item>
Return the complete new cheatsheet between <cheatsheet> and </cheatsheet>; anything you leave
out of it is lost."""

# -- CLIN ----------------------------------------------------------------------------------------

CLIN_SYSTEM = "You maintain a bounded bank of causal rules learned from an agent's episodes."
CLIN_UPDATE = """\
Memory bank ({n} entries, at most {capacity}). When the bank holds more than {capacity} entries
after your edit, the oldest entries are removed first (first in, first out).
{entries}

New episodes, each with its evaluation report. Compare them with each other before editing:
{episodes}

Every rule has the form "<action or condition> <relation> <goal>", the relation being one of
MAY BE NECESSARY to, SHOULD BE NECESSARY to, MAY CONTRIBUTE to, DOES NOT CONTRIBUTE to.
For each existing entry choose retain, delete, or replace (with a corrected rule); then add the
new rules these episodes support. Entries you do not mention are retained.
Answer with a JSON list and nothing else:
[{{"op": "retain", "id": "m1"}}, {{"op": "delete", "id": "m2"}},
 {{"op": "replace", "id": "m3", "text": "<rule>"}}, {{"op": "add", "text": "<rule>"}}]"""

#: CLIN's whole-list rewrite (``update: rewrite``; faulty-memories G.1: the manager rewrites the entire memory
#: every stage and overwrites rather than appends)
CLIN_REWRITE = """\
Memory ({n} items, at most {capacity}):
{entries}

New episodes, each with its evaluation report. Compare them with each other and with the memory:
{episodes}

Write the memory anew: the complete list of at most {capacity} items an agent should read before its
next task. Fold what these episodes teach into the items, rewrite items they correct, merge items that
say the same thing, and leave out what no longer holds. Every item is a self-contained insight; an
item copied unchanged keeps its place. Items you leave out are deleted.
Answer with a JSON list and nothing else, each item naming the old items it comes from (if any):
[{{"text": "<item>", "from": ["m1", "m4"]}}, {{"text": "<item>", "from": []}}]"""
#: the seed call of an empty memory (``seed_list: free_count``; G.1: one call over the whole pool that emits a
#: free-count list of task-type-agnostic insights, the model choosing the count)
CLIN_SEED_FREE = """\
Episodes, each with its evaluation report:
{episodes}

Write the insights an agent should read before any task of these kinds: lessons that hold across
task types rather than for one type alone. Choose how many items the episodes support; there is no
target count. Every item is a self-contained insight.
Answer with a JSON list and nothing else:
[{{"text": "<item>"}}, {{"text": "<item>"}}]"""

# -- Trajectory-log curation (Incr. Keep / One-Pass Keep) ----------------------------------------

KEEP_SYSTEM = "You curate a store of episode logs that an agent will read as in-context examples."
KEEP_DECIDE = """\
Logs already kept:
{kept}

New logs:
{new}

Decide which logs an agent should have in front of it on future tasks of these kinds: keep logs
that show a useful way to solve a task, delete logs that are redundant with others or would
mislead. Decide keep or delete for every new log; you may also delete logs already kept.
Answer with one JSON object mapping log ids to "keep" or "delete", for example
{{"n1": "keep", "n2": "delete", "k3": "delete"}}, and nothing else."""

# -- the task-switch judge (§6.2, App. K.2) ------------------------------------------------------

SWITCH_JUDGE_SYSTEM = "You review the memory of an agent that acts in text environments, one entry at a time."
SWITCH_JUDGE = """\
# Memory entry review

The agent keeps the entry below in its memory. It was distilled from episodes of these task types:
{evidence}

## Entry
{entry}

Label the entry with exactly one of:
- "normal": correct and useful for the task types it came from, with the conditions under which it applies;
- "over-generalized": claims more than its episodes support, or leaves out when it applies, so that it
  would mislead the agent on a related but different task;
- "over-specific": bound to the particular objects, places or quantities of its episodes, so it hardly
  carries over to another episode of the same type;
- "garbage": vague, malformed, contradictory or not something the agent could act on.
Reply with one JSON object: {{"label": "<label>", "reason": "<one sentence>"}}"""

EMPTY_MEMORY = "(empty)"

PROMPTS: dict[str, str] = {
    "consolidation_ace_generator_system": ACE_GENERATOR_SYSTEM,
    "consolidation_ace_generator": ACE_GENERATOR,
    "consolidation_ace_reflector_system": ACE_REFLECTOR_SYSTEM,
    "consolidation_ace_reflector": ACE_REFLECTOR,
    "consolidation_ace_labels_shown": ACE_LABELS_SHOWN,
    "consolidation_ace_labels_hidden": ACE_LABELS_HIDDEN,
    "consolidation_ace_labels_shown_attempts": ACE_LABELS_SHOWN_ATTEMPTS,
    "consolidation_ace_labels_attempt_outcome": ACE_LABELS_ATTEMPT_OUTCOME,
    "consolidation_ace_token_budget": ACE_TOKEN_BUDGET,
    "consolidation_ace_sections_fixed": ACE_SECTIONS_FIXED,
    "consolidation_ace_sections_free": ACE_SECTIONS_FREE,
    "consolidation_ace_attempt": ACE_ATTEMPT,
    "consolidation_ace_reference": ACE_REFERENCE,
    "consolidation_ace_curator_system": ACE_CURATOR_SYSTEM,
    "consolidation_ace_curator": ACE_CURATOR,
    "consolidation_awm_system": AWM_SYSTEM,
    "consolidation_awm_induce": AWM_INDUCE,
    "consolidation_awm_revise": AWM_REVISE,
    "consolidation_awm_placeholders_generic": AWM_PLACEHOLDERS_GENERIC,
    "consolidation_awm_placeholders_named": AWM_PLACEHOLDERS_NAMED,
    "consolidation_dc_system": DC_SYSTEM,
    "consolidation_dc_rewrite": DC_REWRITE,
    "consolidation_clin_system": CLIN_SYSTEM,
    "consolidation_clin_update": CLIN_UPDATE,
    "consolidation_clin_rewrite": CLIN_REWRITE,
    "consolidation_clin_seed_free": CLIN_SEED_FREE,
    "consolidation_keep_system": KEEP_SYSTEM,
    "consolidation_keep_decide": KEEP_DECIDE,
    "consolidation_switch_judge_system": SWITCH_JUDGE_SYSTEM,
    "consolidation_switch_judge": SWITCH_JUDGE,
}


def hashes(names: tuple[str, ...]) -> dict[str, str]:
    """The hashes of the named templates, recorded in a bank's meta by the builder that used them."""
    unknown = [n for n in names if n not in PROMPTS]
    if unknown:
        raise ValueError(f"unknown consolidation prompt(s) {unknown}")
    return prompt_hashes({n: PROMPTS[n] for n in names})
