"""Path traversal (CWE-22): a file name from the request escapes the caller's upload folder."""

from envcore.factory.bugs.base import BugClass, ProbeContext, Variant, step
from envcore.scenario.probes import BodyExcludes, StatusIn

REFUSED = (400, 403, 404, 422)

NAIVE = [
    'target = os.path.join(UPLOAD_DIR, str(user["id"]), name)',
    "if not os.path.isfile(target):",
    '    raise HTTPException(status_code=404, detail="file not found")',
]


def _naive(names, secure):
    return list(NAIVE)


def _strip_once(names, secure):
    return ['name = name.replace("../", "")  # no climbing out of the folder', *NAIVE]


def _extension(names, secure):
    return [
        'if not name.endswith(".txt"):',
        '    raise HTTPException(status_code=400, detail="only text files can be downloaded")',
        *NAIVE,
    ]


def _probes(climb: str):
    def build(ctx: ProbeContext):
        victim = ctx.user("victim")
        victim_file = next(f for f in ctx.spec.files if f.owner == victim.username)
        attacker = ctx.who("attacker")
        return [
            ctx.security(
                "a download cannot climb out of the upload folder to the app's secrets",
                [step(attacker, "GET", "/api/files", StatusIn(codes=REFUSED), BodyExcludes(texts=(ctx.spec.app_secret,)),
                      query={"name": f"{climb}{climb}instance/secrets.txt"})],
                "files",
            ),
            ctx.security(
                "a download cannot reach another user's upload folder",
                [step(attacker, "GET", "/api/files", StatusIn(codes=REFUSED),
                      BodyExcludes(texts=(victim_file.content.strip(),)),
                      query={"name": f"{climb}{victim.user_id}/{victim_file.name}"})],
                "files",
            ),
        ]

    return build


BUG = BugClass(
    name="path_traversal",
    cwe=("CWE-22",),
    title="Path traversal in a file endpoint",
    symptom="the file download endpoint serves files outside the caller's own folder",
    variants=(
        Variant("plain_join", ("files",), {"files.path": _naive}, _probes("../"), features=("files",),
                description="the file name is joined to the folder unchecked"),
        Variant("strip_dotdot_once", ("files",), {"files.path": _strip_once}, _probes("....//"),
                features=("files",), subtle=True, description="`../` is stripped once, so `....//` survives"),
        Variant("extension_allowlist", ("files",), {"files.path": _extension}, _probes("../"),
                features=("files",), subtle=True, description="only the extension is checked"),
    ),
)
