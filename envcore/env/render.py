"""Text renderings of observations for a language model: short, regular, and never more than the
structured fields say (the same content, so a text-only agent and a structured one see the same)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from envcore.numbers import signed
from envcore.scenario.bundle import Bundle, BundleUser

TOOLS_HELP = (
    "Tools: list_files; read_file(path, start_line?, end_line?); search_code(query, regex?, path_prefix?); "
    "http_request(method, path, as_user?, headers?, json_body? or form?); apply_patch(diff); edit_file(path, search, replace); "
    "run_tests (visible probes only); view_diff; submit (ends the episode)."
)


def user_words(user: BundleUser) -> str:
    """``name (role, tenant t)``, and how a request as the user is signed when it is not a bearer
    token (``; signed with the header X-API-Key``): never its secret."""
    signed = f"; signed with {user.credential().describe()}" if user.credentials is not None else ""
    return f"{user.username} ({user.role}{', tenant ' + user.tenant if user.tenant else ''}{signed})"


def intro(bundle: Bundle, max_steps: int) -> str:
    users = ", ".join(user_words(u) for u in bundle.users)
    return (
        f"{bundle.task}\n\n{bundle.policy_text}\n\nSeeded users you can send requests as: {users}.\n"
        f"The app's files: {', '.join(sorted(bundle.files))}.\n"
        "The app runs in a sandbox: once loaded it may change its own files but create none, and each patch "
        "restarts it from its seed data.\n"
        f"{TOOLS_HELP}\nYou have {max_steps} steps."
    )


def validation_error(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors()[:5]:
        where = ".".join(str(x) for x in err.get("loc", ()) if x not in ("function-after",)) or "action"
        problems.append(f"{where}: {err.get('msg')}")
    return "invalid action: " + "; ".join(problems) + f". {TOOLS_HELP}"


def file_list(listing: list[dict[str, Any]]) -> str:
    return "\n".join(f"{f['path']} ({f['lines']} lines)" for f in listing)


def file_view(path: str, start: int, lines: list[str], total: int) -> str:
    if total == 0:
        return f"{path} (empty file)"
    end = start + len(lines) - 1
    body = "\n".join(f"{start + i:>4}  {line}" for i, line in enumerate(lines))
    return f"{path} (lines {start}-{end} of {total})\n{body}"


def search_results(query: str, matches: list[dict[str, Any]], truncated: bool) -> str:
    if not matches:
        return f"No match for {query!r}."
    lines = [f"{m['path']}:{m['line']}: {m['text']}" for m in matches]
    if truncated:
        lines.append("(more matches not shown: narrow the search)")
    return "\n".join(lines)


SHOWN_HEADERS = ("location", "set-cookie", "content-type", "www-authenticate", "content-disposition",
                 "access-control-allow-origin", "access-control-allow-credentials")
"""The response headers an ``http_request`` observation's text shows (when the app sent them): where a
redirect leads, the cookies set, what the body is, how to authenticate, and whom the browser may share
the response with. The observation's ``result`` holds every header."""


def response_headers(headers: dict[str, str], names: tuple[str, ...] | None = SHOWN_HEADERS) -> list[str]:
    """``name: value`` lines of the headers in ``names`` (in that order; ``None``: every header, as
    sent), one line per cookie."""
    lines = []
    for name in headers if names is None else names:
        if name in headers:
            lines += [f"{name}: {value}" for value in str(headers[name]).split("\n")]
    return lines


def http_response(action: Any, result: dict[str, Any]) -> str:
    who = action.as_user or "anonymous"
    head = f"{action.method} {action.path} as {who} -> "
    if result["status"] is None:
        return head + f"no response: {result['error']}"
    lines = [head + str(result["status"]), *response_headers(result["headers"]), "", result["body"]]
    text = "\n".join(lines)
    if result["body_truncated"]:
        text += "\n(body truncated)"
    if result.get("note"):
        text += f"\nNote: {result['note']}"
    return text


def patched(changed: list[str]) -> str:
    if not changed:
        return "The patch applied but changed nothing."
    return f"Patched {', '.join(changed)}. The app restarts with this code on the next request."


def test_results(result: dict[str, Any]) -> str:
    if not result["loaded"]:
        return f"The app did not load: {result['load_error']}"
    lines = [f"Visible probes: {result['passed']}/{result['total']} pass."]
    for probe in result["probes"]:
        mark = "PASS" if probe["passed"] else "FAIL"
        kind = f"{probe['kind']}: {probe['trap']}" if probe.get("trap") else probe["kind"]
        lines.append(f"[{mark}] {probe['probe_id']} ({kind}): expected {' | '.join(probe['expected'])}")
        if not probe["passed"]:
            lines.append(f"       got {' | '.join(probe['got']) or 'nothing'}; {'; '.join(probe['failures'])}")
    return "\n".join(lines)


def final(result: dict[str, Any], breakdown: Any, note: str | None) -> str:
    lines = [note] if note else []
    if result["outcome"] == "infrastructure_error":
        lines.append(f"The verifier could not run: {result['infrastructure_error']}. This episode has no reward.")
        return "\n".join(lines)
    if result["outcome"] == "load_error":
        lines.append(f"Submitted. The app did not load: {result['load_error']}")
    else:
        s, r, t = result["security"], result["regression"], result["trap"]
        g = result.get("guard")  # only a scenario with guard probes reports them
        lines.append(f"Submitted: {str(result['resolution']).upper()}. Exploits refused {s['passed']}/{s['total']}, "
                     f"legitimate use kept {r['passed']}/{r['total']}, traps respected {t['passed']}/{t['total']}"
                     + (f", guards held {g['passed']}/{g['total']}." if g else "."))
    # signed: a reward or a term that rounds to zero is +0.000, never -0.000; a term that rounds to
    # zero says nothing and is left out
    terms = ", ".join(f"{c.name} {signed(c.value)}" for c in breakdown.components if round(c.value, 3))
    lines.append(f"Reward {signed(breakdown.reward)}" + (f": {terms}" if terms else "."))
    return "\n".join(lines)
