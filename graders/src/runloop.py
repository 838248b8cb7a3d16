"""Runloop: Stripe API code in TypeScript/JavaScript. Reward = format reward, averaged with ast-grep checks.

Written for rfteval; scores exactly as Runloop's published grader on every answer. The answer must be
<plan>...</plan><code>...</code> and nothing else; inside <code>, fenced blocks "```lang path".
A malformed item (no reference_answer.ast_greps) raises instead of scoring, because that is a dataset bug.
"""

import re

from ast_grep_py import SgRoot

CODE_LANGUAGES = ("typescript", "javascript", "ts", "js")
WORKSPACE = "/home/user/testbed/"

# A fence: ``` then an optional language word followed by whitespace, an optional path, a newline,
# the shortest body, and a newline before the closing ```.
FENCE = re.compile(
    r"""```
    (?P<lang>\w+\s+)?
    (?P<path>[\w./-]+)?
    \n
    (?P<body>[\s\S]*?)
    \n```""",
    re.VERBOSE,
)

# (reward added when the check holds, check); grading stops at the first failed check.
# Steps are added one by one, in order, so the float sums match the published grader bit for bit.
FORMAT_STEPS = (0.1, 0.1, 0.2, 0.2, 0.1, 0.1, 0.2)


def format_reward(text):
    """Partial credit for the response layout, in the published order of checks."""
    plan_at, plan_end = text.find("<plan>"), text.find("</plan>")
    code_at, code_end = text.find("<code>"), text.find("</code>")
    checks = (
        lambda: -1 not in (plan_at, plan_end, code_at, code_end),
        lambda: plan_at < plan_end < code_at < code_end,
        lambda: len(re.findall(r"</?plan>", text)) == 2 and len(re.findall(r"</?code>", text)) == 2,
        lambda: not text[code_end + len("</code>"):].strip(),
        lambda: bool(text[plan_at + len("<plan>"):plan_end].strip()),
        lambda: bool(text[code_at + len("<code>"):code_end].strip()),
        lambda: not text[plan_end + len("</plan>"):code_at].strip(),
    )
    reward = 0.0
    for step, check in zip(FORMAT_STEPS, checks):
        if not check():
            break
        reward += step
    return reward


def code_blocks(code):
    """(language, absolute path, body) of each fence, or None when any fence lacks a language or path."""
    blocks = []
    for m in FENCE.finditer(code):
        lang = (m.group("lang") or "").strip()
        path = (m.group("path") or "").strip()
        if not lang or not path:
            return None
        if not path.startswith("/"):
            path = WORKSPACE + path
        blocks.append((lang, path, m.group("body").strip()))
    return blocks or None


def _check(value):
    """One ast_greps entry as (path prefix, pattern, required substrings), or None if it is malformed."""
    if not isinstance(value, dict):
        return None
    mask, pattern, extra = value.get("file_path_mask"), value.get("pattern"), value.get("additional_greps")
    if not isinstance(mask, str) or not isinstance(pattern, str):
        return None
    if extra is not None and not (isinstance(extra, list) and all(isinstance(s, str) for s in extra)):
        return None
    return mask, pattern, extra or []


def _found(block, pattern, required):
    lang, _, body = block
    if any(s not in body for s in required):
        return False
    try:
        return SgRoot(body, lang).root().find(pattern=pattern) is not None
    except Exception:  # an unknown language or a pattern ast-grep cannot parse: not found here
        return False


def ast_grep_score(blocks, greps):
    """Share of checks met by some TS/JS block under the check's path prefix; 0 if any check is malformed."""
    checks = [_check(g) for g in greps]
    if not checks or None in checks:
        return 0.0
    blocks = [b for b in blocks if b[0].lower() in CODE_LANGUAGES]
    if not blocks:
        return 0.0
    met = 0.0
    for mask, pattern, required in checks:
        if any(_found(b, pattern, required) for b in blocks if b[1].startswith(mask)):
            met += 1.0
    return met / len(checks)


def grade(sample, item):
    greps = item["reference_answer"]["ast_greps"]
    if isinstance(greps, dict):
        greps = [greps]
    if not isinstance(greps, list):
        raise ValueError("item reference_answer.ast_greps must be a list of {file_path_mask, pattern} objects")
    text = sample.get("output_text")
    if not isinstance(text, str):
        return 0.0
    layout = format_reward(text)
    if layout < 1.0:
        return layout
    code = text[text.find("<code>") + len("<code>"):text.find("</code>")].strip()
    blocks = code_blocks(code)
    if blocks is None:
        return 0.5  # well-formed, but no usable fenced code
    return (layout + ast_grep_score(blocks, greps)) / 2.0
