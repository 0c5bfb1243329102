"""Path traversal (CWE-22): a file name from the request escapes the caller's upload folder.

Forbidden paths: every spelling of a name outside the caller's folder, towards the app's secrets and
towards another user's folder: ``../``, ``./../`` (a fix that refuses names *starting* with ``..``
lets it through), ``....//`` and ``..././`` (what survives stripping ``../`` once) and an absolute
path (a fix that refuses ``..`` lets it through). The absolute names start with ``{app_root}``, which
the grader fills in with the folder the app runs in (every sandboxed worker has its own), as an
attacker who knows the deployment would write them. Query values reach the handler decoded once, so
percent-encoded spellings are the same names.
"""

from envcore.factory.bugs.base import BugClass, NarrowFix, ProbeContext, Variant, step
from envcore.runner.execute import APP_ROOT
from envcore.scenario.probes import BodyExcludes, StatusIn

REFUSED = (400, 403, 404, 422)

def naive(names) -> list[str]:
    """The download check of a naive author: join the name to the caller's folder, see that it exists."""
    return [
        f'target = os.path.join({names.cfg("UPLOAD_DIR")}, str({names.attr("user", "id")}), name)',
        "if not os.path.isfile(target):",
        '    raise HTTPException(status_code=404, detail="file not found")',
    ]


CLIMBS: dict[str, tuple[str, str]] = {
    "dot_dot": ("../", 'name.startswith("../")'),
    "dot_slash_dot_dot": ("./../", 'name.startswith("./")'),
    "doubled_dots": ("....//", '"....//" in name'),
    "dots_around_slash": ("..././", '"..././" in name'),
}
"""Spelling -> (one level up, a test of the name that recognises it in the generated code)."""
ABSOLUTE = (APP_ROOT + "/", 'name.startswith("/")')


def _naive(names, secure):
    return naive(names)


def _strip_once(names, secure):
    return ['name = name.replace("../", "")  # no climbing out of the folder', *naive(names)]


def _extension(names, secure):
    return [
        'if not name.endswith(".txt"):',
        '    raise HTTPException(status_code=400, detail="only text files can be downloaded")',
        *naive(names),
    ]


def _spellings(up: int, relative: str, from_root: str) -> list[str]:
    """Every spelling of one file: climbing ``up`` levels from the caller's folder to ``relative``, and
    the absolute name of ``from_root`` (its path inside the app's folder)."""
    return [climb * up + relative for climb, _ in CLIMBS.values()] + [ABSOLUTE[0] + from_root]


def _probes(ctx: ProbeContext):
    victim = ctx.user("victim")
    victim_file = next(f for f in ctx.spec.files if f.owner == victim.username)
    attacker = ctx.who("attacker")

    def tries(names: list[str], secret: str) -> list:
        return [step(attacker, "GET", "/api/files", StatusIn(codes=REFUSED), BodyExcludes(texts=(secret,)),
                     query={"name": name}) for name in names]

    return [
        ctx.security(
            "no spelling of a file name reaches the app's secrets from a download",
            tries(_spellings(2, "instance/secrets.txt", "instance/secrets.txt"), ctx.spec.app_secret),
            "files",
        ),
        ctx.security(
            "no spelling of a file name reaches another user's upload folder",
            tries(_spellings(1, f"{victim.user_id}/{victim_file.name}", f"uploads/{victim.user_id}/{victim_file.name}"),
                  victim_file.content.strip()),
            "files",
        ),
    ]


def _one_spelling_open(flaw, test: str):
    """The secure check, except for names that ``test`` recognises, which go through ``flaw``'s code."""

    def mutate(names, secure):
        return [f"if {test}:", *[f"    {line}" for line in flaw(names, secure)], "else:", *[f"    {line}" for line in secure]]

    return mutate


def _fixes(flaw, *spellings: str):
    """One narrow fix per spelling ``flaw``'s code lets out of the folder."""
    tests = {**{k: v[1] for k, v in CLIMBS.items()}, "absolute": ABSOLUTE[1]}
    return tuple(
        NarrowFix(f"lets_{spelling}", f"downloading a file named with {spelling.replace('_', ' ')}",
                  {"files.path": _one_spelling_open(flaw, tests[spelling])})
        for spelling in spellings
    )


BUG = BugClass(
    name="path_traversal",
    cwe=("CWE-22",),
    title="Path traversal in a file endpoint",
    symptom="the file download endpoint serves files outside the caller's own folder",
    variants=(
        Variant("plain_join", ("files",), {"files.path": _naive}, _probes, features=("files",),
                description="the file name is joined to the folder unchecked",
                narrow_fixes=_fixes(_naive, "dot_dot", "dot_slash_dot_dot", "absolute")),
        Variant("strip_dotdot_once", ("files",), {"files.path": _strip_once}, _probes,
                features=("files",), subtle=True, description="`../` is stripped once, so `....//` survives",
                narrow_fixes=_fixes(_strip_once, "doubled_dots", "dots_around_slash", "absolute")),
        Variant("extension_allowlist", ("files",), {"files.path": _extension}, _probes,
                features=("files",), subtle=True, description="only the extension is checked",
                narrow_fixes=_fixes(_extension, "dot_dot", "dot_slash_dot_dot", "absolute")),
    ),
)
