"""Authentication the way production FastAPI apps write it: OAuth2 + JWT, API-key headers, session cookies.

Three auth styles, each a ``get_current_user`` dependency built on a ``fastapi.security`` scheme
(``Depends(get_current_user)`` in every signed-in handler, ``Depends(require_admin)`` in the
administrators'):

* ``oauth2_jwt``: ``OAuth2PasswordBearer(tokenUrl="auth/token")``; the login route takes the OAuth2
  password form, checks the password against a hash (pwdlib, bcrypt at 4 rounds: seeded demo accounts
  sign in within a millisecond) and returns a PyJWT token signed with the configured secret, whose
  ``sub`` names the user; the dependency decodes it and loads the user.
* ``api_key``: ``APIKeyHeader(name="X-API-Key")``, the key stored on the user's row.
* ``cookie``: ``APIKeyCookie(name="session_id")``, a session id from the ``sessions`` table.

How a request proves who sends it (the code site ``auth.identity``) is the body of the dependency, so
a flaw that trusts a client-supplied identity lives where a real one would: in ``get_current_user``.
A ``request`` parameter is added to the dependency only when its code reads the request (a flaw's
``request.headers.get(...)``), as a developer adding such a line would add it.
"""

from __future__ import annotations

import re

from envcore.factory.codegen.names import Names
from envcore.factory.codegen.parts import Route, Sites, credential_of
from envcore.scenario.credentials import Credentials, LoginRequest
from envcore.scenario.spec import UserSpec

API_KEY_HEADER = "X-API-Key"
SESSION_COOKIE = "session_id"
LOGIN_PATH = "/auth/token"
TOKEN_FIELD = "access_token"

_READS_REQUEST = re.compile(r"\brequest\.")
SUBJECT = 'payload.get("sub")'
"""Where a decoded access token names its user."""


def crypto_lines(names: Names) -> list[str]:
    """Password hashing and access tokens (``oauth2_jwt`` only)."""
    n = names
    return [
        'ALGORITHM = "HS256"',
        "password_hasher = PasswordHash((BcryptHasher(rounds=4),))",
        "",
        "",
        "def hash_password(password: str) -> str:",
        "    return password_hasher.hash(password)",
        "",
        "",
        "def verify_password(password: str, hashed: str) -> bool:",
        "    return password_hasher.verify(password, hashed)",
        "",
        "",
        "def create_access_token(subject: str) -> str:",
        f'    expire = datetime.now(timezone.utc) + timedelta(minutes={n.cfg("ACCESS_TOKEN_EXPIRE_MINUTES")})',
        f'    return jwt.encode({{"sub": subject, "exp": expire}}, {n.cfg("SECRET_KEY")}, algorithm=ALGORITHM)',
    ]


def dependency_lines(names: Names, sites: Sites) -> tuple[list[str], list[str]]:
    """The security scheme, ``get_current_user`` (code site ``auth.identity``) and ``require_admin``."""
    n = names
    t = n.user_class
    fn = "def" if n.orm else "async def"
    db = ", db: Session = Depends(get_db)" if n.orm else ""
    if n.auth == "oauth2_jwt":
        scheme = ['oauth2_scheme = OAuth2PasswordBearer(tokenUrl="auth/token")']
        credential = "token: str = Depends(oauth2_scheme)"
        doc = "The user named by the request's access token."
        head = [
            "credentials_error = HTTPException(",
            "    status_code=401,",
            '    detail="Could not validate credentials",',
            '    headers={"WWW-Authenticate": "Bearer"},',
            ")",
        ]
        body = [
            "try:",
            f'    payload = jwt.decode(token, {n.cfg("SECRET_KEY")}, algorithms=[ALGORITHM])',
            "except jwt.InvalidTokenError:",
            "    raise credentials_error from None",
            f"user = {n.call('get_user', SUBJECT)}",
            "if user is None:",
            "    raise credentials_error",
            "return user",
        ]
    elif n.auth == "api_key":
        scheme = [f'api_key_header = APIKeyHeader(name="{API_KEY_HEADER}", auto_error=False)']
        credential = "api_key: str | None = Security(api_key_header)"
        doc = "The user the request's API key belongs to."
        head = []
        body = [
            f"user = {n.call('get_user_by_api_key', 'api_key')}",
            "if user is None:",
            '    raise HTTPException(status_code=401, detail="invalid or missing API key")',
            "return user",
        ]
    else:
        scheme = [f'session_cookie = APIKeyCookie(name="{SESSION_COOKIE}", auto_error=False)']
        credential = "session_id: str | None = Security(session_cookie)"
        doc = "The user signed in with the request's session cookie."
        head = []
        body = [
            f"user = {n.call('get_user_by_token', 'session_id')}",
            "if user is None:",
            '    raise HTTPException(status_code=401, detail="not signed in")',
            "return user",
        ]
    body = sites("auth.identity", body)
    request = "request: Request, " if any(_READS_REQUEST.search(line) for line in body) else ""
    lines = [
        *scheme,
        "",
        "",
        f"{fn} get_current_user({request}{credential}{db}) -> {t}:",
        f'    """{doc}"""',
        *[f"    {line}" for line in head + body],
        "",
        "",
        f"{fn} require_admin(user: {t} = Depends(get_current_user)) -> {t}:",
        f'    if {n.attr("user", "role")} != "admin":',
        '        raise HTTPException(status_code=403, detail="administrators only")',
        "    return user",
    ]
    exports = [scheme[0].split(" =")[0], "get_current_user", "require_admin", "logger"]
    return lines, exports


def login_route(names: Names) -> Route:
    """``POST /auth/token``: the OAuth2 password form in, a signed access token out."""
    n = names
    account = n.attr("account", "password_hash")
    body = [
        f"account = {n.call('get_user_by_username', 'form_data.username')}",
        f"if account is None or not verify_password(form_data.password, {account}):",
        "    raise HTTPException(",
        "        status_code=401,",
        '        detail="Incorrect username or password",',
        '        headers={"WWW-Authenticate": "Bearer"},',
        "    )",
        f'return {{"{TOKEN_FIELD}": create_access_token(str({n.attr("account", "id")})), "token_type": "bearer"}}',
    ]
    return Route(
        "auth", "login_for_access_token", ("POST",), LOGIN_PATH, "public",
        ["form_data: OAuth2PasswordRequestForm = Depends()"], body,
        doc="Exchange a username and password for an access token.",
        response_model="Token" if n.orm else None,
    )


def user_credentials(auth: str, user: UserSpec) -> tuple[str, Credentials | None]:
    """``(token, credentials)`` of a seeded user's :class:`~envcore.scenario.bundle.BundleUser`: the
    secret a request as the user carries, and how (``None``: as a bearer token). A login form
    defaults to the username and the secret, so grading's fresh identities sign in by themselves."""
    token = credential_of(user, auth)
    if auth == "oauth2_jwt":
        return token, Credentials(kind="login", login=LoginRequest(path=LOGIN_PATH, token_json=TOKEN_FIELD))
    if auth == "api_key":
        return token, Credentials(kind="header", name=API_KEY_HEADER)
    if auth == "cookie":
        return token, Credentials(kind="cookie", name=SESSION_COOKIE)
    return token, None
