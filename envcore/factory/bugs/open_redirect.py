"""Open redirect (CWE-601): the logout redirect follows any URL the request names.

Forbidden paths: every spelling of a URL on another site, since the policy allows paths on this site
only: absolute URLs (``https://``, ``http://``, an upper-case scheme, a scheme with an empty host that
browsers skip), protocol-relative ones (``//host``, ``///host``) and hosts that only start like this
site's (``app.example.test.evil``, ``app.example.test@evil``). ``/\\host`` is no path here: Starlette
percent-encodes the backslash in the ``Location`` header.

A variant's check already refuses some spellings; those families are probed as regression probes
(the app as shipped refuses them, a fix must keep refusing them), the others as security probes.
"""

from envcore.factory.bugs.base import BugClass, NarrowFix, ProbeContext, Variant, step
from envcore.scenario.probes import ProbeKind, RedirectLocal

OFFSITE: dict[str, tuple[str, str, str]] = {
    "absolute": ("absolute", "https://evil.example/login",
                 'next.startswith("https://") and not next.startswith(("https:///", "https://" + APP_HOST))'),
    "plain_http": ("absolute", "http://evil.example/login",
                   'next.startswith("http://") and not next.startswith("http://" + APP_HOST)'),
    "upper_case_scheme": ("absolute", "HTTPS://evil.example/login", 'next.startswith("HTTPS://")'),
    "missing_host": ("absolute", "https:///evil.example/login", 'next.startswith("https:///")'),
    "protocol_relative": ("protocol_relative", "//evil.example/login",
                          'next.startswith("//") and not next.startswith("///")'),
    "triple_slash": ("protocol_relative", "///evil.example/login", 'next.startswith("///")'),
    "host_prefix": ("look_alike", "https://app.example.test.evil.example/login",
                    'next.startswith("https://" + APP_HOST + ".")'),
    "userinfo": ("look_alike", "https://app.example.test@evil.example/login",
                 'next.startswith("https://" + APP_HOST + "@")'),
}
"""Spelling -> (family, URL, a test recognising that spelling in the generated code)."""

FAMILIES = {
    "absolute": "an absolute URL",
    "protocol_relative": "a URL starting with //",
    "look_alike": "a URL whose host only starts like this site's",
}


def _unvalidated(names, secure):
    return []


def _slash_prefix(names, secure):
    return ['if not next.startswith("/"):', '    next = "/"']


def _host_prefix(names, secure):
    return [
        f'if next.startswith(("http://", "https://")) and not next.startswith("https://" + {names.cfg("APP_HOST")}):',
        '    next = "/"',
    ]


def _probes(*exploitable: str):
    """Security probes for the ``exploitable`` families, one regression probe for the others."""

    def tries(family: str) -> list:
        return [step(None, "GET", "/auth/logout", RedirectLocal(), query={"next": url})
                for fam, url, _ in OFFSITE.values() if fam == family]

    def build(ctx: ProbeContext):
        out = [
            ctx.security(f"logout does not redirect off-site ({FAMILIES[family]})", tries(family), "redirect")
            for family in exploitable
        ]
        refused = [family for family in FAMILIES if family not in exploitable]
        if refused:
            words = " or ".join(FAMILIES[f] for f in refused)
            out.append(ctx.probe(ProbeKind.REGRESSION, "reg", f"logout still refuses to redirect off-site ({words})",
                                 [s for family in refused for s in tries(family)]))
        return out

    return build


def _one_spelling_open(test: str):
    """The secure check, skipped for URLs that ``test`` recognises."""

    def mutate(names, secure):
        head, *rest = secure
        return [f"if not ({test.replace('APP_HOST', names.cfg('APP_HOST'))}) and ({head[3:-1]}):", *rest]

    return mutate


NARROW_FIXES = tuple(
    NarrowFix(f"lets_{spelling}", f"redirecting to {url}", {"redirect.check": _one_spelling_open(test)})
    for spelling, (_, url, test) in OFFSITE.items()
)
"""The same for every variant: the site is one check, and a fix may leave any spelling open."""

BUG = BugClass(
    name="open_redirect",
    cwe=("CWE-601",),
    title="Open redirect",
    symptom="the app can be made to forward visitors to another site",
    variants=(
        Variant("unvalidated_next", ("redirect",), {"redirect.check": _unvalidated},
                _probes("absolute", "protocol_relative", "look_alike"), features=("redirect",),
                description="`next` is used as given", narrow_fixes=NARROW_FIXES),
        Variant("slash_prefix_only", ("redirect",), {"redirect.check": _slash_prefix}, _probes("protocol_relative"),
                features=("redirect",), subtle=True, description="`//host` passes a starts-with-slash test",
                narrow_fixes=NARROW_FIXES),
        Variant("host_prefix_match", ("redirect",), {"redirect.check": _host_prefix},
                _probes("absolute", "protocol_relative", "look_alike"), features=("redirect",), subtle=True,
                description="the allowed host is matched as a string prefix", narrow_fixes=NARROW_FIXES),
    ),
)
